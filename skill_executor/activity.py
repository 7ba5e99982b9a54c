"""Runs in progress, so background housekeeping can step aside for them.

Refilling the warm pool, removing used containers and deleting workspaces all cost
CPU on the same cores (and the engine) as the runs an agent is waiting for.  They wait
until no run is in progress -- but never longer than ``max_wait``, so under sustained
load housekeeping still proceeds and nothing piles up.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


class Activity:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._active = 0

    @contextmanager
    def running(self) -> Iterator[None]:
        hold = self.hold()
        try:
            yield
        finally:
            hold.release()

    def hold(self) -> Hold:
        """Count as a run in progress until :meth:`Hold.release` (idempotent): for an
        answer that outlives its run, e.g. an HTTP response still being sent."""
        with self._cond:
            self._active += 1
        return Hold(self)

    def _release(self) -> None:
        with self._cond:
            self._active -= 1
            if not self._active:
                self._cond.notify_all()

    def wait_quiet(self, max_wait: float) -> None:
        """Return when no run is in progress, or after ``max_wait`` seconds."""
        deadline = time.monotonic() + max_wait
        with self._cond:
            while self._active:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._cond.wait(left)


class Hold:
    """One :meth:`Activity.hold`; released once, however often :meth:`release` is called."""

    def __init__(self, activity: Activity) -> None:
        self._activity: Activity | None = activity
        self._lock = threading.Lock()

    def release(self) -> None:
        with self._lock:
            activity, self._activity = self._activity, None
        if activity is not None:
            activity._release()
