"""One database for every store: a SQLAlchemy engine with the service's rules.

* **Transactions.**  :meth:`Database.write` is a read-write transaction; :meth:`Database.read`
  a read.  On SQLite a write begins ``IMMEDIATE`` (it takes the file's write lock first, so a
  read-modify-write never fails half way), and the threads of one process queue on a lock of
  their own (woken at once) instead of on SQLite's busy handler, which sleeps in growing
  steps; the busy timeout only waits for another process.  On Postgres transactions are
  ``READ COMMITTED``: read-modify-writes lock their rows (``FOR UPDATE``) or are one upsert.
* **Durability.**  SQLite commits in WAL mode; a ``write(durable=True)`` (a saved artifact, a
  published skill) is synced to disk before it returns, other writes (run records) survive a
  crash of the service and may lose the last commits on a power loss.  Postgres commits are
  always durable.
* **Errors** are mapped in one place (:func:`mapped`): a database that cannot be reached, or a
  lock held past the timeout, is a 503 with ``Retry-After`` (``database_unavailable``,
  ``store_busy``); the engine reconnects by itself when the database is back.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, Insert, Table, create_engine, event, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError, DisconnectionError, OperationalError
from sqlalchemy.pool import ConnectionPoolEntry

from ..errors import Unavailable
from ..extras import require
from . import url as urls

log = logging.getLogger(__name__)

#: How long a statement waits for another connection's lock (SQLite) or to connect (Postgres).
LOCK_TIMEOUT_SECONDS = 30
CONNECT_TIMEOUT_SECONDS = 5
#: A pooled Postgres connection idle longer than this is pinged before use.
IDLE_PING_SECONDS = 1.0
_USED = "skill_executor_used"
#: Retry-After of a 503 for a database that cannot be reached.
RETRY_AFTER_SECONDS = 2


class DatabaseUnavailable(Unavailable):
    code = "database_unavailable"


class StoreBusy(Unavailable):
    code = "store_busy"


class Database:
    """The service's database (one per process; thread-safe)."""

    def __init__(self, url: str, *, pool_size: int = 8) -> None:
        self.url: URL = urls.parse(url)
        self.shown = urls.shown(self.url)
        self.is_sqlite = self.url.get_backend_name() == "sqlite"
        self._write_lock = threading.Lock()
        self._local = threading.local()
        if self.is_sqlite:
            path = Path(self.url.database or "")
            path.parent.mkdir(parents=True, exist_ok=True)
            # Private to the service (SQLite makes its -wal and -shm files with the same mode).
            os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
            os.chmod(path, 0o600)
            self.path: Path | None = path
            self.engine: Engine = create_engine(
                self.url,
                connect_args={"timeout": LOCK_TIMEOUT_SECONDS, "check_same_thread": False},
                pool_size=pool_size,
                max_overflow=-1,  # a connection per thread that uses the database (_held)
            )
            event.listen(self.engine, "connect", _sqlite_connect)
            event.listen(self.engine, "begin", _sqlite_begin)
            self._use_wal()
        else:
            require("cluster")  # psycopg: say which extra, not a bare ModuleNotFoundError
            self.path = None
            self.engine = create_engine(
                self.url,
                pool_size=pool_size,
                max_overflow=pool_size * 2,
                pool_timeout=LOCK_TIMEOUT_SECONDS,
                connect_args={"connect_timeout": CONNECT_TIMEOUT_SECONDS, "application_name": "skill-executor"},
            )
            event.listen(self.engine, "connect", _fresh)
            event.listen(self.engine, "checkin", _fresh)
            event.listen(self.engine, "checkout", self._ping_if_idle)
        self._immediate = self.engine.execution_options(skill_executor_immediate=True)

    def _ping_if_idle(self, dbapi_connection: Any, record: ConnectionPoolEntry, _proxy: Any) -> None:
        """Postgres: a pooled connection idle for :data:`IDLE_PING_SECONDS` is pinged before
        use (a server restarted meanwhile: the pool takes a new one); one in use just now is
        not (a round trip saved per transaction). A server lost within that window fails
        the first transaction (503 ``database_unavailable``) and the pool is renewed."""
        if time.monotonic() - record.info.get(_USED, 0.0) < IDLE_PING_SECONDS:
            return
        try:
            self.engine.dialect.do_ping(dbapi_connection)
        except Exception as exc:
            raise DisconnectionError(f"a pooled connection is dead: {exc}") from exc

    # -- transactions -----------------------------------------------------------------

    @contextlib.contextmanager
    def read(self) -> Iterator[Connection]:
        """A connection for reads (one consistent snapshot on SQLite)."""
        with mapped(self):
            if not self.is_sqlite:
                with self.engine.connect() as conn:
                    yield conn
                return
            held = self._held("read", self.engine)
            held.depth += 1
            try:
                yield held.conn
            finally:
                held.depth -= 1
                if held.depth == 0:
                    held.conn.rollback()  # ends the snapshot

    @contextlib.contextmanager
    def write(self, *, durable: bool = False) -> Iterator[Connection]:
        """A read-write transaction, committed when the block ends (rolled back on an error).
        A write inside a write of the same thread joins it."""
        with mapped(self):
            if not self.is_sqlite:
                with self.engine.begin() as conn:
                    yield conn
                return
            held = self._held("write", self._immediate)
            if held.depth:
                held.depth += 1
                try:
                    yield held.conn
                finally:
                    held.depth -= 1
                return
            with self._write_lock:
                _synchronous(held.conn, "FULL" if durable else "NORMAL")
                held.depth = 1
                try:
                    with held.conn.begin():
                        yield held.conn
                finally:
                    held.depth = 0

    def _held(self, kind: str, engine: Engine) -> _Held:
        """This thread's SQLite connection of ``kind`` (a pool checkout per statement would
        cost more than the statement); returned to the pool when the thread ends."""
        held: _Held | None = getattr(self._local, kind, None)
        if held is None or held.conn.closed:
            held = _Held(engine.connect())
            setattr(self._local, kind, held)
        return held

    def insert_ignore(self, table: Table) -> Insert:
        """``INSERT ... ON CONFLICT DO NOTHING`` on either database."""
        if self.is_sqlite:
            return sqlite.insert(table).on_conflict_do_nothing()
        return postgresql.insert(table).on_conflict_do_nothing()

    def upsert(self, table: Table, keys: list[str], values: dict[str, Any], update: dict[str, Any]) -> Insert:
        """``INSERT ... ON CONFLICT (keys) DO UPDATE SET update`` on either database."""
        if self.is_sqlite:
            return sqlite.insert(table).values(**values).on_conflict_do_update(index_elements=keys, set_=update)
        return postgresql.insert(table).values(**values).on_conflict_do_update(index_elements=keys, set_=update)

    def writable(self, timeout: float = 2.0) -> bool:
        """Whether a write succeeds within ``timeout`` seconds (a health check must not
        wait out a 30 s lock)."""
        try:
            if self.is_sqlite:
                if not self._write_lock.acquire(timeout=timeout):
                    return False
                try:
                    with self.engine.connect() as conn:
                        driver = conn.connection.dbapi_connection
                        assert isinstance(driver, sqlite3.Connection)
                        driver.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
                        try:
                            driver.execute("BEGIN IMMEDIATE")
                            driver.execute("ROLLBACK")
                        finally:
                            driver.execute(f"PRAGMA busy_timeout={LOCK_TIMEOUT_SECONDS * 1000}")
                finally:
                    self._write_lock.release()
                return True
            with self.engine.connect() as conn:
                conn.execute(text(f"SET LOCAL statement_timeout = {int(timeout * 1000)}"))
                conn.execute(text("SELECT 1"))
            return True
        except (DBAPIError, sqlite3.Error):
            return False

    def close(self) -> None:
        for kind in ("read", "write"):
            held = getattr(self._local, kind, None)
            if held is not None:
                held.conn.close()
        self.engine.dispose()

    def _use_wal(self) -> None:
        """Switch the file to WAL (a setting the file keeps).  The switch needs the file to
        itself, and SQLite answers "database is locked" at once, without its busy handler,
        while another process opens the same new file: try again until the lock timeout."""
        deadline = time.monotonic() + LOCK_TIMEOUT_SECONDS
        while True:
            try:
                raw = self.engine.raw_connection()
                try:
                    raw.driver_connection.execute("PRAGMA journal_mode=WAL")  # type: ignore[union-attr]
                finally:
                    raw.close()
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)


