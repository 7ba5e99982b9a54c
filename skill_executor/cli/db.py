"""``skill-executor db upgrade|status``: the database's schema (SKILL_EXECUTOR_DATABASE_URL).

``serve`` upgrades the schema by itself at every start (under a lock); ``db upgrade`` is the
step an operator runs first when several replicas share one Postgres and should all start on
the new schema at once.  Both print JSON.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..config import Settings
from ..db import Database, DatabaseUnavailable, legacy, migrate
from .output import emit_json


def register(groups: Any) -> None:
    db = groups.add_parser("db", help="the database's schema (SKILL_EXECUTOR_DATABASE_URL)")
    sub = db.add_subparsers(dest="command", required=True, metavar="SUBCOMMAND")
    upgrade = sub.add_parser("upgrade", help="bring the schema to this version's (and import old per-store files)")
    upgrade.set_defaults(handler=_upgrade)
    status = sub.add_parser("status", help="the schema's revision and this version's")
    status.set_defaults(handler=_status)


def _upgrade(args: argparse.Namespace) -> int:
    settings = Settings()
    database = Database(settings.database)
    try:
        before = migrate.current(database)
        after = migrate.upgrade(database)
        files = legacy.pending(settings.data_dir)
        imported = 0
        if files:
            with migrate.exclusive(database):
                imported = legacy.import_files(database, legacy.pending(settings.data_dir))
        emit_json(
            {
                "database": database.shown,
                "from": before,
                "to": after,
                "imported_files": [str(f) for f in files],
                "imported_rows": imported,
            }
        )
    except DatabaseUnavailable as exc:
        raise explained(database, exc) from None
    finally:
        database.close()
    return 0


def explained(database: Database, exc: DatabaseUnavailable) -> DatabaseUnavailable:
    """The CLI is the operator's: say which database and why (the API's answer does not)."""
    return DatabaseUnavailable(
        f"the database {database.shown} cannot be reached: {getattr(exc.__cause__, 'orig', exc.__cause__)}".strip()
    )


def _status(args: argparse.Namespace) -> int:
    settings = Settings()
    database = Database(settings.database)
    try:
        current, head = migrate.current(database), migrate.head()
        emit_json({"database": database.shown, "revision": current, "head": head, "current": current == head})
    except DatabaseUnavailable as exc:
        raise explained(database, exc) from None
    finally:
        database.close()
    return 0 if current == head else 1
