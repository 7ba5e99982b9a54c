"""SQLite connections shared by the embedded stores: one per thread, WAL, patient locks."""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path
from typing import Literal


class ThreadLocalDB:
    """``db()`` returns this thread's connection to ``path`` (autocommit; explicit BEGINs)."""

    def __init__(self, path: Path, *, synchronous: Literal["FULL", "NORMAL"] = "FULL") -> None:
        self.path = path
        self.synchronous = synchronous
        self._local = threading.local()
        # Private to the service (SQLite makes its -wal and -shm files with the same mode).
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
        os.chmod(path, 0o600)
        self.db().execute("PRAGMA journal_mode=WAL")

    def db(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            conn.execute("PRAGMA busy_timeout=30000")
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            self._local.conn = conn
        return conn
