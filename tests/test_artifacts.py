"""The embedded artifact store: versions, names, crash safety."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from executor.artifacts.store import LocalArtifactStore, parse_ref, validate_name
from executor.errors import ExecutorError


def test_versions_metadata_and_listing(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path)
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
    assert len([p for p in (tmp_path / "blobs").rglob("*") if p.is_file()]) == 3
    with pytest.raises(ExecutorError) as info:
        store.info("a.txt", 9)
    assert info.value.status == 404


def test_reopen_keeps_everything(tmp_path: Path) -> None:
    LocalArtifactStore(tmp_path).put("x", b"persisted")
    assert LocalArtifactStore(tmp_path).read("x")[1] == b"persisted"


class _Exploding(io.RawIOBase):
    def __init__(self) -> None:
        self.calls = 0

    def read(self, size: int = -1) -> bytes:
        self.calls += 1
        if self.calls > 2:
            raise OSError("disk vanished")
        return b"x" * 1024


def test_crash_mid_save_leaves_nothing(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path)
    store.put("keep", b"v1")
    with pytest.raises(OSError):
        store.put("keep", _Exploding())  # type: ignore[arg-type]
    assert [v.version for v in store.versions("keep")] == [1]
    leftovers = [p.name for p in (tmp_path / "blobs").iterdir() if p.name.startswith(".tmp")]
    assert leftovers == []
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
