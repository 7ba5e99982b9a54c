"""Contexts in the embedded store (``<data>/context.db``): one row per (tenant, session).

A context expires after ``ttl`` seconds without an operation (the sessions' TTL): an
expired row reads as absent and :meth:`ContextStore.expire` deletes it.  Changes are
read-modify-write in one ``BEGIN IMMEDIATE`` transaction, so two processes sharing the
data folder never lose each other's updates.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from ..sqlite import ThreadLocalDB
from .model import Context

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS contexts (
    tenant TEXT NOT NULL,
    session TEXT NOT NULL,
    state TEXT NOT NULL,
    updated REAL NOT NULL,
    PRIMARY KEY (tenant, session)
)
"""


class ContextStore:
    def __init__(self, path: Path, ttl_seconds: float, clock: Callable[[], float] = time.time) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = ThreadLocalDB(path)
        self._db.db().execute(_SCHEMA)
        self.ttl = ttl_seconds
        self.clock = clock

    def _read(self, tenant: str, session: str, now: float) -> Context | None:
        row = (
            self._db.db()
            .execute("SELECT state, updated FROM contexts WHERE tenant = ? AND session = ?", (tenant, session))
            .fetchone()
        )
        if row is None or now - float(row[1]) > self.ttl:
            return None
        return Context.from_dict(tenant, session, json.loads(row[0]))

    def get(self, tenant: str, session: str) -> Context | None:
        return self._read(tenant, session, self.clock())

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        db = self._db.db()
        db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def change(self, tenant: str, session: str, counter: str, fn: Callable[[Context, float], T]) -> T:
        """Apply ``fn(context, now)`` to the context (a new one if there is none or it expired)
        and save it; an exception from ``fn`` changes nothing."""
        with self._transaction():
            now = self.clock()
            context = self._read(tenant, session, now) or Context(tenant, session, counter, created=now)
            context.updated = now
            result = fn(context, now)
            self._db.db().execute(
                "INSERT OR REPLACE INTO contexts (tenant, session, state, updated) VALUES (?, ?, ?, ?)",
                (tenant, session, json.dumps(context.to_dict(), sort_keys=True), now),
            )
            return result

    def keep_alive(self, tenant: str, session: str) -> None:
        """Reading a live context is using it: its TTL starts again."""
        now = self.clock()
        self._db.db().execute(
            "UPDATE contexts SET updated = ? WHERE tenant = ? AND session = ? AND updated >= ?",
            (now, tenant, session, now - self.ttl),
        )

    def delete(self, tenant: str, session: str) -> bool:
        with self._transaction():
            cursor = self._db.db().execute("DELETE FROM contexts WHERE tenant = ? AND session = ?", (tenant, session))
            return cursor.rowcount > 0

    def expire(self, now: float | None = None) -> int:
        """Delete the contexts idle for longer than the TTL; returns how many."""
        cutoff = (self.clock() if now is None else now) - self.ttl
        with self._transaction():
            return self._db.db().execute("DELETE FROM contexts WHERE updated < ?", (cutoff,)).rowcount
