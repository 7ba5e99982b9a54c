"""``skill-executor cluster status``: the workers of a cluster, their capacity and leases, and
the queue (from the database of SKILL_EXECUTOR_DATABASE_URL; JSON on stdout).

Exit status 0 when at least one worker holds a live lease, 1 when none does (an operator's
or a probe's "can this cluster run anything now"), 2 for a refused request (no database).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from sqlalchemy import func, select

from ..config import Settings
from ..db import Database, DatabaseUnavailable
from ..db.schema import runs, session_leases, workers
from .db import explained
from .output import emit_json


def register(groups: Any) -> None:
    cluster = groups.add_parser("cluster", help="a cluster's workers and queue (Postgres)")
    sub = cluster.add_subparsers(dest="command", required=True, metavar="SUBCOMMAND")
    status = sub.add_parser("status", help="workers, their capacity and leases; runs queued and running")
    status.set_defaults(handler=_status)


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


def _status(args: argparse.Namespace) -> int:
    settings = Settings()
    database = Database(settings.database)
    try:
        report = status(database)
    except DatabaseUnavailable as exc:
        raise explained(database, exc) from None
    finally:
        database.close()
    emit_json(report)
    return 0 if any(w["alive"] for w in report["workers"]) else 1
