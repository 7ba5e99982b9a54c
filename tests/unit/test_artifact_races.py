"""The artifact store on the shared database and object store: two store objects on one
database and one object store (as two processes have, each with its own connections), saving,
deleting and collecting at once -- on a local object store (and, in
tests/service/test_artifact_objects.py, on real S3)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from skill_executor.artifacts.blobs import TempBlob
from skill_executor.artifacts.store import LocalArtifactStore
from skill_executor.db import Database
from skill_executor.db.schema import orphan_blobs
from skill_executor.errors import ExecutorError
from skill_executor.objects import LocalObjectStore, ObjectStore

from ..conftest import REPO
from ..unit.test_artifacts import another, blob_shas, open_store, url_of

CONTENT = b"the same content, saved and deleted under many names"


Objects = Callable[[], ObjectStore]


@pytest.fixture
def objects(tmp_path: Path) -> Objects:
    """Object store objects on one location, each as another process opens it: here a local
    folder; tests/service/test_artifact_objects.py runs these tests again on S3."""
    return lambda: LocalObjectStore(tmp_path / "objects")


def stores(objects: Objects, *databases: Database) -> list[LocalArtifactStore]:
    return [LocalArtifactStore(objects(), database=db) for db in databases]


@pytest.fixture
def second(database: Database) -> Iterator[Database]:
    """The same database opened a second time: another process's view of it."""
    with another(database) as other:
        yield other


def orphan_rows(database: Database) -> int:
    with database.read() as conn:
        return int(conn.execute(select(func.count()).select_from(orphan_blobs)).scalar_one())


