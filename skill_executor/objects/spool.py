"""Spool files: the private temp files a body is copied into before a store publishes it.

A spool is ``<folder>/.tmp-*`` (0600; no key can start with ``.``).  A crash (``kill -9``)
mid-write leaves it behind; :func:`sweep_spool` removes such leftovers -- but never the
spool of a write in progress, in this or another process sharing the folder (the CLI and
the service may share a data dir):

* a writer holds an exclusive ``flock`` on its spool from the moment the name exists until
  it is renamed or removed; the sweep removes only spools whose lock it can take (a dead
  writer's lock went with its process);
* the name is created and locked while holding a shared lock on ``<folder>/.spool.lock``,
  which the sweep holds exclusively, so the sweep never sees a spool in the instant between
  its creation and its lock.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from .errors import ObjectStoreUnavailable

#: Spools (and downloads in progress) start with this; no key can (see :mod:`.keys`).
TEMP_PREFIX = ".tmp-"
LOCK_NAME = ".spool.lock"


def disk_error(exc: OSError) -> ObjectStoreUnavailable:
    return ObjectStoreUnavailable(f"the object store's temp file could not be written: {exc.strerror}")


@contextmanager
def _folder_lock(folder: Path, mode: int) -> Iterator[None]:
    fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, mode)
        yield
    finally:
        os.close(fd)  # releases the lock


@contextmanager
def spool_file(folder: Path) -> Iterator[tuple[BinaryIO, Path]]:
    """A new, locked temp file (0600) in ``folder``, removed on exit unless renamed away."""
    try:
        with _folder_lock(folder, fcntl.LOCK_SH):
            fd, name = tempfile.mkstemp(dir=folder, prefix=TEMP_PREFIX)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except BaseException:
                os.close(fd)
                os.unlink(name)
                raise
    except OSError as exc:
        raise disk_error(exc) from None
    path = Path(name)
    try:
        with os.fdopen(fd, "w+b") as file:
            yield file, path
    finally:
        path.unlink(missing_ok=True)


def sweep_spool(folder: Path) -> int:
    """Remove the spools of writers that are gone from ``folder`` (creating nothing); how many."""
    if not folder.is_dir():
        return 0
    removed = 0
    with _folder_lock(folder, fcntl.LOCK_EX):
        for entry in os.scandir(folder):
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
