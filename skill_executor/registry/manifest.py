"""The registry's records: a version's manifest entries, their canonical digest, versions, audit entries.

A version's digest is ``sha256`` over its manifest in a canonical byte encoding
(:func:`manifest_digest`): for every file, in ascending byte order of its UTF-8 path
relative to the skill folder, ``path || 0x00 || hex(sha256(content)) || 0x0A`` (a
symbolic link: ``path || 0x00 || "link:" || hex(sha256(target)) || 0x0A``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class FileDigest:
    """One manifest entry: a regular file, or (``link`` set) a symbolic link, kept as a link."""

    path: str
    sha256: str
    size: int
    executable: bool
    link: str | None = None

    @property
    def digest_field(self) -> str:
        """What the canonical encoding writes after the path: the content's hex, ``link:<hex of target>``."""
        return f"link:{self.sha256}" if self.link is not None else self.sha256

    def to_dict(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "path": self.path,
            "sha256": self.sha256,
            "size": self.size,
            "executable": self.executable,
        }
        if self.link is not None:
            entry["link"] = self.link
        return entry


def manifest_digest(files: list[tuple[str, str]]) -> str:
    """``sha256:<hex>`` over ``(relative path, sha256 hex)`` pairs in the canonical encoding
    (a link's pair carries ``link:<sha256 hex of its target>``)."""
    h = hashlib.sha256()
    for path, digest in sorted(files, key=lambda f: f[0].encode("utf-8", "surrogateescape")):
        h.update(path.encode("utf-8", "surrogateescape") + b"\x00" + digest.encode("ascii") + b"\n")
    return "sha256:" + h.hexdigest()


@dataclass(frozen=True, slots=True)
class Version:
    skill: str
    number: int
    digest: str
    created_at: float
    source: str
    actor: str
    dirname: str
    files: tuple[FileDigest, ...]
    is_default: bool = False
    is_latest: bool = False

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    def summary(self) -> dict[str, Any]:
        return {
            "skill": self.skill,
            "version": self.number,
            "digest": self.digest,
            "created_at": self.created_at,
            "source": self.source,
            "created_by": self.actor,
            "file_count": len(self.files),
            "size": self.size,
            "is_default": self.is_default,
            "is_latest": self.is_latest,
        }

    def to_dict(self) -> dict[str, Any]:
        return {**self.summary(), "files": [f.to_dict() for f in self.files]}


@dataclass(frozen=True, slots=True)
class AuditEntry:
    id: int
    at: float
    actor: str
    action: str
    skill: str
    version: int | None
    digest: str | None
    detail: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "at": self.at,
            "actor": self.actor,
            "action": self.action,
            "skill": self.skill,
            "version": self.version,
            "digest": self.digest,
            "detail": self.detail,
        }
