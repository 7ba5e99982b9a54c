"""The object store (skill_executor/objects), on a local folder and on real S3 over HTTP
(SeaweedFS on loopback, tests/s3server.py): round trips, 40 MB streamed both ways with a small
heap, multipart, verified blobs against a tampered store, missing and hostile keys, the store
down or frozen (503 with Retry-After, then working again with the same store object), wrong
credentials and a missing bucket (a configuration error that never shows the secret)."""

from __future__ import annotations

import hashlib
import io
import os
import stat
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from skill_executor.config import Settings
from skill_executor.objects import (
    LocalObjectStore,
    ObjectCorrupt,
    ObjectNotFound,
    ObjectStore,
    ObjectStoreMisconfigured,
    ObjectStoreUnavailable,
    blob_key,
    open_object_store,
)
from skill_executor.objects.s3 import S3ObjectStore
from skill_executor.web import problems

from ..s3server import SeaweedS3, s3_server  # noqa: F401 - the fixture

MiB = 1024 * 1024
BIG = 40 * MiB
#: "Does not hang": a dead or frozen store answers within this (retries and backoff included).
DEAD_STORE_BOUND = 15.0
HOSTILE_KEYS = [
    "",
    "/etc/passwd",
    "../escape",
    "a/../../escape",
    "a/./b",
    "a//b",
    "a/",
    ".hidden",
    "a/.tmp-x",
    "a\\b",
    "..\\..\\escape",
    "a\x00b",
    "a\nb",
    "a b",
    "~/x",
    "%2e%2e/escape",
    "ä",
    "C:/x",
    "x" * 513,
    "s/" + "y" * 256,
]


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "local":
        return LocalObjectStore(tmp_path / "objects")
    server: SeaweedS3 = request.getfixturevalue("s3_server")
    return server.store()


class Pattern:
    """``size`` pseudo-random bytes made piece by piece (never whole in memory), hashed as read."""

    def __init__(self, size: int, seed: bytes = b"seed") -> None:
        self.left = size
        self.block = hashlib.sha256(seed).digest() * 4096  # 128 KiB, varied per piece below
        self.counter = 0
        self.digest = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        n = min(self.left, len(self.block) if size < 0 else min(size, len(self.block)))
        if n <= 0:
            return b""
        self.counter += 1
        piece = self.counter.to_bytes(8, "big") + self.block[: n - 8] if n > 8 else self.block[:n]
        self.left -= len(piece)
        self.digest.update(piece)
        return piece


def sha_of_reader(reader: Any) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    while chunk := reader.read(MiB):
        digest.update(chunk)
        size += len(chunk)
    return digest.hexdigest(), size


def tamper(store: ObjectStore, key: str, data: bytes, server: SeaweedS3 | None) -> None:
    """Replace a stored object behind the store's back."""
    if isinstance(store, LocalObjectStore):
        (store.root / key).write_bytes(data)
    else:
        assert server is not None and isinstance(store, S3ObjectStore)
        server.client(admin=True).put_object(Bucket=store.bucket, Key=f"{store.prefix}/{key}", Body=data)


def server_of(request: pytest.FixtureRequest, store: ObjectStore) -> SeaweedS3 | None:
    return request.getfixturevalue("s3_server") if isinstance(store, S3ObjectStore) else None


# -- round trips --------------------------------------------------------------------------------


def test_round_trip(store: ObjectStore, tmp_path: Path) -> None:
    assert store.put_stream("runs/r1/out.txt", io.BytesIO(b"hello")) == 5
    source = tmp_path / "source.bin"
    source.write_bytes(b"\x00\xff" * 1000)
    store.put_file("runs/r1/data.bin", source)
    with store.open("runs/r1/out.txt") as reader:
        assert reader.read() == b"hello"
    assert store.download("runs/r1/data.bin", tmp_path / "back.bin") == 2000
    assert (tmp_path / "back.bin").read_bytes() == source.read_bytes()
    assert store.exists("runs/r1/out.txt") and not store.exists("runs/r1/nope")
    assert store.size("runs/r1/data.bin") == 2000
    store.put_stream("runs/r1/out.txt", io.BytesIO(b"replaced"))  # a key names one object
    assert store.open("runs/r1/out.txt").read() == b"replaced"
    assert store.put_stream("empty", io.BytesIO(b"")) == 0 and store.open("empty").read() == b""
    store.check()
    assert sorted(store.list()) == ["empty", "runs/r1/data.bin", "runs/r1/out.txt"]  # no probe, no temp
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp-")] == []
    if isinstance(store, LocalObjectStore):  # the data dir is private
        for path in [store.root, *store.root.rglob("*")]:
            mode = stat.S_IMODE(path.lstat().st_mode)
            assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))


