"""Content-addressed blobs on local disk: ``<root>/ab/abcdef...`` (the SHA-256).

A blob is written to a temp file ``<root>/.tmp-*``, hashed as it is written, fsynced
and then renamed into place by the store (under its metadata lock, see
:mod:`skill_executor.artifacts.store`).  A crash (``kill -9``) mid-write leaves the temp file
behind; :meth:`BlobDir.sweep` removes such leftovers -- but never the temp file of a
write in progress, in this or another process sharing the directory (the CLI and the
service may share a data dir):

* a writer holds an exclusive ``flock`` on its temp file from the moment the name
  exists until it is renamed or removed; the sweep removes only temp files whose lock
  it can take (a dead writer's lock went with its process);
* the name is created and locked while holding a shared lock on ``blobs.lock`` (next
  to ``<root>``),
  which the sweep holds exclusively, so the sweep never sees a temp file in the
  instant between its creation and its lock.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from ..errors import TooLarge

TEMP_PREFIX = ".tmp-"


class TempBlob:
    """A blob being written: locked, hashed as it goes, capped at ``max_bytes``."""

    def __init__(self, fd: int, path: Path, max_bytes: int | None) -> None:
        self.path = path
        self.size = 0
        self.max_bytes = max_bytes
        self._digest = hashlib.sha256()
        self._file = open(fd, "wb", closefd=True)  # noqa: SIM115 - closed by close()
        self._fd = fd
        self.placed = False

    def write(self, chunk: bytes | bytearray | memoryview) -> None:
        if self.max_bytes is not None and self.size + len(chunk) > self.max_bytes:
            raise TooLarge(f"the artifact is larger than {self.max_bytes} bytes", code="too_large")
        self._digest.update(chunk)
        self._file.write(chunk)
        self.size += len(chunk)

    def finish(self) -> str:
        """Flush and fsync the content; returns its SHA-256 (hex)."""
        self._file.flush()
        os.fsync(self._fd)
        return self._digest.hexdigest()

    def place(self, target: Path) -> bool:
        """Rename the temp file to ``target`` unless that blob exists (same content);
        returns whether it was renamed.  The caller holds the store's metadata lock."""
        if target.exists():
            return False
        target.parent.mkdir(exist_ok=True)
        os.replace(self.path, target)
        self.placed = True
        _fsync_dir(target.parent)
        return True

    def __enter__(self) -> TempBlob:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Remove the temp file (unless placed) and release the lock (by closing it)."""
        try:
            if not self.placed:
                try:
                    os.unlink(self.path)
                except FileNotFoundError:
                    pass
        finally:
            self._file.close()


class BlobDir:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.lock_path = root.parent / f"{root.name}.lock"
        root.mkdir(parents=True, exist_ok=True)

    def path(self, sha: str) -> Path:
        return self.root / sha[:2] / sha

    def open(self, sha: str) -> BinaryIO:
        """The blob for reading (raises ``FileNotFoundError`` when it is gone)."""
        return open(self.path(sha), "rb")

    def remove(self, sha: str) -> bool:
        try:
            os.unlink(self.path(sha))
            return True
        except FileNotFoundError:
            return False

    @contextmanager
    def _sweep_lock(self, mode: int) -> Iterator[None]:
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, mode)
            yield
        finally:
            os.close(fd)  # releases the lock

    def writer(self, max_bytes: int | None = None) -> TempBlob:
        """A new locked temp blob (a context manager: removed on close unless placed)."""
        with self._sweep_lock(fcntl.LOCK_SH):
            fd, name = tempfile.mkstemp(dir=self.root, prefix=TEMP_PREFIX)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                return TempBlob(fd, Path(name), max_bytes)
            except BaseException:
                os.close(fd)
                os.unlink(name)
                raise

    def sweep(self) -> int:
        """Remove the temp files of writers that are gone; returns how many."""
        removed = 0
        with self._sweep_lock(fcntl.LOCK_EX):
            for entry in os.scandir(self.root):
                if not entry.name.startswith(TEMP_PREFIX) or not entry.is_file(follow_symlinks=False):
                    continue
                try:
                    fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
                except OSError:
                    continue  # its writer just renamed or removed it
                try:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        continue  # a live writer holds it
                    try:
                        os.unlink(entry.path)
                        removed += 1
                    except FileNotFoundError:
                        pass
                finally:
                    os.close(fd)
        return removed


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
