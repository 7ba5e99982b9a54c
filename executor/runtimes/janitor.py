"""The one janitor: removes what finished runs leave (containers, folders) off their path.

Removal is slow on some file systems and engines, and it competes for the same CPU as
the runs agents wait for, so it happens in background workers that first wait for a
quiet moment (at most ``max_wait``).  A job that fails is logged and dropped: a
worker survives anything, and whatever a failed job left is swept at the next start.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from ..activity import Activity

log = logging.getLogger(__name__)

Job = Callable[[], None]


class Janitor:
    def __init__(self, activity: Activity, *, workers: int = 2, max_wait: float = 2.0, name: str = "janitor") -> None:
        self.activity = activity
        self.max_wait = max_wait
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self._closed = False
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True) for i in range(workers)]
        for thread in self._threads:
            thread.start()

    def submit(self, job: Job) -> None:
        """Run ``job`` in the background (at once, in the caller, once closed)."""
        if self._closed:
            self._run(job)
        else:
            self._jobs.put(job)

    @property
    def backlog(self) -> int:
        return self._jobs.qsize()

    def settle(self) -> None:
        """Wait until every job submitted so far is done."""
        self._jobs.join()

    def close(self) -> None:
        """Finish the queued jobs, then stop the workers."""
        self._closed = True
        for _ in self._threads:
            self._jobs.put(None)
        for thread in self._threads:
            thread.join(timeout=60)

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                if job is None:
                    return
                if not self._closed:
                    self.activity.wait_quiet(self.max_wait)
                self._run(job)
            finally:
                self._jobs.task_done()

    @staticmethod
    def _run(job: Job) -> None:
        try:
            job()
        except Exception as exc:  # the janitor must outlive anything a run leaves
            log.warning("cleanup failed: %s", exc)
