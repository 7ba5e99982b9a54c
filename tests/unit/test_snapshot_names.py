"""Session snapshots carry any name Linux allows (issue 39, class 3): a session whose work/
holds a backslash, a newline, bytes that are not UTF-8, a leading dash, a 255-byte name,
two spellings of one accented letter, a path longer than PATH_MAX ... is restored byte for
byte; a manifest planted in the store is refused only for what is unsafe (an absolute path,
``..``, a NUL, an entry below a link, a device, set-id bits), never for what is unusual; a
snapshot that would not restore is refused when it is taken, and says why.

The tree is made and compared as bytes (``os.fsencode`` paths): text would hide what is
being tested.  On a local store (the S3 direction runs in tests/service/test_cluster.py)."""

from __future__ import annotations

import base64
import io
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from skill_executor.objects import LocalObjectStore
from skill_executor.workspace import snapshots as snapshots_module
from skill_executor.workspace.snapshots import SessionSnapshots, SnapshotError, parse_manifest, unkept_key

#: Names a run may give a file (each a folder entry: no "/", no NUL).
ODD_NAMES: list[bytes] = [
    b"back\\slash",
    b"\\",
    b"new\nline",
    b"\n",
    b"carriage\rreturn",
    b"tab\there",
    b"\xff\xfe not utf-8",
    b"\x80",
    b"\xc3\x28 broken two-byte",
    b"\xed\xa0\x80 surrogate-ish",
    b"-rf",
    b"--help",
    b"-",
    b"..foo",
    b"...",
    b".hidden",
    b" leading space",
    b"trailing space ",
    b"a b c",
    b"caf\xc3\xa9",  # NFC
    b"cafe\xcc\x81",  # NFD: another file
    b"a" * 255,
    "€".encode() * 85,  # 255 bytes, 85 characters
    "\U0001f600 emoji".encode(),
    b"*?[glob]",
    b"$(id) `id` 'q' \"qq\"",
    bytes(range(1, 32)),
    b"\x7fdel",
    b"latest",
    b"snapshot-cache.json",
    b"path_b64",
]


def _at(root: Path, rel: bytes) -> bytes:
    return os.path.join(os.fsencode(root), rel)


