"""Queue dispatch (:class:`QueueDispatch`, an API replica, ``serve --role api``): runs are recorded and queued in
one transaction, and everything about them comes back through the database.

* Submit: admission against the cluster's capacity (``busy``), the run's first event
  (``status queued``), its job -- on the tier queue, or for a session with a home on the
  queue of the worker holding it -- all in the transaction that records the run: a commit
  is an acknowledgement, a replica killed before it acknowledged nothing.
* A session whose worker is gone is refused (409 ``session_lost``): its files were on that
  worker. (:func:`session_home` is where a restore from a snapshot will take over.)
* Cancel: a queued run is cancelled at once (its job and its record); a running one is
  told through ``NOTIFY run_cancel`` (its worker listens).
* Waiting, events: the :class:`~skill_executor.lifecycle.dispatch.hub.Hub` wakes readers, who read
  ``runs`` / ``run_events``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, delete, func, select, text, update

from ...db import Database
from ...db.schema import runs, session_leases, workers
from ...errors import Busy, Conflict, Unavailable
from ...runs.models import RunRequest
from ...runs.plan import RunPlan
from ...workspace.sessions import SessionLimit
from ..handle import RunHandle
from ..outcomes import shutdown_error
from ..records import RunRecord, RunStore
from ..seam import StreamEvent, Ticket
from ..status import FINAL, Status
from . import events as ev
from . import queue
from .hub import Hub
from .sweep import now_sql

log = logging.getLogger(__name__)

#: How long a wait for a run of a worker trusts the notifications before it looks itself.
POLL_SECONDS = 1.0
#: Final event kinds: a stream ends after one.
TERMINAL = ("result", "error")


class SessionLost(Conflict):
    code = "session_lost"


def conninfo(database: Database) -> str:
    """libpq's connection string for ``database`` (for psycopg's own connections)."""
    return database.url.set(drivername="postgresql").render_as_string(hide_password=False)


def session_home(conn: Connection, tenant: str, session: str, *, moving: bool = False) -> str | None:
    """The worker holding ``session``'s workspace (None: nobody yet). When that worker is
    gone: with ``moving`` (sessions kept in the object store) its lease is dropped and the
    session goes to whichever worker runs it next (None); else ``session_lost``."""
    row = conn.execute(
        select(session_leases.c.worker_id, workers.c.worker_id)
        .select_from(session_leases.outerjoin(workers, workers.c.worker_id == session_leases.c.worker_id))
        .where(session_leases.c.tenant == tenant, session_leases.c.session == session)
    ).first()
    if row is None:
        return None
    if row[1] is None and moving:
        conn.execute(
            delete(session_leases).where(
                session_leases.c.tenant == tenant,
                session_leases.c.session == session,
                session_leases.c.worker_id == row[0],
            )
        )
        return None
    if row[1] is None:
        raise SessionLost(
            f"session {session!r} lived on a worker that is gone; its files are lost: start a new session",
            details={"session": session},
        )
    return str(row[0])


class NoWorkers(Unavailable):
    code = "no_workers"


@dataclass(slots=True)
class Queued:
    """A run on its way to the queue (:class:`~skill_executor.lifecycle.seam.Ticket`): the
    cluster's admission and its job, written in the transaction that records it."""

    dispatch: QueueDispatch
    run_id: str
    request: RunRequest
    tenant: str

    def record(self, conn: Connection) -> None:
        self.dispatch.admit(conn)
        self.dispatch.enqueue(conn, self.run_id, self.request, self.tenant)

    def release(self) -> None:
        pass  # nothing was taken before the transaction


