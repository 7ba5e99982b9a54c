"""Unpack an untrusted ``.zip`` or ``.tar[.gz|.bz2|.xz]`` into a folder, with bounded work.

Nothing an archive declares is trusted, and every cap applies while bytes are
produced, never after:

* sizes are counted as they are read: a member stops at ``max_file_bytes``, all
  members together at ``max_total_bytes`` (declared sizes over a cap are refused up
  front, as a cheap early answer; a header that claims less than it holds is caught
  by the reader, which stops at the claim and then fails the CRC);
* every byte a decompressor produces counts -- headers, padding, data between or after
  members -- against one budget: ``max_total_bytes`` plus room for headers, and at
  most ``ratio_floor_bytes`` plus ``max_ratio`` times the upload.  That bounds the CPU
  of any stream linearly: a 79-byte ``.tar.bz2`` that inflates to a GiB is refused
  after about ``ratio_floor_bytes``;
* tar is read by a small streaming reader of our own (ustar, GNU long names, pax
  ``path``/``size``), in one pass: the standard ``tarfile`` seeks over members by
  decompressing them, reads pax headers whole and parses them with regular
  expressions that take quadratic time on crafted input;
* zip entries may only be stored or deflated (zip's bzip2 and lzma readers inflate a
  whole input block at once, unbounded), and the central directory is sized before
  :mod:`zipfile` reads it;
* no links, devices, FIFOs or sparse files; no absolute or ``..`` paths, names that
  are not UTF-8, or paths over :data:`MAX_ENTRY_PATH_BYTES`; at most ``max_entries``.
"""

from __future__ import annotations

import _compression
import bz2
import errno
import gzip
import io
import lzma
import stat
import struct
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Protocol

from ..errors import ExecutorError, TooLarge
from ..paths import clean_relative

MiB = 1024 * 1024
_CHUNK = 64 * 1024
_BLOCK = 512
#: An entry's path inside the archive (the install folder's path comes on top).
MAX_ENTRY_PATH_BYTES = 1024
#: One pax extended header or GNU long name.
MAX_META_BYTES = 64 * 1024
#: What the headers, padding and meta headers of one entry may add to the stream.
_OVERHEAD_PER_ENTRY = 4 * 1024
#: The central directory of a zip, per entry allowed.
_ZIP_DIRECTORY_PER_ENTRY = 1536
#: The most memory an xz stream may ask for (``xz -9`` needs 65 MiB).
_XZ_MEMLIMIT = 128 * MiB


@dataclass(frozen=True, slots=True)
class PackageLimits:
    max_entries: int = 2000
    max_file_bytes: int = 32 * MiB
    max_total_bytes: int = 128 * MiB
    #: unpacking may produce this many bytes whatever the upload's size ...
    ratio_floor_bytes: int = 8 * MiB
    #: ... and on top of them at most this many per byte uploaded
    max_ratio: int = 100


class PackageError(ExecutorError):
    code = "invalid_package"
    status = 400


def _too_large(message: str) -> TooLarge:
    return TooLarge(message, code="package_too_large")


class _Tally:
    """What unpacking has produced so far, against the caps."""

    def __init__(self, limits: PackageLimits, upload_bytes: int) -> None:
        self.limits = limits
        self.upload_bytes = upload_bytes
        by_ratio = limits.ratio_floor_bytes + limits.max_ratio * upload_bytes
        by_total = limits.max_total_bytes + limits.max_entries * _OVERHEAD_PER_ENTRY
        self.unpack_limit = min(by_ratio, by_total)
        self.ratio_binds = by_ratio < by_total
        self.unpacked = 0
        self.content = 0
        self.declared = 0
        self.entries = 0

    def unpack(self, count: int) -> None:
        """``count`` more bytes came out of a decompressor (or out of a zip entry)."""
        self.unpacked += count
        if self.unpacked > self.unpack_limit:
            if self.ratio_binds:
                raise _too_large(
                    f"archive unpacks to more than {self.unpack_limit} bytes: {self.limits.ratio_floor_bytes} "
                    f"plus {self.limits.max_ratio} times its own {self.upload_bytes} bytes"
                )
            raise _too_large(f"archive unpacks to more than {self.limits.max_total_bytes} bytes")

    def entry(self) -> None:
        self.entries += 1
        if self.entries > self.limits.max_entries:
            raise _too_large(f"archive has more than {self.limits.max_entries} entries")

    def declare(self, name: str, size: int) -> None:
        """A member says it holds ``size`` bytes: refuse at once what could never fit."""
        if size > self.limits.max_file_bytes:
            raise _too_large(
                f"archive entry {_show(name)} declares {size} bytes; the limit is {self.limits.max_file_bytes}"
            )
        self.declared += size
        if self.declared > self.limits.max_total_bytes:
            raise _too_large(f"archive declares more than {self.limits.max_total_bytes} bytes")

    def write(self, name: str, written: int, count: int) -> None:
        """``count`` more content bytes of one member, ``written`` of it before them."""
        if written + count > self.limits.max_file_bytes:
            raise _too_large(f"archive entry {_show(name)} unpacks to more than {self.limits.max_file_bytes} bytes")
        self.content += count
        if self.content > self.limits.max_total_bytes:
            raise _too_large(f"archive unpacks to more than {self.limits.max_total_bytes} bytes")


