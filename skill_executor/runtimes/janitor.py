"""The one janitor: removes what finished runs leave (containers, folders) off their path.

Removals run in parallel on a bounded set of supervised workers
(:class:`~skill_executor.workers.Supervisor`).  While the backlog is short they first wait
for a quiet moment (at most ``max_wait``), so housekeeping does not compete with the
runs agents wait for; once it grows past the number of workers they go at once, so
cleanup keeps up with any load.  A job that fails is logged (once per cause) and
dropped: what it left is found again by the runtime's periodic reconciliation (and at
the next start).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from ..activity import Activity
from ..workers import Causes, Supervisor

log = logging.getLogger(__name__)

Job = Callable[[], None]
#: How long a worker blocks on an empty queue before it checks whether it should stop.
POLL_SECONDS = 0.5


class Janitor:
    def __init__(
        self,
        activity: Activity,
        supervisor: Supervisor,
        *,
        workers: int = 4,
        max_wait: float = 2.0,
        name: str = "janitor",
    ) -> None:
        self.activity = activity
        self.max_wait = max_wait
        self.workers = max(1, workers)
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self._closed = False
        self._failed_causes = Causes()
        self.failures = 0
        self.done = 0
        for i in range(self.workers):
            supervisor.loop(f"{name}-{i}", self._work_one)
        supervisor.on_close(self._wake)

    def submit(self, job: Job) -> None:
        """Run ``job`` in the background (at once, in the caller, once closed)."""
        if self._closed:
            self._run(job)
        else:
            self._jobs.put(job)

    @property
    def backlog(self) -> int:
        """Jobs waiting or in progress."""
        return self._jobs.unfinished_tasks

    def settle(self, timeout: float | None = None) -> bool:
        """Wait until every job submitted so far is done; False when ``timeout`` passed first."""
        if timeout is None:
            self._jobs.join()
            return True
        deadline = time.monotonic() + timeout
        while self.backlog:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def close(self, timeout: float = 30.0) -> None:
        """Stop taking jobs in the background; finish the queued ones (in parallel, within
        ``timeout``: what is left then is swept at the next start)."""
        self._closed = True
        deadline = time.monotonic() + timeout
        helpers = [threading.Thread(target=self._drain, args=(deadline,), daemon=True) for _ in range(self.workers)]
        for thread in helpers:
            thread.start()
        for thread in helpers:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        # The workers may still be finishing jobs they took before.
        self.settle(timeout=max(0.0, deadline - time.monotonic()))
        left = self.backlog
        if left:
            log.warning("janitor: %d cleanup job(s) left at shutdown (swept at the next start)", left)

    def _wake(self) -> None:
        """Unblock every worker waiting for a job (the supervisor is closing)."""
        for _ in range(self.workers):
            self._jobs.put(None)

    def _drain(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                return
            if job is None:
                self._jobs.task_done()
                continue
            self._take(job, wait=False)

    def _work_one(self) -> None:
        """One step of a worker: take a job (or return after a short poll)."""
        try:
            job = self._jobs.get(timeout=POLL_SECONDS)
        except queue.Empty:
            return
        if job is None:
            self._jobs.task_done()
            return
        self._take(job, wait=not self._closed)

    def _take(self, job: Job, *, wait: bool) -> None:
        try:
            if wait and self._jobs.qsize() < self.workers:
                self.activity.wait_quiet(self.max_wait)
            self._run(job)
        finally:
            self._jobs.task_done()

    def _run(self, job: Job) -> None:
        try:
            job()
            self.done += 1
        except Exception as exc:  # the janitor must outlive anything a run leaves
            self.failures += 1
            cause = f"{type(exc).__name__}: {exc}"
            if self._failed_causes.first(cause):
                log.warning("cleanup failed (left for the reconciliation): %s", cause[:500])
