"""Service-made folder trees in the object store: every file's content a blob, and a manifest
(a blob too) of every folder, file (sha256, size, executable or not) and link (its text).

For trees the service builds itself (dependency environments), never for run-written ones
(session snapshots go through :mod:`skill_executor.workspace.fs`).  Files are kept as 0644
or 0755 and folders as 0755 whatever they were: the service's own modes.  The store is
outside the service, so :func:`restore_tree` checks the whole manifest before it writes
anything (format, bounded entries, safe relative paths without repeats, no entry below a
link, links that stay inside the tree), builds into a folder it is given empty, creates
links last (nothing is written through one) and verifies every blob as it arrives.
"""

from __future__ import annotations

import io
import json
import os
import re
import stat
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal, TypeVar

from ..errors import ExecutorError
from .base import ObjectStore

FORMAT = 1
#: The most entries and levels a manifest may have.
MAX_ENTRIES = 200_000
MAX_DEPTH = 64
#: The most bytes of a manifest that are read.
MAX_MANIFEST_BYTES = 64 * 1024 * 1024
#: Blobs moved at once (S3 answers each in milliseconds: one at a time would be slow).
PARALLEL = 8
_SHA256 = re.compile(r"[0-9a-f]{64}")
Kind = Literal["dir", "file", "link"]
T = TypeVar("T")


class TreeManifestInvalid(ExecutorError):
    """A tree's manifest in the store is not one this service writes: nothing of it is restored."""

    code = "tree_manifest_invalid"
    status = 500


class TreeUnstorable(ExecutorError):
    """A tree holds what a manifest cannot keep (a FIFO, a socket, a device)."""

    code = "tree_unstorable"
    status = 500


@dataclass(frozen=True, slots=True)
class TreeItem:
    path: str
    kind: Kind
    sha256: str = ""
    size: int = 0
    executable: bool = False
    target: str = ""

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"path": self.path, "kind": self.kind}
        if self.kind == "file":
            body.update(sha256=self.sha256, size=self.size, executable=self.executable)
        elif self.kind == "link":
            body["target"] = self.target
        return body


def put_tree(store: ObjectStore, root: Path) -> str:
    """Store the tree under ``root`` (its blobs, then its manifest); the manifest's sha256."""
    entries: list[tuple[str, str, os.stat_result]] = []
    for folder, dirnames, filenames in os.walk(root, onerror=_raise):
        rel_dir = os.path.relpath(folder, root)
        for name in sorted([*dirnames, *filenames]):
            full = os.path.join(folder, name)
            rel = name if rel_dir == "." else f"{rel_dir}/{name}".replace(os.sep, "/")
            entries.append((rel, full, os.lstat(full)))
        dirnames.sort()
    files = [(rel, full, st) for rel, full, st in entries if stat.S_ISREG(st.st_mode)]

    def put(entry: tuple[str, str, os.stat_result]) -> tuple[str, int]:
        return store.put_blob(Path(entry[1]))

    stored = dict(zip((rel for rel, _, _ in files), _parallel(put, files), strict=True))
    items: list[TreeItem] = []
    for rel, full, st in entries:
        if stat.S_ISDIR(st.st_mode):
            items.append(TreeItem(rel, "dir"))
        elif stat.S_ISLNK(st.st_mode):
            items.append(TreeItem(rel, "link", target=os.readlink(full)))
        elif stat.S_ISREG(st.st_mode):
            sha, size = stored[rel]
            items.append(TreeItem(rel, "file", sha, size, bool(st.st_mode & 0o111)))
        else:
            raise TreeUnstorable(f"{root} holds {rel!r}, neither a folder, a file nor a link")
    manifest = json.dumps(
        {"format": FORMAT, "items": [i.to_json() for i in items]}, separators=(",", ":"), sort_keys=True
    ).encode()
    sha, _ = store.put_blob(io.BytesIO(manifest))
    return sha


def read_bounded(store: ObjectStore, sha256: str, bad: Callable[[str], ExecutorError]) -> bytes:
    """The manifest blob ``sha256``, at most :data:`MAX_MANIFEST_BYTES`, verified against its hash."""
    with store.open_blob(sha256) as reader:
        raw = reader.read(MAX_MANIFEST_BYTES + 1)
        if len(raw) > MAX_MANIFEST_BYTES:
            raise bad(f"over {MAX_MANIFEST_BYTES} bytes")
        reader.read()  # to its end: the hash is checked there
    return raw


def manifest_entries(
    raw: bytes, bad: Callable[[str], ExecutorError], *, max_depth: int = MAX_DEPTH
) -> list[tuple[str, str, dict[str, Any]]]:
    """``(path, kind, entry)`` of every entry of a manifest (any format-1 tree manifest: this
    module's and session snapshots'), its envelope checked: JSON, the format, at most
    :data:`MAX_ENTRIES` entries, each an object with a safe relative path seen once.  The
    kinds' own fields are the caller's to check."""
    try:
        data = json.loads(raw)
    except ValueError:
        raise bad("not JSON") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("items"), list):
        raise bad("unknown format")
    if len(data["items"]) > MAX_ENTRIES:
        raise bad("too many entries")
    entries: list[tuple[str, str, dict[str, Any]]] = []
    seen: set[str] = set()
    for raw_item in data["items"]:
        if not isinstance(raw_item, dict):
            raise bad("an entry is not an object")
        path, kind = raw_item.get("path"), raw_item.get("kind")
        if not isinstance(path, str) or not safe_path(path, max_depth) or path in seen:
            raise bad(f"path {str(path)[:80]!r}")
        seen.add(path)
        entries.append((path, str(kind), raw_item))
    return entries


