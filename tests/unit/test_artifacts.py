"""The embedded artifact store: versions, names, crash safety."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from skill_executor_client import ApiError, Client

from skill_executor.artifacts.blobs import TempBlob
from skill_executor.artifacts.names import parse_ref, validate_name
from skill_executor.artifacts.store import LocalArtifactStore
from skill_executor.config import Settings
from skill_executor.db import Database, upgrade
from skill_executor.errors import ExecutorError
from skill_executor.objects import LocalObjectStore, ObjectStore

from ..api_server import Server
from ..conftest import REPO


def open_store(data: Path, database: Database, ttl_seconds: float | None = None) -> LocalArtifactStore:
    """The artifact store of data dir ``data`` on ``database``: its blobs in ``<data>/objects``."""
    return LocalArtifactStore(LocalObjectStore(data / "objects"), database=database, ttl_seconds=ttl_seconds)


def blob_shas(objects: ObjectStore) -> set[str]:
    """The artifact blobs in ``objects`` (on any store)."""
    return {key.rsplit("/", 1)[1] for key in objects.list("artifacts/")}


def url_of(database: Database) -> str:
    """The URL another process would open ``database`` with."""
    return database.url.render_as_string(hide_password=False)


@contextlib.contextmanager
def another(database: Database) -> Iterator[Database]:
    """The same database opened again, as another process would (its own connections)."""
    other = Database(url_of(database))
    try:
        yield other
    finally:
        other.close()


def test_versions_metadata_and_listing(tmp_path: Path, database: Database) -> None:
    store = open_store(tmp_path, database)
    a1 = store.put("a.txt", b"one", mime_type="text/plain", run_id="r1")
    a2 = store.put("a.txt", io.BytesIO(b"two"))
    store.put("b/c.bin", b"\0")
    assert (a1.version, a2.version) == (1, 2)
    assert store.info("a.txt").version == 2 and store.info("a.txt", 1).run_id == "r1"
    assert a1.sha256 == "7692c3ad3540bb803c020b3aee66cd8887123234ea0c6e7143c0add73ff431ed" and a1.size == 3
    assert [i.name for i in store.names()] == ["a.txt", "b/c.bin"]
    assert store.read("a.txt", 1)[1] == b"one" and a2.ref == "artifact://a.txt@2"
    same = store.put("copy.txt", b"one")
    assert same.sha256 == a1.sha256  # content-addressed: one blob
    assert len(blob_files(tmp_path)) == 3
    with pytest.raises(ExecutorError) as info:
        store.info("a.txt", 9)
    assert info.value.status == 404


def test_reopen_keeps_everything(tmp_path: Path, database: Database) -> None:
    open_store(tmp_path, database).put("x", b"persisted")
    database.close()
    with another(database) as reopened:
        assert open_store(tmp_path, reopened).read("x")[1] == b"persisted"


class _Exploding(io.RawIOBase):
    def __init__(self) -> None:
        self.calls = 0

    def read(self, size: int = -1) -> bytes:
        self.calls += 1
        if self.calls > 2:
            raise OSError("disk vanished")
        return b"x" * 1024


def test_crash_mid_save_leaves_nothing(tmp_path: Path, database: Database) -> None:
    store = open_store(tmp_path, database)
    store.put("keep", b"v1")
    with pytest.raises(OSError):
        store.put("keep", _Exploding())  # type: ignore[arg-type]
    assert [v.version for v in store.versions("keep")] == [1]
    assert temps(tmp_path) == []
    assert store.put("keep", b"v2").version == 2


@pytest.mark.parametrize("name", ["", "/abs", "a/../b", "..", "a//b", "x" * 256, "a@b", "with space", "-lead"])
def test_invalid_names(name: str) -> None:
    with pytest.raises(ExecutorError):
        validate_name(name)


def test_refs() -> None:
    assert parse_ref("a/b.txt@3") == ("a/b.txt", 3)
    assert parse_ref("a/b.txt") == ("a/b.txt", None)
    for bad in ["a@0", "a@x", "a@-1"]:
        with pytest.raises(ExecutorError):
            parse_ref(bad)


# -- streaming saves, the size cap ------------------------------------------------------------


def temps(data: Path) -> list[str]:
    """The temp blobs (spools) in data dir ``data``'s local object store."""
    folder = data / "objects"
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".tmp-")) if folder.is_dir() else []


