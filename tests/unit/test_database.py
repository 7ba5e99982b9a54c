"""The database layer: URLs, migrations, transactions and the errors they map to."""

from __future__ import annotations

import multiprocessing
import multiprocessing.synchronize
import sqlite3
import stat
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, text

from skill_executor.context.model import Context
from skill_executor.context.store import ContextStore
from skill_executor.db import Database, DatabaseUnavailable, SchemaMismatch, StoreBusy, migrate, upgrade
from skill_executor.db.schema import runs
from skill_executor.db.url import BadDatabaseUrl, parse, shown
from skill_executor.errors import BadRequest, Conflict, NotFound
from skill_executor.lifecycle.listing import RunFilter, RunListing, decode_cursor, encode_cursor
from skill_executor.lifecycle.records import RunStore

from ..databases import open_database

# -- URLs -------------------------------------------------------------------------------


def test_urls_name_sqlite_files_or_postgres() -> None:
    assert parse("postgresql://u:p@127.0.0.1:5432/db").drivername == "postgresql+psycopg"
    assert parse("sqlite:////tmp/x.db").database == "/tmp/x.db"
    for bad in ("mysql://u@h/db", "sqlite://", "sqlite:///:memory:", "not a url", "redis://h"):
        with pytest.raises(BadDatabaseUrl):
            parse(bad)


def test_a_url_is_never_shown_with_its_password() -> None:
    assert "hunter2" not in shown(parse("postgresql://u:hunter2@h/db"))
    with pytest.raises(BadDatabaseUrl) as caught:
        parse("mysql://u:hunter2@h/db")
    assert "hunter2" not in caught.value.message


# -- migrations ---------------------------------------------------------------------------


def test_the_head_constant_is_alembics_head() -> None:
    assert migrate.head() == migrate.HEAD


def test_upgrade_is_idempotent_and_records_the_head(database: Database) -> None:
    assert migrate.current(database) == migrate.head()
    assert upgrade(database) == migrate.head()
    assert migrate.current(database) == migrate.HEAD


def _procrastinate_objects(conn: Any) -> set[tuple[str, str]]:
    """procrastinate's tables, types and functions (with their arguments) in ``conn``'s database."""
    rows = conn.execute(
        text(
            "SELECT 'table', c.relname || ':' || string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod),"
            " ',' ORDER BY a.attnum) FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid"
            " WHERE c.relname LIKE 'procrastinate%' AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped"
            " GROUP BY c.relname"
            " UNION ALL SELECT 'type', typname FROM pg_type WHERE typname LIKE 'procrastinate%'"
            " UNION ALL SELECT 'function', p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')'"
            " FROM pg_proc p WHERE p.proname LIKE 'procrastinate%'"
            " UNION ALL SELECT 'trigger', tgname FROM pg_trigger WHERE tgname LIKE 'procrastinate%'"
        )
    ).all()
    return {(kind, name) for kind, name in rows}


def test_postgres_schema_has_the_pinned_procrastinates_objects(postgres_server: Any, postgres_url: str) -> None:
    """Migration 0002 applies procrastinate's schema (frozen in the revision) on Postgres:
    what it makes is exactly what the installed library's own schema makes, so a bump of
    the library without a revision fails here."""
    from procrastinate.schema import SchemaManager

    database = Database(postgres_url)
    try:
        upgrade(database)
        with database.read() as conn:
            ours = _procrastinate_objects(conn)
    finally:
        database.close()
    name = postgres_server.create_database()
    reference = Database(postgres_server.url(name))
    try:
        with reference.engine.begin() as conn:
            conn.connection.driver_connection.execute(SchemaManager.get_schema())  # type: ignore[union-attr]
        with reference.read() as conn:
            library = _procrastinate_objects(conn)
    finally:
        reference.close()
        postgres_server.drop_database(name)
    assert ("function", "procrastinate_defer_jobs_v1(jobs procrastinate_job_to_defer_v1[])") in library
    assert ours == library