class _Held:
    """A thread's connection; closed (back to the pool) when the thread's locals go."""

    __slots__ = ("conn", "depth")

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.depth = 0

    def __del__(self) -> None:
        try:
            self.conn.close()
        except Exception:  # a finaliser must not raise; the pool closes it either way
            pass


def _fresh(_dbapi_connection: Any, record: ConnectionPoolEntry) -> None:
    """A connection just made or just given back: in use until now."""
    record.info[_USED] = time.monotonic()


def _sqlite_connect(dbapi_connection: Any, record: ConnectionPoolEntry) -> None:
    # SQLAlchemy begins transactions itself (below); the driver must not.
    dbapi_connection.isolation_level = None
    dbapi_connection.execute(f"PRAGMA busy_timeout={LOCK_TIMEOUT_SECONDS * 1000}")
    dbapi_connection.execute("PRAGMA foreign_keys=ON")
    record.info["synchronous"] = None


def _sqlite_begin(conn: Connection) -> None:
    immediate = conn.get_execution_options().get("skill_executor_immediate", False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def _synchronous(conn: Connection, level: str) -> None:
    """Set SQLite's ``synchronous`` for the next commit of ``conn`` (kept per connection)."""
    info = conn.connection.info
    if info.get("synchronous") != level:
        driver = conn.connection.driver_connection
        assert isinstance(driver, sqlite3.Connection)
        driver.execute(f"PRAGMA synchronous={level}")  # outside a transaction, as SQLite wants
        info["synchronous"] = level


@contextlib.contextmanager
def mapped(database: Database) -> Iterator[None]:
    """The one place database errors become the service's: an unreachable database and a
    lock held past the timeout are 503s with ``Retry-After``; anything else propagates."""
    try:
        yield
    except OperationalError as exc:
        message = str(exc.orig).lower()
        if database.is_sqlite:
            if "locked" in message or "busy" in message:
                raise StoreBusy(
                    f"the database {database.shown} stayed locked by another process; retry later",
                    retry_after=RETRY_AFTER_SECONDS,
                ) from None
            raise
        log.warning("the database %s cannot be reached: %s", database.shown, str(exc.orig).strip())
        raise DatabaseUnavailable(
            "the database cannot be reached; retry later",
            retry_after=RETRY_AFTER_SECONDS,
        ) from exc
    except DBAPIError as exc:
        if not database.is_sqlite and exc.connection_invalidated:
            log.warning("the connection to the database %s was lost: %s", database.shown, str(exc.orig).strip())
            raise DatabaseUnavailable(
                "the connection to the database was lost; retry later",
                retry_after=RETRY_AFTER_SECONDS,
            ) from exc
        raise
