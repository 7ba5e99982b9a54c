"""Run records in SQLite: status, request, result, and idempotency keys.

Records survive a restart.  A run still ``queued`` or ``running`` when a new process
opens the store was interrupted by that restart; :meth:`RunStore.fail_interrupted`
marks it ``failed`` with the reason, so no record is left "running" forever.

Writes of one process are serialised by a lock of the store, so its threads queue on
that lock (woken at once) instead of on SQLite's busy handler, which sleeps in growing
steps; the busy timeout only waits for another process.  ``events`` is the number of
Server-Sent Events the run's live stream had, so a finished run's stream can give its
last events the same ids (``Last-Event-ID``).

Every record has an ``owner``: the tenant (API key id, :mod:`skill_executor.access`) that
made it.  Idempotency keys are per owner.  (The column is called ``principal`` in the
database; rows from before owners were recorded belong to the local tenant.)
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..access import LOCAL_TENANT
from ..errors import Conflict, NotFound, Unavailable
from ..sqlite import ThreadLocalDB

Status = Literal["queued", "running", "completed", "failed", "cancelled"]
FINAL: frozenset[str] = frozenset({"completed", "failed", "cancelled"})
#: SQLite's busy timeout of the store's connections (skill_executor/sqlite.py).
BUSY_TIMEOUT_MS = 30000


@dataclass(slots=True)
class RunRecord:
    run_id: str
    status: Status
    skill: str
    session: str | None
    created_at: float
    updated_at: float
    request: dict[str, Any]
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    #: The tenant (API key id) the run belongs to.
    owner: str = LOCAL_TENANT
    #: How many events the run's live stream had (None: not recorded, e.g. interrupted).
    events: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "status": self.status,
            "skill": self.skill,
            "session": self.session,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "request": self.request,
            "result": self.result,
            "error": self.error,
            "owner": self.owner,
        }


class RunStore:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        # WAL + NORMAL: a record survives a crash of the service; only a power loss
        # may drop the last commits. Run records do not need an fsync per update.
        self._sqlite = ThreadLocalDB(path, synchronous="NORMAL")
        self._write = threading.Lock()
        db = self._db()
        db.executescript(
            """
            CREATE TABLE IF NOT EXISTS runs (
                run_id TEXT PRIMARY KEY, status TEXT NOT NULL, skill TEXT NOT NULL, session TEXT,
                created_at REAL NOT NULL, updated_at REAL NOT NULL, request TEXT NOT NULL,
                result TEXT, error TEXT, principal TEXT, events INTEGER);
            CREATE TABLE IF NOT EXISTS idempotency (
                principal TEXT NOT NULL, key TEXT NOT NULL, fingerprint TEXT NOT NULL,
                run_id TEXT NOT NULL, created_at REAL NOT NULL, PRIMARY KEY (principal, key));
            """
        )
        columns = {row[1] for row in db.execute("PRAGMA table_info(runs)")}
        if "events" not in columns:  # a store made before event ids
            with self._write:
                db.execute("ALTER TABLE runs ADD COLUMN events INTEGER")

    def _db(self) -> sqlite3.Connection:
        return self._sqlite.db()

    def idempotent(self, owner: str, key: str) -> tuple[str, str] | None:
        """(run_id, fingerprint) of the run ``owner`` made with Idempotency-Key ``key``."""
        row = (
            self._db()
            .execute("SELECT run_id, fingerprint FROM idempotency WHERE principal = ? AND key = ?", (owner, key))
            .fetchone()
        )
        return (row[0], row[1]) if row is not None else None

    def create(
        self,
        run_id: str,
        request: dict[str, Any],
        *,
        owner: str,
        idempotency: tuple[str, str] | None = None,
    ) -> RunRecord:
        """Insert a queued run of ``owner``; with ``idempotency=(key, fingerprint)``
        claim the key (per owner) too.

        Raises :class:`~skill_executor.errors.Conflict` with ``details.run_id`` when the key
        is already taken (the caller then serves that run instead).
        """
        now = time.time()
        db = self._db()
        try:
            with self._write:
                self._create(db, run_id, request, owner, idempotency, now)
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            raise Unavailable(
                f"the run store {self.path} stayed locked by another process; retry later", code="store_busy"
            ) from None
        return RunRecord(
            run_id, "queued", request.get("skill", ""), request.get("session"), now, now, request, owner=owner
        )

    @staticmethod
    def _create(
        db: sqlite3.Connection,
        run_id: str,
        request: dict[str, Any],
        owner: str,
        idempotency: tuple[str, str] | None,
        now: float,
    ) -> None:
        db.execute("BEGIN IMMEDIATE")
        try:
            if idempotency is not None:
                key, fingerprint = idempotency
                row = db.execute(
                    "SELECT run_id, fingerprint FROM idempotency WHERE principal = ? AND key = ?",
                    (owner, key),
                ).fetchone()
                if row is not None:
                    db.execute("ROLLBACK")
                    raise Conflict(
                        "this Idempotency-Key was already used",
                        code="idempotency_key_reused" if row[1] != fingerprint else "idempotent_replay",
                        details={"run_id": row[0]},
                    )
                db.execute("INSERT INTO idempotency VALUES (?, ?, ?, ?, ?)", (owner, key, fingerprint, run_id, now))
            db.execute(
                "INSERT INTO runs VALUES (?, 'queued', ?, ?, ?, ?, ?, NULL, NULL, ?, NULL)",
                (run_id, request.get("skill", ""), request.get("session"), now, now, json.dumps(request), owner),
            )
            db.execute("COMMIT")
        except Conflict:
            raise
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def update(
        self,
        run_id: str,
        status: Status,
        *,
        result: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
        events: int | None = None,
    ) -> None:
        values = (
            status,
            time.time(),
            json.dumps(result) if result is not None else None,
            json.dumps(error) if error is not None else None,
            events,
            run_id,
        )
        db = self._db()
        with self._write:
            db.execute(
                "UPDATE runs SET status = ?, updated_at = ?, result = COALESCE(?, result), "
                "error = COALESCE(?, error), events = COALESCE(?, events) WHERE run_id = ?",
                values,
            )

    def get(self, run_id: str) -> RunRecord:
        row = self._db().execute("SELECT * FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            raise NotFound(f"no run {run_id!r}", code="run_not_found")
        return RunRecord(
            run_id=row[0],
            status=row[1],
            skill=row[2],
            session=row[3],
            created_at=row[4],
            updated_at=row[5],
            request=json.loads(row[6]),
            result=json.loads(row[7]) if row[7] else None,
            error=json.loads(row[8]) if row[8] else None,
            owner=row[9] or LOCAL_TENANT,
            events=row[10],
        )

    def fail_interrupted(self) -> int:
        """Mark runs left queued/running by a previous process as failed."""
        error = json.dumps({"code": "interrupted", "message": "the service restarted while this run was in progress"})
        db = self._db()
        with self._write:
            cursor = db.execute(
                "UPDATE runs SET status = 'failed', error = ?, updated_at = ? WHERE status IN ('queued', 'running')",
                (error, time.time()),
            )
        return cursor.rowcount

    def writable(self, timeout: float = 2.0) -> bool:
        """Whether a write succeeds within ``timeout`` seconds (a health check must not
        wait out the 30 s busy timeout behind another process's lock)."""
        if not self._write.acquire(timeout=timeout):
            return False
        try:
            db = self._db()
            db.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
            try:
                db.execute("CREATE TABLE IF NOT EXISTS health (x INTEGER)")
                db.execute("DELETE FROM health")
            finally:
                db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            return True
        except sqlite3.Error:
            return False
        finally:
            self._write.release()