def test_sqlite_gets_the_dispatch_tables_not_procrastinates(tmp_path: Path) -> None:
    database = open_database("sqlite", tmp_path)
    try:
        with database.read() as conn:
            names = {row[0] for row in conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'table'"))}
    finally:
        database.close()
    assert {"workers", "run_events", "session_leases"} <= names
    assert not any(name.startswith("procrastinate") for name in names)


def test_a_schema_newer_than_the_code_is_refused_not_written(database: Database) -> None:
    with database.write() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = 'from-the-future'"))
    with pytest.raises(SchemaMismatch) as caught:
        upgrade(database)
    assert caught.value.status == 503 and "newer" in caught.value.message
    with database.read() as conn:  # nothing was written
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one() == "from-the-future"


def _open(path: str, barrier: multiprocessing.synchronize.Barrier) -> None:
    barrier.wait()
    database = Database(f"sqlite:///{path}")
    upgrade(database)
    RunStore(database, instance="i1").create(f"r-{multiprocessing.current_process().pid}", {"skill": "s"}, owner="o")


def test_processes_opening_one_new_sqlite_file_at_once_all_get_it(tmp_path: Path) -> None:
    """Switching a new file to WAL fails at once while another process opens it (SQLite
    skips its busy handler there), and the schema must be made once: six processes open
    and migrate one new file at once, each writes a record."""
    context = multiprocessing.get_context("fork")
    for attempt in range(8):
        path = tmp_path / f"store-{attempt}.db"
        barrier = context.Barrier(6)
        processes = [context.Process(target=_open, args=(str(path), barrier)) for _ in range(6)]
        for process in processes:
            process.start()
        for process in processes:
            process.join(60)
        assert [p.exitcode for p in processes] == [0] * 6
        raw = sqlite3.connect(path)
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert raw.execute("SELECT count(*) FROM runs").fetchone()[0] == 6
        raw.close()
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


# -- transactions -------------------------------------------------------------------------


def test_a_failed_write_changes_nothing(database: Database) -> None:
    with pytest.raises(RuntimeError), database.write() as conn:
        conn.execute(
            runs.insert().values(
                run_id="x", status="queued", skill="s", created_at=1, updated_at=1, request="{}", owner="o"
            )
        )
        raise RuntimeError("boom")
    with database.read() as conn:
        assert conn.execute(select(runs)).first() is None


def test_a_sqlite_file_locked_past_the_timeout_is_a_503_with_retry_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from skill_executor.db import engine

    monkeypatch.setattr(engine, "LOCK_TIMEOUT_SECONDS", 1)
    database = open_database("sqlite", tmp_path)
    other = sqlite3.connect(tmp_path / "skill-executor.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreBusy) as caught:
            RunStore(database, instance="i1").create("r1", {"skill": "s"}, owner="o")
        assert caught.value.status == 503 and caught.value.retry_after
        assert not database.writable(timeout=0.2)
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert database.writable()
    RunStore(database, instance="i1").create("r1", {"skill": "s"}, owner="o")


# -- the run store ----------------------------------------------------------------------


def test_idempotency_keys_are_claimed_once_per_owner(database: Database) -> None:
    store = RunStore(database, instance="i1")
    store.create("a", {"skill": "s"}, owner="k1", idempotency=("key", "f1"))
    with pytest.raises(Conflict) as caught:
        store.create("b", {"skill": "s"}, owner="k1", idempotency=("key", "f1"))
    assert caught.value.code == "idempotent_replay" and caught.value.details == {"run_id": "a"}
    with pytest.raises(Conflict) as caught:
        store.create("c", {"skill": "s"}, owner="k1", idempotency=("key", "f2"))
    assert caught.value.code == "idempotency_key_reused"
    store.create("d", {"skill": "s"}, owner="k2", idempotency=("key", "f1"))  # another key's own
    assert store.idempotent("k1", "key") == ("a", "f1") and store.idempotent("k2", "key") == ("d", "f1")
    with pytest.raises(NotFound):
        store.get("b")


def test_concurrent_claims_of_one_key_make_one_run(database: Database) -> None:
    store = RunStore(database, instance="i1")
    outcomes: list[str] = []

    def claim(i: int) -> None:
        try:
            store.create(f"r{i}", {"skill": "s"}, owner="k", idempotency=("same", "f"))
            outcomes.append("created")
        except Conflict as exc:
            outcomes.append(exc.code)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes.count("created") == 1 and outcomes.count("idempotent_replay") == 11


def test_records_round_trip_and_interrupted_runs_are_marked(database: Database) -> None:
    store = RunStore(database, instance="i1")
    store.create("a", {"skill": "s", "session": "chat"}, owner="k")
    store.create("b", {"skill": "s"}, owner="k")
    store.update("b", "completed", result={"exit_code": 0}, events=5)
    RunStore(database, instance="i2").create("elsewhere", {"skill": "s"}, owner="k")
    assert store.fail_interrupted() == 1  # never another instance's run (it shares the database)
    assert RunStore(database, instance="i2").get("elsewhere").status == "queued"
    a, b = store.get("a"), store.get("b")
    assert (a.status, a.session, a.error and a.error["code"]) == ("failed", "chat", "interrupted")
    assert (b.status, b.result, b.events, b.owner) == ("completed", {"exit_code": 0}, 5, "k")


def test_run_listing_pages_one_owners_runs_newest_first(database: Database) -> None:
    store = RunStore(database, instance="i1")
    made = {  # run id: (owner, skill as requested, session, created_at, status); ties at 101
        "r1": ("k", "csv-report", None, 100.0, "completed"),
        "r2": ("k", "CSV-Report@3", "chat", 101.0, "failed"),
        "r3": ("k", "math-tools", "chat", 101.0, "queued"),
        "r4": ("k", "csv-reporter", None, 101.0, "queued"),
        "r5": ("k", "csv-report", "other", 102.5, "cancelled"),
        "x1": ("other-key", "csv-report", "chat", 101.0, "completed"),
        "x2": ("other-key", "csv-report", None, 200.0, "completed"),
    }
    for run_id, (owner, skill, session, created, status) in made.items():
        store.create(run_id, {"skill": skill, "session": session}, owner=owner)
        error = {"code": "boom", "message": "it failed", "status": 500} if status == "failed" else None
        store.update(run_id, status, error=error)  # type: ignore[arg-type]
        with database.write() as conn:
            conn.execute(runs.update().where(runs.c.run_id == run_id).values(created_at=created))

    def every(filters: RunFilter = RunFilter(), limit: int = 2, running: tuple[str, ...] = ()) -> list[RunListing]:
        seen: list[RunListing] = []
        after = None
        while True:
            page = store.listing("k", filters, limit=limit + 1, after=after, running=running)
            seen += page[:limit]
            if len(page) <= limit:
                return seen
            after = decode_cursor(encode_cursor(page[limit - 1]))

    assert [r.run_id for r in every()] == ["r5", "r4", "r3", "r2", "r1"]  # never other-key's
    assert [r.run_id for r in every(limit=1)] == [r.run_id for r in every(limit=10)]
    assert every()[3].error == {"code": "boom", "message": "it failed", "status": 500} and every()[0].error is None
    assert [r.run_id for r in every(RunFilter(skill="csv-report"))] == ["r5", "r2", "r1"]  # any case, pinned
    assert [r.run_id for r in every(RunFilter(session="chat"))] == ["r3", "r2"]
    assert [r.run_id for r in every(RunFilter(statuses=("queued",)))] == ["r4", "r3"]
    # the embedded service's started runs still say queued in their records
    running = every(RunFilter(statuses=("running",)), running=("r3", "x1"))
    assert [(r.run_id, r.status) for r in running] == [("r3", "running")]
    assert [r.run_id for r in every(RunFilter(statuses=("queued",)), running=("r3",))] == ["r4"]
    assert [r.run_id for r in every(RunFilter(statuses=("failed", "cancelled")))] == ["r5", "r2"]
    assert [r.run_id for r in every(RunFilter(created_after=101.0, created_before=102.5))] == ["r4", "r3", "r2"]
    assert every(RunFilter(skill="100%_")) == []

    # a page never repeats or skips a run however many are added meanwhile
    first = store.listing("k", limit=3)
    store.create("r6", {"skill": "csv-report"}, owner="k")
    rest = store.listing("k", limit=10, after=decode_cursor(encode_cursor(first[-1])))
    assert [r.run_id for r in first + rest] == ["r5", "r4", "r3", "r2", "r1"]


@pytest.mark.parametrize(
    "cursor", ["", "not base64!", "bnVsbA", "W10", '["1", "r"]', "WzEsMl0", "WyJOYU4iLCJyIl0", "WzFlOTk5LCJyIl0"]
)
def test_a_cursor_the_service_did_not_make_is_refused(cursor: str) -> None:
    with pytest.raises(BadRequest) as refused:
        decode_cursor(cursor)
    assert refused.value.code == "invalid_cursor"


# -- contexts ---------------------------------------------------------------------------


def test_concurrent_first_changes_of_one_context_lose_nothing(database: Database) -> None:
    store = ContextStore(database, ttl_seconds=3600)

    def bump(context: Context, now: float) -> None:
        context.counter = str(int(context.counter) + 1)

    threads = [threading.Thread(target=store.change, args=("t", "s", "0", bump)) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    found = store.get("t", "s")
    assert found is not None and found.counter == "10"


def test_postgres_down_is_a_503_and_the_store_recovers_by_itself(postgres_server: Any, postgres_url: str) -> None:
    """A Postgres restart or outage: clean 503s with Retry-After while it is away, and the
    same store objects work again once it is back (no restart of the service)."""
    database = open_database("postgresql", Path("/nonexistent"), postgres_url)
    store = RunStore(database, instance="i1")
    store.create("before", {"skill": "s"}, owner="k")
    postgres_server.stop()
    try:
        for attempt in range(2):  # the pooled connection is found dead, then no new one can be made
            with pytest.raises(DatabaseUnavailable) as caught:
                store.create(f"during-{attempt}", {"skill": "s"}, owner="k")
            assert caught.value.status == 503 and caught.value.retry_after
        assert not database.writable(timeout=1)
    finally:
        postgres_server.start()
    store.create("after", {"skill": "s"}, owner="k")
    assert store.get("before").status == "queued" and store.get("after").status == "queued"
    assert database.writable()
    database.close()
