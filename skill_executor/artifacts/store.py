"""Versioned artifact store: the interface, and its backend.

The backend keeps metadata in the service's database (:mod:`skill_executor.db`: tables
``artifacts``, ``artifact_counters``, ``orphan_blobs``; SQLite or Postgres, shared by every
process) and content in content-addressed blobs in the object store (a local folder or S3,
shared by every process of a cluster; ``artifacts/sha256/ab/abcdef...``,
:mod:`skill_executor.artifacts.blobs`).

* **Saving streams.**  The content is read in chunks into a locked temp blob (the store's
  spool), hashed as it goes and capped (``max_bytes``) while reading; it is never held in
  memory.  Reads stream from the store too (verified against the SHA-256 when it is remote).
* **Crash safety.**  The temp blob is fsynced, then -- inside the durable transaction that
  inserts the version -- published (or dropped when that content is stored already), so a
  crash leaves no half artifact and no row naming a missing blob; at worst a temp file,
  which the next start-up sweeps.  On a local store publishing is a rename.  On S3 the
  upload is made before that transaction, after the content is noted as an orphan (so a
  crash after the upload leaves a blob the collector removes); the transaction then checks,
  under the lock below, that the blob is still there and uploads it again if a collector
  removed it meanwhile.
* **Versions** are assigned in that transaction too, by one upsert of the name's counter
  that returns the number (the counter row stays locked until the commit): concurrent saves
  of one name, in any process, get distinct consecutive versions, and a number is never
  reused, even after a delete.
* **Deletes and expiry** remove rows and note their blobs as orphans in one transaction;
  :meth:`LocalArtifactStore.collect` then unlinks each orphan no row references any more.
* **A blob is never removed while a save that references it commits**, without any lock
  outside the database: a content's ``orphan_blobs`` row is its lock.  A save first upserts
  that row (taking its lock, or queuing behind whoever holds it), only then places or reuses
  the blob, and deletes the row before it commits.  The collector locks the orphan rows
  nobody holds (``FOR UPDATE SKIP LOCKED``), checks in that transaction that no version
  references them, unlinks those blobs and deletes the rows before it commits.  So either
  the save commits first (the check sees its version, or its row is gone) or the collector
  does (the save, having waited, finds no blob and places its own).  The blob is removed from
  the object store inside the collector's transaction, as a local file was.
* **TTL.**  With ``ttl_seconds`` every version expires that long after it was saved:
  it is invisible to reads at once and removed by :meth:`LocalArtifactStore.expire`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any, BinaryIO, Protocol

from sqlalchemy import Connection, and_, bindparam, delete, func, insert, select
from sqlalchemy.exc import SQLAlchemyError

from ..access import LOCAL_TENANT
from ..config import Settings
from ..db import Database
from ..db.schema import artifact_counters, artifacts, orphan_blobs
from ..errors import ExecutorError, NotFound
from ..objects import ObjectNotFound, ObjectStore, ObjectStoreMisconfigured, ObjectStoreUnavailable
from .blobs import NAMESPACE, TempBlob
from .legacy import import_blobs
from .names import file_id, parse_file_id, validate_name

log = logging.getLogger(__name__)

_CHUNK = 1024 * 1024
#: An artifact row as :class:`ArtifactInfo` takes it.
_COLUMNS = (
    artifacts.c.name,
    artifacts.c.version,
    artifacts.c.size,
    artifacts.c.sha256,
    artifacts.c.mime_type,
    artifacts.c.created_at,
    artifacts.c.run_id,
    artifacts.c.owner,
)
# The statements of the run path (a save, a staged input's lookup), built once.
_INSERT = insert(artifacts)
_UNLOCK_CONTENT = delete(orphan_blobs).where(orphan_blobs.c.sha256 == bindparam("sha"))
_VISIBLE = select(*_COLUMNS).where(
    artifacts.c.owner == bindparam("owner"),
    artifacts.c.name == bindparam("name"),
    artifacts.c.created_at > bindparam("cutoff"),
)
_LATEST = _VISIBLE.order_by(artifacts.c.version.desc()).limit(1)
_VERSION = _VISIBLE.where(artifacts.c.version == bindparam("version"))


class Readable(Protocol):
    def read(self, size: int = ..., /) -> bytes: ...


#: What a save reads: bytes, a binary file (read in chunks) or an iterable of chunks.
Content = bytes | bytearray | memoryview | Readable | Iterable[bytes]


@dataclass(frozen=True, slots=True)
class ArtifactInfo:
    name: str
    version: int
    size: int
    sha256: str
    mime_type: str
    created_at: float
    run_id: str | None = None
    #: The API key (tenant) that owns it; names are per tenant.
    owner: str = LOCAL_TENANT

    @property
    def ref(self) -> str:
        return f"artifact://{self.name}@{self.version}"

    @property
    def file_id(self) -> str:
        """This version's file id (:func:`file_id`)."""
        return file_id(self.owner, self.name, self.version, self.sha256)

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "ref": self.ref, "file_id": self.file_id}


