"""Artifact contents in the object store, on a local folder and on real S3 (SeaweedFS on
loopback, tests/s3server.py): round trips, 40 MB streamed both ways with a small heap, the
blob in the bucket, two executors (separate data dirs) and two services sharing one Postgres
and one bucket, the store down (503 object_store_unavailable + Retry-After, then recovery),
the race tests of tests/unit/test_artifact_races.py again with S3 in the loop, and the blobs of a
data dir from before the object store moved into it (hard link or verified copy, crash-safe)."""

from __future__ import annotations

import errno
import hashlib
import io
import logging
import os
import tracemalloc
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from skill_executor.artifacts import legacy
from skill_executor.artifacts.blobs import TempBlob
from skill_executor.artifacts.store import LocalArtifactStore
from skill_executor.config import Settings
from skill_executor.core import Executor
from skill_executor.db import Database, upgrade
from skill_executor.errors import ExecutorError
from skill_executor.objects import LocalObjectStore, ObjectStore, ObjectStoreUnavailable
from skill_executor.objects.s3 import S3ObjectStore

from ..unit import test_artifact_races as races
from ..api_server import Server
from ..s3server import SeaweedS3, s3_server  # noqa: F401 - the fixture
from ..unit.test_artifact_races import Objects, second  # noqa: F401 - the fixture
from ..unit.test_artifacts import blob_files, blob_shas, open_store
from ..service.test_objects import BIG, MiB, Pattern, sha_of_reader

# -- the race tests, with S3 in the loop --------------------------------------------------------


@pytest.fixture
def objects(s3_server: SeaweedS3) -> Objects:  # noqa: F811
    """S3 store objects on one prefix of the bucket, each as another process opens it."""
    prefix = f"t-{uuid.uuid4().hex[:12]}"
    return lambda: s3_server.store(prefix)


test_s3_concurrent_saves_get_distinct_consecutive_versions = (
    races.test_concurrent_saves_from_two_stores_get_distinct_consecutive_versions
)
test_s3_a_collector_skips_content_a_save_is_committing = (
    races.test_a_collector_in_another_process_skips_content_a_save_is_committing
)
test_s3_a_save_waits_for_a_collector_that_holds_the_content = (
    races.test_a_save_waits_for_a_collector_that_holds_the_content
)
test_s3_saves_deletes_and_collections_never_lose_a_saved_blob = (
    races.test_saves_deletes_and_collections_from_two_stores_never_lose_a_saved_blob
)
test_s3_a_blob_uploaded_by_a_save_that_failed_is_collected = races.test_a_blob_placed_by_a_save_that_failed_is_collected


