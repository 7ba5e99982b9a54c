"""A worker's row in ``workers`` and its lease (database clock only).

The heartbeat renews the lease every ``heartbeat`` seconds only while it is still valid
(``UPDATE ... WHERE lease_until > now``): no row means another process declared this worker
lost, and it must stop. When renewals fail (Postgres unreachable) the worker gives up once
its lease may have run out, before any sweeper may act on it.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable

from sqlalchemy import delete, insert, text, update

from ..db import Database
from ..db.schema import workers
from .sweep import now_sql

log = logging.getLogger(__name__)


class Membership:
    def __init__(
        self, database: Database, worker_id: str, *, tiers: list[str], capacity: int, lease: float, heartbeat: float
    ) -> None:
        self.database = database
        self.worker_id = worker_id
        self.tiers = tiers
        self.capacity = capacity
        self.lease = lease
        self.heartbeat = heartbeat
        #: Set once the lease is lost (for good: the worker must exit).
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def register(self) -> None:
        with self.database.write() as conn:
            conn.execute(
                insert(workers).values(
                    worker_id=self.worker_id,
                    host=socket.gethostname(),
                    tiers=json.dumps(self.tiers),
                    capacity=self.capacity,
                    started_at=text(now_sql()),
                    lease_until=text(f"{now_sql()} + {float(self.lease)}"),
                )
            )

    def renew(self) -> bool:
        """Extend the lease if it is still ours; False: it is lost."""
        with self.database.write() as conn:
            done = conn.execute(
                update(workers)
                .where(workers.c.worker_id == self.worker_id, workers.c.lease_until > text(now_sql()))
                .values(lease_until=text(f"{now_sql()} + {float(self.lease)}"))
            ).rowcount
        return bool(done)

    def start(self, on_lost: Callable[[str], None]) -> None:
        def beat() -> None:
            renewed = time.monotonic()
            # give up before the lease can have run out on the database's clock
            margin = min(self.heartbeat, self.lease / 4)
            while not self._stop.wait(self.heartbeat):
                try:
                    if self.renew():
                        renewed = time.monotonic()
                        continue
                    reason = "its lease was taken (declared lost by a sweep)"
                except Exception as exc:  # Postgres unreachable: hold on while the lease may hold
                    if time.monotonic() - renewed < self.lease - margin:
                        log.warning("worker %s: heartbeat failed (%s); retrying", self.worker_id, exc)
                        continue
                    reason = f"no heartbeat for {self.lease - margin:.0f} s ({exc})"
                self.lost.set()
                on_lost(reason)
                return

        self._thread = threading.Thread(target=beat, name="worker-heartbeat", daemon=True)
        self._thread.start()

    def leave(self) -> None:
        """A clean stop: the row goes (a lost lease leaves it to the sweep)."""
        self._stop.set()
        if self.lost.is_set():
            return
        try:
            with self.database.write() as conn:
                conn.execute(delete(workers).where(workers.c.worker_id == self.worker_id))
        except Exception:
            log.exception("worker %s: could not unregister", self.worker_id)
