"""The embedded stores' SQLite helper."""

from __future__ import annotations

import multiprocessing
import stat
from pathlib import Path

from skill_executor.sqlite import ThreadLocalDB


def _open(path: str, barrier: multiprocessing.synchronize.Barrier) -> None:
    barrier.wait()
    ThreadLocalDB(Path(path)).db().execute("CREATE TABLE IF NOT EXISTS t (x)")


def test_processes_opening_one_new_file_at_once_all_get_it(tmp_path: Path) -> None:
    """Switching a new file to WAL fails at once while another process opens it (SQLite
    skips its busy handler there): two test commands on one data dir crashed with
    "database is locked"."""
    context = multiprocessing.get_context("fork")
    for attempt in range(15):
        path = tmp_path / f"store-{attempt}.db"
        barrier = context.Barrier(6)
        processes = [context.Process(target=_open, args=(str(path), barrier)) for _ in range(6)]
        for process in processes:
            process.start()
        for process in processes:
            process.join(60)
        assert [p.exitcode for p in processes] == [0] * 6
        db = ThreadLocalDB(path)
        assert db.db().execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
