"""A data dir from before the shared database: its stores' SQLite files are imported at the
first start, and kept (renamed), so no record is lost."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from sqlalchemy import text

from skill_executor.core import Executor
from skill_executor.lifecycle.records import RunStore

from ..conftest import make_settings


def _old_runs(data: Path) -> None:
    conn = sqlite3.connect(data / "runs.db")
    conn.executescript(
        """
        CREATE TABLE runs (
            run_id TEXT PRIMARY KEY, status TEXT NOT NULL, skill TEXT NOT NULL, session TEXT,
            created_at REAL NOT NULL, updated_at REAL NOT NULL, request TEXT NOT NULL,
            result TEXT, error TEXT, principal TEXT, events INTEGER);
        CREATE TABLE idempotency (
            principal TEXT NOT NULL, key TEXT NOT NULL, fingerprint TEXT NOT NULL,
            run_id TEXT NOT NULL, created_at REAL NOT NULL, PRIMARY KEY (principal, key));
        """
    )
    conn.execute(
        "INSERT INTO runs VALUES ('old-1', 'completed', 'math-tools', NULL, 1.0, 2.0, ?, ?, NULL, 'key-a', 4)",
        (json.dumps({"skill": "math-tools", "command": "true"}), json.dumps({"exit_code": 0})),
    )
    conn.execute(
        "INSERT INTO runs VALUES ('older', 'completed', 'math-tools', NULL, 1.0, 2.0, '{}', NULL, NULL, NULL, NULL)"
    )
    conn.execute("INSERT INTO idempotency VALUES ('key-a', 'k1', 'f', 'old-1', 1.0)")
    conn.commit()
    conn.close()


def _old_contexts(data: Path) -> None:
    conn = sqlite3.connect(data / "context.db")
    conn.execute(
        "CREATE TABLE contexts (tenant TEXT NOT NULL, session TEXT NOT NULL, state TEXT NOT NULL,"
        " updated REAL NOT NULL, PRIMARY KEY (tenant, session))"
    )
    state = {"counter": "chars", "skills": [], "created": 1.0, "updated": 9e12}
    conn.execute("INSERT INTO contexts VALUES ('local', 'chat', ?, 9e12)", (json.dumps(state),))
    conn.commit()
    conn.close()


def test_old_records_are_imported_once_and_the_files_kept(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, "local")
    settings.data_dir.mkdir(parents=True)
    _old_runs(settings.data_dir)
    _old_contexts(settings.data_dir)
    for _ in range(2):  # a second start finds nothing to import and changes nothing
        executor = Executor.from_settings(settings)
        try:
            store = RunStore(executor.database, instance="i1")
            old = store.get("old-1")
            assert (old.status, old.owner, old.events, old.result) == ("completed", "key-a", 4, {"exit_code": 0})
            assert store.get("older").owner == "local"  # from before owners were recorded
            assert store.idempotent("key-a", "k1") == ("old-1", "f")
            context = executor.contexts.store.get("local", "chat")
            assert context is not None and context.counter == "chars"
        finally:
            executor.close(timeout=5)
        assert not (settings.data_dir / "runs.db").exists() and not (settings.data_dir / "context.db").exists()
        assert (settings.data_dir / "runs.db.imported").is_file()
        assert (settings.data_dir / "context.db.imported").is_file()


def test_an_old_registry_index_is_imported_with_its_audit_order(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, "local")
    registry_dir = settings.data_dir / "registry"
    registry_dir.mkdir(parents=True)
    conn = sqlite3.connect(registry_dir / "index.db")
    conn.executescript(
        """
        CREATE TABLE skills (skill TEXT PRIMARY KEY, next_version INTEGER NOT NULL,
            default_version INTEGER, latest_version INTEGER);
        CREATE TABLE versions (skill TEXT NOT NULL, version INTEGER NOT NULL, digest TEXT NOT NULL,
            created_at REAL NOT NULL, source TEXT NOT NULL, actor TEXT NOT NULL, dirname TEXT NOT NULL,
            manifest TEXT NOT NULL, PRIMARY KEY (skill, version));
        CREATE TABLE audit (id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, actor TEXT NOT NULL,
            action TEXT NOT NULL, skill TEXT NOT NULL, version INTEGER, digest TEXT, detail TEXT);
        INSERT INTO skills VALUES ('old-skill', 3, 1, 2);
        INSERT INTO versions VALUES ('old-skill', 1, 'sha256:a', 1.0, 'upload', 'ci', 'old-skill-1', '{}');
        INSERT INTO versions VALUES ('old-skill', 2, 'sha256:b', 2.0, 'upload', 'ci', 'old-skill-2', '{}');
        INSERT INTO audit (at, actor, action, skill, version) VALUES (1.0, 'ci', 'publish', 'old-skill', 1);
        INSERT INTO audit (at, actor, action, skill, version) VALUES (2.0, 'ci', 'publish', 'old-skill', 2);
        INSERT INTO audit (at, actor, action, skill, version) VALUES (3.0, 'ops', 'set-default', 'old-skill', 1);
        """
    )
    conn.commit()
    conn.close()
    for _ in range(2):  # imported once: a second start adds no audit entry
        executor = Executor.from_settings(settings)
        try:
            registry = executor.repository.registry
            assert registry is not None
            assert registry.pointers("old-skill") == (1, 2)
            with executor.database.read() as db:
                actions = [row[0] for row in db.execute(text("SELECT action FROM audit ORDER BY id"))]
            assert actions == ["publish", "publish", "set-default"]
        finally:
            executor.close(timeout=5)
    assert (registry_dir / "index.db.imported").is_file() and not (registry_dir / "index.db").exists()