def test_save_streams_chunks_and_the_cap_is_found_while_reading(tmp_path: Path, database: Database) -> None:
    store = open_store(tmp_path, database)
    chunk = b"y" * 65536
    info = store.put("streamed.bin", (chunk for _ in range(40)), max_bytes=40 * 65536)
    assert info.size == 40 * 65536 and info.sha256 == hashlib.sha256(chunk * 40).hexdigest()
    assert store.read("streamed.bin")[1] == chunk * 40

    pulled = 0

    def endless() -> Iterator[bytes]:
        nonlocal pulled
        while True:
            pulled += 1
            yield chunk

    with pytest.raises(ExecutorError) as info_:
        store.put("streamed.bin", endless(), max_bytes=10 * 65536)
    assert (info_.value.status, info_.value.code) == (413, "too_large")
    assert pulled == 11  # refused at the chunk that crossed the cap, not after reading everything
    assert temps(tmp_path) == [] and [v.version for v in store.versions("streamed.bin")] == [1]


# -- delete, and blobs nothing references --------------------------------------------------------


def blob_files(data: Path) -> set[str]:
    """The artifact blobs in data dir ``data``'s local object store."""
    return blob_shas(LocalObjectStore(data / "objects"))


def test_delete_versions_and_unreferenced_blobs(tmp_path: Path, database: Database) -> None:
    store = open_store(tmp_path, database)
    one = store.put("a.txt", b"one")
    two = store.put("a.txt", b"two")
    store.put("copy.txt", b"one")  # the same blob as a.txt@1
    assert [i.version for i in store.delete("a.txt", 1)] == [1]
    assert [v.version for v in store.versions("a.txt")] == [2]
    assert one.sha256 in blob_files(tmp_path)  # copy.txt still uses it
    assert [i.name for i in store.delete("copy.txt")] == ["copy.txt"]
    assert one.sha256 not in blob_files(tmp_path) and two.sha256 in blob_files(tmp_path)
    for gone in (("a.txt", 1), ("copy.txt", None), ("never", None)):
        with pytest.raises(ExecutorError) as info:
            store.delete(*gone)
        assert (info.value.status, info.value.code) == (404, "artifact_not_found")
    assert [i.version for i in store.delete("a.txt")] == [2] and blob_files(tmp_path) == set()
    assert store.names() == []
    # A version number is never given twice, even after its rows are gone.
    assert store.put("a.txt", b"again").version == 3
    # Per tenant: another tenant's name is not found, and its delete touches nothing of ours.
    with pytest.raises(ExecutorError):
        store.delete("a.txt", tenant="other")
    assert store.read("a.txt")[1] == b"again"


