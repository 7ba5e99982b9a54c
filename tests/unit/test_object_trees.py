"""Service-made trees in the object store (objects/trees.py) and the checks made before a
tree or a version is built from what the store and the database say: manifests crafted the
way someone with write access to the bucket (or the database) would craft them are refused
before anything is written."""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from skill_executor.db import Database, upgrade
from skill_executor.envs.shared import fetch_env, pointer_key, store_env
from skill_executor.objects import LocalObjectStore
from skill_executor.objects.trees import TreeManifestInvalid, put_tree, restore_tree
from skill_executor.registry.manifest import FileDigest, Version, manifest_digest
from skill_executor.registry.remote import ManifestInvalid
from skill_executor.registry.store import Registry


@pytest.fixture
def store(tmp_path: Path) -> LocalObjectStore:
    return LocalObjectStore(tmp_path / "objects")


def tree(root: Path) -> Path:
    (root / "pkg" / "bin").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "pkg" / "bin" / "cli.js").write_text("#!/usr/bin/env node\n")
    (root / "pkg" / "bin" / "cli.js").chmod(0o700)
    (root / "pkg" / "index.js").write_text("module.exports = 1;\n")
    (root / ".bin").mkdir()
    os.symlink("../pkg/bin/cli.js", root / ".bin" / "cli")
    os.symlink("pkg", root / "alias")
    return root


def listing(root: Path) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        rel = path.relative_to(root).as_posix()
        if stat.S_ISLNK(st.st_mode):
            found[rel] = ("link", os.readlink(path))
        elif stat.S_ISDIR(st.st_mode):
            found[rel] = ("dir", stat.S_IMODE(st.st_mode))
        else:
            found[rel] = ("file", stat.S_IMODE(st.st_mode), path.read_bytes())
    return found


def test_a_tree_round_trips_with_the_services_modes(store: LocalObjectStore, tmp_path: Path) -> None:
    source = tree(tmp_path / "source")
    sha = put_tree(store, source)
    assert put_tree(store, source) == sha  # content-addressed: the same tree, the same manifest
    target = tmp_path / "target"
    target.mkdir()
    restore_tree(store, sha, target)
    got = listing(target)
    assert got["pkg/bin/cli.js"] == ("file", 0o755, b"#!/usr/bin/env node\n")  # 0700 stored as executable
    assert got["pkg/index.js"][:2] == ("file", 0o644)
    assert got[".bin/cli"] == ("link", "../pkg/bin/cli.js") and got["alias"] == ("link", "pkg")
    assert got["empty"] == ("dir", 0o755)
    assert set(got) == set(listing(source))


def manifest(store: LocalObjectStore, items: list[dict[str, Any]]) -> str:
    sha, _ = store.put_blob(io.BytesIO(json.dumps({"format": 1, "items": items}).encode()))
    return sha


def blob(store: LocalObjectStore, data: bytes = b"x") -> dict[str, Any]:
    sha, size = store.put_blob(io.BytesIO(data))
    return {"sha256": sha, "size": size, "executable": False}