class QueueDispatch:
    def __init__(
        self,
        database: Database,
        store: RunStore,
        *,
        queued_allowance: int,
        moving_sessions: bool = False,
        sessions_per_tenant: int | None = None,
        session_ttl: float = 3600.0,
    ) -> None:
        """``queued_allowance``: runs the cluster queues beyond its workers' capacity;
        ``moving_sessions``: sessions are kept in the object store and move off lost workers;
        ``sessions_per_tenant``: live sessions (a run within ``session_ttl``) a tenant may
        hold across the cluster."""
        self.database = database
        self.store = store
        self.sessions_per_tenant = sessions_per_tenant
        self.session_ttl = session_ttl
        self.moving_sessions = moving_sessions
        self.queued_allowance = queued_allowance
        self.hub = Hub(conninfo(database))
        self._closing = False

    def reserve(self, run_id: str, request: RunRequest, tenant: str) -> Queued:
        if self._closing:
            raise shutdown_error()
        return Queued(self, run_id, request, tenant)

    def start(self, ticket: Ticket, record: RunRecord, plan: RunPlan) -> None:
        log.info("run %s queued", record.run_id, extra={"run_id": record.run_id})

    def current(self, record: RunRecord) -> RunRecord:
        return record  # the database is the truth

    def handle(self, run_id: str) -> None:
        return None  # nothing executes on a replica

    def running(self) -> list[str]:
        return []

    # -- submit (in the transaction that records the run) ---------------------------------

    def admit(self, conn: Connection) -> None:
        live = select(func.coalesce(func.sum(workers.c.capacity), 0)).where(
            workers.c.lease_until > text(now_sql()), workers.c.stopping.is_(False)
        )
        active = select(func.count()).where(runs.c.status.in_(("queued", "running")))
        capacity, count = conn.execute(select(live.scalar_subquery(), active.scalar_subquery())).one()
        if not capacity:
            raise NoWorkers(
                "no worker of the cluster holds a live lease: nothing could run this; retry shortly",
                retry_after=5,
            )
        # the run being admitted is already inserted (and counted) in this transaction
        if int(count) > int(capacity) + self.queued_allowance:
            raise Busy(
                "the cluster is busy: every worker's slots and the queue are taken; retry shortly",
                retry_after=1,
                details={"capacity": int(capacity), "queue": self.queued_allowance},
            )

    def enqueue(self, conn: Connection, run_id: str, request: RunRequest, tenant: str) -> None:
        if request.session and self.sessions_per_tenant is not None:
            self._session_quota(conn, run_id, tenant, request.session, self.sessions_per_tenant)
        home = session_home(conn, tenant, request.session, moving=self.moving_sessions) if request.session else None
        target = queue.worker_queue(home) if home else queue.tier_queue(queue.DEFAULT_TIER)
        job_id = queue.defer(conn, run_id, queue=target, lock=queue.session_lock(tenant, request.session))
        conn.execute(update(runs).where(runs.c.run_id == run_id).values(job_id=job_id, tier=queue.DEFAULT_TIER))
        ev.append(conn, run_id, [(1, "status", "queued")])

    def _session_quota(self, conn: Connection, run_id: str, tenant: str, session: str, limit: int) -> None:
        """A session new to the cluster (no run of it within the TTL) is refused once the
        tenant holds ``limit`` live sessions on any workers (429 ``session_limit``)."""
        live = (
            (runs.c.owner == tenant)
            & runs.c.session.is_not(None)
            & (runs.c.updated_at > time.time() - self.session_ttl)
            & (runs.c.run_id != run_id)
        )
        if conn.execute(select(runs.c.run_id).where(live, runs.c.session == session).limit(1)).first():
            return
        # one new session of a tenant at a time, so two cannot both take the last place
        conn.execute(text("SELECT pg_advisory_xact_lock(hashtext(:tenant))"), {"tenant": f"sessions:{tenant}"})
        others = live & (runs.c.session != session)  # a run of this same session admitted meanwhile is no other
        count = int(conn.execute(select(func.count(func.distinct(runs.c.session))).where(others)).scalar_one())
        if count >= limit:
            raise SessionLimit(
                f"cannot start session {session!r}: this tenant keeps {count} sessions across the cluster, the most "
                "allowed (SKILL_EXECUTOR_SESSIONS_PER_TENANT); reuse one, or wait for idle ones to expire",
                details={"sessions": count, "limit": limit},
            )

    # -- cancel ---------------------------------------------------------------------------

    def cancel(self, record: RunRecord) -> None:
        if self._cancel(record.run_id) is None and self.store.get(record.run_id).status in FINAL:
            raise Conflict(f"run {record.run_id!r} has already ended", code="run_finished")

    def _cancel(self, run_id: str) -> Status | None:
        """Its status now when that is final (a queued run is cancelled at once), else None
        (a running one is told through the database)."""
        with self.database.write() as conn:
            row = conn.execute(
                update(runs)
                .where(runs.c.run_id == run_id, runs.c.status.in_(("queued", "running")))
                .values(cancel_requested=True, updated_at=time.time())
                .returning(runs.c.status, runs.c.job_id, runs.c.skill, runs.c.session)
            ).first()
            if row is None:
                return None
            status, job_id, skill, session = row
            if status == "queued" and job_id is not None and queue.cancel_todo(conn, int(job_id)):
                ev.end(conn, run_id, "cancelled", result=ev.not_started(run_id, skill, session), error=None)
                return "cancelled"
            ev.notify(conn, ev.CANCEL_CHANNEL, run_id)  # its worker stops it (or its claim finds it)
        return None

    # -- reading --------------------------------------------------------------------------

    def watch(self, run_id: str, *, outcome_only: bool = False) -> AbstractAsyncContextManager[asyncio.Event]:
        """An event set whenever the run may have new events or an outcome (``outcome_only``:
        an outcome); watch first, then clear it and look: nothing is missed in between."""
        return self.hub.watching(run_id, outcome_only=outcome_only)

    def events_after(self, run_id: str, after: int) -> list[tuple[int, str, Any]]:
        with self.database.read() as conn:
            return ev.after(conn, run_id, after)

    async def wait(self, record: RunRecord) -> RunRecord:
        async with self.watch(record.run_id, outcome_only=True) as wake:  # woken by its outcome
            while True:
                wake.clear()  # then look: an outcome recorded from now on wakes us
                record = await asyncio.to_thread(self.store.get, record.run_id)
                if record.status in FINAL:
                    return record
                if self._closing:
                    raise shutdown_error()
                await _woken(wake, POLL_SECONDS)

    async def settle(self, record: RunRecord, handle: RunHandle | None, timeout: float) -> tuple[Status, bool]:
        deadline = time.monotonic() + timeout
        async with self.watch(record.run_id, outcome_only=True) as wake:
            while True:
                wake.clear()
                record = await asyncio.to_thread(self.store.get, record.run_id)
                left = deadline - time.monotonic()
                if record.status in FINAL or left <= 0:
                    return record.status, record.status in FINAL
                await _woken(wake, min(left, POLL_SECONDS))

    def events(self, record: RunRecord, after: int) -> AsyncIterator[StreamEvent] | None:
        if record.status in FINAL and record.events is not None and after >= record.events:
            return None
        return self._events(record.run_id, after)

    async def _events(self, run_id: str, after: int) -> AsyncIterator[StreamEvent]:
        async with self.hub.watching(run_id) as wake:
            while True:
                wake.clear()
                batch = await asyncio.to_thread(self.events_after, run_id, after)
                for seq, kind, data in batch:
                    after = seq
                    yield seq, kind, data
                    if kind in TERMINAL:
                        return
                await _woken(wake, POLL_SECONDS)  # a safety net under the notifications

    # -- shutdown -------------------------------------------------------------------------

    async def drain(self, grace: float, settle: float) -> None:
        self._closing = True  # nothing of the runs executes here: waiters get shutting_down

    def close(self, timeout: float) -> None:
        self._closing = True

    def figures(self) -> tuple[int, int]:
        """The cluster's (runs waiting for a worker, runs executing), for the metrics."""
        with self.database.read() as conn:
            running = conn.execute(select(func.count()).where(runs.c.status == "running")).scalar_one()
            return queue.depth(conn), int(running)


async def _woken(wake: asyncio.Event, timeout: float) -> None:
    """Until ``wake`` is set, or ``timeout`` seconds."""
    try:
        await asyncio.wait_for(wake.wait(), timeout)
    except TimeoutError:
        pass
