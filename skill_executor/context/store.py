"""Contexts in the service's database: one row per (tenant, session).

A context expires after ``ttl`` seconds without an operation (the sessions' TTL): an
expired row reads as absent and :meth:`ContextStore.expire` deletes it.  A change is a
read-modify-write in one transaction that locks the row (``BEGIN IMMEDIATE`` on SQLite,
``FOR UPDATE`` on Postgres), so two processes never lose each other's updates.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import Connection, delete, select, update

from ..db import Database
from ..db.schema import contexts
from .model import Context

T = TypeVar("T")


class ContextStore:
    def __init__(self, database: Database, ttl_seconds: float, clock: Callable[[], float] = time.time) -> None:
        self.database = database
        self.ttl = ttl_seconds
        self.clock = clock

    def _read(self, conn: Connection, tenant: str, session: str, now: float, *, lock: bool = False) -> Context | None:
        query = select(contexts.c.state, contexts.c.updated).where(
            contexts.c.tenant == tenant, contexts.c.session == session
        )
        row = conn.execute(query.with_for_update() if lock else query).first()
        if row is None or not row[0] or now - float(row[1]) > self.ttl:
            return None
        return Context.from_dict(tenant, session, json.loads(row[0]))

    def get(self, tenant: str, session: str) -> Context | None:
        with self.database.read() as conn:
            return self._read(conn, tenant, session, self.clock())

    def change(self, tenant: str, session: str, counter: str, fn: Callable[[Context, float], T]) -> T:
        """Apply ``fn(context, now)`` to the context (a new one if there is none or it expired)
        and save it; an exception from ``fn`` changes nothing."""
        with self.database.write() as conn:
            # The row to lock: a placeholder (state "", read as absent) when there is none yet, so two
            # first changes of one session queue on it too (Postgres) and never both insert.
            now = self.clock()
            conn.execute(
                self.database.insert_ignore(contexts).values(tenant=tenant, session=session, state="", updated=now)
            )
            context = self._read(conn, tenant, session, now, lock=True) or Context(
                tenant, session, counter, created=now
            )
            context.updated = now
            result = fn(context, now)
            conn.execute(
                update(contexts)
                .where(contexts.c.tenant == tenant, contexts.c.session == session)
                .values(state=json.dumps(context.to_dict(), sort_keys=True), updated=now)
            )
            return result

    def keep_alive(self, tenant: str, session: str) -> None:
        """Reading a live context is using it: its TTL starts again."""
        now = self.clock()
        with self.database.write() as conn:
            conn.execute(
                update(contexts)
                .where(contexts.c.tenant == tenant, contexts.c.session == session, contexts.c.updated >= now - self.ttl)
                .values(updated=now)
            )

    def delete(self, tenant: str, session: str) -> bool:
        with self.database.write() as conn:
            cursor = conn.execute(delete(contexts).where(contexts.c.tenant == tenant, contexts.c.session == session))
            return int(cursor.rowcount) > 0

    def expire(self, now: float | None = None) -> int:
        """Delete the contexts idle for longer than the TTL; returns how many."""
        cutoff = (self.clock() if now is None else now) - self.ttl
        with self.database.write() as conn:
            return int(conn.execute(delete(contexts).where(contexts.c.updated < cutoff)).rowcount)
