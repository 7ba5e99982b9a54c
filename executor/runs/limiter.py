"""At most N runs at once; a bounded number wait; the rest are refused as busy.

A refusal is immediate and says so (HTTP 429), rather than a request hanging in an
unbounded queue while the client times out.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import Busy


class RunLimiter:
    def __init__(self, slots: int, queue: int) -> None:
        if slots < 1:
            raise ValueError("at least one run slot is needed")
        self.slots = slots
        self.queue = queue
        self._cond = threading.Condition()
        self.running = 0
        self.waiting = 0

    @contextmanager
    def slot(self) -> Iterator[None]:
        with self._cond:
            if self.running >= self.slots:
                if self.waiting >= self.queue:
                    raise Busy(
                        f"the service is busy: {self.running} runs are executing and {self.waiting} are queued "
                        f"(limits {self.slots} and {self.queue}); retry later",
                        code="busy",
                    )
                self.waiting += 1
                try:
                    while self.running >= self.slots:
                        self._cond.wait()
                finally:
                    self.waiting -= 1
            self.running += 1
        try:
            yield
        finally:
            with self._cond:
                self.running -= 1
                self._cond.notify()
