"""The tar reader: a small streaming reader of our own (ustar, GNU long names, pax
``path``/``size``) over a gzip, bzip2 or xz stream (or none), in one pass, where every
byte a decompressor produces counts against the budget.  The standard ``tarfile`` seeks
over members by decompressing them, reads pax headers whole and parses them with regular
expressions that take quadratic time on crafted input.
"""

from __future__ import annotations

import _compression
import bz2
import gzip
import io
import lzma
from collections.abc import Callable
from typing import Protocol

from .unpacking import CHUNK, MiB, PackageError, Tally, Writer, entry_path, reading, show, too_large

_BLOCK = 512
#: One pax extended header or GNU long name.
MAX_META_BYTES = 64 * 1024
#: The most memory an xz stream may ask for (``xz -9`` needs 65 MiB).
_XZ_MEMLIMIT = 128 * MiB

_FILE_TYPES = {b"0", b"\0", b"7"}
_PAX_TYPES = {b"x", b"X"}  # X: Solaris' spelling
_LINK_TYPES = {b"1", b"2", b"K"}
_SPECIAL_TYPES = {b"3", b"4", b"6"}


class _Readable(Protocol):
    def read(self, size: int = ..., /) -> bytes: ...


def _decompressed(data: bytes) -> _Readable:
    """The tar stream inside ``data``; each ``read(n)`` returns at most ``n`` bytes."""
    raw = io.BytesIO(data)
    if data[:2] == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if data[:3] == b"BZh":
        return bz2.BZ2File(raw)
    if data[:6] == b"\xfd7zXZ\x00":  # LZMAFile takes no memory limit; its reader does
        return _compression.DecompressReader(
            raw, lzma.LZMADecompressor, trailing_error=lzma.LZMAError, format=lzma.FORMAT_XZ, memlimit=_XZ_MEMLIMIT
        )
    return raw


class _TarStream:
    """Exact reads from the decompressed stream, every byte counted."""

    def __init__(self, source: _Readable, tally: Tally) -> None:
        self.source = source
        self.tally = tally

    def read_some(self, size: int) -> bytes:
        with reading("not a valid tar archive"):
            chunk = self.source.read(size)
        self.tally.unpack(len(chunk))
        return chunk

    def read(self, size: int) -> bytes:
        """Exactly ``size`` bytes; fewer only at the end of the stream."""
        parts: list[bytes] = []
        left = size
        while left > 0:
            chunk = self.read_some(min(left, CHUNK))
            if not chunk:
                break
            parts.append(chunk)
            left -= len(chunk)
        return b"".join(parts)

    def exact(self, size: int, what: str) -> bytes:
        data = self.read(size)
        if len(data) < size:
            raise PackageError(f"not a valid tar archive: it ends inside {what} (truncated?)")
        return data

    def skip(self, size: int, what: str) -> None:
        while size > 0:
            chunk = self.read_some(min(size, CHUNK))
            if not chunk:
                raise PackageError(f"not a valid tar archive: it ends inside {what} (truncated?)")
            size -= len(chunk)

    def drain(self) -> None:
        """Read to the end (counted): the compressed stream's own checks run on all of it."""
        while self.read_some(CHUNK):
            pass


def _padding(size: int) -> int:
    return -size % _BLOCK


def _number(field: bytes) -> int:
    if field[:1] and field[0] & 0x80:  # GNU base-256
        if field[0] != 0x80:
            raise PackageError("not a valid tar archive: a negative or huge number in a header")
        return int.from_bytes(field[1:], "big")
    text = field.split(b"\0", 1)[0].strip(b" ")
    if not text:
        return 0
    if not all(48 <= c <= 55 for c in text):
        raise PackageError(f"not a valid tar archive: {text[:24]!r} is not an octal number")
    return int(text, 8)


def _c_string(field: bytes) -> bytes:
    return field.split(b"\0", 1)[0]


def _checked_header(block: bytes) -> None:
    stored = _number(block[148:156])
    unsigned = sum(block) - sum(block[148:156]) + 8 * 32
    signed = unsigned - 256 * sum(1 for c in block[:148] + block[156:] if c >= 128)
    if stored not in (unsigned, signed):
        raise PackageError("not a valid tar archive: a header's checksum does not match")