def _missing(name: str, version: int | None = None) -> NotFound:
    which = f"{name}@{version}" if version is not None else name
    return NotFound(f"no artifact {which!r}", code="artifact_not_found")


class ArtifactStore(Protocol):
    """What the pipeline and the API need from an artifact backend.

    Every artifact belongs to one tenant (:mod:`skill_executor.access`); names, versions and
    listings are per tenant, so one key never sees another's artifacts.
    """

    def put(
        self,
        name: str,
        data: Content,
        *,
        mime_type: str = ...,
        run_id: str | None = ...,
        tenant: str = ...,
        max_bytes: int | None = ...,
    ) -> ArtifactInfo: ...

    def info(self, name: str, version: int | None = None, *, tenant: str = ...) -> ArtifactInfo: ...

    def open(self, info: ArtifactInfo) -> BinaryIO: ...

    def by_file_id(self, file_id: str, *, tenant: str = ...) -> ArtifactInfo: ...

    def versions(self, name: str, *, tenant: str = ...) -> list[ArtifactInfo]: ...

    def names(self, *, tenant: str = ...) -> list[ArtifactInfo]: ...

    def delete(self, name: str, version: int | None = None, *, tenant: str = ...) -> list[ArtifactInfo]: ...

    def expire(self, now: float | None = None) -> int: ...