def test_s3_a_collector_between_the_upload_and_the_commit_makes_the_save_upload_again(
    objects: Objects, database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The upload is made before the save's transaction: a collector that runs in between (the
    content noted as an orphan, no version yet) removes it; the save, under the lock, finds it
    gone and uploads it again -- its version never names a missing blob."""
    saving, collecting = races.stores(objects, database, database)
    collected: list[int] = []
    uploads: list[bool] = []
    publish = TempBlob.publish

    def publish_then_collect(self: TempBlob) -> bool:
        stored = publish(self)
        uploads.append(stored)
        if len(uploads) == 1:  # the upload before the transaction: a collector comes now
            collected.append(collecting.collect())
            assert blob_shas(saving.objects) == set()
        return stored

    monkeypatch.setattr(TempBlob, "publish", publish_then_collect)
    info = saving.put("raced", b"uploaded twice")
    assert collected == [1] and uploads == [True, True]
    assert blob_shas(saving.objects) == {info.sha256} and races.orphan_rows(database) == 0
    assert collecting.read("raced")[1] == b"uploaded twice"


# -- round trips, big bodies ----------------------------------------------------------------------


@pytest.fixture(params=["local", "s3"])
def artifacts(request: pytest.FixtureRequest, tmp_path: Path, database: Database) -> LocalArtifactStore:
    if request.param == "local":
        return open_store(tmp_path, database)
    server: SeaweedS3 = request.getfixturevalue("s3_server")
    return LocalArtifactStore(server.store(), database=database)


def in_bucket(server: SeaweedS3, store: S3ObjectStore, sha: str) -> bytes:
    """The object of blob ``sha`` as the bucket holds it (read with the admin's own client)."""
    key = f"{store.prefix}/artifacts/sha256/{sha[:2]}/{sha}"
    return bytes(server.client(admin=True).get_object(Bucket=store.bucket, Key=key)["Body"].read())


def test_round_trip_and_the_blob_lies_in_the_store(
    artifacts: LocalArtifactStore, request: pytest.FixtureRequest
) -> None:
    one = artifacts.put("a.txt", b"one", mime_type="text/plain")
    two = artifacts.put("a.txt", io.BytesIO(b"two"))
    same = artifacts.put("copy.txt", b"one")
    assert (one.version, two.version, same.sha256) == (1, 2, one.sha256)
    assert artifacts.read("a.txt", 1)[1] == b"one" and artifacts.read("a.txt")[1] == b"two"
    assert blob_shas(artifacts.objects) == {one.sha256, two.sha256}  # content-addressed: one blob each
    if isinstance(artifacts.objects, S3ObjectStore):
        assert in_bucket(request.getfixturevalue("s3_server"), artifacts.objects, one.sha256) == b"one"
        assert list(Path(artifacts.objects.spool_dir or "/nonexistent").glob(".tmp-*")) == []
    artifacts.delete("a.txt")
    assert blob_shas(artifacts.objects) == {one.sha256}  # copy.txt still uses it
    artifacts.delete("copy.txt")
    assert blob_shas(artifacts.objects) == set()


def test_40_mb_streamed_both_ways_with_a_small_heap(artifacts: LocalArtifactStore) -> None:
    source = Pattern(BIG, b"artifact")
    tracemalloc.start()
    try:
        info = artifacts.put("big.bin", source, max_bytes=BIG)
        saved_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        with artifacts.open(info) as handle:
            got = sha_of_reader(handle)
        read_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (info.size, info.sha256) == (BIG, source.digest.hexdigest())
    assert got == (info.sha256, BIG)
    # the body is never held whole (measured: 1 to 9 MiB, S3's multipart parts included)
    assert saved_peak < 16 * MiB and read_peak < 16 * MiB, (saved_peak, read_peak)


def test_a_remote_blob_that_was_tampered_with_is_refused_at_the_end_of_the_read(
    s3_server: SeaweedS3,  # noqa: F811
    database: Database,
) -> None:
    store = s3_server.store()
    artifacts = LocalArtifactStore(store, database=database)
    info = artifacts.put("signed.txt", b"the real content")
    key = f"{store.prefix}/artifacts/sha256/{info.sha256[:2]}/{info.sha256}"
    s3_server.client(admin=True).put_object(Bucket=store.bucket, Key=key, Body=b"the fake content")
    with pytest.raises(ExecutorError) as corrupt, artifacts.open(info) as handle:
        handle.read()
    assert corrupt.value.code == "object_corrupt"


# -- two executors, two services: one database, one bucket ------------------------------------------


def s3_env(server: SeaweedS3, prefix: str, database_url: str) -> dict[str, str]:
    return {
        "SKILL_EXECUTOR_DATABASE_URL": database_url,
        "SKILL_EXECUTOR_OBJECT_STORE": f"s3://{server.bucket}/{prefix}",
        "SKILL_EXECUTOR_S3_ENDPOINT_URL": server.endpoint,
        "AWS_ACCESS_KEY_ID": server.access_key,
        "AWS_SECRET_ACCESS_KEY": server.secret_key,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }


def test_two_executors_with_their_own_data_dirs_share_artifacts_through_the_bucket(
    s3_server: SeaweedS3,  # noqa: F811
    postgres_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    prefix = f"x-{uuid.uuid4().hex[:12]}"
    for name, value in s3_env(s3_server, prefix, postgres_url).items():
        if name.startswith("AWS_"):
            monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))

    def executor(name: str) -> Executor:
        settings = Settings(
            data_dir=tmp_path / name,
            runtime="local",
            skills_dirs=[],
            database_url=postgres_url,
            object_store=f"s3://{s3_server.bucket}/{prefix}",
            s3_endpoint_url=s3_server.endpoint,
        )
        return Executor.from_settings(settings)

    one, other = executor("one"), executor("other")
    try:
        saved = one.artifacts.put("report.csv", Pattern(12 * MiB, b"report"), run_id="run-1")
        info = other.artifacts.info("report.csv")
        assert (info.version, info.sha256, info.run_id) == (1, saved.sha256, "run-1")
        with other.artifacts.open(info) as handle:
            assert sha_of_reader(handle) == (saved.sha256, 12 * MiB)
        assert isinstance(one.objects, S3ObjectStore)
        assert hashlib.sha256(in_bucket(s3_server, one.objects, saved.sha256)).hexdigest() == saved.sha256
        # Nothing of it on either machine's disk (the spool is gone once uploaded).
        for name in ("one", "other"):
            assert not (tmp_path / name / "objects").exists()
            assert [p.name for p in (tmp_path / name / "spool").glob(".tmp-*")] == []
        # A delete on one removes the blob from the bucket for both.
        other.artifacts.delete("report.csv")
        assert blob_shas(one.objects) == set()
        with pytest.raises(ExecutorError) as gone:
            one.artifacts.info("report.csv")
        assert gone.value.code == "artifact_not_found"
    finally:
        one.close()
        other.close()


