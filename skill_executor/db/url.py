"""``SKILL_EXECUTOR_DATABASE_URL``: which database, as SQLAlchemy names it.

``sqlite:///<path>`` (the default: ``<data_dir>/skill-executor.db``) or
``postgresql://user:pass@host:port/db`` (driven by psycopg 3).  Anything else is refused
with the accepted forms, and a URL is never printed with its password.
"""

from __future__ import annotations

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from ..errors import BadRequest


class BadDatabaseUrl(BadRequest):
    code = "invalid_database_url"


def parse(url: str) -> URL:
    """The SQLAlchemy URL for ``url`` (``postgresql://`` gets the psycopg 3 driver)."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise BadDatabaseUrl(
            "SKILL_EXECUTOR_DATABASE_URL is not a database URL: use sqlite:///<path> or "
            "postgresql://user:password@host:port/database"
        ) from None
    backend, _, driver = parsed.drivername.partition("+")
    if backend == "sqlite" and driver in ("", "pysqlite"):
        if not parsed.database or parsed.database == ":memory:":
            raise BadDatabaseUrl(
                "SKILL_EXECUTOR_DATABASE_URL names no SQLite file: use sqlite:///<path> "
                "(an in-memory database would lose every record at exit)"
            )
        return parsed
    if backend in ("postgresql", "postgres") and driver in ("", "psycopg", "psycopg2"):
        return parsed.set(drivername="postgresql+psycopg")
    raise BadDatabaseUrl(
        f"SKILL_EXECUTOR_DATABASE_URL uses {parsed.drivername!r}: use sqlite:///<path> or "
        "postgresql://user:password@host:port/database"
    )


def shown(url: URL) -> str:
    """``url`` for messages and logs: the password masked."""
    return url.render_as_string(hide_password=True)
