"""The skill registry: immutable, content-addressed versions of every skill, pointers, an audit log.

Layout under ``<data_dir>/registry/``::

    .lock                    flock: one writer of this folder at a time (publish, deletes, GC)
    blobs/<aa>/<sha256>      file contents, read-only (0444); ``<sha256>.x`` the executable variant (0555)
    versions/<id>/<n>/<dir>/ version ``n`` of skill ``id``: folders (0755) of hard links to the blobs
    staging/<uuid>/          a version being built (renamed into place in one step); swept at start
    trash/<uuid>/            a deleted version on its way out

The index -- skills (pointers, next number), their versions (manifests), the audit log --
is in the service's database (:mod:`.index`); ``index.db`` here is an older service's,
imported by the database layer and otherwise left alone.

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
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..db import Database
from ..errors import Conflict, NotFound
from ..objects import ObjectStore
from ..skills.loader import SkillLoadError, find_skill_file, load_skill
from ..skills.model import Skill
from .blobs import folder_signature, materialise
from .index import RegistryIndex
from .manifest import AuditEntry, FileDigest, Version, manifest_digest
from .refs import VersionRef, parse_version
from .remote import build, upload

__all__ = ["AuditEntry", "FileDigest", "Registry", "Version", "manifest_digest"]

log = logging.getLogger(__name__)

SYSTEM_ACTOR = "system"


def no_default(skill_id: str, latest: int) -> Conflict:
    """409 ``skill_no_default``: the skill was published without a default and none was set since."""
    return Conflict(
        f"skill {skill_id!r} has no default version (it was published with no_default): name a version "
        f"({skill_id}@{latest}, {skill_id}@latest) or set its default (PATCH /v1/skills/{skill_id} "
        f'{{"default_version": {latest}}}, or: skill-executor skills pin {skill_id} {latest})',
        code="skill_no_default",
    )


class Registry:
    """Versions of skills under ``root``, indexed in ``database``. Thread-safe; several
    processes may share ``root`` and the database (or only the database, each with its root)."""

    def __init__(self, root: Path, *, database: Database, objects: ObjectStore | None = None) -> None:
        self.root = root
        #: where every version's blobs are put before its row commits, and fetched from by a
        #: process that lacks its folder (None: versions live on this machine only)
        self.objects = objects
        self.blobs = root / "blobs"
        self.versions_dir = root / "versions"
        self.staging = root / "staging"
        self.trash = root / "trash"
        for folder in (self.blobs, self.versions_dir, self.staging, self.trash):
            folder.mkdir(parents=True, exist_ok=True)
        self.index = RegistryIndex(database)
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
        """The writer lock of ``root`` (re-entrant in a thread; an flock across processes).  It
        guards the folders; the index's consistency is its own (:mod:`.index`)."""
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
                if self.objects is not None:  # before the row: a row never names content the store lacks
                    upload(self.objects, self.blobs, files)
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
        placed: list[Path] = []

        def place(number: int) -> None:
            final = self.versions_dir / skill_id / str(number)
            if final.exists():  # left by a crash between the rename and the commit: no row refers to it
                shutil.rmtree(final)
            final.parent.mkdir(parents=True, exist_ok=True)
            os.rename(stage, final)
            placed.append(final)

        try:
            version, created = self.index.record(
                skill_id,
                digest,
                files,
                dirname=dirname,
                actor=actor,
                source=source,
                set_default=set_default,
                place=place,
            )
        except BaseException:
            for final in placed:  # the transaction did not commit: no row refers to it
                shutil.rmtree(final, ignore_errors=True)
            raise
        final = self.versions_dir / skill_id / str(version.number)
        if not created and version.dirname == dirname and not final.exists():
            # published by another machine with this content: the staged copy is its folder here
            final.parent.mkdir(parents=True, exist_ok=True)
            os.rename(stage, final)
        return version, created

    # -- reading -------------------------------------------------------------------------

    def pointers(self, skill_id: str) -> tuple[int | None, int | None]:
        default, latest, _ = self.index.pointers(skill_id)
        return default, latest

    def default_held(self, skill_id: str) -> bool:
        """True when the default was set explicitly (not to ``latest``): a folder change does not move it."""
        return self.index.pointers(skill_id)[2]

    def versions(self, skill_id: str) -> list[Version]:
        return self.index.versions(skill_id)

    def version(self, skill_id: str, ref: VersionRef | str | int | None = None) -> Version:
        """A version by number, ``latest``, ``default`` (None) or ``sha256:<hex>``; 404 when none.

        ``ref`` goes through :func:`.refs.parse_version`: anything else is 400 ``invalid_version``.
        """
        wanted = parse_version("default" if ref is None else ref)
        found = self.index.find(skill_id, wanted)
        if found is None:
            if wanted.kind == "default":
                latest = self.index.pointers(skill_id)[1]
                if latest is not None:
                    raise no_default(skill_id, latest)
            raise NotFound(f"skill {skill_id!r} has no version {wanted}", code="version_not_found")
        return found

    def folder(self, version: Version) -> Path:
        """The version's read-only skill folder."""
        return self.versions_dir / version.skill / str(version.number) / version.dirname

    def load(self, version: Version) -> Skill:
        """The skill as of ``version`` (its path is the immutable version folder)."""
        key = (version.skill, version.number)
        skill = self._loaded.get(key)
        if skill is None or skill.digest != version.digest:
            self.fetch(version)
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

    def fetch(self, version: Version) -> Path:
        """The version's folder on this machine, built from its manifest and the object store
        when absent (published elsewhere): atomically (staged, then renamed), once however many
        threads and processes ask at a time (under the writer lock).  A failure leaves nothing:
        no folder, no staging, no blob it fetched."""
        final = self.versions_dir / version.skill / str(version.number)
        if final.is_dir():
            return final
        if self.objects is None:
            raise NotFound(
                f"version {version.number} of skill {version.skill!r} is not on this machine and no object "
                "store is configured to fetch it from",
                code="version_not_found",
            )
        with self.writing():
            if final.is_dir():  # another thread or process built it meanwhile
                return final
            stage = self.staging / uuid.uuid4().hex
            stage.mkdir()
            fetched: list[Path] = []
            try:
                build(self.objects, version, self.blobs, stage, fetched)
                final.parent.mkdir(parents=True, exist_ok=True)
                os.rename(stage, final)
            except BaseException:
                shutil.rmtree(stage, ignore_errors=True)
                for blob in fetched:  # linked nowhere now
                    with contextlib.suppress(FileNotFoundError):
                        if blob.stat().st_nlink == 1:
                            blob.unlink()
                raise
            finally:
                shutil.rmtree(stage, ignore_errors=True)
            log.info("fetched version %d of skill %s (%d blobs)", version.number, version.skill, len(fetched))
        return final

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
            return self.index.set_default(skill_id, wanted, actor=actor)

    def delete_version(self, skill_id: str, ref: str | int, *, actor: str) -> Version:
        """Delete one version: not the default (409 ``version_is_default``), not one in use (409)."""
        with self.writing():
            version = self.version(skill_id, ref)
            if version.is_default:
                raise Conflict(
                    f"version {version.number} is the default of skill {skill_id!r}; set another default first",
                    code="version_is_default",
                )
            self._remove([version], actor, "delete_version", keep_default=True)
            return version

    def delete_skill(self, skill_id: str, *, actor: str) -> list[Version]:
        """Delete every version of a skill (refused when any is in use); numbers are never reused."""
        with self.writing():
            versions = self.versions(skill_id)
            self._remove(versions, actor, "delete_skill", keep_default=False)
            return versions

    def _remove(self, versions: list[Version], actor: str, action: str, *, keep_default: bool) -> None:
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
            deleted = (
                self.index.remove(versions[0].skill, versions, actor=actor, action=action, keep_default=keep_default)
                if versions
                else set()
            )
            # no row refers to any of these folders now (whichever process deleted the rows)
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
        if keep_default and not deleted:  # another process deleted it meanwhile
            raise NotFound(f"skill {versions[0].skill!r} has no version {versions[0].number}", code="version_not_found")

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
            found = self.index.find(skill_id, parse_version(number)) if self.objects is not None else None
            if found is None:
                raise gone from None
            self.fetch(found)  # published on another machine: built here first
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

    def audit(self, skill_id: str | None = None, *, limit: int = 100) -> list[AuditEntry]:
        """The newest entries first (by ``id``: the order they were written)."""
        return self.index.audit(skill_id, limit)
