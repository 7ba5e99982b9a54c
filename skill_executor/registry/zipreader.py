"""The zip reader: entries only stored or deflated (zip's bzip2 and lzma readers inflate a
whole input block at once, unbounded), the central directory sized before :mod:`zipfile`
reads it, no links or special files, no encryption.
"""

from __future__ import annotations

import io
import stat
import struct
import zipfile
from pathlib import PurePosixPath

from .unpacking import PackageError, Tally, Writer, counting, entry_path, reading, show, too_large

#: The central directory of a zip, per entry allowed.
_ZIP_DIRECTORY_PER_ENTRY = 1536

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


def unzip(data: bytes, out: Writer, tally: Tally) -> None:
    limits = tally.limits
    directory = _zip_directory(data)
    if directory is not None:
        entries, size = directory
        if entries > limits.max_entries:
            raise too_large(f"archive has {entries} entries; the limit is {limits.max_entries}")
        if size > limits.max_entries * _ZIP_DIRECTORY_PER_ENTRY:
            raise too_large(
                f"the archive's central directory is {size} bytes; too large for {limits.max_entries} entries"
            )
    with reading("not a valid zip archive"):
        archive = zipfile.ZipFile(io.BytesIO(data))
    infos = archive.infolist()
    if len(infos) > limits.max_entries:
        raise too_large(f"archive has {len(infos)} entries; the limit is {limits.max_entries}")
    checked: list[tuple[zipfile.ZipInfo, PurePosixPath]] = []
    for info in infos:
        mode = info.external_attr >> 16
        if mode and stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR):
            kind = "symlink" if stat.S_ISLNK(mode) else "special file"
            raise PackageError(f"archive entry {show(info.filename)} is a {kind}; only files and folders are allowed")
        if info.flag_bits & 0x1:
            raise PackageError(f"archive entry {show(info.filename)} is encrypted")
        if info.compress_type not in _ZIP_METHODS:
            raise PackageError(
                f"archive entry {show(info.filename)} uses zip compression method {info.compress_type}; "
                "only stored and deflate are accepted"
            )
        if not info.is_dir():
            tally.declare(info.filename, info.file_size)
        checked.append((info, entry_path(_zip_name(info))))
    for info, path in checked:
        if info.is_dir():
            out.folder(path)
            continue
        with reading(f"archive entry {show(info.filename)} cannot be read"):
            source = archive.open(info)
        with source:
            out.file(path, counting(source.read, tally), info.filename)