@pytest.fixture
def replicas(s3_server: SeaweedS3, postgres_url: str, tmp_path: Path) -> Iterator[tuple[Server, Server]]:  # noqa: F811
    """Two services (separate data dirs) on one Postgres and one bucket prefix."""
    env = {"SKILL_EXECUTOR_RUNTIME": "local", **s3_env(s3_server, f"r-{uuid.uuid4().hex[:12]}", postgres_url)}
    servers = (Server(tmp_path / "a", env=env), Server(tmp_path / "b", env=env))
    for server in servers:
        server.base.mkdir()
    try:
        for server in servers:
            server.start(timeout=60)
        yield servers
    finally:
        for server in servers:
            server.stop()


def test_an_artifact_saved_on_one_replica_downloads_from_the_other_and_the_store_down_is_503(
    replicas: tuple[Server, Server],
    s3_server: SeaweedS3,  # noqa: F811
) -> None:
    a, b = replicas
    body = os.urandom(3 * MiB)
    saved = httpx.post(f"{a.url}/v1/artifacts/shared/data.bin", content=body, timeout=60)
    assert saved.status_code == 201, saved.text
    sha = saved.json()["sha256"]
    got = httpx.get(f"{b.url}/v1/artifacts/shared/data.bin", timeout=60)
    assert got.status_code == 200 and got.content == body and got.headers["X-Artifact-SHA256"] == sha
    assert not (b.data_dir / "objects").exists()  # streamed from the bucket, not from a disk of b's

    s3_server.stop()
    try:
        for answer in (
            httpx.post(f"{a.url}/v1/artifacts/shared/data.bin", content=b"while down", timeout=60),
            httpx.get(f"{b.url}/v1/artifacts/shared/data.bin", timeout=60),
        ):
            assert answer.status_code == 503, answer.text
            assert answer.headers["Retry-After"] == "5"
            assert answer.json()["error"]["code"] == "object_store_unavailable"
            assert s3_server.secret_key not in answer.text
        # The refused save took no version number and left no spool behind.
        listed = httpx.get(f"{b.url}/v1/artifacts", params={"name": "shared/data.bin"}, timeout=30).json()
        assert [v["version"] for v in listed["artifacts"]] == [1]
        assert [p.name for p in (a.data_dir / "spool").glob(".tmp-*")] == []
    finally:
        s3_server.start()
    # Recovery by itself: the same processes save and read again.
    again = httpx.post(f"{a.url}/v1/artifacts/shared/data.bin", content=b"after", timeout=60)
    assert again.status_code == 201 and again.json()["version"] == 2
    assert httpx.get(f"{b.url}/v1/artifacts/shared/data.bin", timeout=60).content == b"after"
    assert httpx.get(f"{a.url}/v1/artifacts/shared/data.bin?version=1", timeout=60).content == body


