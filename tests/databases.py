"""Databases for store tests: the embedded SQLite file, and (where the tests start one) a
real Postgres.  ``open_database(kind, tmp_path)`` gives a migrated, empty database."""

from __future__ import annotations

from pathlib import Path

from skill_executor.db import Database, upgrade

KINDS = ["sqlite"]


def open_database(kind: str, tmp_path: Path, url: str | None = None) -> Database:
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'skill-executor.db'}"
    assert url is not None, f"no URL for a {kind} database"
    database = Database(url)
    upgrade(database)
    return database
