"""skill_executor.workspace.fs on a real file system: no operation follows a link, blocks on a
FIFO, truncates a shared inode, or recurses; a concurrent swapper never wins."""

from __future__ import annotations

import ctypes
import os
import stat
import threading
import time
from pathlib import Path, PurePosixPath

import pytest

from skill_executor.errors import ExecutorError
from skill_executor.workspace import fs
from skill_executor.workspace.remove import remove_tree

P = PurePosixPath


@pytest.fixture
def tree(tmp_path: Path) -> fs.Tree:
    root = tmp_path / "tree"
    root.mkdir()
    with fs.Tree(root) as opened:
        yield opened


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret").write_text("secret")
    return path


def test_write_refuses_links_anywhere_on_the_way(tree: fs.Tree, outside: Path) -> None:
    os.symlink(outside, tree.path / "link")
    os.mkdir(tree.path / "a")
    os.symlink(outside, tree.path / "a" / "b")
    os.symlink(outside / "secret", tree.path / "file")
    os.symlink(outside / "new", tree.path / "dangling")
    for target in ("link/x", "a/b/c/x", "file", "dangling", "link/secret"):
        with pytest.raises(ExecutorError) as info:
            tree.write(P(target), b"data", owner=None)
        assert info.value.code == "path_escape", target
    assert sorted(os.listdir(outside)) == ["secret"] and (outside / "secret").read_text() == "secret"


def test_write_replaces_a_hard_link_instead_of_truncating_it(tree: fs.Tree, outside: Path) -> None:
    os.link(outside / "secret", tree.path / "shared")
    tree.write(P("shared"), b"new", owner=None)
    assert (tree.path / "shared").read_bytes() == b"new" and (outside / "secret").read_text() == "secret"


def test_owner_and_modes_are_set_on_descriptors(tree: fs.Tree) -> None:
    if os.getuid() != 0:
        pytest.skip("changing ownership needs root")
    tree.write(P("d/e/f.txt"), b"x", owner=(1000, 1000))
    tree.write(P("d/ro.txt"), b"x", owner=(1000, 1000), mode=0o444)
    for rel in ("d", "d/e", "d/e/f.txt"):
        assert os.stat(tree.path / rel).st_uid == 1000, rel
    ro = os.stat(tree.path / "d/ro.txt")
    assert ro.st_uid == 0 and stat.S_IMODE(ro.st_mode) == 0o444


def test_open_file_never_blocks_or_follows(tree: fs.Tree, outside: Path) -> None:
    os.mkfifo(tree.path / "fifo")
    os.symlink(outside / "secret", tree.path / "link")
    started = time.monotonic()
    for name in ("fifo", "link"):
        with pytest.raises(ExecutorError):
            fs_fd, _ = tree.open_file(P(name))
            os.close(fs_fd)
    assert time.monotonic() - started < 1


def test_walk_yields_links_but_never_enters_them(tree: fs.Tree, outside: Path) -> None:
    os.makedirs(tree.path / "a" / "b")
    (tree.path / "a" / "b" / "f").write_text("x")
    os.symlink(outside, tree.path / "a" / "out")
    seen = {str(e.path): e for e in tree.walk()}
    assert set(seen) == {"a", "a/b", "a/b/f", "a/out"}
    assert stat.S_ISLNK(seen["a/out"].stat.st_mode)


def test_deep_trees_are_measured_and_removed_without_recursion(tmp_path: Path, outside: Path) -> None:
    root = tmp_path / "deep"
    root.mkdir()
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(fs.MAX_DEPTH + 500):
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.symlink(outside, "escape", dir_fd=fd)
    os.mkdir("ro", 0o555, dir_fd=fd)
    os.close(fd)
    with fs.Tree(root) as opened:
        _, too_deep = opened.usage()
    assert too_deep
    remove_tree(root)
    assert not root.exists() and (outside / "secret").read_text() == "secret"


def test_usage_counts_every_allocated_block_once_and_follows_nothing(tmp_path: Path, outside: Path) -> None:
    root = tmp_path / "measured"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "one").write_bytes(b"x" * 10_000)
    (root / "a" / "b" / "two").write_bytes(b"y" * 70_000)
    os.link(root / "a" / "one", root / "a" / "b" / "one-again")  # a hard link counts once
    os.symlink(outside, root / "a" / "escape")  # a link is counted, never followed
    os.mkfifo(root / "fifo")
    expected, seen = 0, set()
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            st = os.lstat(os.path.join(folder, name))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                expected += st.st_blocks * 512
    with fs.Tree(root) as opened:
        assert opened.usage() == (expected, False)
    # A folder the service cannot list makes the measure incomplete, not smaller silently.
    locked = root / "a" / "locked"
    locked.mkdir(mode=0o000)
    if os.geteuid() != 0:
        with fs.Tree(root) as opened:
            assert opened.usage()[1] is True


def test_usage_stops_past_the_entry_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "many"
    root.mkdir()
    for i in range(30):
        (root / f"f{i}").write_text("x")
    monkeypatch.setattr(fs, "MAX_ENTRIES", 20)
    with fs.Tree(root) as opened:
        assert opened.usage()[1] is True


RENAME_EXCHANGE = 2
_libc = ctypes.CDLL(None, use_errno=True)


def _exchange(a: Path, b: Path) -> None:
    _libc.renameat2(-100, bytes(a), -100, bytes(b), RENAME_EXCHANGE)


def test_a_concurrent_swapper_never_gets_a_write_or_read_outside(tree: fs.Tree, outside: Path) -> None:
    """A folder and a link to ``outside`` swap places as fast as they can while the
    tree writes into, reads from and walks the folder."""
    d = tree.path / "d"
    d.mkdir()
    (d / "mine").write_text("mine")
    os.symlink(outside, tree.path / "link")
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            _exchange(d, tree.path / "link")

    thread = threading.Thread(target=swap)
    thread.start()
    try:
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            for op in (
                lambda: tree.write(P("d/new"), b"attacker", owner=None),
                lambda: os.close(tree.open_file(P("d/secret"))[0]),
                lambda: list(tree.walk(P("d"))),
                lambda: tree.make_dirs(P("d/sub"), owner=None),
            ):
                try:
                    op()
                except ExecutorError:
                    pass
    finally:
        stop.set()
        thread.join()
    assert sorted(os.listdir(outside)) == ["secret"] and (outside / "secret").read_text() == "secret"


def test_remove_tree_of_a_link_removes_the_link_only(tmp_path: Path, outside: Path) -> None:
    link = tmp_path / "link"
    os.symlink(outside, link)
    remove_tree(link)
    assert not os.path.lexists(link) and (outside / "secret").exists()
