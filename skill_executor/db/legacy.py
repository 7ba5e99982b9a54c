"""Records from before the shared database: each store had its own SQLite file
(``<data>/runs.db``, ``<data>/context.db``, ``<data>/artifacts/artifacts.db``,
``<data>/registry/index.db``).  The first start on a data dir that has them copies their rows
into the database (any kind: moving a single machine to Postgres is the same step), then
renames each file to ``<name>.imported`` -- kept, never deleted, so nothing is lost.

Copying is idempotent (a row already there is kept; an audit entry is matched on its
contents), so a start that crashed half way imports again safely.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import Table, and_, insert, select

from ..access import LOCAL_TENANT
from . import schema
from .engine import Database

log = logging.getLogger(__name__)

#: Where each old file lived, relative to the data dir.
FILES = ("runs.db", "context.db", "artifacts/artifacts.db", "registry/index.db")
#: old table -> (new table, old column -> new column; None: keep the name)
_RENAMED: dict[str, tuple[Table, dict[str, str]]] = {
    "runs": (schema.runs, {"principal": "owner"}),
    "idempotency": (schema.idempotency, {"principal": "owner"}),
    "contexts": (schema.contexts, {}),
    "artifacts": (schema.artifacts, {}),
    "artifact_counters": (schema.artifact_counters, {}),
    "orphan_blobs": (schema.orphan_blobs, {}),
    "skills": (schema.skills, {}),
    "versions": (schema.skill_versions, {}),
    "audit": (schema.audit, {}),
}
#: Columns an old row may lack, and their value (records from before tenants had owners).
_DEFAULTS: dict[str, dict[str, Any]] = {
    "runs": {"owner": LOCAL_TENANT},
    "idempotency": {"owner": LOCAL_TENANT},
    "artifacts": {"owner": LOCAL_TENANT},
    "artifact_counters": {"owner": LOCAL_TENANT},
    "skills": {"default_held": 0},
}


def pending(data_dir: Path) -> list[Path]:
    """The old files of ``data_dir`` not imported yet."""
    return [data_dir / name for name in FILES if (data_dir / name).is_file()]


def import_files(database: Database, files: list[Path]) -> int:
    """Copy every row of ``files`` into ``database``, then rename each file; returns the rows copied."""
    copied = 0
    for path in files:
        tables = dict(_read(path))
        with database.write(durable=True) as conn:
            for name, rows in tables.items():
                table, renamed = _RENAMED[name]
                for old in rows:
                    row = {renamed.get(k, k): v for k, v in old.items()}
                    for column, value in _DEFAULTS.get(name, {}).items():
                        if row.get(column) is None:
                            row[column] = value
                    row = {k: v for k, v in row.items() if k in table.c}
                    if table is schema.audit:
                        row.pop("id", None)
                        match = and_(
                            *(table.c[k] == v if v is not None else table.c[k].is_(None) for k, v in row.items())
                        )
                        if conn.execute(select(table.c.id).where(match).limit(1)).first() is not None:
                            continue
                        conn.execute(insert(table).values(**row))
                    else:
                        conn.execute(database.insert_ignore(table).values(**row))
                    copied += 1
        for suffix in ("-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        try:
            os.replace(path, path.with_name(path.name + ".imported"))
        except FileNotFoundError:  # another process imported it at the same time
            pass
        log.warning(
            "imported the records of %s into %s (the file is kept as %s.imported)", path, database.shown, path.name
        )
    return copied


def _read(path: Path) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    conn = sqlite3.connect(path)
    try:
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        # An artifact store from before tenancy renamed its table to artifacts_v1 mid-upgrade.
        for name in _RENAMED:
            if name in names:
                order = " ORDER BY id" if name == "audit" else ""
                yield name, [dict(row) for row in conn.execute(f'SELECT * FROM "{name}"{order}')]
        if "artifacts_v1" in names and "artifacts" not in names:
            yield "artifacts", [dict(row) for row in conn.execute("SELECT * FROM artifacts_v1")]
    finally:
        conn.close()
