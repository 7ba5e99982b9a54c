"""A worker's row in ``workers`` and its lease (database clock only). A worker's id is its
data dir's (:func:`skill_executor.owners.data_dir_id`): restarted there, it is the same worker.

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

from sqlalchemy import delete, insert, select, text, update

from ...db import Database
from ...db.schema import runs, workers
from .sweep import lost_run, now_sql

log = logging.getLogger(__name__)


class Membership:
    def __init__(
        self,
        database: Database,
        worker_id: str,
        *,
        tiers: list[str],
        capacity: int,
        lease: float,
        heartbeat: float,
        url: str | None = None,
    ) -> None:
        """``url``: where replicas reach this worker (its sessions' processes)."""
        self.database = database
        self.worker_id = worker_id
        self.tiers = tiers
        self.capacity = capacity
        self.lease = lease
        self.heartbeat = heartbeat
        self.url = url
        #: Set once the lease is lost (for good: the worker must exit).
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def register(self) -> list[str]:
        """Take (or take back) this worker's row and lease. A worker's id is its data dir's,
        so a worker restarted on its data dir is the same worker: the runs its predecessor
        was running died with it and end ``interrupted`` here, or are queued again when
        their request's ``retry`` allows (only its own: nobody else's);
        its sessions' leases, and their files on its disk, are its again. The ids of the
        runs it interrupted."""
        with self.database.write() as conn:
            interrupted = []
            for run_id, job_id in conn.execute(
                select(runs.c.run_id, runs.c.job_id).where(
                    runs.c.status == "running", runs.c.worker_id == self.worker_id
                )
            ).all():
                # its sessions' files are on its disk: a session run may be retried too
                if lost_run(conn, run_id, job_id, self.worker_id, session_kept=True) == "interrupted":
                    interrupted.append(run_id)
            conn.execute(delete(workers).where(workers.c.worker_id == self.worker_id))
            conn.execute(
                insert(workers).values(
                    worker_id=self.worker_id,
                    host=socket.gethostname(),
                    tiers=json.dumps(self.tiers),
                    capacity=self.capacity,
                    url=self.url,
                    started_at=text(now_sql()),
                    lease_until=text(f"{now_sql()} + {float(self.lease)}"),
                )
            )
        if interrupted:
            log.warning(
                "worker %s: %d run(s) of its previous process marked interrupted", self.worker_id, len(interrupted)
            )
        return interrupted

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
