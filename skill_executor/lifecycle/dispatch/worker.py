"""A run worker (``skill-executor worker``): claims queued runs through procrastinate,
executes them with this process's :class:`~skill_executor.lifecycle.dispatch.local.InProcess` (its
Docker engine, warm pool and workspaces), and records their events and outcomes.

* **Claim** (the only way a run starts): ``UPDATE runs SET status='running' ... WHERE
  status='queued' AND NOT cancel_requested AND <this worker's lease is valid>``. No row:
  nothing runs (a late or re-delivered job never re-executes a run). A session's run
  first finds the session's home: another live worker's -> its job goes to that worker's
  queue; a lost one -> ``session_lost``; none -> this worker takes the session's lease
  (:meth:`Worker.take_session`: the hook for a restore from a snapshot).
* **Events** go through one writer thread: what arrived meanwhile is written in one
  transaction with one ``NOTIFY`` per run; the outcome is written with the run's last
  events, only while this worker still holds the run (``status='running' AND
  worker_id=me``): a worker declared lost writes nothing.
* **Cancel**: ``LISTEN run_cancel`` (and, after every reconnect, the runs asked to stop).
* **Lease lost** (:mod:`.membership`): every local run is cancelled and the process exits
  non-zero; so does a procrastinate worker that stopped by itself.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import time
from typing import Any

from sqlalchemy import Connection, delete, insert, select, text, update

from ... import tracing
from ...db import Database
from ...db.schema import runs, session_leases, workers
from ...errors import Conflict
from ..records import RunRecord
from . import events as ev
from . import queue
from .hub import Hub
from .local import InProcess
from .membership import Membership
from .postgres import SessionLost, conninfo
from .sweep import SESSION_LOST, now_sql
from .writer import EventWriter

log = logging.getLogger(__name__)

#: Exit codes of a worker that had to stop: its lease is gone; its job loop ended by itself.
EXIT_LEASE_LOST = 4
EXIT_QUEUE_STOPPED = 5
#: A run counts as in progress (housekeeping steps aside: activity.py) this long after its
#: outcome is recorded, while its API replica answers the client (measured: a warm run's
#: p50 through a replica fell from 28 to 24 ms, p90 from 37 to 25).
ANSWER_SECONDS = 0.05
#: How often a worker also looks for its runs asked to stop (notifications can be lost).
CANCEL_CATCH_UP_SECONDS = 2.0


class Worker:
    """The worker's side of dispatch: what it claims runs :class:`InProcess`."""

    def __init__(
        self,
        runs: InProcess,
        database: Database,
        *,
        capacity: int,
        lease: float,
        heartbeat: float,
        worker_id: str,
        moving_sessions: bool = False,
        url: str | None = None,
    ) -> None:
        """``url``: where replicas reach this worker (its sessions' processes)."""
        self.runs = runs
        #: Sessions are kept in the object store: a lost worker's sessions move here.
        self.moving_sessions = moving_sessions
        snapshots = runs.runner.sessions.snapshots
        if snapshots is not None:  # a snapshot is the session's newest only while it is still ours
            snapshots.holds = self.holds_session
        self.database = database
        self.worker_id = worker_id
        self.capacity = capacity
        self.tiers = [queue.DEFAULT_TIER]
        self.membership = Membership(
            database, self.worker_id, tiers=self.tiers, capacity=capacity, lease=lease, heartbeat=heartbeat, url=url
        )
        self.writer = EventWriter(database, self.worker_id, self.membership.lost)
        self.hub = Hub(conninfo(database), channels=(ev.CANCEL_CHANNEL,))
        self.hub.on_notify.append(lambda _channel, run_id: self._cancel_one(run_id))
        self._claims = concurrent.futures.ThreadPoolExecutor(max_workers=max(2, capacity), thread_name_prefix="claim")
        from procrastinate import App  # the cluster extra, imported by a worker only

        from .connector import SteadyConnector

        self.app = App(connector=SteadyConnector(conninfo=conninfo(database), patience=lease))
        self.app.task(name=queue.TASK)(self._execute_run)
        self.lost_reason: str | None = None

    # -- a job ----------------------------------------------------------------------------

    async def _execute_run(self, run_id: str) -> None:
        loop = asyncio.get_running_loop()
        hold = self.runs.runner.runtime.activity.hold()
        answered = False
        try:
            handle = await loop.run_in_executor(self._claims, self.claim, run_id)
            if handle is None:
                return
            try:
                record = await handle.wait()
                await loop.run_in_executor(self._claims, handle.recorded.wait)
                with tracing.under(handle.record.traceparent):
                    log.info("run %s ended: %s", run_id, record.status, extra={"run_id": run_id})
            finally:
                tracing.end(handle.record.root)  # a fresh trace's root (the run came without a parent)
            answered = True
        finally:
            # housekeeping waits while the replica answers; the job's slot is free at once
            loop.call_later(ANSWER_SECONDS if answered else 0, hold.release)

    def claim(self, run_id: str) -> Any:
        """Claim ``run_id`` and start it here; its handle, or None when it is not this
        worker's to run (see the module's docstring)."""
        with self.database.write() as conn:
            row = conn.execute(
                select(runs.c.status, runs.c.cancel_requested, runs.c.owner, runs.c.session, runs.c.skill).where(
                    runs.c.run_id == run_id
                )
            ).first()
            if row is None or row.status != "queued":
                return None
            if row.cancel_requested:  # asked to stop after its job was fetched: it never starts
                ev.end(conn, run_id, "cancelled", result=ev.not_started(run_id, row.skill, row.session), error=None)
                return None
            if row.session and not self._session_here(conn, run_id, row.owner, row.session):
                return None
            claimed = conn.execute(
                update(runs)
                .where(
                    runs.c.run_id == run_id,
                    runs.c.status == "queued",
                    runs.c.cancel_requested.is_(False),
                    select(workers.c.worker_id)
                    .where(workers.c.worker_id == self.worker_id, workers.c.lease_until > text(now_sql()))
                    .exists(),
                )
                .values(
                    status="running",
                    worker_id=self.worker_id,
                    attempt=runs.c.attempt + 1,
                    started_at=time.time(),
                    updated_at=time.time(),
                )
                .returning(runs)
            ).first()
            if claimed is None:
                return None
            # a first attempt's events so far: ``status queued``; a retried run's: all of its
            # earlier attempts' too (numbering goes on after them)
            history = ev.after(conn, run_id, 0) if claimed.attempt > 1 else [(1, "status", "queued")]
            ev.append(conn, run_id, [(len(history) + 1, "status", "running")])  # with its claim
            ev.notify(conn, ev.EVENTS_CHANNEL, run_id)
            # the run's trace goes on here (none or a malformed parent: a fresh one, recorded)
            fresh, parent = tracing.adopt(claimed.traceparent, "skill_run", run_id=run_id, worker=self.worker_id)
            if fresh is not None:
                trace_id = tracing.trace_id(fresh)
                conn.execute(update(runs).where(runs.c.run_id == run_id).values(trace_id=trace_id, traceparent=parent))
        record = RunRecord(
            run_id=claimed.run_id,
            status="running",
            skill=claimed.skill,
            session=claimed.session,
            created_at=claimed.created_at,
            updated_at=claimed.updated_at,
            request=json.loads(claimed.request),
            owner=claimed.owner,
            trace_id=trace_id if fresh is not None else claimed.trace_id,
            traceparent=parent,
            root=fresh,
        )
        with tracing.under(parent):
            log.info("run %s claimed by worker %s", run_id, self.worker_id, extra={"run_id": run_id})
        return self.runs.execute_claimed(
            record,
            history=[(kind, data) for _, kind, data in history],
            sink=self.writer.sink(run_id),
            outcome=self.writer.outcome,
        )

    def _session_here(self, conn: Connection, run_id: str, tenant: str, session: str) -> bool:
        """Whether this worker runs ``session``'s run (else it was sent where it belongs)."""
        home = conn.execute(
            select(session_leases.c.worker_id, workers.c.worker_id)
            .select_from(session_leases.outerjoin(workers, workers.c.worker_id == session_leases.c.worker_id))
            .where(session_leases.c.tenant == tenant, session_leases.c.session == session)
        ).first()
        if home is None:
            self.take_session(conn, tenant, session)
            return True
        if home[0] == self.worker_id:
            return True
        if home[1] is None and self.moving_sessions:  # its worker is gone: the session moves here
            conn.execute(
                delete(session_leases).where(
                    session_leases.c.tenant == tenant,
                    session_leases.c.session == session,
                    session_leases.c.worker_id == home[0],
                )
            )
            self.take_session(conn, tenant, session)
            return True
        if home[1] is None:  # its worker is gone, and its files with it
            ev.end(conn, run_id, "failed", result=None, error=SESSION_LOST)
            return False
        job_id = queue.defer(
            conn, run_id, queue=queue.worker_queue(str(home[0])), lock=queue.session_lock(tenant, session)
        )
        conn.execute(update(runs).where(runs.c.run_id == run_id).values(job_id=job_id))
        return False

    def holds_session(self, tenant: str, session: str) -> bool:
        """Whether this worker still holds ``session`` (its lease on it, and its own lease)."""
        if self.membership.lost.is_set():
            return False
        with self.database.read() as conn:
            return (
                conn.execute(
                    select(session_leases.c.worker_id)
                    .select_from(session_leases.join(workers, workers.c.worker_id == session_leases.c.worker_id))
                    .where(
                        session_leases.c.tenant == tenant,
                        session_leases.c.session == session,
                        session_leases.c.worker_id == self.worker_id,
                        workers.c.lease_until > text(now_sql()),
                    )
                ).first()
                is not None
            )

    def claim_session(self, tenant: str, session: str) -> None:
        """Make this worker ``session``'s home before a process of it starts here (so its
        runs come here, and join the process's loopback): taken when nobody holds it (or its
        holder is gone and sessions move); 409 ``session_elsewhere`` when another live
        worker holds it (the replica routes there), ``session_lost`` when its holder is
        gone with its files."""
        with self.database.write() as conn:
            conn.execute(text("SELECT pg_advisory_xact_lock(hashtext(:key))"), {"key": f"session:{tenant}:{session}"})
            home = conn.execute(
                select(session_leases.c.worker_id, workers.c.worker_id)
                .select_from(session_leases.outerjoin(workers, workers.c.worker_id == session_leases.c.worker_id))
                .where(session_leases.c.tenant == tenant, session_leases.c.session == session)
            ).first()
            if home is not None and home[0] == self.worker_id:
                return
            if home is not None and home[1] is not None:
                raise Conflict(
                    f"session {session!r} is held by another worker",
                    code="session_elsewhere",
                    details={"session": session, "worker": str(home[0])},
                )
            if home is not None and not self.moving_sessions:
                raise SessionLost(
                    f"session {session!r} lived on a worker that is gone; its files are lost: start a new session",
                    details={"session": session},
                )
            if home is not None:
                conn.execute(
                    delete(session_leases).where(
                        session_leases.c.tenant == tenant,
                        session_leases.c.session == session,
                        session_leases.c.worker_id == home[0],
                    )
                )
            self.take_session(conn, tenant, session)

    def take_session(self, conn: Connection, tenant: str, session: str) -> None:
        """This worker becomes ``session``'s home (with snapshots, its run restores the
        session's newest ``work/`` from the object store: SessionStore.use)."""
        conn.execute(
            insert(session_leases).values(
                tenant=tenant, session=session, worker_id=self.worker_id, taken_at=time.time()
            )
        )

    # -- cancel ---------------------------------------------------------------------------

    def _cancel_one(self, run_id: str) -> None:
        self.runs.cancel_local(run_id, "request")

    def _catch_up_cancels(self) -> None:
        ids = self.runs.running()
        if not ids:
            return
        with self.database.read() as conn:  # raises while Postgres is away: the caller retries
            wanted = conn.execute(
                select(runs.c.run_id).where(runs.c.run_id.in_(ids), runs.c.cancel_requested.is_(True))
            ).scalars()
            for run_id in wanted:
                self._cancel_one(run_id)

    # -- the loop -------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event, *, lease: float, heartbeat: float, grace: float, poll: float = 5.0) -> int:
        """Register, take jobs until ``stop`` is set (0) or the lease is lost / the job loop
        ends by itself (non-zero). Queued runs are announced; ``poll``: how often the queue is
        also looked at (announcements can be lost)."""
        loop = asyncio.get_running_loop()
        await asyncio.to_thread(self.membership.register)
        lost = asyncio.Event()

        def on_lost(reason: str) -> None:
            self.lost_reason = reason
            log.error("worker %s: lease lost: %s; cancelling its runs and exiting", self.worker_id, reason)
            for run_id in self.runs.running():
                self.runs.cancel_local(run_id, "lease_lost")
            loop.call_soon_threadsafe(lost.set)

        self.membership.start(on_lost)
        hub = loop.create_task(self._listen_cancels())
        code = 0
        async with self.app.open_async():
            jobs = loop.create_task(
                self.app.run_worker_async(
                    queues=[queue.tier_queue(t) for t in self.tiers] + [queue.worker_queue(self.worker_id)],
                    concurrency=self.capacity,
                    name=self.worker_id,
                    install_signal_handlers=False,
                    update_heartbeat_interval=heartbeat,
                    fetch_job_polling_interval=poll,
                    stalled_worker_timeout=lease,
                    delete_jobs="successful",
                    shutdown_graceful_timeout=grace,
                ),
                name="procrastinate-worker",
            )
            waits = {jobs, loop.create_task(stop.wait()), loop.create_task(lost.wait())}
            done, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            if jobs in done:
                problem = "cancelled" if jobs.cancelled() else jobs.exception()
                log.error("worker %s: its job loop stopped by itself (%s); exiting", self.worker_id, problem)
                code = EXIT_QUEUE_STOPPED
            elif lost.is_set():
                code = EXIT_LEASE_LOST
            for task in pending:
                task.cancel()
            if not jobs.done():
                jobs.cancel()
            await asyncio.gather(jobs, return_exceptions=True)
        hub.cancel()
        await asyncio.gather(hub, return_exceptions=True)
        await self.hub.close()
        return code

    async def _listen_cancels(self) -> None:
        """The cancel hub, and a catch-up of cancels every few seconds (notifications sent
        while the connection was down are lost)."""
        self.hub.start()
        while True:
            try:
                await asyncio.to_thread(self._catch_up_cancels)
            except Exception as exc:
                log.warning("worker %s: looking for cancelled runs failed: %s", self.worker_id, exc)
            await asyncio.sleep(CANCEL_CATCH_UP_SECONDS)

    def close(self) -> None:
        self.membership.leave()
        self.writer.close()
        self._claims.shutdown(wait=False, cancel_futures=True)