def test_a_blob_being_saved_is_never_collected(
    tmp_path: Path, database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deleting the only version that uses some content while a save of that same
    content is under way: the save's version must end up with its blob."""
    store = open_store(tmp_path, database)
    store.put("old", b"shared content")

    # 1. The delete (and its collection) happens while the save is still reading.
    def body() -> Iterator[bytes]:
        yield b"shared "
        store.delete("old")
        assert blob_files(tmp_path) == set()
        yield b"content"

    assert store.put("new", body()).version == 1
    assert store.read("new")[1] == b"shared content"

    # 2. The delete comes while the save is committing (its blob placed, its row not yet in).
    placed, release = threading.Event(), threading.Event()
    original = TempBlob.publish

    def slow_place(self: TempBlob) -> bool:
        renamed = original(self)
        placed.set()
        release.wait(5)
        return renamed

    monkeypatch.setattr(TempBlob, "publish", slow_place)
    saver = threading.Thread(target=lambda: store.put("newer", b"shared content"))
    saver.start()
    assert placed.wait(5)
    deleter = threading.Thread(target=lambda: store.delete("new"))
    deleter.start()
    time.sleep(0.2)
    release.set()
    saver.join(5)
    deleter.join(5)
    assert not saver.is_alive() and not deleter.is_alive()
    assert store.read("newer")[1] == b"shared content"
    assert [i.name for i in store.names()] == ["newer"]


# -- TTL -------------------------------------------------------------------------------------


def test_expired_versions_are_invisible_at_once_and_removed_by_expire(tmp_path: Path, database: Database) -> None:
    from sqlalchemy import update

    from skill_executor.db.schema import artifacts

    store = open_store(tmp_path, database, ttl_seconds=30)
    old = store.put("t.txt", b"old")
    with database.write() as conn:  # saved a minute ago: past the TTL (no sleep: a loaded host stays in bounds)
        conn.execute(update(artifacts).where(artifacts.c.version == 1).values(created_at=time.time() - 60))
    new = store.put("t.txt", b"new")
    assert store.info("t.txt").version == 2 and [v.version for v in store.versions("t.txt")] == [2]
    with pytest.raises(ExecutorError):
        store.info("t.txt", 1)
    with pytest.raises(ExecutorError):
        store.delete("t.txt", 1)  # invisible is missing
    assert old.sha256 in blob_files(tmp_path)  # not removed yet: only hidden
    assert open_store(tmp_path, database).info("t.txt", 1).version == 1  # a store without a TTL still has it
    assert store.expire() == 1
    assert old.sha256 not in blob_files(tmp_path) and new.sha256 in blob_files(tmp_path)
    assert store.expire(now=time.time() + 3600) == 1 and store.names() == [] and blob_files(tmp_path) == set()
    assert store.put("t.txt", b"newest").version == 3
    assert open_store(tmp_path, database).expire() == 0  # no TTL: nothing expires


# -- temp blobs of crashed writers --------------------------------------------------------------

WRITER = """
import sys
from pathlib import Path
from skill_executor.artifacts.store import LocalArtifactStore
from skill_executor.db import Database
from skill_executor.objects import LocalObjectStore
objects = LocalObjectStore(Path(sys.argv[1]) / "objects")
info = LocalArtifactStore(objects, database=Database(sys.argv[2])).put("live", sys.stdin.buffer)
print(info.version, flush=True)
"""


def start_writer(root: Path, url: str) -> subprocess.Popen[bytes]:
    """Another process saving from its stdin; returns once its temp blob has data."""
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(root), url], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert proc.stdin is not None
    proc.stdin.write(b"z" * (2 * 1024 * 1024))
    proc.stdin.flush()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        spools = root / "objects"
        if spools.is_dir() and any(p.stat().st_size > 0 for p in spools.iterdir() if p.name.startswith(".tmp-")):
            return proc
        time.sleep(0.02)
    proc.kill()
    raise AssertionError("the writer made no temp blob")


def test_sweep_removes_dead_writers_temps_never_a_live_ones(tmp_path: Path, database: Database) -> None:
    open_store(tmp_path, database)
    (tmp_path / "objects").mkdir()
    (tmp_path / "objects" / ".tmp-leftover").write_bytes(b"")
    live = start_writer(tmp_path, url_of(database))
    live_temp = next(name for name in temps(tmp_path) if name != ".tmp-leftover")
    store = open_store(tmp_path, database)  # start-up: sweeps
    assert temps(tmp_path) == [live_temp]
    assert store.objects.sweep() == 0
    assert live.stdin is not None
    live.stdin.close()
    assert live.wait(20) == 0 and temps(tmp_path) == []
    assert store.read("live")[1] == b"z" * (2 * 1024 * 1024)

    dead = start_writer(tmp_path, url_of(database))
    dead.kill()  # SIGKILL: its lock goes with it, its temp stays
    dead.wait(20)
    assert len(temps(tmp_path)) == 1
    store = open_store(tmp_path, database)
    assert temps(tmp_path) == [] and [v.version for v in store.versions("live")] == [1]


# -- CLI -------------------------------------------------------------------------------------


def cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILL_EXECUTOR_")}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, "-m", "skill_executor.cli.main", "artifacts", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_reading_an_absent_store_creates_nothing(tmp_path: Path) -> None:
    listed = cli("list", cwd=tmp_path)
    assert listed.returncode == 0 and json.loads(listed.stdout) == []
    for args in (("list", "x"), ("get", "x"), ("delete", "x@1")):
        missing = cli(*args, cwd=tmp_path)
        assert missing.returncode == 2 and "artifact_not_found" in missing.stderr, missing.stderr
    assert list(tmp_path.iterdir()) == []  # no ./data


