"""What every archive reader shares: the caps (:class:`PackageLimits`) counted as bytes
are produced (:class:`Tally`), the one writer of entries under the install folder
(:class:`Writer`: every file new, paths checked by :func:`entry_path`), and the mapping
of a broken archive's errors to :class:`PackageError`.
"""

from __future__ import annotations

import errno
import lzma
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..errors import ExecutorError, TooLarge
from ..paths import clean_relative

MiB = 1024 * 1024
CHUNK = 64 * 1024
#: An entry's path inside the archive (the install folder's path comes on top).
MAX_ENTRY_PATH_BYTES = 1024
#: What the headers, padding and meta headers of one entry may add to the stream.
_OVERHEAD_PER_ENTRY = 4 * 1024


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


def too_large(message: str) -> TooLarge:
    return TooLarge(message, code="package_too_large")


class Tally:
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
                raise too_large(
                    f"archive unpacks to more than {self.unpack_limit} bytes: {self.limits.ratio_floor_bytes} "
                    f"plus {self.limits.max_ratio} times its own {self.upload_bytes} bytes"
                )
            raise too_large(f"archive unpacks to more than {self.limits.max_total_bytes} bytes")

    def entry(self) -> None:
        self.entries += 1
        if self.entries > self.limits.max_entries:
            raise too_large(f"archive has more than {self.limits.max_entries} entries")

    def declare(self, name: str, size: int) -> None:
        """A member says it holds ``size`` bytes: refuse at once what could never fit."""
        if size > self.limits.max_file_bytes:
            raise too_large(
                f"archive entry {show(name)} declares {size} bytes; the limit is {self.limits.max_file_bytes}"
            )
        self.declared += size
        if self.declared > self.limits.max_total_bytes:
            raise too_large(f"archive declares more than {self.limits.max_total_bytes} bytes")

    def write(self, name: str, written: int, count: int) -> None:
        """``count`` more content bytes of one member, ``written`` of it before them."""
        if written + count > self.limits.max_file_bytes:
            raise too_large(f"archive entry {show(name)} unpacks to more than {self.limits.max_file_bytes} bytes")
        self.content += count
        if self.content > self.limits.max_total_bytes:
            raise too_large(f"archive unpacks to more than {self.limits.max_total_bytes} bytes")


def show(name: str) -> str:
    return repr(name if len(name) <= 200 else name[:200] + "...")


@contextmanager
def reading(what: str) -> Iterator[None]:
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


class Writer:
    """Creates the entries under ``dest``; every file is new (a second one with the same path is refused)."""

    def __init__(self, dest: Path, tally: Tally) -> None:
        self.dest = dest
        self.tally = tally
        self.files: list[PurePosixPath] = []

    def folder(self, path: PurePosixPath) -> None:
        with self._writing(path):
            (self.dest / str(path)).mkdir(parents=True, exist_ok=True)

    def file(self, path: PurePosixPath, read: Callable[[int], bytes], what: str) -> None:
        if path == PurePosixPath("."):
            raise PackageError(f"archive entry {show(what)} is a file without a name")
        name = str(path)
        target = self.dest / name
        with self._writing(path):
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "xb") as out:
                written = 0
                while True:
                    with reading(f"archive entry {show(what)} cannot be read"):
                        chunk = read(CHUNK)
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
            raise PackageError(f"archive holds the same path twice: {show(str(path))}") from None
        except (NotADirectoryError, IsADirectoryError):
            raise PackageError(f"archive holds a file and a folder at the same path: {show(str(path))}") from None
        except OSError as exc:
            if exc.errno == errno.ENAMETOOLONG:
                raise PackageError(f"archive entry path {show(str(path))} is too long to unpack") from None
            raise


def entry_path(name: str) -> PurePosixPath:
    """An archive entry's name as a safe relative path (``.`` for the root)."""
    if len(name.encode("utf-8", "surrogatepass")) > MAX_ENTRY_PATH_BYTES:
        raise PackageError(f"archive entry {show(name)} has a path longer than {MAX_ENTRY_PATH_BYTES} bytes")
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        raise PackageError(f"archive entry {show(name)} has an absolute path")
    try:
        return clean_relative(name, what="archive entry", allow_empty=True)
    except ExecutorError as exc:
        if ".." in name or "\x00" in name:
            raise PackageError(f"archive entry {show(name)} has an unsafe path ('..' or NUL)") from None
        raise PackageError(f"archive entry {show(name)}: {exc.message}") from None


def counting(read: Callable[[int], bytes], tally: Tally) -> Callable[[int], bytes]:
    def counted(size: int) -> bytes:
        chunk = read(size)
        tally.unpack(len(chunk))
        return chunk

    return counted
