"""Session snapshots (skill_executor/workspace/snapshots.py) on a local store and real S3:
a session's work/ restored whole on another machine's empty folder, incrementally taken,
and never a way to read or write outside work/ (links are text, manifests are checked)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from skill_executor.objects import LocalObjectStore, ObjectCorrupt, ObjectStore
from skill_executor.workspace.snapshots import SessionSnapshots, SnapshotError, pointer_key

from ..s3server import SeaweedS3, s3_server  # noqa: F401 - the fixture


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "local":
        return LocalObjectStore(tmp_path / "objects")
    server: SeaweedS3 = request.getfixturevalue("s3_server")
    return server.store()


def listing(root: Path) -> dict[str, Any]:
    """Every entry below ``root``: kind, mode and content (or link target), not following links."""
    found: dict[str, Any] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            rel = str(path.relative_to(root))
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                found[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                found[rel] = ("dir", stat.S_IMODE(st.st_mode))
            elif stat.S_ISREG(st.st_mode):
                found[rel] = ("file", stat.S_IMODE(st.st_mode), path.read_bytes())
    return found


def sample_work(work: Path) -> None:
    (work / "notes").mkdir(parents=True)
    (work / "notes" / "a.txt").write_text("alpha\n")
    (work / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (work / "run.sh").chmod(0o755)
    (work / "secret.key").write_bytes(os.urandom(3000))
    (work / "secret.key").chmod(0o600)
    (work / "empty").mkdir()
    (work / "big.bin").write_bytes(os.urandom(3 * 1024 * 1024))
    os.symlink("notes/a.txt", work / "rel-link")
    os.symlink("/etc/shadow", work / "abs-link")
    os.mkfifo(work / "pipe")
    (work / "locked").mkdir()
    (work / "locked" / "inside.txt").write_text("in a read-only folder")
    (work / "locked").chmod(0o555)


def test_a_session_is_restored_whole_in_an_empty_folder(store: ObjectStore, tmp_path: Path) -> None:
    work, cache = tmp_path / "w1" / "work", tmp_path / "w1"
    work.mkdir(parents=True)
    sample_work(work)
    snapshots = SessionSnapshots(store)
    taken = snapshots.take("key-a", "chat", work, cache)
    assert taken.skipped == 1  # the FIFO
    assert snapshots.latest("key-a", "chat") == taken.manifest
    elsewhere = tmp_path / "w2" / "work"
    elsewhere.mkdir(parents=True)
    restored = snapshots.restore("key-a", "chat", elsewhere, owner=None)
    assert restored is not None and restored.entries == taken.entries
    expected = listing(work)
    assert listing(elsewhere) == expected
    # Links are kept as text, never followed: /etc/shadow's content is not in the store.
    assert not store.has_blob(hashlib.sha256(Path("/etc/shadow").read_bytes()).hexdigest())
    # Another tenant's session of the same name has no snapshot.
    assert snapshots.latest("key-b", "chat") is None


def test_snapshots_are_incremental(store: ObjectStore, tmp_path: Path) -> None:
    work = tmp_path / "s" / "work"
    work.mkdir(parents=True)
    sample_work(work)
    snapshots = SessionSnapshots(store)
    first = snapshots.take("t", "s", work, work.parent)
    assert first.read_bytes == first.bytes
    (work / "notes" / "a.txt").write_text("changed\n")
    second = snapshots.take("t", "s", work, work.parent)
    assert second.read_bytes == len("changed\n") and second.manifest != first.manifest
    # A cache lost (a new worker) reads again but uploads nothing new.
    (work.parent / "snapshot-cache.json").unlink()
    third = snapshots.take("t", "s", work, work.parent)
    assert third.manifest == second.manifest


def test_a_session_ended_forgets_its_snapshot(store: ObjectStore, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "x").write_text("x")
    snapshots = SessionSnapshots(store)
    snapshots.take("t", "s", work, tmp_path)
    snapshots.forget("t", "s")
    assert snapshots.latest("t", "s") is None
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert snapshots.restore("t", "s", fresh, owner=None) is None and not any(fresh.iterdir())


HOSTILE_ITEMS = [
    {"path": "../escape", "kind": "file", "mode": 0o644},
    {"path": "/etc/cron.d/x", "kind": "file", "mode": 0o644},
    {"path": "a/../../escape", "kind": "dir", "mode": 0o755},
    {"path": "a\x00b", "kind": "dir", "mode": 0o755},
    {"path": "setuid", "kind": "dir", "mode": 0o4755},
    {"path": "dev", "kind": "device", "mode": 0o644},
    {"path": "", "kind": "dir", "mode": 0o755},
    {"path": "x", "kind": "link", "mode": 0o777, "target": ""},
]


@pytest.mark.parametrize("item", HOSTILE_ITEMS, ids=[repr(i["path"]) + i["kind"] for i in HOSTILE_ITEMS])
def test_a_hostile_manifest_is_refused_before_anything_is_written(tmp_path: Path, item: dict[str, Any]) -> None:
    """The store is outside the service: a manifest planted there must not write anywhere."""
    store = LocalObjectStore(tmp_path / "objects")
    content_sha, _ = store.put_blob(io.BytesIO(b"owned"))
    if item["kind"] == "file":
        item = {**item, "sha256": content_sha, "size": 5}
    manifest = json.dumps({"format": 1, "items": [{"path": "ok", "kind": "dir", "mode": 0o755}, item]}).encode()
    sha, _ = store.put_blob(io.BytesIO(manifest))
    store.put_stream(pointer_key("t", "s"), io.BytesIO(sha.encode()))
    work = tmp_path / "deep" / "work"
    work.mkdir(parents=True)
    with pytest.raises(SnapshotError):
        SessionSnapshots(store).restore("t", "s", work, owner=None)
    assert not any(work.iterdir()) and not (tmp_path / "deep" / "escape").exists()


def test_a_garbage_pointer_or_a_tampered_blob_is_an_error(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "objects")
    work = tmp_path / "work"
    work.mkdir()
    (work / "f").write_text("original")
    snapshots = SessionSnapshots(store)
    snapshots.take("t", "s", work, tmp_path)
    blob = next(p for p in (tmp_path / "objects").rglob("*") if p.is_file() and p.read_bytes() == b"original")
    blob.chmod(0o600)
    blob.write_bytes(b"tampered")
    target = tmp_path / "restored"
    target.mkdir()
    with pytest.raises(ObjectCorrupt):
        snapshots.restore("t", "s", target, owner=None)
    store.put_stream(pointer_key("t", "s"), io.BytesIO(b"../../etc/passwd"))
    with pytest.raises(SnapshotError):
        snapshots.restore("t", "s", target, owner=None)


def test_a_link_swapped_in_for_a_folder_is_recorded_not_followed(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "objects")
    work = tmp_path / "work"
    work.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "host-secret").write_text("host secret")
    os.symlink(outside, work / "dir-link")
    taken = SessionSnapshots(store).take("t", "s", work, tmp_path)
    assert taken.entries == 1 and taken.bytes == 0
    assert not store.has_blob(hashlib.sha256(b"host secret").hexdigest())


def test_a_worker_that_no_longer_holds_the_session_keeps_nothing(store: ObjectStore, tmp_path: Path) -> None:
    """A worker paused past its lease wakes after the session moved on: its snapshot never
    becomes the session's newest (the other worker's stays)."""
    work = tmp_path / "s" / "work"
    work.mkdir(parents=True)
    sample_work(work)
    snapshots = SessionSnapshots(store)
    kept = snapshots.take("t", "s", work, work.parent)
    (work / "notes" / "a.txt").write_text("stale half-finished state\n")
    asked: list[tuple[str, str]] = []
    snapshots.holds = lambda tenant, session: bool(asked.append((tenant, session)))
    with pytest.raises(SnapshotError, match="no longer holds the session"):
        snapshots.take("t", "s", work, work.parent)
    assert asked == [("t", "s")] and snapshots.latest("t", "s") == kept.manifest