def _bad_tree(why: str) -> TreeManifestInvalid:
    return TreeManifestInvalid(f"a tree manifest in the object store is invalid ({why})")


def read_manifest(store: ObjectStore, sha256: str) -> list[TreeItem]:
    """The checked items of the manifest ``sha256`` (verified against its hash)."""
    return parse_manifest(read_bounded(store, sha256, _bad_tree))


def parse_manifest(raw: bytes) -> list[TreeItem]:
    bad = _bad_tree
    items: list[TreeItem] = []
    links: set[str] = set()
    for path, kind, raw_item in manifest_entries(raw, bad):
        if kind == "dir":
            items.append(TreeItem(path, "dir"))
        elif kind == "file":
            sha, size, executable = raw_item.get("sha256"), raw_item.get("size"), raw_item.get("executable")
            if not isinstance(sha, str) or not _SHA256.fullmatch(sha):
                raise bad(f"file {path!r}")
            if not isinstance(size, int) or size < 0 or not isinstance(executable, bool):
                raise bad(f"file {path!r}")
            items.append(TreeItem(path, "file", sha, size, executable))
        elif kind == "link":
            target = raw_item.get("target")
            if not isinstance(target, str) or not _link_inside(path, target):
                raise bad(f"link {path!r}")
            items.append(TreeItem(path, "link", target=target))
            links.add(path)
        else:
            raise bad(f"entry {path!r}")
    for item in items:
        if any(str(parent) in links for parent in PurePosixPath(item.path).parents):
            raise bad(f"{item.path[:80]!r} lies below a link")
    return items


def restore_tree(store: ObjectStore, sha256: str, target: Path) -> list[TreeItem]:
    """Rebuild the tree of manifest ``sha256`` in the empty folder ``target`` (the caller's to
    remove whole on an error: a file may be missing, none is unverified)."""
    items = read_manifest(store, sha256)
    if any(target.iterdir()):
        raise ValueError(f"{target} is not empty")
    for item in items:
        if item.kind == "dir":
            _make_dirs(target, target.joinpath(*item.path.split("/")))
    files = [item for item in items if item.kind == "file"]

    def fetch(item: TreeItem) -> None:
        dst = target.joinpath(*item.path.split("/"))
        _make_dirs(target, dst.parent)
        store.fetch_blob(item.sha256, dst)
        os.chmod(dst, 0o755 if item.executable else 0o644)

    for folder in {target.joinpath(*i.path.split("/")).parent for i in files}:
        _make_dirs(target, folder)  # before the threads: no two make one folder
    _parallel(fetch, files)
    for item in items:  # links last: nothing above was written through one
        if item.kind == "link":
            dst = target.joinpath(*item.path.split("/"))
            _make_dirs(target, dst.parent)
            os.symlink(item.target, dst)
    return items


def _parallel(work: Callable[[T], Any], items: Iterable[T]) -> list[Any]:
    todo = list(items)
    if len(todo) <= 1:
        return [work(i) for i in todo]
    with ThreadPoolExecutor(max_workers=PARALLEL, thread_name_prefix="tree") as pool:
        return list(pool.map(work, todo))


def _make_dirs(top: Path, folder: Path) -> None:
    missing: list[Path] = []
    while folder != top and not folder.is_dir():
        missing.append(folder)
        folder = folder.parent
    for path in reversed(missing):
        path.mkdir(mode=0o755)
        os.chmod(path, 0o755)  # whatever the umask


def safe_path(path: str, max_depth: int = MAX_DEPTH) -> bool:
    """A relative ``/``-separated path with no empty, ``.`` or ``..`` part, no NUL or backslash,
    at most ``max_depth`` parts of at most 255 bytes each (what a manifest may name)."""
    if not path or path.startswith("/") or "\0" in path or "\\" in path or len(path) > 4096:
        return False
    parts = path.split("/")
    return len(parts) <= max_depth and all(p not in ("", ".", "..") and len(p.encode()) <= 255 for p in parts)


def _link_inside(path: str, target: str) -> bool:
    """A relative link that stays inside the tree however links are followed: some leading
    ``..`` (no more than the link's folder is deep: those are real folders, no entry lies
    below a link), then only names down.  By induction every link lands inside."""
    if not target or "\0" in target or len(target) > 4096 or target.startswith("/"):
        return False
    parts = [p for p in target.split("/") if p not in ("", ".")]
    ups = 0
    while ups < len(parts) and parts[ups] == "..":
        ups += 1
    return ".." not in parts[ups:] and ups <= path.count("/")


def _raise(exc: OSError) -> None:
    raise exc
