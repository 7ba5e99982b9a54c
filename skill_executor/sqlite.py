"""SQLite connections shared by the embedded stores: one per thread, WAL, patient locks."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Literal

#: How long a statement waits for another connection's lock.
LOCK_TIMEOUT_SECONDS = 30


class ThreadLocalDB:
    """``db()`` returns this thread's connection to ``path`` (autocommit; explicit BEGINs)."""

    def __init__(self, path: Path, *, synchronous: Literal["FULL", "NORMAL"] = "FULL") -> None:
        self.path = path
        self.synchronous = synchronous
        self._local = threading.local()
        # Private to the service (SQLite makes its -wal and -shm files with the same mode).
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
        os.chmod(path, 0o600)
        self._use_wal()

    def _use_wal(self) -> None:
        """Switch the file to WAL (a setting the file keeps).  The switch needs the file to
        itself, and SQLite answers "database is locked" at once, without its busy handler,
        while another process opens the same new file (two ``skill-executor test`` at once
        on one data dir): try again until the connection's own timeout."""
        deadline = time.monotonic() + LOCK_TIMEOUT_SECONDS
        while True:
            try:
                self.db().execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)

    def db(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=LOCK_TIMEOUT_SECONDS, isolation_level=None)
            conn.execute(f"PRAGMA busy_timeout={LOCK_TIMEOUT_SECONDS * 1000}")
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            self._local.conn = conn
        return conn
