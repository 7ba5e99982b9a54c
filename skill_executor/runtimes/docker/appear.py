"""Waiting for a file to appear in a folder without polling: Linux inotify (through libc).

A warm container is ready once its launcher publishes its socket (a rename, or under
gVisor a link, into the workspace's ``run/`` folder); the pool waits for that event
instead of looking every few milliseconds.  The folder is watched before its content is
looked at, so an entry made just before the watch is seen too.
"""

from __future__ import annotations

import ctypes
import logging
import os
import select
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

IN_CREATE = 0x00000100
IN_MOVED_TO = 0x00000080
#: The longest a wait sleeps between two looks (a safety net: events wake it at once).
LOOK_SECONDS = 0.25
#: Between two looks when no watch can be had (the process or user is out of inotify
#: instances or watches): the wait then polls, and says so in the log.
POLL_SECONDS = 0.01

_libc = ctypes.CDLL(None, use_errno=True)  # the C library the interpreter is linked with


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
    deadline = time.monotonic() + timeout
    try:
        fd = _watch(path.parent)
    except OSError as exc:
        log.warning("no inotify watch for %s (%s): polling every %.0f ms", path.parent, exc, POLL_SECONDS * 1000)
        fd = -1
    poller = select.poll()  # not select(): descriptors past 1024 are fine
    if fd >= 0:
        poller.register(fd, select.POLLIN)
    try:
        while True:
            if os.path.lexists(path):
                return True
            left = deadline - time.monotonic()
            if left <= 0 or stop():
                return False
            if fd < 0:
                time.sleep(min(left, POLL_SECONDS))
                continue
            if poller.poll(min(left, LOOK_SECONDS) * 1000):
                try:
                    while os.read(fd, 4096):  # drain: the names do not matter, the look does
                        pass
                except BlockingIOError:
                    pass
    finally:
        if fd >= 0:
            os.close(fd)
