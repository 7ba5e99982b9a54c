"""``skill-executor cluster status``: the workers of a cluster, their capacity and leases, and
the queue (from the database of SKILL_EXECUTOR_DATABASE_URL; JSON on stdout).

Exit status 0 when at least one worker holds a live lease, 1 when none does (an operator's
or a probe's "can this cluster run anything now"), 2 for a refused request (no database).
"""

from __future__ import annotations

import argparse
from typing import Any

from ..config import Settings
from ..db import Database, DatabaseUnavailable, migrate
from ..errors import ExecutorError
from ..lifecycle.dispatch.view import status
from .db import explained
from .output import emit_json


def register(groups: Any) -> None:
    cluster = groups.add_parser("cluster", help="a cluster's workers and queue (Postgres)")
    sub = cluster.add_subparsers(dest="command", required=True, metavar="SUBCOMMAND")
    parser = sub.add_parser("status", help="workers, their capacity and leases; runs queued and running")
    parser.set_defaults(handler=_status)


def _status(args: argparse.Namespace) -> int:
    settings = Settings()
    database = Database(settings.database)
    try:
        current, head = migrate.current(database), migrate.head()
        if current != head:  # the queue's tables are not there (yet) to read
            raise ExecutorError(
                f"the database {database.shown} is at schema revision {current or 'none'}, not {head}: "
                "run `skill-executor db upgrade` (or start the service) first",
                code="database_schema",
            )
        report = status(database)
    except DatabaseUnavailable as exc:
        raise explained(database, exc) from None
    finally:
        database.close()
    emit_json(report)
    return 0 if any(w["alive"] for w in report["workers"]) else 1