def test_cli_delete(tmp_path: Path) -> None:
    data = ("--data-dir", str(tmp_path / "data"))
    src = tmp_path / "src.txt"
    src.write_text("one")
    cli("put", "d/x", str(src), *data)
    cli("put", "d/x", str(src), *data)
    one = json.loads(cli("delete", "d/x@1", *data).stdout)
    assert [i["version"] for i in one] == [1]
    assert [i["version"] for i in json.loads(cli("list", "d/x", *data).stdout)] == [2]
    rest = json.loads(cli("delete", "artifact://d/x", *data).stdout)
    assert [i["version"] for i in rest] == [2] and json.loads(cli("list", *data).stdout) == []
    again = cli("delete", "d/x", *data)
    assert again.returncode == 2 and "artifact_not_found" in again.stderr


# -- the real service -----------------------------------------------------------------------------

KEY_A, KEY_B, ADMIN = "artifacts-key-a", "artifacts-key-b", "artifacts-admin"
MiB = 1024 * 1024
BIG = 60 * MiB


def key_id(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:12]


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(
        tmp_path_factory.mktemp("artifacts"),
        env={
            "SKILL_EXECUTOR_RUNTIME": "local",  # no runs here: only the artifact routes
            "SKILL_EXECUTOR_API_KEYS": f"{KEY_A},{KEY_B}",
            "SKILL_EXECUTOR_ADMIN_KEYS": ADMIN,
            "SKILL_EXECUTOR_MAX_REQUEST_BYTES": str(64 * MiB),
        },
    )
    srv.start()
    yield srv
    srv.stop()


def client(server: Server, key: str = KEY_A) -> Client:
    return Client(server.url, api_key=key, timeout=120)


