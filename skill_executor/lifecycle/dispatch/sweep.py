"""Lost workers: what happens to their runs (any API replica, every few seconds, one at a
time under a transaction-level advisory lock).

A worker whose lease ran out (``workers.lease_until`` past, database clock) is gone. In
one transaction: its running runs end ``failed`` with ``interrupted`` (never re-executed:
runs may have had side effects, unless their request opts in with ``retry``: then they are
queued again while attempts are left, see :func:`lost_run`), their jobs end failed (their session locks free), the
runs queued on its own queue (a session's next runs) end ``failed`` with ``session_lost``,
its row goes; its session leases stay, marking the sessions lost (the next run is refused
``session_lost``). Then queued runs whose job ended without starting them (a claim that
failed on a broken connection) are queued again.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field

from sqlalchemy import Connection, delete, select, text, update

from ...db import Database
from ...db.schema import runs, session_leases, workers
from . import events as ev
from . import queue

log = logging.getLogger(__name__)

#: pg_try_advisory_xact_lock's key for the sweep (one replica sweeps at a time).
SWEEP_KEY = 0x5E5E_0002

INTERRUPTED = {
    "code": "interrupted",
    "message": "the worker running this run was lost (its lease expired); the run was not re-executed",
    "details": {"reason": "worker_lost"},
    "status": 500,
}
QUEUE_TIMEOUT = {
    "code": "queue_timeout",
    "message": "no worker took this run within SKILL_EXECUTOR_QUEUE_TIMEOUT_SECONDS; it never started",
    "status": 503,
}
#: Sent instead of ``interrupted`` once a run that asked for re-executions has used them all.
RETRIES_USED = "the worker running this run was lost (its lease expired), and the run's retries are used up"
#: ... or was asked to stop before its worker was lost.
CANCELLED_LOST = "the run was asked to stop, and the worker running it was lost; it was not re-executed"
#: ... or could not have one: its session's files were lost with the worker.
SESSION_GONE = "the worker running this run was lost with its session's files; the run was not re-executed"
SESSION_LOST = {
    "code": "session_lost",
    "message": "the worker holding this run's session was lost before the run started; the session's files are lost",
    "status": 409,
}


def now_sql() -> str:
    return "extract(epoch from clock_timestamp())"


@dataclass(slots=True)
class Swept:
    workers: list[str] = field(default_factory=list)
    interrupted: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    requeued: list[str] = field(default_factory=list)
    expired: list[str] = field(default_factory=list)


def lost_run(conn: Connection, run_id: str, job_id: int | None, worker_id: str, *, session_kept: bool) -> str:
    """A run that ``worker_id`` was running when it was lost: its job ends failed (freeing
    its session lock); the run is queued again (``"retried"``) when its request's ``retry``
    allows one more attempt and its session (if any) is kept (``session_kept``: in the object
    store, or on a worker that came back), else it ends ``interrupted`` (``"interrupted"``).
    ``""``: it was not that worker's running run any more."""
    row = conn.execute(
        select(runs.c.request, runs.c.attempt, runs.c.owner, runs.c.session, runs.c.cancel_requested)
        .where(runs.c.run_id == run_id, runs.c.status == "running", runs.c.worker_id == worker_id)
        .with_for_update()
    ).first()
    if row is None:
        return ""
    if job_id is not None:
        queue.fail_doing(conn, int(job_id))
    retries = int(json.loads(row.request).get("retry") or 0)
    attempt = int(row.attempt)
    if row.cancel_requested:  # asked to stop: it stops here, never executed again
        error = {**INTERRUPTED, "message": CANCELLED_LOST, "details": {"reason": "worker_lost", "attempt": attempt}}
        ev.end(conn, run_id, "cancelled", result=None, error=error)
        return "interrupted"
    if retries and attempt <= retries and (row.session is None or session_kept):
        seq = ev.last_seq(conn, run_id)
        new_job = queue.defer(  # before the session's later runs (same lock): it came first
            conn,
            run_id,
            queue=queue.tier_queue(queue.DEFAULT_TIER),
            lock=queue.session_lock(row.owner, row.session),
            priority=queue.RETRY_PRIORITY,
        )
        conn.execute(
            update(runs)
            .where(runs.c.run_id == run_id)
            .values(status="queued", worker_id=None, job_id=new_job, events=seq + 2, updated_at=time.time())
        )
        lost = {"reason": "worker_lost", "attempt": attempt, "retries_left": retries - attempt}
        ev.append(conn, run_id, [(seq + 1, "retry", lost), (seq + 2, "status", "queued")])
        ev.notify(conn, ev.EVENTS_CHANNEL, run_id)
        return "retried"
    details: dict[str, object] = {"reason": "worker_lost", "attempt": attempt}
    error = {**INTERRUPTED, "details": details}
    if retries:
        details["retry"] = retries
        error["message"] = RETRIES_USED if attempt > retries else SESSION_GONE
    ev.end(conn, run_id, "failed", result=None, error=error)
    return "interrupted"


