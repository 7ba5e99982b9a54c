"""Background workers that survive anything: the one way the service runs housekeeping.

A :class:`Supervisor` owns named workers, each a thread calling one function:

* ``every(name, interval, fn)``: ``fn`` runs every ``interval`` seconds;
* ``loop(name, fn)``: ``fn`` runs again as soon as it returns (a queue consumer).

A worker that raises is retried with exponential backoff (``BACKOFF_START`` doubling
up to ``BACKOFF_MAX``); each distinct cause is logged once (warning), and recovery once
(info).  A worker whose thread dies all the same (an exception no ``except Exception``
catches) is restarted by the supervisor's watch and counted.  :meth:`stats` feeds the
metrics and the health check.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

BACKOFF_START = 0.5
BACKOFF_MAX = 30.0
WATCH_INTERVAL = 1.0


class Causes:
    """Failure causes already logged: each distinct one is logged once (the first
    ``LIMIT`` kept; past them every new cause is logged again)."""

    LIMIT = 100

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def first(self, cause: str) -> bool:
        """True when ``cause`` should be logged now."""
        with self._lock:
            if cause in self._seen:
                return False
            if len(self._seen) < self.LIMIT:
                self._seen.add(cause)
            return True

    def clear(self) -> None:
        with self._lock:
            self._seen.clear()


@dataclass
class WorkerStats:
    failures: int = 0
    restarts: int = 0
    last_error: str | None = None
    failing: bool = False


@dataclass
class _Worker:
    name: str
    fn: Callable[[], object]
    interval: float | None  # None: loop
    initial_delay: float = 0.0
    stats: WorkerStats = field(default_factory=WorkerStats)
    thread: threading.Thread | None = None
    causes: Causes = field(default_factory=Causes)
    next_restart: float = 0.0


class Supervisor:
    def __init__(self, name: str) -> None:
        self.name = name
        self._workers: dict[str, _Worker] = {}
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._watch: threading.Thread | None = None
        self._on_close: list[Callable[[], None]] = []

    # -- registering ---------------------------------------------------------------------

    def every(self, name: str, interval: float, fn: Callable[[], object], *, initial_delay: float = 0.0) -> None:
        """Run ``fn`` every ``interval`` seconds (first after ``initial_delay``)."""
        self._add(_Worker(name, fn, interval, initial_delay))

    def loop(self, name: str, fn: Callable[[], object]) -> None:
        """Run ``fn`` over and over (it blocks for its own work, e.g. on a queue)."""
        self._add(_Worker(name, fn, None))

    def _add(self, worker: _Worker) -> None:
        with self._lock:
            if worker.name in self._workers:
                raise ValueError(f"worker {worker.name!r} exists already")
            self._workers[worker.name] = worker
            self._start(worker)
            if self._watch is None:
                self._watch = threading.Thread(target=self._watch_loop, name=f"{self.name}-watch", daemon=True)
                self._watch.start()

    # -- state -----------------------------------------------------------------------------

    def stats(self) -> dict[str, WorkerStats]:
        with self._lock:
            return {name: WorkerStats(**vars(w.stats)) for name, w in self._workers.items()}

    def alive(self) -> dict[str, bool]:
        with self._lock:
            return {name: w.thread is not None and w.thread.is_alive() for name, w in self._workers.items()}

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True when the supervisor was closed meanwhile."""
        return self._closed.wait(seconds)

    def on_close(self, wake: Callable[[], None]) -> None:
        """Call ``wake`` when closing, to unblock a worker waiting on something of its own."""
        self._on_close.append(wake)

    def close(self, timeout: float = 5.0) -> None:
        """Stop every worker (each finishes its current call) within ``timeout`` in all."""
        self._closed.set()
        for wake in self._on_close:
            wake()
        deadline = time.monotonic() + timeout
        with self._lock:
            threads = [w.thread for w in self._workers.values() if w.thread is not None]
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(timeout=max(0.0, deadline - time.monotonic()))

    # -- running ---------------------------------------------------------------------------

    def _start(self, worker: _Worker) -> None:
        worker.thread = threading.Thread(
            target=self._run, args=(worker,), name=f"{self.name}-{worker.name}", daemon=True
        )
        worker.thread.start()

    def _run(self, worker: _Worker) -> None:
        if worker.initial_delay and self._closed.wait(worker.initial_delay):
            return
        backoff = BACKOFF_START
        while not self._closed.is_set():
            try:
                worker.fn()
            except Exception as exc:  # a worker outlives anything its job raises
                self._failed(worker, exc)
                if self._closed.wait(backoff):
                    return
                backoff = min(BACKOFF_MAX, backoff * 2)
                continue
            if worker.stats.failing:
                worker.stats.failing = False
                worker.causes.clear()
                log.info("%s: %s recovered", self.name, worker.name)
            backoff = BACKOFF_START
            if worker.interval is not None and self._closed.wait(worker.interval):
                return

    def _failed(self, worker: _Worker, exc: Exception) -> None:
        cause = f"{type(exc).__name__}: {exc}"
        worker.stats.failures += 1
        worker.stats.last_error = cause[:500]
        worker.stats.failing = True
        if worker.causes.first(cause):
            log.warning("%s: %s failed (retrying with backoff): %s", self.name, worker.name, cause[:500])

    def _watch_loop(self) -> None:
        while not self._closed.wait(WATCH_INTERVAL):
            with self._lock:
                now = time.monotonic()
                for worker in self._workers.values():
                    if (
                        worker.thread is not None
                        and not worker.thread.is_alive()
                        and not self._closed.is_set()
                        and now >= worker.next_restart
                    ):
                        worker.stats.restarts += 1
                        # A worker that keeps dying is restarted less and less often.
                        worker.next_restart = now + min(BACKOFF_MAX, BACKOFF_START * 2**worker.stats.restarts)
                        log.error(
                            "%s: worker %s died; restarting it (restart %d)",
                            self.name,
                            worker.name,
                            worker.stats.restarts,
                        )
                        self._start(worker)
