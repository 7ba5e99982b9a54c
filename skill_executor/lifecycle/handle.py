"""A run's live view in this process (:class:`RunHandle`): its numbered events for any
number of subscribers (thread-safe, asyncio-friendly), its cancel flag and its outcome."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from .records import RunRecord

Event = tuple[str, Any]


@dataclass(eq=False)
class RunHandle:
    """Live view of one run in this process.

    Its events are numbered from 1 in the order they happened (the ids of the run's
    Server-Sent Events): ``status`` ``queued``, ``status`` ``running``, ``stdout`` /
    ``stderr`` chunks, the final ``status``, then ``result`` or ``error``.  Each status
    appears once, but for a run executed again after its cluster worker was lost (it asked
    to be: ``retry``): ``retry`` then ``status queued``, ``status running`` follow its
    earlier attempt's events.
    """

    run_id: str
    record: RunRecord
    started: bool = False
    cancel: threading.Event = field(default_factory=threading.Event)
    #: Why ``cancel`` was set: "request" (DELETE) or "shutdown".
    reason: str | None = None
    future: concurrent.futures.Future[RunRecord] = field(default_factory=concurrent.futures.Future)
    #: Set once the outcome is in the store (just after ``future``: waiters are answered first).
    recorded: threading.Event = field(default_factory=threading.Event)
    events: list[Event] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = field(default_factory=list)
    #: A worker's: gets every event ``(id, kind, data)`` in order, as published (must not block).
    sink: Callable[[int, str, Any], None] | None = None
    #: A worker's: records the outcome instead of the store (``record``, guarded by its claim).
    outcome: Callable[[RunRecord], None] | None = None

    def publish(self, kind: str, data: Any) -> None:
        with self._lock:
            self.events.append((kind, data))
            waiters = list(self._waiters)
            if self.sink is not None:
                self.sink(len(self.events), kind, data)
        for loop, event in waiters:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # the subscriber's loop is gone
                pass

    async def stream(self, after: int = 0) -> AsyncIterator[tuple[int, str, Any]]:
        """``(id, kind, data)`` of every event after id ``after``, then new ones as they
        come, until the run's ``result`` or ``error``."""
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()
        entry = (loop, wake)
        with self._lock:
            self._waiters.append(entry)
        try:
            offset = max(0, after)
            while True:
                wake.clear()
                with self._lock:
                    batch = self.events[offset:]
                for kind, data in batch:
                    offset += 1
                    yield offset, kind, data
                    if kind in TERMINAL:
                        return
                with self._lock:
                    if offset >= len(self.events) and self.events and self.events[-1][0] in TERMINAL:
                        return  # resumed after the last event: nothing more will come
                await wake.wait()
        finally:
            with self._lock:
                self._waiters.remove(entry)

    async def wait(self) -> RunRecord:
        """The final record.  A waiter that is cancelled leaves the run alone (unlike
        ``asyncio.wrap_future``, which would cancel the run's future with it)."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[RunRecord] = loop.create_future()

        def resolve(done: concurrent.futures.Future[RunRecord]) -> None:
            if not waiter.done():
                waiter.set_result(done.result())

        def finished(done: concurrent.futures.Future[RunRecord]) -> None:
            try:
                loop.call_soon_threadsafe(resolve, done)
            except RuntimeError:  # the waiter's loop is gone
                pass

        self.future.add_done_callback(finished)
        return await waiter


#: The event that ends a run's stream.
TERMINAL = ("result", "error")


def terminal(record: RunRecord) -> tuple[str, dict[str, Any]]:
    """A finished run's last event: ``("error", body)`` when it ended with an error
    (failed, or cancelled by a shutdown), else ``("result", result)``."""
    if record.error is not None and record.status != "completed":
        return "error", {k: v for k, v in record.error.items() if k != "status"}
    return "result", record.result or {}