def _show(name: str) -> str:
    return repr(name if len(name) <= 200 else name[:200] + "...")


@contextmanager
def _reading(what: str) -> Iterator[None]:
    """Turn what a broken archive makes the readers raise into a :class:`PackageError`."""
    try:
        yield
    except ExecutorError:
        raise
    except (
        zipfile.BadZipFile,
        zlib.error,
        lzma.LZMAError,
        EOFError,
        OSError,
        ValueError,
        NotImplementedError,
        RuntimeError,
    ) as exc:
        raise PackageError(f"{what}: {exc}") from None


def unpack(data: bytes, dest: Path, limits: PackageLimits) -> list[PurePosixPath]:
    """Write the archive's folders and files under ``dest`` (which must exist).

    Returns the files' paths, in archive order.  Raises :class:`PackageError`
    (400) for a broken or unsafe archive, ``TooLarge`` (413, ``package_too_large``)
    for one over a cap; an ``OSError`` only from writing under ``dest``.
    """
    tally = _Tally(limits, len(data))
    out = _Writer(dest, tally)
    if data[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        _unzip(data, out, tally)
    else:
        _untar(data, out, tally)
    return out.files


class _Writer:
    """Creates the entries under ``dest``; every file is new (a second one with the same path is refused)."""

    def __init__(self, dest: Path, tally: _Tally) -> None:
        self.dest = dest
        self.tally = tally
        self.files: list[PurePosixPath] = []

    def folder(self, path: PurePosixPath) -> None:
        with self._writing(path):
            (self.dest / str(path)).mkdir(parents=True, exist_ok=True)

    def file(self, path: PurePosixPath, read: Callable[[int], bytes], what: str) -> None:
        if path == PurePosixPath("."):
            raise PackageError(f"archive entry {_show(what)} is a file without a name")
        name = str(path)
        target = self.dest / name
        with self._writing(path):
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "xb") as out:
                written = 0
                while True:
                    with _reading(f"archive entry {_show(what)} cannot be read"):
                        chunk = read(_CHUNK)
                    if not chunk:
                        break
                    self.tally.write(what, written, len(chunk))
                    written += len(chunk)
                    out.write(chunk)
        self.files.append(path)

    @contextmanager
    def _writing(self, path: PurePosixPath) -> Iterator[None]:
        try:
            yield
        except FileExistsError:
            raise PackageError(f"archive holds the same path twice: {_show(str(path))}") from None
        except (NotADirectoryError, IsADirectoryError):
            raise PackageError(f"archive holds a file and a folder at the same path: {_show(str(path))}") from None
        except OSError as exc:
            if exc.errno == errno.ENAMETOOLONG:
                raise PackageError(f"archive entry path {_show(str(path))} is too long to unpack") from None
            raise


def entry_path(name: str) -> PurePosixPath:
    """An archive entry's name as a safe relative path (``.`` for the root)."""
    if len(name.encode("utf-8", "surrogatepass")) > MAX_ENTRY_PATH_BYTES:
        raise PackageError(f"archive entry {_show(name)} has a path longer than {MAX_ENTRY_PATH_BYTES} bytes")
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        raise PackageError(f"archive entry {_show(name)} has an absolute path")
    try:
        return clean_relative(name, what="archive entry", allow_empty=True)
    except ExecutorError as exc:
        if ".." in name or "\x00" in name:
            raise PackageError(f"archive entry {_show(name)} has an unsafe path ('..' or NUL)") from None
        raise PackageError(f"archive entry {_show(name)}: {exc.message}") from None


# -- zip -------------------------------------------------------------------------------

_ZIP_METHODS = {zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED}


def _zip_directory(data: bytes) -> tuple[int, int] | None:
    """(entries, central directory bytes) as :mod:`zipfile` will find them; None without an end record."""
    end = len(data) - 22
    if not (end >= 0 and data[end : end + 4] == b"PK\x05\x06" and data[-2:] == b"\0\0"):
        end = data.rfind(b"PK\x05\x06", max(0, len(data) - 22 - 0xFFFF))
        if end < 0 or len(data) - end < 22:
            return None
    entries, size = struct.unpack_from("<HL", data, end + 10)
    record = end - 20 - 56  # a zip64 end record sits right before its locator
    if record >= 0 and data[end - 20 : end - 16] == b"PK\x06\x07" and data[record : record + 4] == b"PK\x06\x06":
        entries, size = struct.unpack_from("<QQ", data, record + 32)
    return entries, size


