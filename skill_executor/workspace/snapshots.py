"""Session snapshots: a session's ``work/`` kept in the object store, so a session outlives
the worker that holds it.

After every run of a session its ``work/`` is snapshotted: each regular file's content is
stored once, content-addressed (:meth:`ObjectStore.put_blob`: a file already in the store
costs a lookup, a file unchanged since the last snapshot costs nothing), and a manifest --
every folder, file (sha256, size, mode) and link (its target text) -- is stored as a blob too.
The session's pointer, ``sessions/<tenant>/<session>/latest``, names the newest manifest; it
is written last, so a snapshot is all there or not there.  When a worker takes a session it
does not hold on disk, the pointer's manifest is restored into a fresh ``work/``.

``work/`` is written by runs: it is read and written only through :class:`~.fs.Tree`
(no path resolved by name, links never followed, special files skipped), and a manifest is
checked before anything of it is restored (relative paths without ``..``, known kinds, modes
without set-id bits, bounded entries), since the store is outside the service.
"""

from __future__ import annotations

import io
import json
import logging
import math
import os
import re
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from ..errors import ExecutorError
from ..objects import ObjectNotFound, ObjectStore, trees
from .fs import MAX_DEPTH, MAX_ENTRIES, Owner, Tree

log = logging.getLogger(__name__)

FORMAT = 1
#: Where the cache of the last snapshot lives in the session's folder (outside ``work/``).
CACHE_FILE = "snapshot-cache.json"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
Kind = Literal["dir", "file", "link"]


class SnapshotError(ExecutorError):
    """A snapshot could not be taken or restored whole."""

    code = "session_snapshot_failed"
    status = 503


