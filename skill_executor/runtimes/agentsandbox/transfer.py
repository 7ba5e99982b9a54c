"""A run's files between the worker's workspace and its pod, with nothing of the pod trusted.

* :func:`pack` -- the staged tops of a workspace (``skills``, ``work``, ``run``; plus the
  workspace root's links into the skill) as what a pod needs: a few plain files (PUT each, mode
  kept) or one tar (PUT once, unpacked by one process).  The worker-side trees are read through
  :class:`~skill_executor.workspace.fs.Tree` (links never followed); a link is kept only if its
  target stays inside the workspace as the pod sees it.
* :func:`mirror` -- a pod's folder back into a worker-side :class:`Tree`: one listing per folder,
  one GET per file, bounded in depth, entries, files and bytes.  A listing is untrusted: names
  that are not one plain path component (``..``, ``a/b``, NUL, empty) are skipped with a warning,
  a file larger than it said or than the budget is dropped, and every write goes through the
  ``Tree``, so nothing lands outside it or through a link.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import stat
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any, BinaryIO, Protocol, cast

from ...errors import ExecutorError
from ...workspace.fs import Tree

#: At most this many files (and no links, no empty folders) are sent as plain PUTs; more: one tar.
PLAIN_MAX_FILES = 4
#: A tar kept in memory up to this size, spooled to disk beyond it.
SPOOL_BYTES = 16 << 20


@dataclass(slots=True)
class Packed:
    """What to send: ``plain`` files ``(path, data, mode)``, or ``tar`` (a file object at 0)."""

    plain: list[tuple[str, bytes, int]] = field(default_factory=list)
    tar: IO[bytes] | None = None
    tar_bytes: int = 0
    files: int = 0
    bytes: int = 0
    warnings: list[str] = field(default_factory=list)


def _link_inside(rel: PurePosixPath, target: str, box_root: str) -> bool:
    """Does the link ``rel`` -> ``target`` stay inside the workspace (as the pod sees it at ``box_root``)?"""
    if target.startswith("/"):
        inside = posixpath.relpath(posixpath.normpath(target), box_root)
    else:
        inside = posixpath.normpath(posixpath.join(str(rel.parent), target))
    return inside != ".." and not inside.startswith("../") and not posixpath.isabs(inside)


def pack(
    sources: dict[str, Path],
    *,
    root: Path | None = None,
    folders: Sequence[str] = (),
    box_root: str = "/workspace",
) -> Packed:
    """``sources``: top name in the pod -> its worker-side folder.  ``root``: the workspace root,
    whose own links (a skill's top-level entries) go along.  ``folders``: empty folders to make
    (``out``).  Files are read as they are added (a large tar spools to disk, not memory)."""
    packed = Packed()
    with contextlib.ExitStack() as stack:
        entries = _entries(sources, root, stack, packed)
        entries += [("dir", PurePosixPath(name), 0o755) for name in folders if name not in sources]
        kept = []
        for kind, rel, payload in entries:
            if kind == "link" and not _link_inside(rel, payload, box_root):
                packed.warnings.append(f"{rel}: a link out of the workspace; not sent to the pod")
                continue
            kept.append((kind, rel, payload))
        files = [payload for kind, _, payload in kept if kind == "file"]
        packed.files = len(files)
        packed.bytes = sum(st.st_size for _, _, _, st in files)
        parents = {p for _, rel, _ in kept for p in rel.parents}
        empty_dirs = [rel for kind, rel, _ in kept if kind == "dir" and rel not in parents]
        if len(files) <= PLAIN_MAX_FILES and not empty_dirs and not any(k == "link" for k, _, _ in kept):
            for _kind, rel, (tree, path, mode, st) in (e for e in kept if e[0] == "file"):
                fd, _ = tree.open_file(path)
                with open(fd, "rb", closefd=True) as file:
                    packed.plain.append((str(rel), file.read(st.st_size), mode))
            return packed
        spool = tempfile.SpooledTemporaryFile(SPOOL_BYTES)
        with tarfile.open(fileobj=spool, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for kind, rel, payload in sorted(kept, key=lambda item: (item[0] == "link", str(item[1]))):
                info = tarfile.TarInfo(str(rel))
                info.uid = info.gid = 1000
                if kind == "dir":
                    info.type, info.mode = tarfile.DIRTYPE, payload | 0o700
                    tar.addfile(info)
                elif kind == "link":
                    info.type, info.linkname, info.mode = tarfile.SYMTYPE, payload, 0o777
                    tar.addfile(info)
                else:
                    tree, path, info.mode, st = payload
                    info.size, info.mtime = st.st_size, int(st.st_mtime)
                    fd, _ = tree.open_file(path)
                    with open(fd, "rb", closefd=True) as file:
                        tar.addfile(info, file)
        packed.tar_bytes = spool.tell()
        spool.seek(0)
        packed.tar = spool
        return packed


def _entries(
    sources: dict[str, Path], root: Path | None, stack: contextlib.ExitStack, packed: Packed
) -> list[tuple[str, PurePosixPath, Any]]:
    """(kind, path in the pod, payload): a folder's mode, a link's target, a file's (tree, path, mode, lstat)."""
    entries: list[tuple[str, PurePosixPath, Any]] = []
    if root is not None:
        tree = stack.enter_context(Tree(root))
        for name in sorted(os.listdir(root)):
            st = tree.lstat(PurePosixPath(name))
            if name not in sources and st is not None and stat.S_ISLNK(st.st_mode):
                entries.append(("link", PurePosixPath(name), tree.read_link(PurePosixPath(name))))
    for top, folder in sources.items():
        if not folder.is_dir():
            continue
        tree = stack.enter_context(Tree(folder))
        entries.append(("dir", PurePosixPath(top), stat.S_IMODE(os.fstat(tree.fd).st_mode)))
        for entry in tree.walk():
            rel = PurePosixPath(top) / entry.path
            mode = entry.stat.st_mode
            if stat.S_ISDIR(mode):
                entries.append(("dir", rel, stat.S_IMODE(mode)))
            elif stat.S_ISLNK(mode):
                entries.append(("link", rel, tree.read_link(entry.path)))
            elif stat.S_ISREG(mode):
                entries.append(("file", rel, (tree, entry.path, stat.S_IMODE(mode) & 0o777, entry.stat)))
            else:
                packed.warnings.append(f"{rel}: not a file, folder or link; not sent to the pod")
    return entries


# -- back from the pod ----------------------------------------------------------------------------


class Listing(Protocol):
    """A pod folder's entry (read-only attributes: a frozen dataclass fits)."""

    @property
    def name(self) -> str: ...
    @property
    def size(self) -> int: ...
    @property
    def type(self) -> str: ...
    @property
    def mode(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class MirrorLimits:
    max_bytes: int
    max_files: int = 1000
    max_depth: int = 32
    max_entries: int = 10_000


@dataclass(slots=True)
class Mirrored:
    files: int = 0
    bytes: int = 0
    warnings: list[str] = field(default_factory=list)


def plain_name(name: object) -> bool:
    """One path component a worker may create: not empty, ``.``/``..``, no ``/`` or NUL, <= 255 bytes."""
    return (
        isinstance(name, str)
        and name not in ("", ".", "..")
        and "/" not in name
        and "\x00" not in name
        and len(name.encode("utf-8", "surrogateescape")) <= 255
    )


def _mode(text: str | None) -> int:
    try:
        return int(text or "0644", 8) & 0o777
    except ValueError:
        return 0o644


def mirror(
    list_dir: Callable[[str], Sequence[Listing]],
    read_to: Callable[[str, IO[bytes], int], int],
    remote: str,
    tree: Tree,
    *,
    limits: MirrorLimits,
    owner: tuple[int, int] | None,
) -> Mirrored:
    """Copy the pod's folder ``remote`` into ``tree`` (see the module docstring)."""
    done = Mirrored()
    seen = 0
    stack: list[tuple[str, PurePosixPath, int]] = [(remote, PurePosixPath("."), 0)]
    while stack:
        folder, rel_folder, depth = stack.pop()
        entries = list_dir(folder)
        for entry in sorted(entries, key=lambda e: str(e.name), reverse=True):
            seen += 1
            if seen > limits.max_entries:
                done.warnings.append(f"{remote}: more than {limits.max_entries} entries; the rest was left in the pod")
                return done
            if not plain_name(entry.name):
                done.warnings.append(f"{folder}: the pod listed an entry named {str(entry.name)[:80]!r}; skipped")
                continue
            rel, path = rel_folder / entry.name, f"{folder}/{entry.name}"
            try:
                if entry.type == "directory":
                    if depth + 1 > limits.max_depth:
                        done.warnings.append(f"{path}: deeper than {limits.max_depth} folders; not collected")
                        continue
                    tree.make_dirs(rel, owner=owner)
                    stack.append((path, rel, depth + 1))
                elif entry.type == "file":
                    _copy_file(read_to, path, rel, entry, tree, limits, owner, done)
            except ExecutorError as exc:
                done.warnings.append(f"{path}: not collected ({exc.message})")
    return done


def _copy_file(
    read_to: Callable[[str, IO[bytes], int], int],
    path: str,
    rel: PurePosixPath,
    entry: Listing,
    tree: Tree,
    limits: MirrorLimits,
    owner: tuple[int, int] | None,
    done: Mirrored,
) -> None:
    room = limits.max_bytes - done.bytes
    if done.files >= limits.max_files:
        done.warnings.append(f"{path}: more than {limits.max_files} files; not collected")
        return
    if entry.size > room:
        done.warnings.append(f"{path}: {entry.size} bytes would exceed the output cap; not collected")
        return
    with tempfile.SpooledTemporaryFile(1 << 20) as spool:
        try:
            size = read_to(path, spool, room)
        except RuntimeError:  # the SDK's cap: the pod sent more than it listed or than the budget
            done.warnings.append(f"{path}: larger than listed or than the output cap; not collected")
            return
        spool.seek(0)
        tree.write(rel, cast(BinaryIO, spool), owner=owner, mode=_mode(entry.mode))
    done.files += 1
    done.bytes += size