class PeakRSS:
    """The most resident memory a process had while this was running (from /proc)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.start = self.now()
        self.peak = self.start
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def now(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.now())
            time.sleep(0.005)

    def __enter__(self) -> PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.now())

    @property
    def growth(self) -> int:
        return self.peak - self.start


def big_chunks() -> Iterator[bytes]:
    chunk = bytes(range(256)) * 4096  # 1 MiB
    for _ in range(BIG // len(chunk)):
        yield chunk


class HashSink:
    def __init__(self) -> None:
        self.digest = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        self.size += len(data)
        return len(data)


def test_large_bodies_stream_with_bounded_server_memory(service: Server, tmp_path: Path) -> None:
    assert service.process is not None
    expected = hashlib.sha256(b"".join(big_chunks())).hexdigest()
    source = tmp_path / "big.bin"
    with open(source, "wb") as out:
        for chunk in big_chunks():
            out.write(chunk)
    uploads: list[dict[str, object]] = []

    def upload(i: int) -> None:
        with client(service) as c:
            # From an iterator (sent chunked), from a path and from an open file (with their length).
            if i % 3 == 0:
                uploads.append(c.put_artifact("big.bin", big_chunks()))
            elif i % 3 == 1:
                uploads.append(c.put_artifact("big.bin", source))
            else:
                with open(source, "rb") as handle:
                    uploads.append(c.put_artifact("big.bin", handle))

    with PeakRSS(service.process.pid) as memory:
        threads = [threading.Thread(target=upload, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert sorted(int(str(u.version)) for u in uploads) == [1, 2, 3, 4]
    assert {u.sha256 for u in uploads} == {expected} and {u.size for u in uploads} == {BIG}
    assert memory.growth < 200 * MiB, f"4 uploads of 60 MB grew the service by {memory.growth / MiB:.0f} MiB"

    sinks = [HashSink() for _ in range(8)]

    def download(sink: HashSink) -> None:
        with client(service) as c:
            assert c.download_artifact("big.bin", sink)["sha256"] == expected  # type: ignore[arg-type]

    with PeakRSS(service.process.pid) as memory:
        threads = [threading.Thread(target=download, args=(sink,)) for sink in sinks]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert [(s.size, s.digest.hexdigest()) for s in sinks] == [(BIG, expected)] * 8
    assert memory.growth < 200 * MiB, f"8 downloads of 60 MB grew the service by {memory.growth / MiB:.0f} MiB"
    with client(service) as c:
        target = tmp_path / "copy.bin"
        assert c.download_artifact("big.bin", target, version=2)["version"] == 2
        assert target.stat().st_size == BIG
        c.delete_artifact("big.bin")
    assert temps(service.data_dir) == []


def test_the_size_cap_refuses_mid_stream_and_leaves_nothing(service: Server) -> None:
    def over() -> Iterator[bytes]:
        yield from big_chunks()
        yield from big_chunks()  # 120 MB, no Content-Length: only reading finds it too big

    with client(service) as c:
        with pytest.raises(ApiError) as info:
            c.put_artifact("capped.bin", over())
        assert (info.value.status, info.value.code) == (413, "too_large")
        with pytest.raises(ApiError) as missing:
            c.artifact_versions("capped.bin")
        assert missing.value.code == "artifact_not_found"
    assert temps(service.data_dir) == []


def test_slow_uploads_hold_no_thread_and_a_vanished_client_leaves_no_temp(service: Server) -> None:
    """More stalled uploads than the service has worker threads (40): every other
    route still answers, and when those clients go away their temp blobs go too."""
    head = (
        f"POST /v1/artifacts/slow HTTP/1.1\r\nHost: 127.0.0.1:{service.port}\r\n"
        f"Authorization: Bearer {KEY_A}\r\nTransfer-Encoding: chunked\r\n\r\n"
    ).encode()
    stalled = []
    try:
        for _ in range(48):
            sock = socket.create_connection(("127.0.0.1", service.port))
            sock.sendall(head + b"10000\r\n" + b"s" * 0x10000 + b"\r\n")  # 64 KiB, then nothing
            stalled.append(sock)
        deadline = time.monotonic() + 20
        while len(temps(service.data_dir)) < 48 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(temps(service.data_dir)) == 48
        with client(service) as c:
            started = time.monotonic()
            c.put_artifact("quick.txt", b"not stuck behind the slow ones")
            assert c.get_artifact("quick.txt") == b"not stuck behind the slow ones"
            assert "quick.txt" in {a.name for a in c.list_artifacts().artifacts}
            assert time.monotonic() - started < 10
            c.delete_artifact("quick.txt")
    finally:
        for sock in stalled:
            sock.close()
    deadline = time.monotonic() + 20
    while temps(service.data_dir) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert temps(service.data_dir) == []
    with client(service) as c, pytest.raises(ApiError):
        c.artifact_versions("slow")


def audit_lines(server: Server) -> list[dict[str, object]]:
    time.sleep(0.2)
    path = server.base / f"server-{server.port}.log"
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("logger") == "skill_executor.audit"]


def test_delete_by_owner_or_admin_only(service: Server) -> None:
    a, b, admin = client(service), client(service, KEY_B), client(service, ADMIN)
    with a, b, admin:
        first = a.put_artifact("plans/q3.txt", b"draft", mime_type="text/plain")
        a.put_artifact("plans/q3.txt", b"final", mime_type="text/plain")
        a.put_artifact("plans/q4.txt", b"later")
        # Another key: the same 404 as for a name that does not exist.
        for call, code in (
            (lambda: b.delete_artifact("plans/q3.txt"), "artifact_not_found"),
            (lambda: b.delete_artifact("plans/q3.txt", 1), "artifact_not_found"),
            (lambda: b.delete_artifact("plans/q3.txt", owner=key_id(KEY_A)), "owner_not_found"),
        ):
            with pytest.raises(ApiError) as info:
                call()
            assert (info.value.status, info.value.code) == (404, code)
        assert [v.version for v in a.artifact_versions("plans/q3.txt").artifacts] == [1, 2]

        # The owner: one version, then the rest.
        deleted = a.delete_artifact("plans/q3.txt", 1).artifacts
        assert [(d.name, d.version, d.sha256) for d in deleted] == [("plans/q3.txt", 1, first.sha256)]
        assert first.sha256 not in blob_files(service.data_dir)
        assert a.get_artifact("plans/q3.txt") == b"final"
        with pytest.raises(ApiError) as gone:
            a.get_artifact("plans/q3.txt", version=1)
        assert gone.value.code == "artifact_not_found"

        # An admin, across tenants: allowed and audited.
        assert [d.version for d in admin.delete_artifact("plans/q3.txt", owner=key_id(KEY_A)).artifacts] == [2]
        with pytest.raises(ApiError) as info:
            a.get_artifact("plans/q3.txt")
        assert info.value.code == "artifact_not_found"
        names = {x.name for x in a.list_artifacts().artifacts}
        assert "plans/q4.txt" in names and "plans/q3.txt" not in names
        assert any(
            x["action"] == "artifact.delete"
            and x["owner"] == key_id(KEY_A)
            and x["principal"] == key_id(ADMIN)
            and x["target"] == "plans/q3.txt"
            for x in audit_lines(service)
        )
        # A new save continues the numbering: a ref like plans/q3.txt@1 never means other content.
        assert a.put_artifact("plans/q3.txt", b"again").version == 3


def test_any_name_is_addressable_even_one_ending_in_versions(service: Server) -> None:
    with client(service) as c:
        c.put_artifact("x/versions", b"a file called versions", mime_type="text/plain")
        c.put_artifact("x", b"x itself")
        c.put_artifact("versions", b"top-level")
        assert c.get_artifact("x/versions") == b"a file called versions"
        assert c.get_artifact("versions") == b"top-level"
        assert [(v.name, v.version) for v in c.artifact_versions("x/versions").artifacts] == [("x/versions", 1)]
        assert [(v.name, v.version) for v in c.artifact_versions("x").artifacts] == [("x", 1)]
        # The raw URLs: /v1/artifacts/x/versions is that artifact, never a listing of x.
        raw = httpx.get(f"{service.url}/v1/artifacts/x/versions", headers={"Authorization": f"Bearer {KEY_A}"})
        assert raw.status_code == 200 and raw.content == b"a file called versions"
        assert [v.name for v in c.delete_artifact("x/versions").artifacts] == ["x/versions"]
        assert c.get_artifact("x") == b"x itself"


@pytest.fixture
def expiring(tmp_path: Path) -> Iterator[tuple[Server, subprocess.Popen[bytes]]]:
    """A service with a 1 s TTL, started over a crash's leftover temp blob and a live
    writer's (a CLI process saving into the same data dir)."""
    srv = Server(tmp_path, env={"SKILL_EXECUTOR_RUNTIME": "local", "SKILL_EXECUTOR_ARTIFACT_TTL_SECONDS": "1"})
    root = srv.data_dir
    url = Settings(data_dir=srv.data_dir).database  # the service's database
    database = Database(url)
    upgrade(database)
    open_store(root, database)
    database.close()
    (root / "objects").mkdir(parents=True)
    (root / "objects" / ".tmp-crashed").write_bytes(b"")
    writer = start_writer(root, url)
    srv.start()
    yield srv, writer
    srv.stop()
    writer.kill()
    writer.wait()


def test_service_start_sweeps_temps_and_expires_versions(expiring: tuple[Server, subprocess.Popen[bytes]]) -> None:
    srv, writer = expiring
    root = srv.data_dir
    assert len(temps(root)) == 1 and ".tmp-crashed" not in temps(root)  # the live writer's stays
    assert writer.stdin is not None
    writer.stdin.close()
    assert writer.wait(20) == 0 and temps(root) == []

    with Client(srv.url) as c:
        saved = c.put_artifact("short-lived.txt", b"soon gone")
        assert c.get_artifact("short-lived.txt") == b"soon gone"
        time.sleep(1.1)
        # Invisible at once ...
        with pytest.raises(ApiError) as info:
            c.get_artifact("short-lived.txt")
        assert info.value.code == "artifact_not_found"
        assert c.list_artifacts().artifacts == []
        # ... and removed (rows and blobs) by the service's periodic expiry.
        blob = root / "objects" / "artifacts" / "sha256" / saved.sha256[:2] / saved.sha256
        deadline = time.monotonic() + 10
        while blob.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not blob.exists()
    database = Database(Settings(data_dir=srv.data_dir).database)
    try:  # no TTL here: what is left is really gone
        assert open_store(root, database).names() == []
    finally:
        database.close()