def sweep(
    database: Database, *, moving: bool = False, queue_timeout: float | None = None, stuck_after: float = 60.0
) -> Swept:
    """``moving``: sessions are kept in the object store (SKILL_EXECUTOR_SESSION_SNAPSHOTS):
    a lost worker's sessions move, so their queued runs go to any other worker (which
    restores the session's newest snapshot) instead of ending ``session_lost``.
    ``queue_timeout``: runs waiting longer than this for a worker (since they were queued,
    or queued again) end ``queue_timeout`` (their job cancelled: they never start).
    ``stuck_after``: a job fetched this long ago whose run was never claimed (its worker
    died between the two) is queued again."""
    swept = Swept()
    with database.write() as conn:
        if not conn.execute(text("SELECT pg_try_advisory_xact_lock(:key)"), {"key": SWEEP_KEY}).scalar_one():
            return swept
        dead = [
            row[0]
            for row in conn.execute(
                select(workers.c.worker_id)
                .where(workers.c.lease_until < text(now_sql()))
                .with_for_update(skip_locked=True)
            )
        ]
        for worker_id in dead:
            for run_id, job_id in conn.execute(
                select(runs.c.run_id, runs.c.job_id).where(runs.c.status == "running", runs.c.worker_id == worker_id)
            ).all():
                done = lost_run(conn, run_id, job_id, worker_id, session_kept=moving)
                if done == "retried":
                    swept.requeued.append(run_id)
                elif done:
                    swept.interrupted.append(run_id)
            for run_id, job_id in queue.waiting_on(conn, [queue.worker_queue(worker_id)]):
                queue.cancel_todo(conn, job_id)
                if moving:
                    row = conn.execute(select(runs.c.owner, runs.c.session).where(runs.c.run_id == run_id)).one()
                    new_job = queue.defer(
                        conn,
                        run_id,
                        queue=queue.tier_queue(queue.DEFAULT_TIER),
                        lock=queue.session_lock(row[0], row[1]),
                    )
                    conn.execute(update(runs).where(runs.c.run_id == run_id).values(job_id=new_job))
                    swept.requeued.append(run_id)
                elif ev.end(conn, run_id, "failed", result=None, error=SESSION_LOST):
                    swept.lost.append(run_id)
            if moving:  # its sessions are free: the next worker to run one takes it over
                conn.execute(delete(session_leases).where(session_leases.c.worker_id == worker_id))
            conn.execute(delete(workers).where(workers.c.worker_id == worker_id))
            swept.workers.append(worker_id)
        if queue_timeout is not None:
            for run_id, job_id in queue.overdue(conn, time.time() - queue_timeout):
                if not queue.cancel_todo(conn, job_id):
                    continue  # fetched by a worker just now: its claim decides
                if ev.end(conn, run_id, "failed", result=None, error=QUEUE_TIMEOUT):
                    swept.expired.append(run_id)
        for run_id, stuck_job in queue.orphaned(conn, stuck_after):
            if stuck_job is not None:
                queue.fail_doing(conn, stuck_job)  # its fetcher died before the claim: nothing runs it
            row = conn.execute(select(runs.c.owner, runs.c.session).where(runs.c.run_id == run_id)).one()
            job_id = queue.defer(
                conn,
                run_id,
                queue=queue.tier_queue(queue.DEFAULT_TIER),
                lock=queue.session_lock(row[0], row[1]),
            )
            conn.execute(update(runs).where(runs.c.run_id == run_id).values(job_id=job_id, updated_at=time.time()))
            swept.requeued.append(run_id)
    if swept.expired:
        log.warning("%d run(s) waited past the queue timeout for a worker: ended queue_timeout", len(swept.expired))
    if swept.workers or swept.requeued:
        log.warning(
            "swept %d lost worker(s) %s: %d run(s) interrupted, %d session run(s) lost, %d run(s) queued again",
            len(swept.workers),
            swept.workers,
            len(swept.interrupted),
            len(swept.lost),
            len(swept.requeued),
        )
    return swept
