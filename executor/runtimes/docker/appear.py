"""Waiting for a file to appear in a folder without polling: Linux inotify (through libc).

A warm container is ready once its launcher publishes its socket (a rename, or under
gVisor a link, into the workspace's ``run/`` folder); the pool waits for that event
instead of looking every few milliseconds.  The folder is watched before its content is
looked at, so an entry made just before the watch is seen too.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import select
import time
from collections.abc import Callable
from pathlib import Path

IN_CREATE = 0x00000100
IN_MOVED_TO = 0x00000080
#: The longest a wait sleeps between two looks (a safety net: events wake it at once).
LOOK_SECONDS = 0.25

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def _watch(folder: Path) -> int:
    fd = int(_libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC))
    if fd < 0:
        raise OSError(ctypes.get_errno(), f"inotify_init1: {os.strerror(ctypes.get_errno())}")
    if _libc.inotify_add_watch(fd, os.fsencode(folder), IN_CREATE | IN_MOVED_TO) < 0:
        errno = ctypes.get_errno()
        os.close(fd)
        raise OSError(errno, f"inotify_add_watch {folder}: {os.strerror(errno)}")
    return fd


def wait_for(path: Path, timeout: float, stop: Callable[[], bool] = lambda: False) -> bool:
    """True once ``path`` exists (links not followed); False after ``timeout`` seconds or
    once ``stop()`` is true (looked at on each event, and at least every
    :data:`LOOK_SECONDS`)."""
    fd = _watch(path.parent)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if os.path.lexists(path):
                return True
            left = deadline - time.monotonic()
            if left <= 0 or stop():
                return False
            ready, _, _ = select.select([fd], [], [], min(left, LOOK_SECONDS))
            if ready:
                try:
                    while os.read(fd, 4096):  # drain: the names do not matter, the look does
                        pass
                except BlockingIOError:
                    pass
    finally:
        os.close(fd)
