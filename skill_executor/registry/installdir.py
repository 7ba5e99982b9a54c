"""The install root's file operations: locked staging folders, atomic swaps, the start-up sweep.

Everything an install or a removal writes goes through a *staging folder*
``<root>/.skill-executor-<hex>/`` (never discovered as a skill).  Its owner holds an
exclusive ``flock`` on the folder itself from right after creating it until it is
gone, so a crash (``kill -9`` included) leaves a folder whose lock nobody holds: the
kernel drops a dead process's locks.

The rule that makes the sweep safe: a staging folder is created, and its lock taken,
under a *shared* ``flock`` on the install root; :func:`sweep` holds that lock
*exclusively*.  While it does, no folder is between "created" and "locked", so a
staging folder whose lock it can take has no live owner and is removed; one whose lock
is held (an install in progress in this or another process, e.g. a
``skill-executor skills install``) is left alone.  The locks are on the folders
themselves, so the install root holds nothing but skills and staging folders.

A skill is replaced with ``renameat2(RENAME_EXCHANGE)``: the staged folder and the live
one trade places in one step, so at every instant -- and at every crash point -- the
skill's path holds either the complete old version or the complete new one.  The old
version ends up inside the staging folder and goes with it.  Where the file system
cannot exchange, a replacement is refused (:class:`AtomicSwapUnsupported`); there is no
non-atomic fallback.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import logging
import os
import platform
import shutil
import uuid
from pathlib import Path

from ..errors import ExecutorError

log = logging.getLogger(__name__)

#: Prefix of the staging folders; never a skill (discovery skips it).
STAGING_PREFIX = ".skill-executor-"

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
#: ``renameat2`` by number, where the C library has no wrapper (glibc < 2.28).
_SYSCALL_RENAMEAT2 = {"x86_64": 316, "aarch64": 276}


class AtomicSwapUnsupported(ExecutorError):
    code = "atomic_replace_unsupported"
    status = 503


def _load_libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:  # pragma: no cover - no C library to load
        return None


_libc = _load_libc()


def _renameat2(src: Path, dst: Path, flags: int) -> None:
    """``renameat2(AT_FDCWD, src, AT_FDCWD, dst, flags)``; raises ``OSError`` with the errno."""
    source, target = os.fsencode(src), os.fsencode(dst)
    if _libc is None:
        raise OSError(errno.ENOSYS, "no C library to call renameat2 through", str(src), None, str(dst))
    function = getattr(_libc, "renameat2", None)
    if function is not None:
        function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
        function.restype = ctypes.c_int
        result = function(_AT_FDCWD, source, _AT_FDCWD, target, flags)
    else:
        number = _SYSCALL_RENAMEAT2.get(platform.machine()) if platform.system() == "Linux" else None
        if number is None:
            raise OSError(errno.ENOSYS, "renameat2 is not available here", str(src), None, str(dst))
        _libc.syscall.restype = ctypes.c_long
        result = _libc.syscall(
            ctypes.c_long(number),
            ctypes.c_int(_AT_FDCWD),
            ctypes.c_char_p(source),
            ctypes.c_int(_AT_FDCWD),
            ctypes.c_char_p(target),
            ctypes.c_uint(flags),
        )
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(src), None, str(dst))


def exchange(a: Path, b: Path) -> None:
    """Swap two paths atomically (``renameat2(RENAME_EXCHANGE)``); both must exist."""
    try:
        _renameat2(a, b, _RENAME_EXCHANGE)
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise AtomicSwapUnsupported(
                f"the file system of {b.parent} cannot swap folders atomically (renameat2 RENAME_EXCHANGE: "
                f"{exc.strerror}); replacing an installed skill is refused there rather than done in two steps"
            ) from None
        raise


class _Locked:
    """A folder opened and ``flock``-ed; :meth:`close` releases it."""

    def __init__(self, folder: Path, operation: int, *, follow: bool = False) -> None:
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
        self.fd = os.open(folder, flags)
        try:
            fcntl.flock(self.fd, operation)
        except BaseException:
            os.close(self.fd)
            raise

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class Staging:
    """A staging folder under ``root``, owned (locked) by this process until :meth:`close`.

    Use as a context manager; on exit the folder and everything in it (an unpacked
    package, a replaced or removed skill) are deleted.
    """

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        guard = _Locked(root, fcntl.LOCK_SH, follow=True)
        try:
            self.path = root / f"{STAGING_PREFIX}{uuid.uuid4().hex}"
            self.path.mkdir()
            try:
                self._lock = _Locked(self.path, fcntl.LOCK_EX)  # brand new: nobody else has it
            except BaseException:
                self.path.rmdir()
                raise
        finally:
            guard.close()

    def __enter__(self) -> Staging:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Delete the folder, still holding its lock, so a sweep never races with the removal."""
        if self._lock.fd < 0:
            return
        try:
            if not _remove(self.path):
                log.warning("cannot remove the staging folder %s; the next start-up sweeps it", self.path)
        finally:
            self._lock.close()


def _remove(folder: Path) -> bool:
    """Delete ``folder`` and everything in it; True when it is gone."""
    shutil.rmtree(folder, ignore_errors=True)
    return not folder.exists()


def leftovers(root: Path) -> list[Path]:
    """The staging folders under ``root`` (live or not)."""
    try:
        entries = list(os.scandir(root))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(
        Path(e.path) for e in entries if e.name.startswith(STAGING_PREFIX) and e.is_dir(follow_symlinks=False)
    )


def sweep(root: Path) -> list[Path]:
    """Remove the staging folders under ``root`` that no live process owns; returns them.

    Writes nothing when there is nothing to sweep.
    """
    if not leftovers(root):
        return []
    removed: list[Path] = []
    guard = _Locked(root, fcntl.LOCK_EX, follow=True)
    try:
        for folder in leftovers(root):
            try:
                lock = _Locked(folder, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # an install or removal in progress
            except FileNotFoundError:
                continue  # removed meanwhile by its owner
            try:
                if _remove(folder):
                    removed.append(folder)
                else:
                    log.warning("cannot remove the leftover staging folder %s", folder)
            finally:
                lock.close()
    finally:
        guard.close()
    if removed:
        log.info("removed %d leftover staging folder(s) under %s", len(removed), root)
    return removed
