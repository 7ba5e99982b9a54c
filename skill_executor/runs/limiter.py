"""At most N runs at once; a bounded number wait; the rest are refused as busy.

Admission is two steps so a caller can be refused *before* it commits to a run (the
HTTP API answers 429 instead of accepting a run that would then fail):
:meth:`RunLimiter.reserve` takes a place or raises :class:`~skill_executor.errors.Busy`,
and entering the returned reservation waits for a free slot.
"""

from __future__ import annotations

import threading

from ..errors import Busy


class Reservation:
    """A place in line; ``with reservation:`` holds a run slot for the block."""

    def __init__(self, limiter: RunLimiter) -> None:
        self._limiter = limiter
        self._state = "reserved"

    def __enter__(self) -> Reservation:
        self.acquire()
        return self

    def acquire(self, cancel: threading.Event | None = None) -> bool:
        """Wait for a run slot (at once if this reservation holds one already); False,
        with the place given up, when ``cancel`` is set first (see :meth:`RunLimiter.wake`)."""
        limiter = self._limiter
        with limiter._cond:
            if self._state == "running":
                return True
            while cancel is None or not cancel.is_set():
                if limiter.running < limiter.slots:
                    limiter.waiting -= 1
                    limiter.running += 1
                    self._state = "running"
                    return True
                limiter._cond.wait()
        self.release()
        return False

    def __exit__(self, *exc: object) -> None:
        limiter = self._limiter
        with limiter._cond:
            if self._state == "running":
                limiter.running -= 1
            elif self._state == "reserved":
                limiter.waiting -= 1
            self._state = "done"
            limiter._cond.notify_all()

    def release(self) -> None:
        """Give the place or the slot up (idempotent)."""
        self.__exit__(None, None, None)


class RunLimiter:
    def __init__(self, slots: int, queue: int) -> None:
        if slots < 1:
            raise ValueError("at least one run slot is needed")
        self.slots = slots
        self.queue = queue
        self._cond = threading.Condition()
        self.running = 0
        self.waiting = 0

    def reserve(self) -> Reservation:
        with self._cond:
            # A free slot admits at once; otherwise there must be room in the queue.
            free = self.slots - self.running - self.waiting
            if free <= 0 and self.waiting - max(0, self.slots - self.running) >= self.queue:
                raise Busy(
                    f"the service is busy: {self.running} runs are executing and "
                    f"{max(0, self.waiting - max(0, self.slots - self.running))} are queued "
                    f"(limits {self.slots} and {self.queue}); retry later",
                    code="busy",
                )
            self.waiting += 1
            return Reservation(self)

    def wake(self) -> None:
        """Wake every reservation waiting for a slot, so a cancelled one stops waiting."""
        with self._cond:
            self._cond.notify_all()