def test_blobs_are_content_addressed_and_uploaded_once(
    store: ObjectStore, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    data = b"same bytes" * 1000
    sha = hashlib.sha256(data).hexdigest()
    path = tmp_path / "blob"
    path.write_bytes(data)
    assert store.put_blob(path) == (sha, len(data))
    assert list(store.list()) == [f"sha256/{sha[:2]}/{sha}"] == [blob_key(sha)]
    uploads: list[str] = []
    if isinstance(store, S3ObjectStore):
        for op in ("PutObject", "CreateMultipartUpload"):
            store._client.meta.events.register(f"before-call.s3.{op}", lambda **kw: uploads.append(kw["model"].name))
        before = None
    else:
        before = os.stat(store.root / blob_key(sha)).st_ino
    assert store.put_blob(io.BytesIO(data)) == (sha, len(data))  # a reader: the same blob
    assert uploads == []
    if before is not None:
        assert isinstance(store, LocalObjectStore) and os.stat(store.root / blob_key(sha)).st_ino == before
    assert store.has_blob(sha) and not store.has_blob("0" * 64)
    with store.open_blob(sha) as reader:
        assert reader.read() == data
    assert store.fetch_blob(sha, tmp_path / "fetched") == len(data)
    assert (tmp_path / "fetched").read_bytes() == data


# -- big objects: streamed, multipart ------------------------------------------------------------


def test_40_mb_streamed_both_ways_with_a_small_heap(store: ObjectStore, tmp_path: Path) -> None:
    peaks: dict[str, int] = {}
    times: dict[str, float] = {}

    def measure(name: str, action: Any) -> Any:
        tracemalloc.start()
        began = time.perf_counter()
        try:
            result = action()
        finally:
            times[name] = time.perf_counter() - began
            peaks[name] = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        return result

    source = Pattern(BIG)
    assert measure("put_stream", lambda: store.put_stream("big/one", source)) == BIG
    expected = source.digest.hexdigest()

    def read_all() -> tuple[str, int]:
        with store.open("big/one") as reader:
            return sha_of_reader(reader)

    assert measure("open+read", read_all) == (expected, BIG)
    assert measure("download", lambda: store.download("big/one", tmp_path / "big")) == BIG
    with open(tmp_path / "big", "rb") as written:
        assert sha_of_reader(written) == (expected, BIG)
    (tmp_path / "big").unlink()
    blob_source = Pattern(BIG, b"blob")
    sha, size = measure("put_blob", lambda: store.put_blob(blob_source))
    assert (sha, size) == (blob_source.digest.hexdigest(), BIG)
    assert measure("fetch_blob", lambda: store.fetch_blob(sha, tmp_path / "blob")) == BIG
    print(
        f"\n{type(store).__name__} 40 MiB: "
        + ", ".join(f"{name} {times[name]:.2f} s (peak heap {peaks[name] / MiB:.1f} MiB)" for name in times)
    )
    assert max(peaks.values()) < 16 * MiB, peaks  # the body is never held whole (measured: 0.4 to 8.2 MiB)


def test_multipart_is_used_above_the_threshold(s3_server: SeaweedS3, tmp_path: Path) -> None:  # noqa: F811
    store = s3_server.store()
    calls: list[str] = []
    for op in ("PutObject", "CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload"):
        store._client.meta.events.register(f"before-call.s3.{op}", lambda **kw: calls.append(kw["model"].name))
    store.put_stream("small", Pattern(MiB))
    assert calls == ["PutObject"]
    calls.clear()
    store.put_stream("big", Pattern(BIG))
    assert calls.count("UploadPart") == BIG // (8 * MiB) and calls[0] == "CreateMultipartUpload"
    assert calls[-1] == "CompleteMultipartUpload"
    head = s3_server.client().head_object(Bucket=store.bucket, Key=f"{store.prefix}/big")
    assert head["ETag"].strip('"').endswith(f"-{BIG // (8 * MiB)}")  # the server assembled parts
    assert head["ContentLength"] == BIG


# -- integrity: a store that returns other bytes ----------------------------------------------------


def test_fetch_blob_verifies_what_the_store_returned(
    store: ObjectStore, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    sha, _ = store.put_blob(io.BytesIO(b"the real content"))
    tamper(store, blob_key(sha), b"forged content!!", server_of(request, store))
    target = tmp_path / "out" / "blob"
    target.parent.mkdir()
    with pytest.raises(ObjectCorrupt) as info:
        store.fetch_blob(sha, target)
    assert (info.value.code, info.value.status) == ("object_corrupt", 500)
    assert list(target.parent.iterdir()) == []  # neither the file nor a temp
    target.write_bytes(b"an earlier good copy")
    with pytest.raises(ObjectCorrupt):
        store.fetch_blob(sha, target)
    assert target.read_bytes() == b"an earlier good copy"  # never replaced by unverified bytes
    with store.open_blob(sha) as reader, pytest.raises(ObjectCorrupt):
        reader.read()


# -- missing and hostile keys --------------------------------------------------------------------


def test_missing_keys(store: ObjectStore, tmp_path: Path) -> None:
    for attempt in (
        lambda: store.open("no/such"),
        lambda: store.size("no/such"),
        lambda: store.download("no/such", tmp_path / "x"),
        lambda: store.fetch_blob("a" * 64, tmp_path / "x"),
        lambda: store.open_blob("a" * 64),
    ):
        with pytest.raises(ObjectNotFound) as info:
            attempt()
        assert (info.value.code, info.value.status) == ("object_not_found", 404)
    assert not store.exists("no/such")
    store.delete("no/such")  # deleting an absent key is not an error
    assert list(tmp_path.iterdir()) in ([], [tmp_path / "objects"])


@pytest.mark.parametrize("key", HOSTILE_KEYS, ids=range(len(HOSTILE_KEYS)))
def test_hostile_keys_are_refused_before_any_io(
    store: ObjectStore, key: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    (tmp_path / "src").write_bytes(b"payload")
    attempts = [
        lambda: store.put_stream(key, io.BytesIO(b"payload")),
        lambda: store.put_file(key, tmp_path / "src"),
        lambda: store.open(key),
        lambda: store.download(key, tmp_path / "dl"),
        lambda: store.exists(key),
        lambda: store.size(key),
        lambda: store.delete(key),
        *([lambda: list(store.list(key))] if key not in ("", "a/") else []),  # valid list prefixes
        lambda: store.fetch_blob(key, tmp_path / "dl"),
        lambda: store.open_blob(key),
    ]
    for attempt in attempts:
        with pytest.raises(ValueError):
            attempt()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]  # not even the root was made
    server = server_of(request, store)
    if server is not None:  # nothing anywhere in the bucket outside the tests' own prefixes
        listed = server.client(admin=True).list_objects_v2(Bucket=server.bucket).get("Contents", [])
        assert [o["Key"] for o in listed if not o["Key"].startswith("t-")] == []


def test_list_and_delete(store: ObjectStore) -> None:
    for key in ("a/1", "a/2", "a/b/3", "ab/4", "c"):
        store.put_stream(key, io.BytesIO(key.encode()))
    assert sorted(store.list()) == ["a/1", "a/2", "a/b/3", "ab/4", "c"]
    assert sorted(store.list("a/")) == ["a/1", "a/2", "a/b/3"]  # a folder, not a string prefix of ab/
    assert sorted(store.list("a/b/")) == ["a/b/3"]
    assert list(store.list("zz/")) == []
    with pytest.raises(ValueError):
        list(store.list("a"))
    store.delete("a/1")
    store.delete("a/b/3")
    assert sorted(store.list()) == ["a/2", "ab/4", "c"]
    assert not store.exists("a/1")


# -- the store down, frozen, misconfigured --------------------------------------------------------


def http_answer(action: Any) -> Any:
    """What the HTTP layer answers when ``action`` raises (the service's real handlers)."""
    app = FastAPI()
    problems.install(app)

    @app.get("/probe")
    def probe() -> dict[str, str]:
        action()
        return {"ok": "yes"}

    with TestClient(app, raise_server_exceptions=False) as client:
        return client.get("/probe")


def test_the_store_down_answers_503_then_recovers_by_itself(s3_server: SeaweedS3) -> None:  # noqa: F811
    store = s3_server.store()
    store.put_stream("kept", io.BytesIO(b"survives"))
    s3_server.stop()
    try:
        for attempt in (
            lambda: store.open("kept"),
            lambda: store.exists("kept"),
            lambda: store.put_stream("new", io.BytesIO(b"x")),
            lambda: store.put_blob(io.BytesIO(b"y" * (9 * MiB))),  # a blob: spooled, then refused
            lambda: list(store.list()),
            store.check,
        ):
            began = time.monotonic()
            with pytest.raises(ObjectStoreUnavailable) as info:
                attempt()
            assert time.monotonic() - began < DEAD_STORE_BOUND
            assert (info.value.code, info.value.status, info.value.retry_after) == ("object_store_unavailable", 503, 5)
        answer = http_answer(lambda: store.exists("kept"))
        assert answer.status_code == 503 and answer.headers["Retry-After"] == "5"
        assert answer.json()["error"]["code"] == "object_store_unavailable"
        assert s3_server.secret_key not in answer.text
    finally:
        s3_server.start()
    store.check()  # the same object: nothing to re-create
    assert store.open("kept").read() == b"survives"
    store.put_stream("new", io.BytesIO(b"x"))
    assert http_answer(lambda: store.exists("kept")).status_code == 200


def test_a_frozen_store_times_out(s3_server: SeaweedS3) -> None:  # noqa: F811
    """Connections are accepted (the kernel's backlog) but nothing answers: the read timeout."""
    store = s3_server.store(read_timeout=1.0, connect_timeout=1.0)
    store.put_stream("kept", io.BytesIO(b"thawed"))
    s3_server.freeze()
    try:
        began = time.monotonic()
        with pytest.raises(ObjectStoreUnavailable):
            store.open("kept")
        assert time.monotonic() - began < DEAD_STORE_BOUND
    finally:
        s3_server.thaw()
    assert store.open("kept").read() == b"thawed"


def test_wrong_credentials_are_a_configuration_error_without_the_secret(s3_server: SeaweedS3) -> None:  # noqa: F811
    good = s3_server.store()
    good.put_stream("there", io.BytesIO(b"x"))
    wrong_secret = "WRONG-" + s3_server.secret_key[::-1]
    stores = [
        s3_server.store(prefix=good.prefix, session=s3_server.session(secret=wrong_secret)),
        s3_server.store(
            prefix=good.prefix,
            session=__import__("boto3").session.Session(
                aws_access_key_id="AKIAUNKNOWNKEY000000", aws_secret_access_key=wrong_secret, region_name="us-east-1"
            ),
        ),
    ]
    for store in stores:
        for attempt in (
            lambda: store.exists("there"),
            lambda: store.open("there"),
            lambda: store.put_stream("x", io.BytesIO(b"x")),
            store.check,
        ):
            with pytest.raises(ObjectStoreMisconfigured) as info:
                attempt()
            error = info.value
            shown = f"{error} {error.to_dict()} {error!r}"
            assert error.code == "object_store_misconfigured" and error.status == 503
            assert s3_server.bucket in error.message and s3_server.endpoint in error.message
            assert wrong_secret not in shown and s3_server.secret_key not in shown
            assert http_answer(attempt).status_code == 503


def test_a_missing_bucket_is_a_configuration_error_and_is_not_created(s3_server: SeaweedS3) -> None:  # noqa: F811
    store = S3ObjectStore("no-such-bucket-here", "p", s3_server.endpoint, session=s3_server.session())
    for attempt in (
        lambda: store.exists("k"),
        lambda: store.size("k"),
        lambda: store.put_stream("k", io.BytesIO(b"x")),
        lambda: store.open("k"),
        store.check,
    ):
        with pytest.raises(ObjectStoreMisconfigured) as info:
            attempt()
        assert "no-such-bucket-here" in info.value.message
    buckets = {b["Name"] for b in s3_server.client(admin=True).list_buckets()["Buckets"]}
    assert "no-such-bucket-here" not in buckets


def test_open_object_store_takes_the_standard_aws_variables(
    s3_server: SeaweedS3,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # never the metadata service
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    settings = Settings(
        data_dir=tmp_path / "data", object_store=f"s3://{s3_server.bucket}/envtest/", s3_endpoint_url=s3_server.endpoint
    )
    store = open_object_store(settings)
    assert isinstance(store, S3ObjectStore) and store.prefix == "envtest"
    store.check()
    sha, _ = store.put_blob(Pattern(9 * MiB))  # spooled under <data_dir>/spool, then gone
    assert store.has_blob(sha)
    assert list((tmp_path / "data" / "spool").glob(".tmp-*")) == []
    local = open_object_store(Settings(data_dir=tmp_path / "data"))
    assert isinstance(local, LocalObjectStore) and local.root == (tmp_path / "data" / "objects").absolute()


# -- the test server itself -----------------------------------------------------------------------


def test_the_s3_server_is_on_loopback_only_and_starts_fast(s3_server: SeaweedS3) -> None:  # noqa: F811
    sockets = s3_server.sockets()
    assert sockets, "the server holds no socket?"
    for local, remote in sockets:
        assert local.startswith("127.0.0.1:"), (local, remote)
        assert remote.startswith(("127.0.0.1:", "0.0.0.0:0")), (local, remote)
    print(f"\nweed mini startup (to S3 answering with the bucket): {s3_server.startup_seconds}")
    assert max(s3_server.startup_seconds) < 30  # a generous "does not hang" bound
