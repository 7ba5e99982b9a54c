"""Databases for store tests: the embedded SQLite file, and (where the tests start one) a
real Postgres.  ``open_database(kind, tmp_path)`` gives a migrated, empty database."""

from __future__ import annotations

from pathlib import Path

from skill_executor.db import Database, upgrade

import os
import uuid

from sqlalchemy import create_engine, text

KINDS = ["sqlite", "postgresql"] if os.environ.get("SKILL_EXECUTOR_TEST_POSTGRES_URL") else ["sqlite"]


def fresh_postgres() -> str:
    """A new empty database on the test server (SKILL_EXECUTOR_TEST_POSTGRES_URL)."""
    base = os.environ["SKILL_EXECUTOR_TEST_POSTGRES_URL"]
    name = f"t_{uuid.uuid4().hex[:16]}"
    admin = create_engine(base.replace("postgresql://", "postgresql+psycopg://", 1), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return base.rsplit("/", 1)[0] + "/" + name


def open_database(kind: str, tmp_path: Path, url: str | None = None) -> Database:
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'skill-executor.db'}"
    elif kind == "postgresql" and url is None:
        url = fresh_postgres()
    assert url is not None, f"no URL for a {kind} database"
    database = Database(url)
    upgrade(database)
    return database