def run_threads(*targets: Callable[[], None], timeout: float = 60) -> None:
    """Run ``targets`` at once; re-raise the first error of any."""
    errors: list[BaseException] = []

    def guarded(target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except BaseException as exc:  # reported below, in the test's thread
                errors.append(exc)

        return run

    threads = [threading.Thread(target=guarded(t)) for t in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    if errors:
        raise errors[0]


# -- versions ---------------------------------------------------------------------------------


def test_concurrent_saves_from_two_stores_get_distinct_consecutive_versions(
    objects: Objects, database: Database, second: Database
) -> None:
    savers = stores(objects, database, second, database, second)
    start = threading.Barrier(len(savers))
    saved: list[int] = []
    lock = threading.Lock()

    def saver(store: LocalArtifactStore, n: int) -> Callable[[], None]:
        def run() -> None:
            start.wait()  # every thread's first save is the name's first: the counter row races too
            for i in range(10):
                version = store.put("racy.txt", f"{n}-{i}".encode()).version
                with lock:
                    saved.append(version)

        return run

    run_threads(*(saver(store, n) for n, store in enumerate(savers)))
    assert sorted(saved) == list(range(1, 41))
    listed = savers[1].versions("racy.txt")
    assert [v.version for v in listed] == list(range(1, 41))
    # Every version names its own content (no two saves shared a number and overwrote a row).
    assert len({savers[0].read("racy.txt", v.version)[1] for v in listed}) == 40
    savers[0].delete("racy.txt")
    assert savers[1].put("racy.txt", b"after the delete").version == 41  # never reused


# -- a blob and the collector -----------------------------------------------------------------


def orphan_without_collecting(store: LocalArtifactStore, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Delete ``name`` but leave its blob for a later collect: an orphan row, its blob still there."""
    with monkeypatch.context() as patch:
        patch.setattr(store, "collect", lambda: 0)
        store.delete(name)


def in_transaction(store: LocalArtifactStore, calls: list[int]) -> bool:
    """Whether this call of ``TempBlob.publish`` is the one under the content's lock (on S3 the
    first is the upload before the transaction)."""
    calls.append(1)
    return len(calls) == (1 if store.objects.local else 2)


def test_a_collector_in_another_process_skips_content_a_save_is_committing(
    objects: Objects, database: Database, second: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The orphan row exists before the save starts; the save has reused the blob and
    not committed yet when the other store collects: the blob must stay."""
    saving, collecting = stores(objects, database, second)
    old = saving.put("old", CONTENT)
    orphan_without_collecting(collecting, "old", monkeypatch)
    assert old.sha256 in blob_shas(saving.objects) and orphan_rows(database) == 1

    placed, release = threading.Event(), threading.Event()
    original = TempBlob.publish
    calls: list[int] = []

    def slow_place(self: TempBlob) -> bool:
        renamed = original(self)
        if in_transaction(saving, calls):
            placed.set()
            assert release.wait(10)
        return renamed

    monkeypatch.setattr(TempBlob, "publish", slow_place)
    collected: list[int] = []

    def save() -> None:
        saving.put("new", CONTENT)

    def collect() -> None:
        assert placed.wait(10)
        threading.Timer(0.3, release.set).start()  # whatever the collector does meanwhile, it does now
        collected.append(collecting.collect())

    run_threads(save, collect)
    assert collected == [0]
    assert saving.read("new")[1] == CONTENT and collecting.read("new")[1] == CONTENT
    assert orphan_rows(database) == 0


def test_a_save_waits_for_a_collector_that_holds_the_content(
    objects: Objects, database: Database, second: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other store's collector has checked that nothing references the content and is
    about to unlink its blob, which is still there: a save of that content must not take
    the blob as stored (it would be gone once the collector goes on), but wait and place
    its own."""
    saving, collecting = stores(objects, database, second)
    old = saving.put("old", CONTENT)
    orphan_without_collecting(collecting, "old", monkeypatch)

    unlinking, release = threading.Event(), threading.Event()
    original = ObjectStore.delete_blob

    def slow_remove(self: ObjectStore, sha: str, namespace: str = "") -> None:
        unlinking.set()
        assert release.wait(10)
        original(self, sha, namespace)

    monkeypatch.setattr(ObjectStore, "delete_blob", slow_remove)
    collected: list[int] = []

    def collect() -> None:
        collected.append(collecting.collect())

    def save() -> None:
        assert unlinking.wait(10)
        assert old.sha256 in blob_shas(saving.objects)  # the blob is there, about to go
        threading.Timer(0.3, release.set).start()  # time for a wrong save to commit first
        saving.put("new", CONTENT)

    run_threads(collect, save)
    assert collected == [1]  # the old blob went ...
    assert saving.read("new")[1] == CONTENT  # ... and the save placed its own
    assert orphan_rows(database) == 0


def test_saves_deletes_and_collections_from_two_stores_never_lose_a_saved_blob(
    objects: Objects, database: Database, second: Database
) -> None:
    keeping, churning = stores(objects, database, second)
    kept: list[str] = []
    stop = threading.Event()

    def keep() -> None:
        try:
            for i in range(25):
                info = keeping.put(f"keep-{i}", CONTENT)
                with keeping.open(info) as handle:  # readable the moment the save returns
                    assert handle.read() == CONTENT
                kept.append(info.name)
        finally:
            stop.set()

    def churn() -> None:
        while not stop.is_set():
            churning.put("tmp", CONTENT)
            churning.delete("tmp")  # orphans the content, then collects

    def collect() -> None:
        while not stop.is_set():
            keeping.collect()

    run_threads(keep, churn, collect, timeout=120)
    assert len(kept) == 25
    for name in kept:
        assert churning.read(name)[1] == CONTENT
    for name in kept:
        churning.delete(name)
    assert blob_shas(keeping.objects) == set() and orphan_rows(database) == 0  # nothing leaked either


def test_a_blob_placed_by_a_save_that_failed_is_collected(
    objects: Objects, database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    (store,) = stores(objects, database)

    def fail(*args: object) -> int:
        raise RuntimeError("the database went away mid-save")

    monkeypatch.setattr(store, "_next_version", fail)  # after the blob is placed, before its row
    with pytest.raises(RuntimeError):
        store.put("lost", b"placed, never referenced")
    monkeypatch.undo()
    assert len(blob_shas(store.objects)) == 1 and orphan_rows(database) == 1  # noted for the collector
    assert store.expire() == 0 and blob_shas(store.objects) == set() and orphan_rows(database) == 0
    with pytest.raises(ExecutorError) as missing:
        store.info("lost")
    assert missing.value.code == "artifact_not_found"
    assert store.put("lost", b"now").version == 1  # the failed save took no number


# -- what is there ------------------------------------------------------------------------------


def test_exists_means_a_version_was_ever_saved_in_the_database(
    tmp_path: Path, database: Database, second: Database
) -> None:
    assert not LocalArtifactStore.exists(database)
    open_store(tmp_path / "elsewhere", second)  # opening one saves nothing
    assert not LocalArtifactStore.exists(database)
    store = open_store(tmp_path, second)
    store.put("x", b"1")
    assert LocalArtifactStore.exists(database)
    store.delete("x")
    assert LocalArtifactStore.exists(database)  # it was: its numbers are kept


def test_names_are_listed_in_code_point_order_on_every_database(tmp_path: Path, database: Database) -> None:
    store = open_store(tmp_path, database)
    for name in ("b", "a.b", "B", "a/b", "a", "a-b", "_x"):
        store.put(name, name.encode())
    assert [i.name for i in store.names()] == sorted(["b", "a.b", "B", "a/b", "a", "a-b", "_x"])


# -- the CLI on the configured database ----------------------------------------------------------


def cli(*args: str, env: dict[str, str] | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SKILL_EXECUTOR_")}
    clean["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, "-m", "skill_executor.cli.main", "artifacts", *args],
        cwd=cwd,
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_cli_uses_the_configured_database(tmp_path: Path, database: Database) -> None:
    data = tmp_path / "data"
    env = {"SKILL_EXECUTOR_DATABASE_URL": url_of(database)}
    # The database exists (a service ran) but nothing was saved: empty, and no store is made.
    listed = cli("list", "--data-dir", str(data), env=env)
    assert listed.returncode == 0 and json.loads(listed.stdout) == []
    missing = cli("get", "x", "--data-dir", str(data), env=env)
    assert missing.returncode == 2 and "artifact_not_found" in missing.stderr
    assert not data.exists()
    # What a service saved into that database, the CLI reads (and the reverse).
    open_store(data, database).put("shared.txt", b"from the service")
    got = cli("get", "shared.txt", "--data-dir", str(data), env=env)
    assert got.returncode == 0 and got.stdout == "from the service", got.stderr
    src = tmp_path / "src.txt"
    src.write_text("from the cli")
    assert cli("put", "shared.txt", str(src), "--data-dir", str(data), env=env).returncode == 0
    assert open_store(data, database).read("shared.txt")[1] == b"from the cli"
    # Without the setting it is the data dir's own embedded database: a different store.
    assert json.loads(cli("list", "--data-dir", str(data)).stdout) == []
    assert not (data / "skill-executor.db").exists()
