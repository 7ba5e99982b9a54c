"""The run queue: procrastinate's jobs, on Postgres. The only module that names
procrastinate's SQL functions (versioned ``*_v1``; its schema is in migration 0002).

A run's job carries only its id (``{"run_id": ...}``); the run itself (request, owner,
status) is our ``runs`` row. Queues: ``tier:<tier>`` (any worker of the tier) and
``w:<worker_id>`` (one worker: the one holding a session's workspace). A session's jobs
share the lock ``session:<tenant>:<session>``: they never run at once, and in order.
"""

from __future__ import annotations

import json

from sqlalchemy import Connection, text

#: The one task every job is.
TASK = "execute_run"
#: The tier of every run for now (workers register the tiers they run; one tier so far).
DEFAULT_TIER = "default"


#: A run queued again (its worker lost) goes before the later runs of its session.
RETRY_PRIORITY = 1


def tier_queue(tier: str) -> str:
    return f"tier:{tier}"


def worker_queue(worker_id: str) -> str:
    return f"w:{worker_id}"


def session_lock(tenant: str, session: str | None) -> str | None:
    return f"session:{tenant}:{session}" if session else None


def defer(conn: Connection, run_id: str, *, queue: str, lock: str | None, priority: int = 0) -> int:
    """Queue ``run_id``'s job in ``conn``'s transaction (delivered at commit); its job id."""
    job_id = conn.execute(
        text(
            "SELECT unnest(procrastinate_defer_jobs_v1(ARRAY[ROW(:queue, :task, :priority, :lock, NULL,"
            " CAST(:args AS jsonb), NULL)]::procrastinate_job_to_defer_v1[]))"
        ),
        {"queue": queue, "task": TASK, "priority": priority, "lock": lock, "args": json.dumps({"run_id": run_id})},
    ).scalar_one()
    return int(job_id)


def cancel_todo(conn: Connection, job_id: int) -> bool:
    """Cancel a job no worker has fetched yet; whether it was still waiting."""
    found = conn.execute(
        text("SELECT procrastinate_cancel_job_v1(:job, false, false)"), {"job": job_id}
    ).scalar_one_or_none()
    return found is not None


def fail_doing(conn: Connection, job_id: int) -> None:
    """End a fetched job as failed (its worker is gone), so its lock frees; nothing re-runs it."""
    conn.execute(
        text(
            "SELECT procrastinate_finish_job_v1(id, 'failed', false) FROM procrastinate_jobs"
            " WHERE id = :job AND status IN ('todo', 'doing')"
        ),
        {"job": job_id},
    )


def waiting_on(conn: Connection, queues: list[str]) -> list[tuple[str, int]]:
    """(run_id, job_id) of queued runs whose job waits, unfetched, on one of ``queues``."""
    rows = conn.execute(
        text(
            "SELECT r.run_id, r.job_id FROM runs r JOIN procrastinate_jobs j ON j.id = r.job_id"
            " WHERE r.status = 'queued' AND j.status = 'todo' AND j.queue_name = ANY(:queues)"
            " ORDER BY j.priority DESC, j.id"  # queued again in the order they would have run
        ),
        {"queues": queues},
    ).all()
    return [(row[0], int(row[1])) for row in rows]


def orphaned(conn: Connection, stuck_after: float) -> list[tuple[str, int | None]]:
    """(run_id, job_id) of queued runs whose job ended without starting them (a claim that
    failed on a broken connection, a Postgres restart), or was fetched more than
    ``stuck_after`` seconds ago by a worker that never claimed the run (it died in between):
    they must be queued again, or they wait forever."""
    rows = conn.execute(
        text(
            "SELECT r.run_id, j.id FROM runs r LEFT JOIN procrastinate_jobs j ON j.id = r.job_id"
            " WHERE r.status = 'queued' AND NOT r.cancel_requested"
            " AND (j.id IS NULL OR j.status NOT IN ('todo', 'doing')"
            "  OR (j.status = 'doing' AND NOT EXISTS (SELECT 1 FROM procrastinate_events e"
            "   WHERE e.job_id = j.id AND e.type = 'started' AND e.at > now() - make_interval(secs => :stuck))))"
            " ORDER BY r.created_at"
        ),
        {"stuck": stuck_after},
    ).all()
    return [(row[0], None if row[1] is None else int(row[1])) for row in rows]


def overdue(conn: Connection, queued_before: float) -> list[tuple[str, int]]:
    """(run_id, job_id) of runs waiting for a worker (their job unfetched, not asked to stop)
    since before ``queued_before``; not those waiting behind a running run of their session."""
    rows = conn.execute(
        text(
            "SELECT r.run_id, r.job_id FROM runs r JOIN procrastinate_jobs j ON j.id = r.job_id"
            " WHERE r.status = 'queued' AND NOT r.cancel_requested AND j.status = 'todo'"
            " AND r.updated_at < :before"
            " AND NOT (r.session IS NOT NULL AND EXISTS (SELECT 1 FROM runs o WHERE o.owner = r.owner"
            "  AND o.session = r.session AND o.status = 'running'))"
            " ORDER BY r.updated_at LIMIT 500"
        ),
        {"before": queued_before},
    ).all()
    return [(row[0], int(row[1])) for row in rows]


def depth(conn: Connection) -> int:
    """Jobs waiting for a worker."""
    return int(conn.execute(text("SELECT count(*) FROM procrastinate_jobs WHERE status = 'todo'")).scalar_one())