def test_a_delete_while_the_store_is_down_succeeds_and_the_blob_goes_later(
    s3_server: SeaweedS3,  # noqa: F811
    database: Database,
) -> None:
    artifacts = LocalArtifactStore(s3_server.store(), database=database)
    info = artifacts.put("doomed.txt", b"to be deleted while the store is away")
    s3_server.stop()
    try:
        assert [d.version for d in artifacts.delete("doomed.txt")] == [1]  # committed: not a 503
        with pytest.raises(ObjectStoreUnavailable):
            artifacts.collect()
    finally:
        s3_server.start()
    assert blob_shas(artifacts.objects) == {info.sha256} and races.orphan_rows(database) == 1
    assert artifacts.expire() == 0  # the periodic pass collects it
    assert blob_shas(artifacts.objects) == set() and races.orphan_rows(database) == 0


# -- blobs from before the object store ----------------------------------------------------------------


def old_layout(data: Path, database: Database, contents: list[bytes]) -> list[str]:
    """A data dir as the version before the object store left it: versions in the database,
    blobs in ``<data>/artifacts/blobs/<ab>/<sha>``."""
    store = open_store(data, database)
    shas = []
    for i, content in enumerate(contents):
        sha = store.put(f"old-{i}", content).sha256
        old = data / "artifacts" / "blobs" / sha[:2] / sha
        old.parent.mkdir(parents=True, exist_ok=True)
        os.replace(data / "objects" / "artifacts" / "sha256" / sha[:2] / sha, old)
        shas.append(sha)
    assert blob_files(data) == set()
    return shas


def old_blobs(data: Path) -> set[str]:
    folder = data / "artifacts" / "blobs"
    return (
        {p.name for p in folder.rglob("*") if p.is_file() and not p.name.startswith(".")} if folder.exists() else set()
    )


def reopen(data: Path, database: Database, objects: ObjectStore | None = None) -> LocalArtifactStore:
    objects = objects or LocalObjectStore(data / "objects")
    return LocalArtifactStore.from_settings(Settings(data_dir=data), database=database, objects=objects)


def test_old_blobs_are_hard_linked_into_a_local_store_at_start(tmp_path: Path, database: Database) -> None:
    data = tmp_path / "data"
    shas = old_layout(data, database, [b"first", b"second", b"x" * (3 * MiB)])
    inodes = {sha: (data / "artifacts" / "blobs" / sha[:2] / sha).stat().st_ino for sha in shas}
    (data / "artifacts" / "blobs" / ".tmp-crashed").write_bytes(b"half")  # a crashed writer's temp
    store = reopen(data, database)
    assert blob_files(data) == set(shas) and old_blobs(data) == set()
    assert not (data / "artifacts" / "blobs").exists()  # the old folder is gone (its lock too)
    assert not (data / "artifacts" / "blobs.lock").exists()
    for i, sha in enumerate(shas):
        moved = data / "objects" / "artifacts" / "sha256" / sha[:2] / sha
        assert moved.stat().st_ino == inodes[sha] and moved.stat().st_nlink == 1  # linked, not copied
        assert store.read(f"old-{i}")[1] == [b"first", b"second", b"x" * (3 * MiB)][i]
    assert legacy.import_blobs(data / "artifacts" / "blobs", store.objects) == 0  # idempotent


