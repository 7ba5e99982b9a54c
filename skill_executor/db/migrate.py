"""The schema's version: Alembic migrations, applied by ``skill-executor db upgrade`` and at
every start of the service.

Two processes may start at once on one database: on Postgres the upgrade holds an advisory
lock (the second waits, then finds nothing to do); on SQLite an ``flock`` on a file beside
the database does the same.  A database whose schema is newer than this code (a newer
service upgraded it) is refused, not written to.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, inspect, text

from ..errors import Unavailable
from .engine import Database, mapped

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
#: The newest revision in migrations/versions (a test checks it is Alembic's head), so a
#: start on an up-to-date schema needs no Alembic import (a fifth of a second).
HEAD = "0008"
#: pg_advisory_lock's key for schema changes (any constant shared by every process).
ADVISORY_KEY = 0x5E5E_0001


class SchemaMismatch(Unavailable):
    code = "database_schema"


def _config(connection: Connection | None = None) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head() -> str:
    """The newest revision this code knows (Alembic's own answer; :data:`HEAD` is its copy)."""
    from alembic.script import ScriptDirectory

    revision = ScriptDirectory.from_config(_config()).get_current_head()
    assert revision is not None
    return revision


def _revision(conn: Connection) -> str | None:
    if not inspect(conn).has_table("alembic_version"):
        return None
    return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()


def current(database: Database) -> str | None:
    """The database's revision (None: no schema yet)."""
    with mapped(database), database.engine.connect() as conn:
        return _revision(conn)


@contextlib.contextmanager
def exclusive(database: Database) -> Iterator[None]:
    """Hold the schema lock (other processes' upgrades and imports wait)."""
    with mapped(database), database.engine.connect() as conn, _exclusive(database, conn):
        yield


@contextlib.contextmanager
def _exclusive(database: Database, conn: Connection) -> Iterator[None]:
    if database.is_sqlite:
        assert database.path is not None
        lock = database.path.with_name(database.path.name + ".migrate-lock")
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)
        return
    conn.execute(text("SELECT pg_advisory_lock(:key)"), {"key": ADVISORY_KEY})
    conn.commit()
    try:
        yield
    finally:
        conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": ADVISORY_KEY})
        conn.commit()


def upgrade(database: Database) -> str:
    """Bring the schema to this code's head (nothing to do: nothing happens); returns it."""
    if current(database) == HEAD:
        return HEAD
    from alembic import command
    from alembic.script import ScriptDirectory

    target = head()
    known = {s.revision for s in ScriptDirectory.from_config(_config()).walk_revisions()}
    with mapped(database), database.engine.connect() as conn, _exclusive(database, conn):
        found = _revision(conn)
        conn.commit()
        if found is not None and found not in known:
            raise SchemaMismatch(
                f"the database {database.shown} has schema revision {found!r}, newer than this "
                f"service knows (its newest is {target!r}): run the newer service, or restore a backup"
            )
        if found != target:
            command.upgrade(_config(conn), "head")
            conn.commit()
    return target
