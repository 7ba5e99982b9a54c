"""Versioned artifact store: the interface, and the embedded local backend.

The local backend keeps metadata in SQLite and content in content-addressed blobs
(``blobs/ab/abcdef...``).  A blob is written to a temp file, fsynced and renamed into
place before the metadata row that names it is committed, so a crash mid-save leaves
no half artifact and no row pointing at nothing.  Versions are assigned inside an
immediate transaction: concurrent saves of one name get distinct consecutive versions.
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

from ..access import LOCAL_TENANT
from ..errors import BadRequest, NotFound
from ..sqlite import ThreadLocalDB

NAME_MAX = 255
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._+-]*(/[A-Za-z0-9_][A-Za-z0-9._+-]*)*$")
_CHUNK = 1024 * 1024


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


class ArtifactStore(Protocol):
    """What the pipeline and the API need from an artifact backend.

    Every artifact belongs to one tenant (:mod:`executor.access`); names, versions and
    listings are per tenant, so one key never sees another's artifacts.
    """

    def put(
        self, name: str, data: bytes | BinaryIO, *, mime_type: str = ..., run_id: str | None = ..., tenant: str = ...
    ) -> ArtifactInfo: ...

    def info(self, name: str, version: int | None = None, *, tenant: str = ...) -> ArtifactInfo: ...

    def open(self, info: ArtifactInfo) -> BinaryIO: ...

    def versions(self, name: str, *, tenant: str = ...) -> list[ArtifactInfo]: ...

    def names(self, *, tenant: str = ...) -> list[ArtifactInfo]: ...


class LocalArtifactStore:
    """SQLite metadata + content-addressed blobs on local disk."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.blobs = root / "blobs"
        self.blobs.mkdir(parents=True, exist_ok=True)
        # Artifact metadata is synced on every commit: a save is final once it returns.
        self._sqlite = ThreadLocalDB(root / "artifacts.db", synchronous="FULL")
        with self._connect() as db:
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

    def _connect(self) -> sqlite3.Connection:
        return self._sqlite.db()

    def _blob_path(self, sha: str) -> Path:
        return self.blobs / sha[:2] / sha

    def _write_blob(self, data: bytes | BinaryIO) -> tuple[str, int]:
        digest = hashlib.sha256()
        size = 0
        fd, tmp = tempfile.mkstemp(dir=self.blobs, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as out:
                if isinstance(data, bytes | bytearray | memoryview):
                    digest.update(data)
                    out.write(data)
                    size = len(data)
                else:
                    while chunk := data.read(_CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
                        size += len(chunk)
                out.flush()
                os.fsync(out.fileno())
            sha = digest.hexdigest()
            target = self._blob_path(sha)
            target.parent.mkdir(exist_ok=True)
            os.replace(tmp, target)
            _fsync_dir(target.parent)
            return sha, size
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    def put(
        self,
        name: str,
        data: bytes | BinaryIO,
        *,
        mime_type: str = "application/octet-stream",
        run_id: str | None = None,
        tenant: str = LOCAL_TENANT,
    ) -> ArtifactInfo:
        validate_name(name)
        sha, size = self._write_blob(data)
        db = self._connect()
        created = time.time()
        db.execute("BEGIN IMMEDIATE")
        try:
            (latest,) = db.execute(
                "SELECT COALESCE(MAX(version), 0) FROM artifacts WHERE owner = ? AND name = ?", (tenant, name)
            ).fetchone()
            version = latest + 1
            db.execute(
                "INSERT INTO artifacts VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (name, version, size, sha, mime_type, created, run_id, tenant),
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return ArtifactInfo(name, version, size, sha, mime_type, created, run_id, tenant)

    def info(self, name: str, version: int | None = None, *, tenant: str = LOCAL_TENANT) -> ArtifactInfo:
        validate_name(name)
        db = self._connect()
        if version is None:
            row = db.execute(
                "SELECT * FROM artifacts WHERE owner = ? AND name = ? ORDER BY version DESC LIMIT 1", (tenant, name)
            ).fetchone()
        else:
            row = db.execute(
                "SELECT * FROM artifacts WHERE owner = ? AND name = ? AND version = ?", (tenant, name, version)
            ).fetchone()
        if row is None:
            which = f"{name}@{version}" if version is not None else name
            raise NotFound(f"no artifact {which!r}", code="artifact_not_found")
        return ArtifactInfo(*row)

    def open(self, info: ArtifactInfo) -> BinaryIO:
        return open(self._blob_path(info.sha256), "rb")

    def read(self, name: str, version: int | None = None, *, tenant: str = LOCAL_TENANT) -> tuple[ArtifactInfo, bytes]:
        info = self.info(name, version, tenant=tenant)
        with self.open(info) as handle:
            return info, handle.read()

    def versions(self, name: str, *, tenant: str = LOCAL_TENANT) -> list[ArtifactInfo]:
        validate_name(name)
        rows = self._connect().execute(
            "SELECT * FROM artifacts WHERE owner = ? AND name = ? ORDER BY version", (tenant, name)
        ).fetchall()
        if not rows:
            raise NotFound(f"no artifact {name!r}", code="artifact_not_found")
        return [ArtifactInfo(*row) for row in rows]

    def names(self, *, tenant: str = LOCAL_TENANT) -> list[ArtifactInfo]:
        """The latest version of every artifact of ``tenant``, by name."""
        rows = self._connect().execute(
            """SELECT a.* FROM artifacts a JOIN
               (SELECT name, MAX(version) v FROM artifacts WHERE owner = ? GROUP BY name) m
               ON a.owner = ? AND a.name = m.name AND a.version = m.v ORDER BY a.name""",
            (tenant, tenant),
        ).fetchall()
        return [ArtifactInfo(*row) for row in rows]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
