"""Objects as files under a private folder: ``<root>/<key>``.

Writes go to a temp file in the root (``.tmp-*``, 0600), are fsynced and renamed into
place (the folder fsynced too), so a reader sees a whole object or none.  Folders are
0700.  A crash mid-write leaves a ``.tmp-*`` file that no key can name and :meth:`list`
never shows.  Disk errors map like S3's: permissions are a misconfiguration, anything
else (a full or failing disk) makes the store unavailable.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import BinaryIO

from ..errors import ExecutorError
from .base import CHUNK_BYTES, ObjectStore, spool_file
from .errors import ObjectNotFound, ObjectStoreMisconfigured, ObjectStoreUnavailable
from .keys import blob_key

_DENIED = {errno.EACCES, errno.EPERM, errno.EROFS}
#: A hard link cannot be made (another file system, links refused, too many): copy instead.
_NO_LINK = {errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP}


class LocalObjectStore(ObjectStore):
    local = True

    def __init__(self, root: Path) -> None:
        self.root = Path(root).absolute()

    def import_blob(self, path: Path, sha256: str, namespace: str = "") -> bool:
        """A hard link to ``path`` when it is on this store's file system (not verified: the
        file is this machine's own); else a verified copy (:meth:`ObjectStore.import_blob`)."""
        key = blob_key(sha256, namespace)
        target = self._path(key)
        with self._errors("a write"):
            self._ensure_root()
            _makedirs(self.root, target.parent)
        try:
            os.link(path, target, follow_symlinks=False)
        except FileExistsError:
            return False
        except OSError as exc:
            if exc.errno not in _NO_LINK:
                with self._errors(key):
                    raise
            return super().import_blob(path, sha256, namespace)
        with self._errors(key):
            _fsync_dir(target.parent)
        return True

    def describe(self) -> str:
        return f"folder {self.root}"

    def check(self) -> None:
        with self._errors("the health probe"):
            self._ensure_root()
            with spool_file(self.root) as (file, _):
                file.write(b"ok")
                os.fsync(file.fileno())

    # -- hooks ------------------------------------------------------------------------------

    def _spool_folder(self) -> Path | None:
        return self.root

    def _spool(self) -> AbstractContextManager[tuple[BinaryIO, Path]]:
        with self._errors("a write"):
            self._ensure_root()
        return spool_file(self.root)

    def _publish(self, key: str, path: Path) -> None:
        target = self._path(key)
        with self._errors(key):
            _makedirs(self.root, target.parent)
            os.replace(path, target)
            _fsync_dir(target.parent)

    def _put_file(self, key: str, path: Path) -> None:
        with open(path, "rb") as reader:
            self.put_stream(key, reader)

    def _open(self, key: str) -> BinaryIO:
        with self._errors(key):
            fd = os.open(self._path(key), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            return os.fdopen(fd, "rb", buffering=CHUNK_BYTES)

    def _download_into(self, key: str, file: BinaryIO) -> None:
        with self._open(key) as reader, self._errors(key):
            while chunk := reader.read(CHUNK_BYTES):
                file.write(chunk)

    def _exists(self, key: str) -> bool:
        with self._errors(key):
            try:
                return os.path.isfile(self._path(key)) and not os.path.islink(self._path(key))
            except FileNotFoundError:
                return False

    def _size(self, key: str) -> int:
        with self._errors(key):
            info = os.stat(self._path(key), follow_symlinks=False)
        if not stat.S_ISREG(info.st_mode):
            raise ObjectNotFound(f"no object {key} in the object store")
        return info.st_size

    def _delete(self, key: str) -> None:
        with self._errors(key):
            try:
                os.unlink(self._path(key))
            except FileNotFoundError:
                pass

    def _list(self, prefix: str) -> Iterator[str]:
        start = self.root / prefix if prefix else self.root
        with self._errors(prefix or "the listing"):
            if not start.is_dir():
                return  # nothing stored there (yet)
            for folder, dirs, files in os.walk(start, onerror=_raise):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                relative = Path(folder).relative_to(self.root).as_posix()
                for name in sorted(files):
                    if not name.startswith(".") and not os.path.islink(os.path.join(folder, name)):
                        yield name if relative == "." else f"{relative}/{name}"

    # -- helpers ----------------------------------------------------------------------------

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*key.split("/"))

    def _ensure_root(self) -> None:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)

    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        """The one mapping of this store's OS errors."""
        try:
            yield
        except ExecutorError:
            raise
        except (FileNotFoundError, NotADirectoryError) as exc:
            if what in ("a write", "the health probe"):
                raise ObjectStoreUnavailable(f"the object store {self.describe()} is gone: {exc.strerror}") from None
            raise ObjectNotFound(f"no object {what} in the object store") from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # a link where an object should be (O_NOFOLLOW): not ours
                raise ObjectNotFound(f"no object {what} in the object store") from None
            if exc.errno in _DENIED:
                raise ObjectStoreMisconfigured(
                    f"the object store {self.describe()} refused {what}: {exc.strerror}"
                ) from None
            raise ObjectStoreUnavailable(
                f"the object store {self.describe()} failed on {what}: {exc.strerror}"
            ) from None


def _makedirs(root: Path, folder: Path) -> None:
    """Create ``folder`` (below ``root``) and its parents, 0700."""
    missing = []
    while folder != root and not folder.is_dir():
        missing.append(folder)
        folder = folder.parent
    for path in reversed(missing):
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            if not path.is_dir() or path.is_symlink():
                raise


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _raise(exc: OSError) -> None:
    raise exc