def test_a_move_that_crashed_midway_loses_nothing_and_the_next_start_finishes_it(
    tmp_path: Path, database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    contents = [b"a", b"b", b"c", b"d"]
    shas = old_layout(data, database, contents)
    original = LocalObjectStore.import_blob
    calls: list[str] = []

    def crash_on_the_third(self: LocalObjectStore, path: Path, sha: str, namespace: str = "") -> bool:
        calls.append(sha)
        if len(calls) == 3:
            raise KeyboardInterrupt("the process dies here")
        return original(self, path, sha, namespace)

    monkeypatch.setattr(LocalObjectStore, "import_blob", crash_on_the_third)
    with pytest.raises(KeyboardInterrupt):
        reopen(data, database)
    monkeypatch.undo()
    assert blob_files(data) | old_blobs(data) == set(shas)  # every blob in one place or the other
    assert len(blob_files(data)) == 2
    # A crash between the link and the unlink: a blob in both places.
    both = next(iter(old_blobs(data)))
    os.link(data / "artifacts" / "blobs" / both[:2] / both, data / "objects" / "artifacts" / "sha256" / both[:2] / both)
    store = reopen(data, database)
    assert blob_files(data) == set(shas) and old_blobs(data) == set()
    assert [store.read(f"old-{i}")[1] for i in range(4)] == contents


def test_old_blobs_are_copied_and_verified_across_file_systems(
    tmp_path: Path, database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    shas = old_layout(data, database, [b"crosses a device"])

    def no_link(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr("skill_executor.objects.local.os.link", no_link)
    old_inode = (data / "artifacts" / "blobs" / shas[0][:2] / shas[0]).stat().st_ino
    store = reopen(data, database)
    moved = data / "objects" / "artifacts" / "sha256" / shas[0][:2] / shas[0]
    assert moved.stat().st_ino != old_inode and moved.read_bytes() == b"crosses a device"
    assert old_blobs(data) == set() and store.read("old-0")[1] == b"crosses a device"


def test_hostile_or_corrupt_old_blobs_are_left_where_they_are(
    s3_server: SeaweedS3,  # noqa: F811
    tmp_path: Path,
    database: Database,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Into S3 (a copy, verified): a good blob moves; a blob whose bytes are not its name stays;
    a link named like a blob is never followed (the file it points at stays out of the bucket)."""
    data = tmp_path / "data"
    (good,) = old_layout(data, database, [b"good"])
    folder = data / "artifacts" / "blobs"
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"not an artifact")
    linked = hashlib.sha256(b"not an artifact").hexdigest()
    (folder / linked[:2]).mkdir(exist_ok=True)
    (folder / linked[:2] / linked).symlink_to(secret)
    lying = hashlib.sha256(b"what the name says").hexdigest()
    (folder / lying[:2]).mkdir(exist_ok=True)
    (folder / lying[:2] / lying).write_bytes(b"other bytes")
    store = s3_server.store()
    with caplog.at_level(logging.WARNING, logger="skill_executor.artifacts.legacy"):
        moved = legacy.import_blobs(folder, store)
    assert moved == 1 and blob_shas(store) == {good}
    assert (folder / lying[:2] / lying).read_bytes() == b"other bytes"
    assert (folder / linked[:2] / linked).is_symlink() and secret.read_bytes() == b"not an artifact"
    assert lying in caplog.text and linked in caplog.text
    assert LocalArtifactStore(store, database=database).read("old-0")[1] == b"good"


def test_a_service_started_on_an_old_data_dir_serves_its_artifacts(tmp_path: Path) -> None:
    server = Server(tmp_path, env={"SKILL_EXECUTOR_RUNTIME": "local"})
    database = Database(Settings(data_dir=server.data_dir).database)
    try:
        upgrade(database)
        shas = old_layout(server.data_dir, database, [b"kept across the upgrade"])
    finally:
        database.close()
    server.start()
    try:
        got = httpx.get(f"{server.url}/v1/artifacts/old-0", timeout=30)
        assert got.status_code == 200 and got.content == b"kept across the upgrade"
        assert blob_files(server.data_dir) == set(shas) and old_blobs(server.data_dir) == set()
    finally:
        server.stop()


def test_the_embedded_save_publishes_its_spool_by_a_rename(tmp_path: Path, database: Database) -> None:
    """On the local store the spool lies in the store's folder and becomes the blob: no copy."""
    store = open_store(tmp_path, database)
    blob = store.new_blob()
    try:
        blob.write(b"renamed, not copied")
        spool = blob.writer.path
        assert spool.parent == tmp_path / "objects"
        inode = spool.stat().st_ino
        info = store.commit(blob, "renamed.txt")
    finally:
        blob.close()
    assert (tmp_path / "objects" / "artifacts" / "sha256" / info.sha256[:2] / info.sha256).stat().st_ino == inode
