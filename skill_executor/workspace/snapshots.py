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
checked before anything of it is restored, since the store is outside the service.

Names are bytes, not text: a run may name a file anything Linux allows (a backslash, a
newline, bytes that are not UTF-8, a leading dash, 255 bytes, two spellings of one accented
letter), and such a session must survive its worker.  A manifest of format 2 keeps every
path and link target as the base64 of its bytes (``path_b64``, ``target_b64``); format 1
(text, written before) is still read.  A restore refuses only what is unsafe, never what is
merely unusual: an absolute path, an empty, ``.`` or ``..`` component, a NUL, a component
over 255 bytes, a path seen twice, an entry below a link or a file (it would be written
through it), a kind but folder, file and link (device nodes, FIFOs, sockets), set-id bits,
unbounded sizes.  A link's target is kept as it is (an absolute one, ``../x``): it is only
ever followed inside the sandbox, where it means what it meant to the run; the service
never follows a link in ``work/``.  Every snapshot is parsed with the restore's own checks
before it becomes the session's newest (:meth:`SessionSnapshots.take`): one that could not
be restored is refused when it is taken, the previous one stays, and the run's result says
why -- a session is never silently unrecoverable.
"""

from __future__ import annotations

import base64
import binascii
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
from ..objects.trees import MAX_ENTRIES as MAX_MANIFEST_ENTRIES
from .fs import MAX_DEPTH, MAX_ENTRIES, Owner, Tree

log = logging.getLogger(__name__)

#: The manifest format written (names as the base64 of their bytes); formats read.
FORMAT = 2
FORMATS = (1, 2)
#: The longest name of one folder entry, and of a link's target (Linux: NAME_MAX, PATH_MAX - 1).
NAME_MAX = 255
TARGET_MAX = 4095
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


def unkept_key(tenant: str, session: str) -> str:
    """Where a snapshot that failed says why (until one succeeds): a restore elsewhere tells
    the session's next run that its ``work/`` is older than its last run left it."""
    return f"sessions/{tenant}/{session}/unkept"


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
        the tree could not be read whole or would not restore (the previous snapshot stays
        the session's, and the store remembers why: :func:`unkept_key`)."""
        cache_path = cache_dir / CACHE_FILE
        loaded = _load_cache(cache_path)
        try:
            taken = self._take(tenant, session, work, cache_path, loaded.get("files", {}))
        except SnapshotError as exc:
            if not exc.details.get("moved"):
                self._unkept(tenant, session, exc.message, cache_path, loaded)
            raise
        if loaded.get("unkept"):  # this one is whole again: nothing older to warn about
            self.store.delete(unkept_key(tenant, session))
        return taken

    def _unkept(self, tenant: str, session: str, why: str, cache_path: Path, cache: dict[str, Any]) -> None:
        record = {"reason": why[:2000], "at": round(self.clock(), 3)}
        try:
            self.store.put_stream(unkept_key(tenant, session), io.BytesIO(json.dumps(record).encode()))
            _save_cache(cache_path, {**cache, "unkept": True})
        except Exception:  # the run's warning says it all the same
            log.exception("session %s: could not record why its snapshot failed", session)

    def _take(self, tenant: str, session: str, work: Path, cache_path: Path, cache: dict[str, Any]) -> Snapshot:
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
        try:  # what a restore would refuse is refused now, while this worker still holds the files
            parse_manifest(manifest, session)
        except SnapshotError as exc:
            raise SnapshotError(
                f"session {session!r}: work/ holds what a snapshot could not restore ({exc.message}); "
                "not snapshotted: the session stays on this worker, and its previous snapshot is its newest"
            ) from None
        sha, _ = self.store.put_blob(io.BytesIO(manifest))
        if self.holds is not None and not self.holds(tenant, session):
            # a worker that lost its lease (paused past it): the session moved on without it
            raise SnapshotError(
                f"session {session!r}: this worker no longer holds the session; its work/ is not kept",
                details={"moved": True},
            )
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

    def unkept(self, tenant: str, session: str) -> str | None:
        """Why the session's last snapshot failed, when its newest is older than its last
        run left it (None: the newest snapshot is its last run's)."""
        try:
            with self.store.open(unkept_key(tenant, session)) as reader:
                record = json.loads(reader.read(8192))
        except ObjectNotFound:
            return None
        except ValueError:
            return "unknown"
        reason = record.get("reason") if isinstance(record, dict) else None
        return str(reason) if reason else "unknown"

    def forget(self, tenant: str, session: str) -> None:
        """The session ended: later sessions of that name start empty."""
        self.store.delete(pointer_key(tenant, session))
        self.store.delete(unkept_key(tenant, session))


def parse_manifest(raw: bytes, session: str) -> list[Item]:
    """The items of a manifest (format 1 or 2), each checked (the store is outside the
    service): what is unsafe to restore is refused, whatever else a name holds is kept."""

    def bad(why: str) -> SnapshotError:
        return SnapshotError(f"session {session!r}: its snapshot manifest is invalid ({why})")

    try:
        data = json.loads(raw)
    except ValueError:
        raise bad("not JSON") from None
    if not isinstance(data, dict) or data.get("format") not in FORMATS or not isinstance(data.get("items"), list):
        raise bad("unknown format")
    if len(data["items"]) > MAX_MANIFEST_ENTRIES:
        raise bad("too many entries")
    binary = data["format"] >= 2
    items: list[Item] = []
    kinds: dict[bytes, str] = {}
    for raw_item in data["items"]:
        if not isinstance(raw_item, dict):
            raise bad("an entry is not an object")
        path = _name(raw_item.get("path_b64" if binary else "path"), binary)
        shown = _show(path if path is not None else b"?")
        if path is None or not safe_name(path):
            raise bad(f"path {shown}")
        if path in kinds:
            raise bad(f"path {shown} is there twice")
        kind, mode = raw_item.get("kind"), raw_item.get("mode")
        if kind not in ("dir", "file", "link") or isinstance(mode, bool) or not isinstance(mode, int):
            raise bad(f"entry {shown} (kind {str(kind)[:20]!r}: only folders, files and links are restored)")
        if mode & ~0o1777 or mode < 0:
            raise bad(f"entry {shown} (mode {mode:#o}: no set-id bits)")
        name = os.fsdecode(path)
        if kind == "file":
            sha, size = raw_item.get("sha256"), raw_item.get("size")
            if not isinstance(sha, str) or not _SHA256.match(sha):
                raise bad(f"file {shown} (sha256)")
            if isinstance(size, bool) or not isinstance(size, int) or size < 0:
                raise bad(f"file {shown} (size)")
            items.append(Item(name, "file", mode, sha, size))
        elif kind == "link":
            target = _name(raw_item.get("target_b64" if binary else "target"), binary)
            if target is None or not target or b"\0" in target or len(target) > TARGET_MAX:
                raise bad(f"link {shown} (target)")
            items.append(Item(name, "link", mode, target=os.fsdecode(target)))
        else:
            items.append(Item(name, "dir", mode))
        kinds[path] = kind
    for path in kinds:  # below a link or a file, it would be written through it (or fail half way)
        parent = path.rpartition(b"/")[0]
        while parent and parent not in kinds:  # up to the nearest entry (checked itself the same way)
            parent = parent.rpartition(b"/")[0]
        if parent and kinds[parent] != "dir":
            raise bad(f"{_show(path)} lies below a {kinds[parent]}")
    return items


def safe_name(path: bytes, max_depth: int = MAX_DEPTH) -> bool:
    """A relative ``/``-separated path of bytes that a restore may make below ``work/``: no
    NUL, not absolute, no empty, ``.`` or ``..`` component, at most ``max_depth`` components
    of at most :data:`NAME_MAX` bytes each.  Anything else a name holds is the run's business."""
    if not path or path.startswith(b"/") or b"\0" in path:
        return False
    parts = path.split(b"/")
    return len(parts) <= max_depth and all(p not in (b"", b".", b"..") and len(p) <= NAME_MAX for p in parts)


def _name(value: object, binary: bool) -> bytes | None:
    """The bytes of a path or link target as a manifest keeps it (None: not one)."""
    if not isinstance(value, str):
        return None
    if not binary:  # format 1: text (a name that was not UTF-8 as lone surrogates)
        try:
            return os.fsencode(value)
        except UnicodeEncodeError:
            return None
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error, ValueError):
        return None


def _b64(name: str) -> str:
    return base64.b64encode(os.fsencode(name)).decode("ascii")


def _show(path: bytes) -> str:
    """A path for a message: escaped, bounded."""
    return repr(os.fsdecode(path[:120]))


def _item_json(item: Item) -> dict[str, Any]:
    body: dict[str, Any] = {"path_b64": _b64(item.path), "kind": item.kind, "mode": item.mode}
    if item.kind == "file":
        body.update(sha256=item.sha256, size=item.size)
    elif item.kind == "link":
        body["target_b64"] = _b64(item.target)
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