HOSTILE: dict[str, list[dict[str, Any]]] = {
    "absolute path": [{"path": "/etc/cron.d/x", "kind": "file"}],
    "dot-dot path": [{"path": "a/../../x", "kind": "file"}],
    "empty segment": [{"path": "a//x", "kind": "dir"}],
    "repeated path": [{"path": "a", "kind": "dir"}, {"path": "a", "kind": "dir"}],
    "absolute link": [{"path": "l", "kind": "link", "target": "/etc"}],
    "link out of the tree": [{"path": "l", "kind": "link", "target": "../outside"}],
    "deep link out": [{"path": "d/l", "kind": "link", "target": "../../outside"}],
    "link up after a name": [
        {"path": "d/e/l3", "kind": "link", "target": "../.."},
        {"path": "l", "kind": "link", "target": "d/e/l3/.."},
    ],
    "entry below a link": [
        {"path": "l", "kind": "link", "target": "."},
        {"path": "l/x", "kind": "dir"},
    ],
    "unknown kind": [{"path": "p", "kind": "fifo"}],
    "not a sha256": [{"path": "f", "kind": "file", "sha256": "../../x", "size": 1, "executable": False}],
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_manifests_are_refused_before_anything_is_written(
    store: LocalObjectStore, tmp_path: Path, case: str
) -> None:
    items = [dict(item) for item in HOSTILE[case]]
    for item in items:
        if item["kind"] == "file" and "sha256" not in item:
            item.update(blob(store))
    sha = manifest(store, [{"path": "first", "kind": "dir"}, *items])
    target = tmp_path / "target"
    target.mkdir()
    with pytest.raises(TreeManifestInvalid):
        restore_tree(store, sha, target)
    assert os.listdir(target) == []
    assert not (tmp_path / "outside").exists()


def test_an_environment_that_is_not_its_keys_is_refused_and_leaves_nothing(
    store: LocalObjectStore, tmp_path: Path
) -> None:
    envs = tmp_path / "envs"
    envs.mkdir()
    other = tmp_path / "other"
    other.mkdir()
    (other / "manifest.json").write_text(json.dumps({"key": "b" * 32}))
    store_env(store, "b" * 32, other)
    # the pointer of key a names the environment of key b (a swapped pointer in the bucket)
    store.put_stream(pointer_key("a" * 32), store.open(pointer_key("b" * 32)))
    with pytest.raises(TreeManifestInvalid):
        fetch_env(store, "a" * 32, envs, envs / ("a" * 32))
    store.put_stream(pointer_key("c" * 32), io.BytesIO(b"../../etc/passwd"))
    with pytest.raises(TreeManifestInvalid):
        fetch_env(store, "c" * 32, envs, envs / ("c" * 32))
    assert os.listdir(envs) == []
    assert fetch_env(store, "d" * 32, envs, envs / ("d" * 32)) is False  # none stored: resolve it
    assert fetch_env(store, "b" * 32, envs, envs / ("b" * 32)) is True
    assert json.loads((envs / ("b" * 32) / "manifest.json").read_text()) == {"key": "b" * 32}


def crafted(skill: str, files: list[FileDigest], *, digest: str | None = None, dirname: str = "x") -> Version:
    return Version(
        skill,
        1,
        digest or manifest_digest([(f.path, f.digest_field) for f in files]),
        0.0,
        "upload",
        "attacker",
        dirname,
        tuple(files),
    )


def test_a_version_row_that_is_not_a_version_is_refused_and_leaves_nothing(tmp_path: Path) -> None:
    """Rows are written by the service; one that says otherwise (a crafted row, a bug) builds nothing."""
    store = LocalObjectStore(tmp_path / "objects")
    sha, size = store.put_blob(io.BytesIO(b"payload"))
    database = Database(f"sqlite:///{tmp_path / 'db.sqlite'}")
    upgrade(database)
    registry = Registry(tmp_path / "registry", database=database, objects=store)
    link_sha = hashlib.sha256(b".").hexdigest()
    cases = {
        "dot-dot": crafted("s", [FileDigest("../../escape", sha, size, False)]),
        "absolute": crafted("s", [FileDigest("/tmp/escape", sha, size, False)]),
        "below a link": crafted("s", [FileDigest("l", link_sha, 0, False, "."), FileDigest("l/f", sha, size, False)]),
        "a link whose hash is not its text": crafted("s", [FileDigest("l", sha, 0, False, "/etc")]),
        "digest of other files": crafted("s", [FileDigest("f", sha, size, False)], digest="sha256:" + "0" * 64),
        "folder name": crafted("s", [FileDigest("f", sha, size, False)], dirname=".."),
    }
    try:
        for why, version in cases.items():
            with pytest.raises(ManifestInvalid):
                registry.fetch(version)
            assert list(registry.versions_dir.iterdir()) == [], why
            assert list(registry.staging.iterdir()) == [], why
        assert not (tmp_path / "escape").exists()
    finally:
        database.close()