class LocalArtifactStore:
    """Metadata in the service's database, content-addressed blobs in the object store.

    Opening it sweeps the temp blobs of dead writers (:meth:`from_settings` also moves the blobs
    of a data dir from before the object store into it).
    """

    def __init__(self, objects: ObjectStore, *, database: Database, ttl_seconds: float | None = None) -> None:
        if ttl_seconds is not None and ttl_seconds <= 0:
            raise ValueError("ttl_seconds must be positive")
        self.objects = objects
        self.database = database
        self.ttl_seconds = ttl_seconds
        # A save's upserts, built once (a save is on the run path): the content's lock, and the
        # name's counter plus one -- a first save starts after any version already stored
        # (e.g. imported without a counter); either row stays locked until the commit.
        self._lock_content = database.upsert(
            orphan_blobs, ["sha256"], {"sha256": bindparam("sha")}, {"sha256": orphan_blobs.c.sha256}
        )
        latest = (
            select(func.coalesce(func.max(artifacts.c.version), 0) + 1)
            .where(artifacts.c.owner == bindparam("owner"), artifacts.c.name == bindparam("name"))
            .scalar_subquery()
        )
        self._count = database.upsert(
            artifact_counters,
            ["owner", "name"],
            {"owner": bindparam("owner"), "name": bindparam("name"), "last_version": latest},
            {"last_version": artifact_counters.c.last_version + 1},
        ).returning(artifact_counters.c.last_version)
        objects.sweep()

    @classmethod
    def from_settings(cls, settings: Settings, *, database: Database, objects: ObjectStore) -> LocalArtifactStore:
        """The configured store, the blobs of ``<data>/artifacts/blobs`` moved into ``objects`` first."""
        import_blobs(settings.artifacts_dir / "blobs", objects)
        return cls(objects, database=database, ttl_seconds=settings.artifact_ttl_seconds)

    @staticmethod
    def exists(database: Database) -> bool:
        """Whether a version was ever saved in ``database`` (a store that never saved one reads
        as empty, and reading it need create nothing).  Counters outlive deletes."""
        with database.read() as conn:
            return conn.execute(select(artifact_counters.c.owner).limit(1)).first() is not None

    def _cutoff(self, now: float | None = None) -> float:
        """Versions saved at or before this time are expired (-1: none)."""
        if self.ttl_seconds is None:
            return -1.0
        return (time.time() if now is None else now) - self.ttl_seconds

    # -- writing ------------------------------------------------------------------------

    def put(
        self,
        name: str,
        data: Content,
        *,
        mime_type: str = "application/octet-stream",
        run_id: str | None = None,
        tenant: str = LOCAL_TENANT,
        max_bytes: int | None = None,
    ) -> ArtifactInfo:
        """Save ``data`` as the next version of ``name``; over ``max_bytes`` is
        ``TooLarge`` (413), found while reading, and leaves nothing behind."""
        validate_name(name)
        with self.new_blob(max_bytes) as blob:
            for chunk in _chunks(data):
                blob.write(chunk)
            return self.commit(blob, name, mime_type=mime_type, run_id=run_id, tenant=tenant)

    def new_blob(self, max_bytes: int | None = None) -> TempBlob:
        """A temp blob to write a save into, chunk by chunk (``write``), then
        :meth:`commit` it; ``close`` it in any case (that removes it unless committed)."""
        return TempBlob(self.objects.new_blob(NAMESPACE), max_bytes)

    def commit(
        self,
        blob: TempBlob,
        name: str,
        *,
        mime_type: str = "application/octet-stream",
        run_id: str | None = None,
        tenant: str = LOCAL_TENANT,
    ) -> ArtifactInfo:
        """Make the content written to ``blob`` the next version of ``name``."""
        validate_name(name)
        sha = blob.finish()
        try:
            if not self.objects.local:
                # An upload takes a while: made before the transaction, noted for the collector
                # first (a crash after it leaves a blob the collector removes).
                with self.database.write(durable=True) as conn:
                    self._orphan(conn, {sha})
                blob.publish()
            with self.database.write(durable=True) as conn:
                # The content's lock (module docstring): held from before the blob is looked at.
                conn.execute(self._lock_content, {"sha": sha})
                blob.publish()  # there (uploaded above, or the same content saved before), or placed now
                created = time.time()
                version = self._next_version(conn, tenant, name)
                conn.execute(
                    _INSERT,
                    {
                        "owner": tenant,
                        "name": name,
                        "version": version,
                        "size": blob.size,
                        "sha256": sha,
                        "mime_type": mime_type,
                        "created_at": created,
                        "run_id": run_id,
                    },
                )
                conn.execute(_UNLOCK_CONTENT, {"sha": sha})
        except BaseException:
            if blob.placed:
                self._note_orphans([sha])  # placed but never referenced: let collect() judge it
            raise
        return ArtifactInfo(name, version, blob.size, sha, mime_type, created, run_id, tenant)

    def _next_version(self, conn: Connection, tenant: str, name: str) -> int:
        return int(conn.execute(self._count, {"owner": tenant, "name": name}).scalar_one())

    def delete(self, name: str, version: int | None = None, *, tenant: str = LOCAL_TENANT) -> list[ArtifactInfo]:
        """Delete every version of ``name`` (or just ``version``); returns what was
        deleted.  Blobs no other version references are removed."""
        validate_name(name)
        where = [artifacts.c.owner == tenant, artifacts.c.name == name]
        if version is not None:
            where.append(artifacts.c.version == version)
        cutoff = self._cutoff()
        with self.database.write(durable=True) as conn:
            rows = [_info(row) for row in conn.execute(delete(artifacts).where(*where).returning(*_COLUMNS))]
            shown = sorted((info for info in rows if info.created_at > cutoff), key=lambda info: info.version)
            if not shown:
                raise _missing(name, version)  # rolls the delete back: expired versions are expire()'s
            self._orphan(conn, {info.sha256 for info in rows})
        try:
            self.collect()
        except (ObjectStoreUnavailable, ObjectStoreMisconfigured) as exc:
            # The versions are deleted (committed); their blobs stay orphans for the next collection.
            log.warning("deleted %s; its unreferenced blobs stay until the object store answers: %s", name, exc)
        return shown

    def expire(self, now: float | None = None) -> int:
        """Remove the versions past the TTL (none without one) and every blob no
        version references any more; returns how many versions were removed."""
        removed = 0
        if self.ttl_seconds is not None:
            cutoff = self._cutoff(now)
            with self.database.write(durable=True) as conn:
                shas = conn.execute(
                    delete(artifacts).where(artifacts.c.created_at <= cutoff).returning(artifacts.c.sha256)
                ).scalars()
                gone = list(shas)
                removed = len(gone)
                self._orphan(conn, set(gone))
        self.collect()
        return removed

    def _orphan(self, conn: Connection, shas: set[str]) -> None:
        if shas:  # in one order, so two deletes never wait on each other's rows in a cycle
            conn.execute(self.database.insert_ignore(orphan_blobs), [{"sha256": sha} for sha in sorted(shas)])

    def collect(self, batch: int = 500) -> int:
        """Unlink the orphaned blobs that no version references; returns how many.

        An orphan row a save holds is skipped (the save deletes it); the rest are locked, checked
        and their blobs unlinked before the transaction that deletes them commits."""
        removed = 0
        while True:
            with self.database.write(durable=True) as conn:
                locked = list(
                    conn.execute(
                        select(orphan_blobs.c.sha256)
                        .order_by(orphan_blobs.c.sha256)
                        .limit(batch)
                        .with_for_update(skip_locked=True)
                    ).scalars()
                )
                if not locked:
                    return removed
                used = set(
                    conn.execute(select(artifacts.c.sha256).where(artifacts.c.sha256.in_(locked)).distinct()).scalars()
                )
                for sha in locked:
                    if sha not in used:
                        self.objects.delete_blob(sha, NAMESPACE)
                        removed += 1
                conn.execute(delete(orphan_blobs).where(orphan_blobs.c.sha256.in_(locked)))

    def _note_orphans(self, shas: list[str]) -> None:
        try:
            with self.database.write(durable=True) as conn:
                self._orphan(conn, set(shas))
        except (SQLAlchemyError, ExecutorError) as exc:
            # The save's own error is what propagates; the blob stays, unreferenced, until a
            # later save or delete of that content notes it again.
            log.warning("could not note unreferenced blobs %s as orphans: %s", shas, exc)

    # -- reading ------------------------------------------------------------------------

    def info(self, name: str, version: int | None = None, *, tenant: str = LOCAL_TENANT) -> ArtifactInfo:
        validate_name(name)
        query, params = _LATEST, {"owner": tenant, "name": name, "cutoff": self._cutoff()}
        if version is not None:
            query, params = _VERSION, {**params, "version": version}
        with self.database.read() as conn:
            row = conn.execute(query, params).first()
        if row is None:
            raise _missing(name, version)
        return _info(row)

    def by_file_id(self, file_id: str, *, tenant: str = LOCAL_TENANT) -> ArtifactInfo:
        """The version a file id names, among ``tenant``'s; 404 ``file_not_found`` otherwise
        (another key's id, a deleted or expired version)."""
        name, version = parse_file_id(file_id)
        try:
            info = self.info(name, version, tenant=tenant)
        except NotFound:
            info = None
        if info is None or info.file_id != file_id:
            raise NotFound(f"no file {file_id[:500]!r}", code="file_not_found")
        return info

    def open(self, info: ArtifactInfo) -> BinaryIO:
        """The content of ``info``, streamed from the object store (on a local store an open
        file, readable to its end if deleted meanwhile; from S3, verified against its SHA-256:
        :class:`~skill_executor.objects.ObjectCorrupt` at the end if it differs)."""
        try:
            return self.objects.open_blob(info.sha256, NAMESPACE, verify=not self.objects.local)
        except ObjectNotFound:
            raise _missing(info.name, info.version) from None  # deleted since ``info`` was read

    def read(self, name: str, version: int | None = None, *, tenant: str = LOCAL_TENANT) -> tuple[ArtifactInfo, bytes]:
        info = self.info(name, version, tenant=tenant)
        with self.open(info) as handle:
            return info, handle.read()

    def versions(self, name: str, *, tenant: str = LOCAL_TENANT) -> list[ArtifactInfo]:
        validate_name(name)
        query = (
            select(*_COLUMNS)
            .where(artifacts.c.owner == tenant, artifacts.c.name == name, artifacts.c.created_at > self._cutoff())
            .order_by(artifacts.c.version)
        )
        with self.database.read() as conn:
            rows = [_info(row) for row in conn.execute(query)]
        if not rows:
            raise _missing(name)
        return rows

    def names(self, *, tenant: str = LOCAL_TENANT) -> list[ArtifactInfo]:
        """The latest version of every artifact of ``tenant``, by name (in code point order,
        the same on every database)."""
        latest = (
            select(artifacts.c.name, func.max(artifacts.c.version).label("version"))
            .where(artifacts.c.owner == tenant, artifacts.c.created_at > self._cutoff())
            .group_by(artifacts.c.name)
            .subquery()
        )
        query = select(*_COLUMNS).join(
            latest,
            and_(
                artifacts.c.owner == tenant,
                artifacts.c.name == latest.c.name,
                artifacts.c.version == latest.c.version,
            ),
        )
        with self.database.read() as conn:
            rows = [_info(row) for row in conn.execute(query)]
        return sorted(rows, key=lambda info: info.name)


def _info(row: Iterable[Any]) -> ArtifactInfo:
    return ArtifactInfo(*row)  # _COLUMNS' order


def _chunks(data: Content) -> Iterator[bytes | bytearray | memoryview]:
    if isinstance(data, bytes | bytearray | memoryview):
        yield data
    elif hasattr(data, "read"):
        while chunk := data.read(_CHUNK):
            yield chunk
    else:
        yield from data