def make_odd_tree(work: Path) -> None:
    """Every odd name as a file at the top, and as a folder holding a file and a link; links
    whose targets are odd; a path longer than PATH_MAX; odd modes."""
    for i, name in enumerate(ODD_NAMES):
        with open(_at(work, name), "wb") as file:
            file.write(b"content of %d: " % i + name)
        folder = _at(work, name + b".d") if len(name) < 250 else _at(work, b"d%d" % i)
        os.mkdir(folder)
        with open(os.path.join(folder, name), "wb") as file:
            file.write(name * 3)
        os.symlink(name, os.path.join(folder, b"link-to-" + name[:200]))
    os.chmod(_at(work, b"-rf"), 0o600)
    os.chmod(_at(work, b"new\nline"), 0o755)
    os.chmod(_at(work, b"\\.d"), 0o700)
    # links whose targets are unusual: kept as they are (followed only in the sandbox)
    for i, target in enumerate(
        [b"\xff\xfe", b"back\\slash", b"/etc/shadow", b"../../../outside", b"dangling\n", b"x" * 4000]
    ):
        os.symlink(target, _at(work, b"odd-link-%d" % i))
    # deeper than PATH_MAX in all: 20 levels of 250-byte names
    fd = os.open(work, os.O_RDONLY | os.O_DIRECTORY)
    for level in range(20):  # one level at a time: the whole path is too long for a system call
        name = bytes([0x61 + level]) * 250
        os.mkdir(name, dir_fd=fd)
        child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    bottom = os.open(b"\xfe bottom", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
    os.write(bottom, b"at the bottom")
    os.close(bottom)
    os.close(fd)
    os.mkdir(_at(work, b"empty \xff folder"))


def listing(root: Path) -> dict[bytes, Any]:
    """Every entry below ``root`` by its path in bytes: kind, mode and content or target."""
    found: dict[bytes, Any] = {}
    top = os.fsencode(root)
    stack = [b""]
    while stack:
        rel = stack.pop()
        for name in _names(top, rel):
            path = os.path.join(rel, name) if rel else name
            parent = _open_dir(top, rel)
            try:
                st = os.stat(name, dir_fd=parent, follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    found[path] = ("link", os.readlink(name, dir_fd=parent))
                elif stat.S_ISDIR(st.st_mode):
                    found[path] = ("dir", stat.S_IMODE(st.st_mode))
                    stack.append(path)
                else:
                    fd = os.open(name, os.O_RDONLY, dir_fd=parent)
                    with os.fdopen(fd, "rb") as file:
                        found[path] = ("file", stat.S_IMODE(st.st_mode), file.read())
            finally:
                os.close(parent)
    return found


def _open_dir(top: bytes, rel: bytes) -> int:
    """A descriptor of ``top/rel``, reached one level at a time (paths past PATH_MAX)."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for part in rel.split(b"/") if rel else []:
        child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
        os.close(fd)
        fd = child
    return fd


def _names(top: bytes, rel: bytes) -> list[bytes]:
    fd = _open_dir(top, rel)
    try:
        return [os.fsencode(n) for n in os.listdir(fd)]
    finally:
        os.close(fd)


@pytest.fixture
def store(tmp_path: Path) -> LocalObjectStore:
    return LocalObjectStore(tmp_path / "objects")


def test_every_name_linux_allows_survives_a_snapshot_byte_for_byte(store: LocalObjectStore, tmp_path: Path) -> None:
    work = tmp_path / "a" / "work"
    work.mkdir(parents=True)
    make_odd_tree(work)
    expected = listing(work)
    assert any(len(path) > 4096 for path in expected), "a path longer than PATH_MAX is in the corpus"
    snapshots = SessionSnapshots(store)
    taken = snapshots.take("t", "odd", work, work.parent)
    assert taken.entries == len(expected)
    elsewhere = tmp_path / "b" / "work"
    elsewhere.mkdir(parents=True)
    restored = snapshots.restore("t", "odd", elsewhere, owner=None)
    assert restored is not None and restored.entries == len(expected)
    got = listing(elsewhere)
    assert set(got) == set(expected), set(got) ^ set(expected)
    assert got == expected
    # the NFC and NFD spellings stayed two files
    assert got[b"caf\xc3\xa9"] != got[b"cafe\xcc\x81"]
    assert snapshots.unkept("t", "odd") is None


def test_the_manifest_keeps_names_as_bytes(store: LocalObjectStore, tmp_path: Path) -> None:
    """Format 2: every path and link target is the base64 of its bytes (no text decoding
    anywhere on the way, so nothing a JSON reader does to text can change a name)."""
    work = tmp_path / "work"
    work.mkdir()
    with open(_at(work, b"\xff\n\\"), "wb") as file:
        file.write(b"x")
    os.symlink(b"\xfe/\\", _at(work, b"l\x80"))
    sha = SessionSnapshots(store).take("t", "s", work, tmp_path).manifest
    with store.open_blob(sha) as reader:
        manifest = json.loads(reader.read())
    assert manifest["format"] == 2
    assert {base64.b64decode(i["path_b64"]) for i in manifest["items"]} == {b"\xff\n\\", b"l\x80"}
    link = next(i for i in manifest["items"] if i["kind"] == "link")
    assert base64.b64decode(link["target_b64"]) == b"\xfe/\\" and "path" not in link


def test_a_manifest_of_format_1_still_restores_also_with_names_it_used_to_refuse(
    store: LocalObjectStore, tmp_path: Path
) -> None:
    """Snapshots taken before format 2 (text paths; a name that was not UTF-8 as lone
    surrogates, as Python's JSON wrote it) restore as they are."""
    sha_content, _ = store.put_blob(io.BytesIO(b"old"))
    items = [
        {"path": "notes", "kind": "dir", "mode": 0o755},
        {"path": "notes/plain.txt", "kind": "file", "mode": 0o644, "sha256": sha_content, "size": 3},
        {"path": "notes/back\\slash", "kind": "file", "mode": 0o600, "sha256": sha_content, "size": 3},
        {"path": os.fsdecode(b"notes/\xff"), "kind": "file", "mode": 0o644, "sha256": sha_content, "size": 3},
        {"path": "link", "kind": "link", "mode": 0o777, "target": "notes/plain.txt"},
    ]
    manifest = json.dumps({"format": 1, "items": items}).encode()
    sha, _ = store.put_blob(io.BytesIO(manifest))
    work = tmp_path / "work"
    work.mkdir()
    SessionSnapshots(store).restore("t", "s", work, owner=None, sha=sha)
    got = listing(work)
    assert got[b"notes/plain.txt"] == ("file", 0o644, b"old")
    assert got[b"notes/back\\slash"] == ("file", 0o600, b"old")
    assert got[b"notes/\xff"] == ("file", 0o644, b"old")
    assert got[b"link"] == ("link", b"notes/plain.txt")


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _file(path: bytes, sha: str, **more: Any) -> dict[str, Any]:
    return {"path_b64": _b64(path), "kind": "file", "mode": 0o644, "sha256": sha, "size": 5, **more}


def _dir(path: bytes, mode: int = 0o755) -> dict[str, Any]:
    return {"path_b64": _b64(path), "kind": "dir", "mode": mode}


def _link(path: bytes, target: bytes) -> dict[str, Any]:
    return {"path_b64": _b64(path), "kind": "link", "mode": 0o777, "target_b64": _b64(target)}


#: Manifests (their items, after a harmless first one) a restore must refuse whole.
HOSTILE: dict[str, list[dict[str, Any]]] = {
    "dotdot": [_file(b"../escape", "S")],
    "dotdot-inside": [_file(b"a/../../escape", "S")],
    "dot": [_file(b"./x", "S")],
    "absolute": [_file(b"/etc/cron.d/x", "S")],
    "empty-component": [_file(b"a//x", "S")],
    "empty": [_dir(b"")],
    "nul": [_file(b"a\x00b", "S")],
    "name-over-255": [_file(b"n" * 256, "S")],
    "below-a-link": [_link(b"l", b"/etc"), _file(b"l/cron.d/x", "S")],
    "below-a-link-listed-first": [_file(b"l/x", "S"), _link(b"l", b"/etc")],
    "below-a-link-deeper": [_link(b"l", b".."), _dir(b"l/a"), _file(b"l/a/x", "S")],
    "below-a-file": [_file(b"f", "S"), _file(b"f/x", "S")],
    "twice": [_file(b"x", "S"), _link(b"x", b"/etc/passwd")],
    "device": [{"path_b64": _b64(b"dev"), "kind": "device", "mode": 0o644}],
    "fifo": [{"path_b64": _b64(b"fifo"), "kind": "fifo", "mode": 0o644}],
    "setuid": [_file(b"x", "S", mode=0o4755)],
    "setgid-folder": [_dir(b"d", 0o2755)],
    "negative-mode": [_file(b"x", "S", mode=-1)],
    "negative-size": [_file(b"x", "S", size=-5)],
    "bool-size": [_file(b"x", "S", size=True)],
    "not-base64": [{"path_b64": "!!!", "kind": "dir", "mode": 0o755}],
    "text-path-in-format-2": [{"path": "x", "kind": "dir", "mode": 0o755}],
    "link-target-nul": [_link(b"l", b"a\x00b")],
    "link-target-empty": [_link(b"l", b"")],
    "link-target-over-4095": [_link(b"l", b"t" * 4096)],
    "bad-sha": [_file(b"x", "../../etc/passwd")],
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_manifest_is_refused_before_anything_is_written(
    store: LocalObjectStore, tmp_path: Path, name: str
) -> None:
    """The store is outside the service: what is unsafe to restore is refused, nothing written."""
    content, _ = store.put_blob(io.BytesIO(b"owned"))
    items = [_dir(b"ok")] + [
        {**item, "sha256": content} if item.get("sha256") == "S" else item for item in HOSTILE[name]
    ]
    manifest = json.dumps({"format": 2, "items": items}).encode()
    sha, _ = store.put_blob(io.BytesIO(manifest))
    work = tmp_path / "deep" / "work"
    work.mkdir(parents=True)
    with pytest.raises(SnapshotError, match="manifest is invalid"):
        SessionSnapshots(store).restore("t", "s", work, owner=None, sha=sha)
    assert not any(work.iterdir()) and not (tmp_path / "deep" / "escape").exists()


@pytest.mark.parametrize(
    "raw", [b"", b"[]", b'{"format": 3, "items": []}', b'{"format": 2}', b'{"format": 2, "items": [1]}']
)
def test_a_manifest_that_is_no_manifest_is_refused(raw: bytes) -> None:
    with pytest.raises(SnapshotError, match="manifest is invalid"):
        parse_manifest(raw, "s")


def test_what_is_merely_unusual_is_accepted() -> None:
    """The other side of the refusals above: a restore keeps every odd name and link target."""
    items = [_file(name, "0" * 64) for name in ODD_NAMES]
    items += [_link(b"abs", b"/etc/shadow"), _link(b"up", b"../../../../x"), _link(b"odd", b"\xff\\\n")]
    items += [_dir(b"/".join([b"d" * 255] * 60))]
    parsed = parse_manifest(json.dumps({"format": 2, "items": items}).encode(), "s")
    assert [os.fsencode(i.path) for i in parsed[: len(ODD_NAMES)]] == ODD_NAMES
    assert os.fsencode(parsed[-2].target) == b"\xff\\\n"


def test_a_snapshot_that_would_not_restore_is_refused_when_taken_and_says_why(
    store: LocalObjectStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checked with the restore's own rules before it becomes the session's newest: refused
    then (the previous snapshot stays), the store remembers why, and the next successful
    snapshot clears it.  (No tree Linux makes breaks today's rules: a smaller bound stands in.)"""
    work = tmp_path / "work"
    work.mkdir()
    (work / "f").write_text("one")
    snapshots = SessionSnapshots(store)
    first = snapshots.take("t", "s", work, tmp_path)
    os.symlink("a-target-longer-than-the-bound", work / "link")
    monkeypatch.setattr(snapshots_module, "TARGET_MAX", 10)
    with pytest.raises(SnapshotError, match="could not restore.*link 'link'.*stays on this worker"):
        snapshots.take("t", "s", work, tmp_path)
    assert snapshots.latest("t", "s") == first.manifest
    why = snapshots.unkept("t", "s")
    assert why is not None and "link 'link'" in why
    monkeypatch.undo()
    second = snapshots.take("t", "s", work, tmp_path)
    assert snapshots.latest("t", "s") == second.manifest != first.manifest
    assert snapshots.unkept("t", "s") is None and not store.exists(unkept_key("t", "s"))
