"""The skill registry: immutable, content-addressed versions of every skill, pointers, an audit log.

Layout under ``<data_dir>/registry/``::

    index.db                 SQLite: skills (pointers, next number), versions (manifest), audit
    .lock                    flock: one writer at a time (publish, pointer changes, deletes, GC)
    blobs/<aa>/<sha256>      file contents, read-only (0444); ``<sha256>.x`` the executable variant (0555)
    versions/<id>/<n>/<dir>/ version ``n`` of skill ``id``: folders (0755) of hard links to the blobs
    staging/<uuid>/          a version being built (renamed into place in one step); swept at start
    trash/<uuid>/            a deleted version on its way out

A version's digest is ``sha256`` over its manifest in a canonical byte encoding
(:func:`manifest_digest`): for every file, in ascending byte order of its UTF-8 path
relative to the skill folder, ``path || 0x00 || hex(sha256(content)) || 0x0A`` (a
symbolic link: ``path || 0x00 || "link:" || hex(sha256(target)) || 0x0A``).  File
modes, times and empty folders are not part of it.

Version numbers are consecutive per skill and never reused (``skills.next_version``
survives deletes).  Publishing content whose digest equals the skill's *latest* version
returns that version (``created`` False): a re-run CI job is idempotent.  Any other
content -- a revert to an older version's content included -- is a new number.

A run holds a :meth:`Registry.lease` on its version folder (a shared ``flock``) while it
runs; deleting a version takes the lock exclusively without waiting, so a version in
use is refused (409 ``version_in_use``), never removed underneath a run.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import Conflict, NotFound
from ..skills.loader import SkillLoadError, find_skill_file, load_skill
from ..skills.model import Skill
from ..sqlite import ThreadLocalDB
from .blobs import folder_signature, materialise
from .manifest import AuditEntry, FileDigest, Version, manifest_digest
from .refs import VersionRef, parse_version

__all__ = ["AuditEntry", "FileDigest", "Registry", "Version", "manifest_digest"]

log = logging.getLogger(__name__)

SYSTEM_ACTOR = "system"


_COLUMNS = "skill, version, digest, created_at, source, actor, dirname, manifest"


class Registry:
    """Versions of skills under ``root``. Thread-safe; several processes may share ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.blobs = root / "blobs"
        self.versions_dir = root / "versions"
        self.staging = root / "staging"
        self.trash = root / "trash"
        for folder in (self.blobs, self.versions_dir, self.staging, self.trash):
            folder.mkdir(parents=True, exist_ok=True)
        self._sqlite = ThreadLocalDB(root / "index.db")
        self._sqlite.db().executescript(
            """
            CREATE TABLE IF NOT EXISTS skills (
                skill TEXT PRIMARY KEY, next_version INTEGER NOT NULL,
                default_version INTEGER, latest_version INTEGER, default_held INTEGER NOT NULL DEFAULT 0);
            CREATE TABLE IF NOT EXISTS versions (
                skill TEXT NOT NULL, version INTEGER NOT NULL, digest TEXT NOT NULL, created_at REAL NOT NULL,
                source TEXT NOT NULL, actor TEXT NOT NULL, dirname TEXT NOT NULL, manifest TEXT NOT NULL,
                PRIMARY KEY (skill, version));
            CREATE INDEX IF NOT EXISTS versions_digest ON versions (skill, digest);
            CREATE TABLE IF NOT EXISTS audit (
                id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, actor TEXT NOT NULL, action TEXT NOT NULL,
                skill TEXT NOT NULL, version INTEGER, digest TEXT, detail TEXT);
            """
        )
        columns = {row[1] for row in self._sqlite.db().execute("PRAGMA table_info(skills)")}
        if "default_held" not in columns:  # an index made before held defaults
            self._sqlite.db().execute("ALTER TABLE skills ADD COLUMN default_held INTEGER NOT NULL DEFAULT 0")
        self._thread_lock = threading.RLock()
        self._depth = 0
        self._lock_fd = -1
        #: folder -> (signature, digest, number, when the signature was last taken)
        self._observed: dict[Path, tuple[tuple[Any, ...], str, int, float]] = {}
        self._loaded: dict[tuple[str, int], Skill] = {}
        self._leases: dict[tuple[str, int], int] = {}
        self._leases_lock = threading.Lock()  # not the writer's: a long publish must not hold runs up
        with self.writing():
            for leftover in [*self.staging.iterdir(), *self.trash.iterdir()]:
                shutil.rmtree(leftover, ignore_errors=True)
            for partial in self.blobs.glob(".tmp-*"):  # a blob a crashed publish was writing
                partial.unlink(missing_ok=True)

    # -- locking -------------------------------------------------------------------------

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """The writer lock (re-entrant in a thread; an flock across processes)."""
        with self._thread_lock:
            if self._depth == 0:
                fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                except BaseException:
                    os.close(fd)
                    raise
                self._lock_fd = fd
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0:
                    os.close(self._lock_fd)
                    self._lock_fd = -1

    def _db(self) -> Any:
        return self._sqlite.db()

    # -- publishing ----------------------------------------------------------------------

    def publish(
        self, skill_id: str, folder: Path, *, actor: str, source: str = "upload", set_default: bool = True
    ) -> tuple[Version, bool]:
        """Snapshot ``folder`` as the next version of ``skill_id``; returns (version, created)."""
        with self.writing():
            stage = self.staging / uuid.uuid4().hex
            stage.mkdir()
            try:
                target = stage / folder.name
                target.mkdir(mode=0o755)
                files = materialise(folder, target, self.blobs)
                digest = manifest_digest([(f.path, f.digest_field) for f in files])
                return self._commit(skill_id, stage, folder.name, files, digest, actor, source, set_default)
            finally:
                shutil.rmtree(stage, ignore_errors=True)

    def _commit(
        self,
        skill_id: str,
        stage: Path,
        dirname: str,
        files: list[FileDigest],
        digest: str,
        actor: str,
        source: str,
        set_default: bool,
    ) -> tuple[Version, bool]:
        """Record the staged version (or return the latest, when it has this content).

        An upload moves the default when ``set_default`` (and then the default follows
        again).  A folder observation (``source="folder"``) moves it only while it follows:
        after an explicit :meth:`set_default` to anything but ``latest`` it is *held*, and
        a changed folder becomes a new latest version that is not the default.
        """
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            row = db.execute(
                "SELECT next_version, default_version, latest_version, default_held FROM skills WHERE skill = ?",
                (skill_id,),
            ).fetchone()
            next_version, default, latest, held = row if row else (1, None, None, 0)
            observed = source == "folder"
            if latest is not None:
                current = db.execute(
                    "SELECT digest FROM versions WHERE skill = ? AND version = ?", (skill_id, latest)
                ).fetchone()
                if current is not None and current[0] == digest:
                    if set_default and not observed and (default != latest or held):
                        db.execute(
                            "UPDATE skills SET default_version = ?, default_held = 0 WHERE skill = ?",
                            (latest, skill_id),
                        )
                        self._audit(db, actor, "set_default", skill_id, latest, digest, "re-published")
                    db.execute("COMMIT")
                    return self.version(skill_id, latest), False
            number = next_version
            now = time.time()
            final = self.versions_dir / skill_id / str(number)
            if final.exists():  # left by a crash between the rename and the commit: no row refers to it
                shutil.rmtree(final)
            final.parent.mkdir(parents=True, exist_ok=True)
            manifest = json.dumps([f.to_dict() for f in files])
            db.execute(
                f"INSERT INTO versions ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (skill_id, number, digest, now, source, actor, dirname, manifest),
            )
            moves = default is None or (set_default and not (observed and held))
            new_default, new_held = (number, 0) if moves else (default, held)
            db.execute(
                "INSERT INTO skills (skill, next_version, default_version, latest_version, default_held) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT(skill) DO UPDATE SET next_version = excluded.next_version, "
                "default_version = excluded.default_version, latest_version = excluded.latest_version, "
                "default_held = excluded.default_held",
                (skill_id, number + 1, new_default, number, new_held),
            )
            self._audit(
                db,
                actor,
                "publish",
                skill_id,
                number,
                digest,
                f"source={source} default={new_default}" + (" (held)" if new_held else ""),
            )
            os.rename(stage, final)
            try:
                db.execute("COMMIT")
            except BaseException:
                shutil.rmtree(final, ignore_errors=True)
                raise
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        return self.version(skill_id, number), True

    # -- reading -------------------------------------------------------------------------

    def _row_to_version(self, row: tuple[Any, ...], pointers: tuple[Any, ...] | None) -> Version:
        skill, number, digest, created_at, source, actor, dirname, manifest = row
        files = tuple(FileDigest(**f) for f in json.loads(manifest))
        default, latest = pointers if pointers else (None, None)
        return Version(
            skill,
            number,
            digest,
            created_at,
            source,
            actor,
            dirname,
            files,
            is_default=number == default,
            is_latest=number == latest,
        )

    def _pointers(self, skill_id: str) -> tuple[Any, ...] | None:
        row: tuple[Any, ...] | None = (
            self._db()
            .execute("SELECT default_version, latest_version FROM skills WHERE skill = ?", (skill_id,))
            .fetchone()
        )
        return row

    def pointers(self, skill_id: str) -> tuple[int | None, int | None]:
        row = self._pointers(skill_id)
        return (row[0], row[1]) if row else (None, None)

    def default_held(self, skill_id: str) -> bool:
        """True when the default was set explicitly (not to ``latest``): a folder change does not move it."""
        row = self._db().execute("SELECT default_held FROM skills WHERE skill = ?", (skill_id,)).fetchone()
        return bool(row and row[0])

    def versions(self, skill_id: str) -> list[Version]:
        rows = (
            self._db()
            .execute(f"SELECT {_COLUMNS} FROM versions WHERE skill = ? ORDER BY version", (skill_id,))
            .fetchall()
        )
        pointers = self._pointers(skill_id)
        return [self._row_to_version(r, pointers) for r in rows]

    def version(self, skill_id: str, ref: VersionRef | str | int | None = None) -> Version:
        """A version by number, ``latest``, ``default`` (None) or ``sha256:<hex>``; 404 when none.

        ``ref`` goes through :func:`.refs.parse_version`: anything else is 400 ``invalid_version``.
        """
        wanted = parse_version("default" if ref is None else ref)
        db = self._db()
        pointers = self._pointers(skill_id)
        if wanted.kind == "digest":
            row = db.execute(
                f"SELECT {_COLUMNS} FROM versions WHERE skill = ? AND digest = ? ORDER BY version DESC LIMIT 1",
                (skill_id, wanted.digest),
            ).fetchone()
        else:
            number = (
                wanted.number
                if wanted.kind == "number"
                else (pointers[0 if wanted.kind == "default" else 1] if pointers else None)
            )
            row = (
                db.execute(
                    f"SELECT {_COLUMNS} FROM versions WHERE skill = ? AND version = ?", (skill_id, number)
                ).fetchone()
                if number is not None
                else None
            )
        if row is None:
            raise NotFound(f"skill {skill_id!r} has no version {wanted}", code="version_not_found")
        return self._row_to_version(row, pointers)

    def folder(self, version: Version) -> Path:
        """The version's read-only skill folder."""
        return self.versions_dir / version.skill / str(version.number) / version.dirname

    def load(self, version: Version) -> Skill:
        """The skill as of ``version`` (its path is the immutable version folder)."""
        key = (version.skill, version.number)
        skill = self._loaded.get(key)
        if skill is None or skill.digest != version.digest:
            try:
                skill = load_skill(self.folder(version))
            except SkillLoadError as exc:
                raise NotFound(
                    f"version {version.number} of skill {version.skill!r} cannot be loaded: {exc}",
                    code="version_not_found",
                ) from None
            skill.version, skill.digest = version.number, version.digest
            self._loaded[key] = skill
        return skill

    # -- folder skills: a change on disk is a new version --------------------------------

    def observe(self, skill_id: str, folder: Path, *, max_age: float = 0.0) -> Version:
        """The version matching ``folder``'s current content, published if it changed.

        ``max_age``: a signature taken less than this many seconds ago is trusted without
        walking the folder again (the catalog's own refresh interval: an edit shows within
        it, as in the overview).  Records stay truthful either way: a run copies the
        version's immutable folder, never the live one.
        """
        if find_skill_file(folder) is None:  # removed since the catalog saw it
            raise NotFound(f"unknown skill {skill_id!r}: {folder} holds no SKILL.md", code="skill_not_found")
        seen = self._observed.get(folder)
        now = time.monotonic()
        fresh = seen is not None and max_age > 0 and now - seen[3] < max_age
        signature = seen[0] if fresh and seen is not None else folder_signature(folder)
        if seen is not None and seen[0] == signature:
            with contextlib.suppress(NotFound):
                found = self.version(skill_id, seen[2])
                if found.digest == seen[1]:
                    if not fresh:
                        self._observed[folder] = (*seen[:3], now)
                    return found
        version, _ = self.publish(skill_id, folder, actor=SYSTEM_ACTOR, source="folder")
        self._observed[folder] = (signature, version.digest, version.number, now)
        return version

    # -- pointers and deletes ------------------------------------------------------------

    def set_default(self, skill_id: str, ref: VersionRef | str | int, *, actor: str) -> Version:
        """Point the default at a version (a rollback, a promotion).  It then holds -- a changed
        folder of a folder-root skill no longer moves it -- unless ``ref`` is ``latest``, which
        makes the default follow the latest version again."""
        wanted = parse_version(ref)
        with self.writing():
            version = self.version(skill_id, wanted)
            held = wanted.kind != "latest"
            db = self._db()
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute(
                    "UPDATE skills SET default_version = ?, default_held = ? WHERE skill = ?",
                    (version.number, int(held), skill_id),
                )
                self._audit(
                    db,
                    actor,
                    "set_default",
                    skill_id,
                    version.number,
                    version.digest,
                    "held" if held else "follows latest",
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            return self.version(skill_id, version.number)

    def delete_version(self, skill_id: str, ref: str | int, *, actor: str) -> Version:
        """Delete one version: not the default (409 ``version_is_default``), not one in use (409)."""
        with self.writing():
            version = self.version(skill_id, ref)
            if version.is_default:
                raise Conflict(
                    f"version {version.number} is the default of skill {skill_id!r}; set another default first",
                    code="version_is_default",
                )
            self._remove([version], actor, "delete_version")
            return version

    def delete_skill(self, skill_id: str, *, actor: str) -> list[Version]:
        """Delete every version of a skill (refused when any is in use); numbers are never reused."""
        with self.writing():
            versions = self.versions(skill_id)
            self._remove(versions, actor, "delete_skill")
            return versions

    def _remove(self, versions: list[Version], actor: str, action: str) -> None:
        locks: list[int] = []
        try:
            for version in versions:
                folder = self.versions_dir / version.skill / str(version.number)
                try:
                    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                except FileNotFoundError:
                    continue
                locks.append(fd)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise Conflict(
                        f"version {version.number} of skill {version.skill!r} is in use by a run or a "
                        "download; try again when it has finished",
                        code="version_in_use",
                    ) from None
            db = self._db()
            db.execute("BEGIN IMMEDIATE")
            try:
                for version in versions:
                    db.execute("DELETE FROM versions WHERE skill = ? AND version = ?", (version.skill, version.number))
                    self._audit(db, actor, action, version.skill, version.number, version.digest, None)
                if versions:
                    skill_id = versions[0].skill
                    left = db.execute("SELECT MAX(version) FROM versions WHERE skill = ?", (skill_id,)).fetchone()[0]
                    db.execute(
                        "UPDATE skills SET latest_version = ?, default_version = CASE WHEN ? IS NULL "
                        "THEN NULL ELSE default_version END, default_held = CASE WHEN ? IS NULL THEN 0 "
                        "ELSE default_held END WHERE skill = ?",
                        (left, left, left, skill_id),
                    )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            for version in versions:
                folder = self.versions_dir / version.skill / str(version.number)
                gone = self.trash / uuid.uuid4().hex
                with contextlib.suppress(FileNotFoundError):
                    os.rename(folder, gone)
                shutil.rmtree(gone, ignore_errors=True)
                self._loaded.pop((version.skill, version.number), None)
        finally:
            for fd in locks:
                os.close(fd)
        self.collect_garbage()

    def collect_garbage(self) -> int:
        """Remove blobs no version links to any more; returns how many."""
        removed = 0
        with self.writing():
            for sub in self.blobs.iterdir():
                if not sub.is_dir():
                    continue
                for blob in sub.iterdir():
                    with contextlib.suppress(FileNotFoundError):
                        if blob.stat().st_nlink == 1:
                            blob.unlink()
                            removed += 1
        return removed

    # -- leases --------------------------------------------------------------------------

    @contextlib.contextmanager
    def lease(self, skill: Skill) -> Iterator[None]:
        """Hold ``skill``'s version (a shared flock on its folder) so it cannot be deleted meanwhile."""
        if skill.version is None:
            yield
            return
        with self.hold(skill.id, skill.version):
            yield

    @contextlib.contextmanager
    def hold(self, skill_id: str, number: int) -> Iterator[None]:
        """:meth:`lease` by version: a run, or a download streaming the version's files."""
        folder = self.versions_dir / skill_id / str(number)
        gone = NotFound(f"version {number} of skill {skill_id!r} was deleted", code="version_not_found")
        try:
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise gone from None
        key = (skill_id, number)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            try:
                if os.stat(folder).st_ino != os.fstat(fd).st_ino:
                    raise gone
            except FileNotFoundError:
                raise gone from None
            with self._leases_lock:
                self._leases[key] = self._leases.get(key, 0) + 1
            try:
                yield
            finally:
                with self._leases_lock:
                    self._leases[key] -= 1
                    if not self._leases[key]:
                        del self._leases[key]
        finally:
            os.close(fd)

    def in_use(self, skill_id: str, number: int) -> int:
        """How many runs (and downloads) of this process hold the version."""
        return self._leases.get((skill_id, number), 0)

    # -- audit ---------------------------------------------------------------------------

    @staticmethod
    def _audit(
        db: Any, actor: str, action: str, skill: str, version: int | None, digest: str | None, detail: str | None
    ) -> None:
        db.execute(
            "INSERT INTO audit (at, actor, action, skill, version, digest, detail) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (time.time(), actor, action, skill, version, digest, detail),
        )

    def audit(self, skill_id: str | None = None, *, limit: int = 100) -> list[AuditEntry]:
        db = self._db()
        cols = "id, at, actor, action, skill, version, digest, detail"
        if skill_id is None:
            rows = db.execute(f"SELECT {cols} FROM audit ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
        else:
            rows = db.execute(
                f"SELECT {cols} FROM audit WHERE skill = ? ORDER BY id DESC LIMIT ?", (skill_id, limit)
            ).fetchall()
        return [AuditEntry(*r) for r in rows]
