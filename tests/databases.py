"""Databases for store tests: the embedded SQLite file and a real Postgres (the session's
server, tests/pgserver.py; a fresh database per test).

``database`` is a fixture over both kinds; ``open_database(kind, tmp_path, url)`` gives a
migrated database of one kind (``url``: the Postgres one, from ``postgres_url``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from skill_executor.db import Database, upgrade

KINDS = ["sqlite", "postgresql"]


def open_database(kind: str, tmp_path: Path, url: str | None = None) -> Database:
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'skill-executor.db'}"
    assert url is not None, f"no URL for a {kind} database: take it from the postgres_url fixture"
    database = Database(url)
    upgrade(database)
    return database


def database_url(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL of a fresh database of ``kind`` for the requesting test."""
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'skill-executor.db'}"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture(params=KINDS)
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    """A migrated, empty database: SQLite, then Postgres."""
    db = open_database(request.param, tmp_path, database_url(request.param, request, tmp_path))
    yield db
    db.close()