@dataclass(frozen=True, slots=True)
class Item:
    path: str
    kind: Kind
    mode: int = 0o755
    sha256: str = ""
    size: int = 0
    target: str = ""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What one snapshot took: its manifest's sha256, entries and bytes, and how many bytes
    were read anew (the rest was unchanged since the last snapshot)."""

    manifest: str
    entries: int
    bytes: int
    read_bytes: int
    skipped: int


def pointer_key(tenant: str, session: str) -> str:
    return f"sessions/{tenant}/{session}/latest"


class SessionSnapshots:
    """Snapshots of sessions' ``work/`` in ``store`` (thread-safe: one session is used by one
    run at a time, under its lock)."""

    def __init__(
        self, store: ObjectStore, ttl_seconds: float = math.inf, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        #: A snapshot older than this is of an expired session: never restored.
        self.ttl = ttl_seconds
        self.clock = clock
        #: Whether this process still holds a session (a cluster's worker: its lease on it);
        #: asked right before a snapshot becomes the session's newest (None: always).
        self.holds: Callable[[str, str], bool] | None = None

    # -- taking ----------------------------------------------------------------------------

    def take(self, tenant: str, session: str, work: Path, cache_dir: Path) -> Snapshot:
        """Snapshot ``work`` and point the session at it; raises :class:`SnapshotError` when
        the tree could not be read whole (the previous snapshot stays the session's)."""
        cache_path = cache_dir / CACHE_FILE
        cache = _load_cache(cache_path).get("files", {})
        fresh: dict[str, list[Any]] = {}
        items: list[Item] = []
        total = read = skipped = 0
        with Tree(work) as tree:
            for entry in tree.walk():
                if len(items) >= MAX_ENTRIES or entry.depth > MAX_DEPTH:
                    raise SnapshotError(f"session {session!r}: work/ has more than {MAX_ENTRIES} entries or levels")
                rel, st = str(entry.path), entry.stat
                mode = stat.S_IMODE(st.st_mode) & 0o1777
                if stat.S_ISDIR(st.st_mode):
                    items.append(Item(rel, "dir", mode))
                elif stat.S_ISLNK(st.st_mode):
                    items.append(Item(rel, "link", 0o777, target=tree.read_link(entry.path)))
                elif stat.S_ISREG(st.st_mode):
                    key = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
                    known = cache.get(rel)
                    if known is not None and known[:4] == key and self.store.has_blob(known[4]):
                        sha, size = known[4], st.st_size
                    else:
                        fd, _ = tree.open_file(entry.path)
                        with os.fdopen(fd, "rb") as file:
                            sha, size = self.store.put_blob(file)
                        read += size
                    fresh[rel] = [*key, sha]
                    items.append(Item(rel, "file", mode, sha, size))
                    total += size
                else:
                    skipped += 1  # FIFOs, sockets: nothing to keep
            if tree.incomplete:
                raise SnapshotError(f"session {session!r}: part of work/ could not be read; not snapshotted")
        manifest = json.dumps(
            {"format": FORMAT, "items": [_item_json(i) for i in items]}, separators=(",", ":"), sort_keys=True
        ).encode()
        sha, _ = self.store.put_blob(io.BytesIO(manifest))
        if self.holds is not None and not self.holds(tenant, session):
            # a worker that lost its lease (paused past it): the session moved on without it
            raise SnapshotError(f"session {session!r}: this worker no longer holds the session; its work/ is not kept")
        pointer = f"{sha} {self.clock():.3f}".encode()
        self.store.put_stream(pointer_key(tenant, session), io.BytesIO(pointer))
        _save_cache(cache_path, {"manifest": sha, "files": fresh})
        return Snapshot(sha, len(items), total, read, skipped)

    @staticmethod
    def held(cache_dir: Path) -> str | None:
        """The manifest this machine's copy of the session was last snapshotted as (or restored from)."""
        manifest = _load_cache(cache_dir / CACHE_FILE).get("manifest")
        return manifest if isinstance(manifest, str) else None

    # -- restoring -------------------------------------------------------------------------

    def latest(self, tenant: str, session: str) -> str | None:
        """The sha256 of the session's newest manifest (None: never snapshotted, or idle
        past the sessions' TTL)."""
        try:
            with self.store.open(pointer_key(tenant, session)) as reader:
                text = reader.read(128).decode("ascii", "replace")
        except ObjectNotFound:
            return None
        sha, _, taken = text.strip().partition(" ")
        try:
            when = float(taken)
        except ValueError:
            when = math.nan
        if not _SHA256.match(sha) or not math.isfinite(when):
            raise SnapshotError(f"session {session!r}: its snapshot pointer is invalid")
        if self.clock() - when > self.ttl:
            return None  # the session expired (its worker's sweep leaves the pointer: it may have moved)
        return sha

    def restore(
        self, tenant: str, session: str, work: Path, owner: Owner, *, sha: str | None = None
    ) -> Snapshot | None:
        """Rebuild the session's newest snapshot (or manifest ``sha``) in the empty folder
        ``work`` (files and folders owned by ``owner``); None when the session was never
        snapshotted.  The session's folder (``work``'s parent) remembers what it holds."""
        sha = sha or self.latest(tenant, session)
        if sha is None:
            return None
        items = parse_manifest(
            trees.read_bounded(self.store, sha, lambda why: SnapshotError(f"session {session!r}: manifest {why}")),
            session,
        )
        total = 0
        with Tree(work) as tree:
            for item in items:
                path = PurePosixPath(item.path)
                if item.kind == "dir":
                    tree.make_dirs(path, owner=owner, what=f"snapshot folder {item.path!r}")
                elif item.kind == "link":
                    tree.make_link(path, item.target, owner=owner, what=f"snapshot link {item.path!r}")
                else:
                    with self.store.open_blob(item.sha256) as content:
                        total += tree.write(
                            path, content, owner=owner, mode=item.mode, what=f"snapshot file {item.path!r}"
                        )
            for item in reversed(items):  # folder modes last (a read-only folder takes no files)
                if item.kind == "dir" and item.mode != 0o755:
                    tree.set_mode(PurePosixPath(item.path), item.mode)
        _save_cache(work.parent / CACHE_FILE, {"manifest": sha, "files": {}})
        return Snapshot(sha, len(items), total, total, 0)

    def forget(self, tenant: str, session: str) -> None:
        """The session ended: later sessions of that name start empty."""
        self.store.delete(pointer_key(tenant, session))


def parse_manifest(raw: bytes, session: str) -> list[Item]:
    """The items of a manifest, each checked (the store is outside the service)."""

    def bad(why: str) -> SnapshotError:
        return SnapshotError(f"session {session!r}: its snapshot manifest is invalid ({why})")

    items: list[Item] = []
    for path, kind, raw_item in trees.manifest_entries(raw, bad, max_depth=MAX_DEPTH):
        mode, sha, size, target = (raw_item.get(k) for k in ("mode", "sha256", "size", "target"))
        if kind not in ("dir", "file", "link") or not isinstance(mode, int) or mode & ~0o1777:
            raise bad(f"entry {path!r}")
        if kind == "file":
            if not isinstance(sha, str) or not _SHA256.match(sha) or not isinstance(size, int):
                raise bad(f"file {path!r}")
            items.append(Item(path, "file", mode, sha, size))
        elif kind == "link":
            if not isinstance(target, str) or not target or "\0" in target or len(target) > 4096:
                raise bad(f"link {path!r}")
            items.append(Item(path, "link", mode, target=target))
        else:
            items.append(Item(path, "dir", mode))
    return items


def _item_json(item: Item) -> dict[str, Any]:
    body: dict[str, Any] = {"path": item.path, "kind": item.kind, "mode": item.mode}
    if item.kind == "file":
        body.update(sha256=item.sha256, size=item.size)
    elif item.kind == "link":
        body["target"] = item.target
    return body


def _load_cache(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _save_cache(path: Path, cache: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(cache, separators=(",", ":")))
    os.replace(tmp, path)
