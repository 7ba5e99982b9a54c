"""Versioned artifact store: the interface, and the embedded local backend.

The local backend keeps metadata in SQLite and content in content-addressed blobs
(``blobs/ab/abcdef...``, :mod:`skill_executor.artifacts.blobs`).

* **Saving streams.**  The content is read in chunks into a locked temp blob, hashed
  as it goes and capped (``max_bytes``) while reading; it is never held in memory.
* **Crash safety.**  The temp blob is fsynced, then -- inside the immediate
  transaction that inserts the version -- renamed into place (or dropped when that
  content is stored already), so a crash leaves no half artifact and no row naming a
  missing blob; at worst a temp file, which the next start-up sweeps.
* **Versions** are assigned in that transaction too: concurrent saves of one name get
  distinct consecutive versions, and a number is never reused, even after a delete.
* **Deletes and expiry** remove rows and note their blobs as orphans in one
  transaction; :meth:`LocalArtifactStore.collect` then unlinks each orphan no row
  references any more, holding the same write lock as the placing of a blob -- so a
  blob is never removed while a save that references it is being committed.
* **TTL.**  With ``ttl_seconds`` every version expires that long after it was saved:
  it is invisible to reads at once and removed by :meth:`LocalArtifactStore.expire`.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

from ..access import LOCAL_TENANT
from ..errors import BadRequest, NotFound
from ..sqlite import ThreadLocalDB
from .blobs import BlobDir, TempBlob

NAME_MAX = 255
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._+-]*(/[A-Za-z0-9_][A-Za-z0-9._+-]*)*$")
_CHUNK = 1024 * 1024
_DB = "artifacts.db"


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

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "ref": self.ref}


def validate_name(name: str) -> str:
    """Artifact names: path-like segments of ``[A-Za-z0-9._+-]``, no ``..``, <= 255 chars."""
    if not name or len(name) > NAME_MAX or not _NAME.match(name) or ".." in name.split("/"):
        raise BadRequest(
            f"invalid artifact name {name!r}: use 1-{NAME_MAX} characters of letters, digits, "
            "'.', '_', '+', '-' in '/'-separated segments (no '..', no leading '/')",
            code="invalid_artifact_name",
        )
    return name


def parse_ref(ref: str) -> tuple[str, int | None]:
    """``name[@version]`` (without the ``artifact://`` scheme) -> (name, version)."""
    name, sep, version = ref.rpartition("@")
    if not sep:
        return validate_name(ref), None
    if not version.isdigit() or int(version) < 1:
        raise BadRequest(f"invalid artifact version {version!r} in {ref!r}", code="invalid_artifact_ref")
    return validate_name(name), int(version)


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

    def versions(self, name: str, *, tenant: str = ...) -> list[ArtifactInfo]: ...

    def names(self, *, tenant: str = ...) -> list[ArtifactInfo]: ...

    def delete(self, name: str, version: int | None = None, *, tenant: str = ...) -> list[ArtifactInfo]: ...

    def expire(self, now: float | None = None) -> int: ...


class LocalArtifactStore:
    """SQLite metadata + content-addressed blobs on local disk.

    Opening it creates ``root`` and sweeps the temp blobs of dead writers.
    """

    def __init__(self, root: Path, *, ttl_seconds: float | None = None) -> None:
        if ttl_seconds is not None and ttl_seconds <= 0:
            raise ValueError("ttl_seconds must be positive")
        self.root = root
        self.ttl_seconds = ttl_seconds
        self.blobs = BlobDir(root / "blobs")
        # Artifact metadata is synced on every commit: a save is final once it returns.
        self._sqlite = ThreadLocalDB(root / _DB, synchronous="FULL")
        db = self._connect()
        columns = [row[1] for row in db.execute("PRAGMA table_info(artifacts)")]
        if columns and "owner" not in columns:
            # A store from before tenancy: everything in it belongs to the local tenant.
            db.execute("ALTER TABLE artifacts RENAME TO artifacts_v1")
        db.execute(
            """CREATE TABLE IF NOT EXISTS artifacts (
                name TEXT NOT NULL, version INTEGER NOT NULL, size INTEGER NOT NULL,
                sha256 TEXT NOT NULL, mime_type TEXT NOT NULL, created_at REAL NOT NULL,
                run_id TEXT, owner TEXT NOT NULL, PRIMARY KEY (owner, name, version))"""
        )
        if columns and "owner" not in columns:
            db.execute("INSERT INTO artifacts SELECT *, ? FROM artifacts_v1", (LOCAL_TENANT,))
            db.execute("DROP TABLE artifacts_v1")
        db.execute("CREATE INDEX IF NOT EXISTS artifacts_sha256 ON artifacts (sha256)")
        db.execute("CREATE INDEX IF NOT EXISTS artifacts_created ON artifacts (created_at)")
        # The last version ever given to a name (rows may be deleted; numbers are not reused).
        db.execute(
            """CREATE TABLE IF NOT EXISTS artifact_counters (
                owner TEXT NOT NULL, name TEXT NOT NULL, last_version INTEGER NOT NULL, PRIMARY KEY (owner, name))"""
        )
        # Blobs whose rows were deleted: unlinked by collect() unless referenced again.
        db.execute("CREATE TABLE IF NOT EXISTS orphan_blobs (sha256 TEXT PRIMARY KEY)")
        self.blobs.sweep()

    @staticmethod
    def exists(root: Path) -> bool:
        """Whether a store was ever opened at ``root`` (reading an absent one is empty)."""
        return (root / _DB).is_file()

    def _connect(self) -> sqlite3.Connection:
        return self._sqlite.db()

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
        return self.blobs.writer(max_bytes)

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
            with _writing(self._connect()) as db:
                blob.place(self.blobs.path(sha))
                created = time.time()
                version = self._next_version(db, tenant, name)
                db.execute(
                    "INSERT INTO artifacts VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (name, version, blob.size, sha, mime_type, created, run_id, tenant),
                )
        except BaseException:
            if blob.placed:
                self._note_orphans([sha])  # placed but never referenced: let collect() judge it
            raise
        return ArtifactInfo(name, version, blob.size, sha, mime_type, created, run_id, tenant)

    @staticmethod
    def _next_version(db: sqlite3.Connection, tenant: str, name: str) -> int:
        (latest,) = db.execute(
            "SELECT COALESCE(MAX(version), 0) FROM artifacts WHERE owner = ? AND name = ?", (tenant, name)
        ).fetchone()
        row = db.execute(
            "SELECT last_version FROM artifact_counters WHERE owner = ? AND name = ?", (tenant, name)
        ).fetchone()
        version = max(latest, row[0] if row else 0) + 1
        db.execute(
            """INSERT INTO artifact_counters VALUES (?, ?, ?)
               ON CONFLICT (owner, name) DO UPDATE SET last_version = excluded.last_version""",
            (tenant, name, version),
        )
        return int(version)

    def delete(self, name: str, version: int | None = None, *, tenant: str = LOCAL_TENANT) -> list[ArtifactInfo]:
        """Delete every version of ``name`` (or just ``version``); returns what was
        deleted.  Blobs no other version references are removed."""
        validate_name(name)
        with _writing(self._connect()) as db:
            where, params = "owner = ? AND name = ?", list[object]([tenant, name])
            if version is not None:
                where += " AND version = ?"
                params.append(version)
            rows = db.execute(
                f"SELECT * FROM artifacts WHERE {where} AND created_at > ? ORDER BY version",
                (*params, self._cutoff()),
            ).fetchall()
            if not rows:
                raise _missing(name, version)
            shas = db.execute(f"SELECT DISTINCT sha256 FROM artifacts WHERE {where}", params).fetchall()
            db.execute(f"DELETE FROM artifacts WHERE {where}", params)
            db.executemany("INSERT OR IGNORE INTO orphan_blobs VALUES (?)", shas)
        self.collect()
        return [ArtifactInfo(*row) for row in rows]

    def expire(self, now: float | None = None) -> int:
        """Remove the versions past the TTL (none without one) and every blob no
        version references any more; returns how many versions were removed."""
        removed = 0
        if self.ttl_seconds is not None:
            with _writing(self._connect()) as db:
                cutoff = self._cutoff(now)
                shas = db.execute("SELECT DISTINCT sha256 FROM artifacts WHERE created_at <= ?", (cutoff,)).fetchall()
                removed = db.execute("DELETE FROM artifacts WHERE created_at <= ?", (cutoff,)).rowcount
                db.executemany("INSERT OR IGNORE INTO orphan_blobs VALUES (?)", shas)
        self.collect()
        return removed

    def collect(self) -> int:
        """Unlink the orphaned blobs that no version references; returns how many.

        Runs under the write lock that :meth:`put` holds while placing a blob and
        committing its row, so a blob a save is about to reference is never removed."""
        removed = 0
        with _writing(self._connect()) as db:
            orphans = [sha for (sha,) in db.execute("SELECT sha256 FROM orphan_blobs").fetchall()]
            for sha in orphans:
                if db.execute("SELECT 1 FROM artifacts WHERE sha256 = ? LIMIT 1", (sha,)).fetchone() is None:
                    removed += self.blobs.remove(sha)
            db.execute("DELETE FROM orphan_blobs")
        return removed

    def _note_orphans(self, shas: list[str]) -> None:
        try:
            self._connect().executemany("INSERT OR IGNORE INTO orphan_blobs VALUES (?)", [(s,) for s in shas])
        except sqlite3.Error:
            pass  # best effort: the blob stays (unreferenced) if even this fails

    # -- reading ------------------------------------------------------------------------

    def info(self, name: str, version: int | None = None, *, tenant: str = LOCAL_TENANT) -> ArtifactInfo:
        validate_name(name)
        db = self._connect()
        if version is None:
            row = db.execute(
                """SELECT * FROM artifacts WHERE owner = ? AND name = ? AND created_at > ?
                   ORDER BY version DESC LIMIT 1""",
                (tenant, name, self._cutoff()),
            ).fetchone()
        else:
            row = db.execute(
                "SELECT * FROM artifacts WHERE owner = ? AND name = ? AND version = ? AND created_at > ?",
                (tenant, name, version, self._cutoff()),
            ).fetchone()
        if row is None:
            raise _missing(name, version)
        return ArtifactInfo(*row)

    def open(self, info: ArtifactInfo) -> BinaryIO:
        """The content of ``info`` (an open file: it stays readable if deleted meanwhile)."""
        try:
            return self.blobs.open(info.sha256)
        except FileNotFoundError:
            raise _missing(info.name, info.version) from None  # deleted since ``info`` was read

    def read(self, name: str, version: int | None = None, *, tenant: str = LOCAL_TENANT) -> tuple[ArtifactInfo, bytes]:
        info = self.info(name, version, tenant=tenant)
        with self.open(info) as handle:
            return info, handle.read()

    def versions(self, name: str, *, tenant: str = LOCAL_TENANT) -> list[ArtifactInfo]:
        validate_name(name)
        rows = (
            self._connect()
            .execute(
                "SELECT * FROM artifacts WHERE owner = ? AND name = ? AND created_at > ? ORDER BY version",
                (tenant, name, self._cutoff()),
            )
            .fetchall()
        )
        if not rows:
            raise _missing(name)
        return [ArtifactInfo(*row) for row in rows]

    def names(self, *, tenant: str = LOCAL_TENANT) -> list[ArtifactInfo]:
        """The latest version of every artifact of ``tenant``, by name."""
        rows = (
            self._connect()
            .execute(
                """SELECT a.* FROM artifacts a JOIN
               (SELECT name, MAX(version) v FROM artifacts WHERE owner = ? AND created_at > ? GROUP BY name) m
               ON a.owner = ? AND a.name = m.name AND a.version = m.v ORDER BY a.name""",
                (tenant, self._cutoff(), tenant),
            )
            .fetchall()
        )
        return [ArtifactInfo(*row) for row in rows]


@contextmanager
def _writing(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """An immediate transaction: the store's write lock, across threads and processes."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


def _chunks(data: Content) -> Iterator[bytes | bytearray | memoryview]:
    if isinstance(data, bytes | bytearray | memoryview):
        yield data
    elif hasattr(data, "read"):
        while chunk := data.read(_CHUNK):
            yield chunk
    else:
        yield from data