def _zip_name(info: zipfile.ZipInfo) -> str:
    """The entry's name; UTF-8 also when the archiver did not set the flag that says so (Info-ZIP, Windows)."""
    if info.flag_bits & 0x800:
        return info.filename
    try:
        return info.filename.encode("cp437").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return info.filename


def _unzip(data: bytes, out: _Writer, tally: _Tally) -> None:
    limits = tally.limits
    directory = _zip_directory(data)
    if directory is not None:
        entries, size = directory
        if entries > limits.max_entries:
            raise _too_large(f"archive has {entries} entries; the limit is {limits.max_entries}")
        if size > limits.max_entries * _ZIP_DIRECTORY_PER_ENTRY:
            raise _too_large(
                f"the archive's central directory is {size} bytes; too large for {limits.max_entries} entries"
            )
    with _reading("not a valid zip archive"):
        archive = zipfile.ZipFile(io.BytesIO(data))
    infos = archive.infolist()
    if len(infos) > limits.max_entries:
        raise _too_large(f"archive has {len(infos)} entries; the limit is {limits.max_entries}")
    checked: list[tuple[zipfile.ZipInfo, PurePosixPath]] = []
    for info in infos:
        mode = info.external_attr >> 16
        if mode and stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR):
            kind = "symlink" if stat.S_ISLNK(mode) else "special file"
            raise PackageError(f"archive entry {_show(info.filename)} is a {kind}; only files and folders are allowed")
        if info.flag_bits & 0x1:
            raise PackageError(f"archive entry {_show(info.filename)} is encrypted")
        if info.compress_type not in _ZIP_METHODS:
            raise PackageError(
                f"archive entry {_show(info.filename)} uses zip compression method {info.compress_type}; "
                "only stored and deflate are accepted"
            )
        if not info.is_dir():
            tally.declare(info.filename, info.file_size)
        checked.append((info, entry_path(_zip_name(info))))
    for info, path in checked:
        if info.is_dir():
            out.folder(path)
            continue
        with _reading(f"archive entry {_show(info.filename)} cannot be read"):
            source = archive.open(info)
        with source:
            out.file(path, _counting(source.read, tally), info.filename)


def _counting(read: Callable[[int], bytes], tally: _Tally) -> Callable[[int], bytes]:
    def counted(size: int) -> bytes:
        chunk = read(size)
        tally.unpack(len(chunk))
        return chunk

    return counted


# -- tar -------------------------------------------------------------------------------

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

    def __init__(self, source: _Readable, tally: _Tally) -> None:
        self.source = source
        self.tally = tally

    def read_some(self, size: int) -> bytes:
        with _reading("not a valid tar archive"):
            chunk = self.source.read(size)
        self.tally.unpack(len(chunk))
        return chunk

    def read(self, size: int) -> bytes:
        """Exactly ``size`` bytes; fewer only at the end of the stream."""
        parts: list[bytes] = []
        left = size
        while left > 0:
            chunk = self.read_some(min(left, _CHUNK))
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
            chunk = self.read_some(min(size, _CHUNK))
            if not chunk:
                raise PackageError(f"not a valid tar archive: it ends inside {what} (truncated?)")
            size -= len(chunk)

    def drain(self) -> None:
        """Read to the end (counted): the compressed stream's own checks run on all of it."""
        while self.read_some(_CHUNK):
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


def _untar(data: bytes, out: _Writer, tally: _Tally) -> None:
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
                raise _too_large(f"a tar meta header of {size} bytes; the limit is {MAX_META_BYTES}")
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
            raise PackageError(f"archive entry {_show(repr(name)[2:-1])} has a name that is not valid UTF-8") from None
        if kind in _LINK_TYPES:
            raise PackageError(f"archive entry {_show(text)} is a link; links are not allowed")
        if sparse:
            raise PackageError(f"archive entry {_show(text)} is a sparse file; only plain files are allowed")
        if kind in _SPECIAL_TYPES:
            raise PackageError(f"archive entry {_show(text)} is a special file; only files and folders are allowed")
        is_dir = kind == b"5" or (kind == b"\0" and text.endswith("/"))
        if not is_dir and kind not in _FILE_TYPES:
            raise PackageError(f"archive entry {_show(text)} has tar type {kind!r}; only files and folders are allowed")
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
            raise PackageError(f"not a valid tar archive: it ends inside {_show(name)} (truncated?)")
        left -= len(chunk)
        return chunk

    return read
