"""The cluster as the database sees it: its workers (capacity, runs, sessions, lease) and the
runs queued and running. Read by ``skill-executor cluster status`` and an API replica's
``/metrics``."""

from __future__ import annotations

import json
import time
from typing import Any

from sqlalchemy import func, select

from ...db import Database
from ...db.schema import runs, session_leases, workers


def status(database: Database, now: float | None = None) -> dict[str, Any]:
    """The cluster as the database sees it."""
    now = time.time() if now is None else now
    with database.read() as conn:
        counts: dict[str, int] = dict(
            conn.execute(
                select(runs.c.status, func.count())
                .where(runs.c.status.in_(("queued", "running")))
                .group_by(runs.c.status)
            ).all()
        )
        running: dict[str, int] = dict(
            conn.execute(
                select(runs.c.worker_id, func.count())
                .where(runs.c.status == "running", runs.c.worker_id.is_not(None))
                .group_by(runs.c.worker_id)
            ).all()
        )
        sessions: dict[str, int] = dict(
            conn.execute(select(session_leases.c.worker_id, func.count()).group_by(session_leases.c.worker_id)).all()
        )
        rows = conn.execute(select(workers).order_by(workers.c.worker_id)).all()
    listed = [
        {
            "worker_id": row.worker_id,
            "host": row.host,
            "tiers": json.loads(row.tiers),
            "capacity": row.capacity,
            "running": running.get(row.worker_id, 0),
            "sessions": sessions.get(row.worker_id, 0),
            "lease_seconds_left": round(row.lease_until - now, 1),
            "alive": row.lease_until > now and not row.stopping,
            "stopping": bool(row.stopping),
            "up_seconds": round(now - row.started_at, 1),
        }
        for row in rows
    ]
    alive = [w for w in listed if w["alive"]]
    return {
        "database": database.shown,
        "workers": listed,
        "capacity": sum(w["capacity"] for w in alive),
        "queued": int(counts.get("queued", 0)),
        "running": int(counts.get("running", 0)),
    }