def _pax_records(data: bytes) -> dict[bytes, bytes]:
    """``<length> <key>=<value>\\n`` records, in one linear pass."""
    records: dict[bytes, bytes] = {}
    pos = 0
    while pos < len(data):
        space = data.find(b" ", pos, pos + 21)
        digits = data[pos:space] if space > pos else b""
        if not digits.isdigit():
            raise PackageError("not a valid tar archive: a malformed pax header")
        end = pos + int(digits)
        if end <= space + 1 or end > len(data) or data[end - 1] != 0x0A:
            raise PackageError("not a valid tar archive: a malformed pax header")
        key, eq, value = data[space + 1 : end - 1].partition(b"=")
        if not eq:
            raise PackageError("not a valid tar archive: a malformed pax header")
        records[key] = value
        pos = end
    return records


def untar(data: bytes, out: Writer, tally: Tally) -> None:
    stream = _TarStream(_decompressed(data), tally)
    pax: dict[bytes, bytes] = {}
    long_name: bytes | None = None
    first = True
    while True:
        block = stream.read(_BLOCK)
        if not block and not first:
            break  # an archive without its end-of-archive blocks
        if len(block) < _BLOCK:
            raise PackageError("not a valid tar archive: it ends inside a header (truncated?)")
        if block == bytes(_BLOCK):
            if first:
                raise PackageError("not a valid tar archive: it is empty")
            stream.drain()
            return
        _checked_header(block)
        first = False
        kind, size = block[156:157], _number(block[124:136])
        if kind in _PAX_TYPES or kind == b"g" or kind == b"L":
            if size > MAX_META_BYTES:
                raise too_large(f"a tar meta header of {size} bytes; the limit is {MAX_META_BYTES}")
            meta = stream.exact(size, "a meta header")
            stream.skip(_padding(size), "a meta header")
            if kind in _PAX_TYPES:
                pax.update(_pax_records(meta))
            elif kind == b"L":
                long_name = _c_string(meta)
            continue  # a global header ('g') changes nothing we use
        name = pax.get(b"path") or long_name
        if name is None:
            name = _c_string(block[0:100])
            prefix = _c_string(block[345:500]) if block[257:263] == b"ustar\0" else b""
            if prefix:
                name = prefix + b"/" + name
        if b"size" in pax:
            if not pax[b"size"].isdigit():
                raise PackageError("not a valid tar archive: a malformed pax size")
            size = int(pax[b"size"])
        sparse = kind == b"S" or any(key.startswith(b"GNU.sparse.") for key in pax)
        pax, long_name = {}, None
        try:
            text = name.decode("utf-8")
        except UnicodeDecodeError:
            raise PackageError(f"archive entry {show(repr(name)[2:-1])} has a name that is not valid UTF-8") from None
        if kind in _LINK_TYPES:
            raise PackageError(f"archive entry {show(text)} is a link; links are not allowed")
        if sparse:
            raise PackageError(f"archive entry {show(text)} is a sparse file; only plain files are allowed")
        if kind in _SPECIAL_TYPES:
            raise PackageError(f"archive entry {show(text)} is a special file; only files and folders are allowed")
        is_dir = kind == b"5" or (kind == b"\0" and text.endswith("/"))
        if not is_dir and kind not in _FILE_TYPES:
            raise PackageError(f"archive entry {show(text)} has tar type {kind!r}; only files and folders are allowed")
        tally.entry()
        tally.declare(text, size)
        path = entry_path(text)
        if is_dir:
            out.folder(path)
            stream.skip(size, "a folder entry")
        else:
            out.file(path, _member(stream, size, text), text)
        stream.skip(_padding(size), "padding")


def _member(stream: _TarStream, size: int, name: str) -> Callable[[int], bytes]:
    """Reads of one member's ``size`` bytes, then the end."""
    left = size

    def read(count: int) -> bytes:
        nonlocal left
        chunk = stream.read(min(count, left))
        if len(chunk) < min(count, left):
            raise PackageError(f"not a valid tar archive: it ends inside {show(name)} (truncated?)")
        left -= len(chunk)
        return chunk

    return read
