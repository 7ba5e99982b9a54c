"""The registry's index in the service's database: skills (pointers, next number), their
versions (manifests) and the audit log (tables ``skills``, ``skill_versions``, ``audit``).

Every change of a skill's rows -- a new number, the default and latest pointers, the held
flag, a delete -- is one transaction that first locks the skill's ``skills`` row
(``FOR UPDATE`` on Postgres, the write lock on SQLite) and decides under that lock, so two
processes on two machines sharing the database never get one number twice, never delete the
default and never leave a pointer at a deleted version.  A lookup is one statement.  The
audit log's order is its ``id``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Connection, Select, bindparam, delete, func, insert, select, update

from ..db import Database
from ..db.schema import audit, skill_versions, skills
from ..errors import Conflict, NotFound
from .manifest import AuditEntry, FileDigest, Version
from .refs import VersionRef

_V = skill_versions.c
_S = skills.c
_COLUMNS = (_V.skill, _V.version, _V.digest, _V.created_at, _V.source, _V.actor, _V.dirname, _V.manifest)
_POINTERS = (_S.default_version, _S.latest_version)


def _to_version(row: Sequence[Any]) -> Version:
    """A version from ``(*_COLUMNS, default_version, latest_version)``."""
    skill, number, digest, created_at, source, actor, dirname, manifest, default, latest = row
    return Version(
        skill,
        number,
        digest,
        created_at,
        source,
        actor,
        dirname,
        tuple(FileDigest(**f) for f in json.loads(manifest)),
        is_default=number == default,
        is_latest=number == latest,
    )


def _build_lookups() -> dict[str, Select[Any]]:
    """The four lookups, built once (building a statement costs more than running it here):
    the version a reference names, with the skill's pointers, in one statement each."""
    query = select(*_COLUMNS, *_POINTERS)
    found: dict[str, Select[Any]] = {}
    for kind, pointer in (("default", _S.default_version), ("latest", _S.latest_version)):
        found[kind] = query.select_from(
            skills.join(skill_versions, (_V.skill == _S.skill) & (_V.version == pointer))
        ).where(_S.skill == bindparam("skill"))
    by_skill = query.select_from(skill_versions.outerjoin(skills, _S.skill == _V.skill)).where(
        _V.skill == bindparam("skill")
    )
    found["digest"] = by_skill.where(_V.digest == bindparam("digest")).order_by(_V.version.desc()).limit(1)
    found["number"] = by_skill.where(_V.version == bindparam("number"))
    return found


_LOOKUPS = _build_lookups()
_POINTERS_OF = select(*_POINTERS, _S.default_held).where(_S.skill == bindparam("skill"))


def _lookup(conn: Connection, skill_id: str, wanted: VersionRef) -> Sequence[Any] | None:
    """The row of the version ``wanted`` names (see :func:`_to_version`), None when none."""
    params: dict[str, Any] = {"skill": skill_id}
    if wanted.kind == "digest":
        params["digest"] = wanted.digest
    elif wanted.kind == "number":
        params["number"] = wanted.number
    return conn.execute(_LOOKUPS[wanted.kind], params).first()


def _audit_row(
    actor: str, action: str, skill: str, version: int | None, digest: str | None, detail: str | None
) -> dict[str, Any]:
    return {
        "at": time.time(),
        "actor": actor,
        "action": action,
        "skill": skill,
        "version": version,
        "digest": digest,
        "detail": detail,
    }


def _not_found(skill_id: str, wanted: VersionRef) -> NotFound:
    return NotFound(f"skill {skill_id!r} has no version {wanted}", code="version_not_found")


class RegistryIndex:
    """The index's reads and its locked read-modify-writes (thread-safe; one per store)."""

    def __init__(self, database: Database) -> None:
        self.database = database

    # -- reads: one statement each ----------------------------------------------------

    def find(self, skill_id: str, wanted: VersionRef) -> Version | None:
        with self.database.read() as conn:
            row = _lookup(conn, skill_id, wanted)
        return _to_version(row) if row is not None else None

    def versions(self, skill_id: str) -> list[Version]:
        query = (
            select(*_COLUMNS, *_POINTERS)
            .select_from(skill_versions.outerjoin(skills, _S.skill == _V.skill))
            .where(_V.skill == skill_id)
            .order_by(_V.version)
        )
        with self.database.read() as conn:
            return [_to_version(row) for row in conn.execute(query)]

    def pointers(self, skill_id: str) -> tuple[int | None, int | None, bool]:
        """(default, latest, held); (None, None, False) for a skill with no versions."""
        with self.database.read() as conn:
            row = conn.execute(_POINTERS_OF, {"skill": skill_id}).first()
        return (row[0], row[1], bool(row[2])) if row is not None else (None, None, False)

    def known(self, skill_id: str) -> bool:
        """Whether the skill ever had a version here (its row stays after a delete)."""
        with self.database.read() as conn:
            return conn.execute(select(_S.skill).where(_S.skill == skill_id)).first() is not None

    def installed(self) -> list[Version]:
        """The default version of every skill installed by upload (not observed in a folder),
        whichever process installed it; a skill published without a default: its latest
        version (``is_default`` False: listed nowhere, resolved only when pinned)."""
        shown = func.coalesce(_S.default_version, _S.latest_version)
        query = (
            select(*_COLUMNS, *_POINTERS)
            .select_from(skills.join(skill_versions, (_V.skill == _S.skill) & (_V.version == shown)))
            .where(_V.source != "folder")
            .order_by(_S.skill)
        )
        with self.database.read() as conn:
            return [_to_version(row) for row in conn.execute(query)]

    def deleted(self) -> set[str]:
        """Skills whose every version was deleted (their row stays: numbers are never reused)."""
        query = select(_S.skill).where(_S.default_version.is_(None), _S.latest_version.is_(None))
        with self.database.read() as conn:
            return set(conn.execute(query).scalars())

    def audit(self, skill_id: str | None, limit: int) -> list[AuditEntry]:
        c = audit.c
        query = select(c.id, c.at, c.actor, c.action, c.skill, c.version, c.digest, c.detail)
        if skill_id is not None:
            query = query.where(c.skill == skill_id)
        with self.database.read() as conn:
            return [AuditEntry(*row) for row in conn.execute(query.order_by(c.id.desc()).limit(limit))]

    # -- changes: one transaction each, the skill's row locked first ------------------

    def record(
        self,
        skill_id: str,
        digest: str,
        files: list[FileDigest],
        *,
        dirname: str,
        actor: str,
        source: str,
        set_default: bool,
        place: Callable[[int], None],
    ) -> tuple[Version, bool]:
        """Record a new version of ``skill_id`` (or return the latest, when it has ``digest``).

        ``place(number)`` puts the version's files where they belong; it runs inside the
        transaction, after the number is taken, so a failure there records nothing.  Pointer
        rules: :meth:`skill_executor.registry.store.Registry._commit`.
        """
        observed = source == "folder"
        with self.database.write(durable=True) as conn:
            # The row to lock: made (no versions, no pointers) when the skill is new, so two first
            # publishes of one skill queue on it too and never both take number 1.
            conn.execute(
                self.database.insert_ignore(skills).values(
                    skill=skill_id, next_version=1, default_version=None, latest_version=None, default_held=0
                )
            )
            locked = conn.execute(
                select(_S.next_version, _S.default_held, *_COLUMNS, *_POINTERS)
                .select_from(
                    skills.outerjoin(skill_versions, (_V.skill == _S.skill) & (_V.version == _S.latest_version))
                )
                .where(_S.skill == skill_id)
                .with_for_update(of=skills)
            ).one()
            next_version, held, latest_row = locked[0], bool(locked[1]), locked[2:]
            default, latest = latest_row[-2], latest_row[-1]
            if latest_row[2] == digest:  # the latest version has this content
                current = _to_version(latest_row)
                if set_default and not observed and (default != latest or held):
                    conn.execute(
                        update(skills).where(_S.skill == skill_id).values(default_version=latest, default_held=0)
                    )
                    conn.execute(
                        insert(audit).values(_audit_row(actor, "set_default", skill_id, latest, digest, "re-published"))
                    )
                    current = _to_version((*latest_row[:-2], latest, latest))
                return current, False
            number = next_version
            # An upload moves the default only when asked: a skill first published without one
            # has none (invisible to unpinned use) until someone sets it.  A folder observation
            # gives a skill its first default, then moves it while it is not held.
            moves = (default is None or (set_default and not held)) if observed else set_default
            new_default, new_held = (number, False) if moves else (default, held)
            now = time.time()
            manifest = json.dumps([f.to_dict() for f in files])
            conn.execute(
                insert(skill_versions).values(
                    skill=skill_id,
                    version=number,
                    digest=digest,
                    created_at=now,
                    source=source,
                    actor=actor,
                    dirname=dirname,
                    manifest=manifest,
                )
            )
            conn.execute(
                update(skills)
                .where(_S.skill == skill_id)
                .values(
                    next_version=number + 1,
                    default_version=new_default,
                    latest_version=number,
                    default_held=int(new_held),
                )
            )
            detail = f"source={source} default={new_default}" + (" (held)" if new_held else "")
            conn.execute(insert(audit).values(_audit_row(actor, "publish", skill_id, number, digest, detail)))
            place(number)
        version = Version(
            skill_id, number, digest, now, source, actor, dirname, tuple(files), number == new_default, True
        )
        return version, True

    def set_default(self, skill_id: str, wanted: VersionRef, *, actor: str) -> Version:
        """Point the default at the version ``wanted`` names (resolved under the lock); it is
        held unless ``wanted`` is ``latest``."""
        held = wanted.kind != "latest"
        with self.database.write(durable=True) as conn:
            if self._lock(conn, skill_id) is None:
                raise _not_found(skill_id, wanted)
            row = _lookup(conn, skill_id, wanted)
            if row is None:
                raise _not_found(skill_id, wanted)
            found = _to_version(row)
            conn.execute(
                update(skills).where(_S.skill == skill_id).values(default_version=found.number, default_held=int(held))
            )
            detail = "held" if held else "follows latest"
            conn.execute(
                insert(audit).values(_audit_row(actor, "set_default", skill_id, found.number, found.digest, detail))
            )
        return _to_version((*row[:-2], found.number, row[-1]))

    def remove(
        self, skill_id: str, versions: list[Version], *, actor: str, action: str, keep_default: bool
    ) -> set[int]:
        """Delete the rows of ``versions`` (of one skill) and move the pointers off them.

        ``keep_default``: refuse (409 ``version_is_default``) when one of them is the default
        *now* -- checked under the lock, so a default set meanwhile by another process holds.
        Returns the numbers this call deleted (not those another process deleted meanwhile).
        """
        numbers = [v.number for v in versions]
        with self.database.write(durable=True) as conn:
            locked = self._lock(conn, skill_id)
            default, held = (locked[0], bool(locked[2])) if locked is not None else (None, False)
            if keep_default and default in numbers:
                raise Conflict(
                    f"version {default} is the default of skill {skill_id!r}; set another default first",
                    code="version_is_default",
                )
            gone = set(
                conn.execute(
                    delete(skill_versions).where(_V.skill == skill_id, _V.version.in_(numbers)).returning(_V.version)
                ).scalars()
            )
            if not gone:
                return gone
            conn.execute(
                insert(audit),
                [_audit_row(actor, action, skill_id, v.number, v.digest, None) for v in versions if v.number in gone],
            )
            left = conn.execute(select(func.max(_V.version)).where(_V.skill == skill_id)).scalar()
            if default in gone:  # only when deleting a whole skill: nothing is left, but for a
                default, held = left, False  # version another process published meanwhile
            conn.execute(
                update(skills)
                .where(_S.skill == skill_id)
                .values(latest_version=left, default_version=default, default_held=int(held))
            )
        return gone

    @staticmethod
    def _lock(conn: Connection, skill_id: str) -> tuple[Any, ...] | None:
        """Lock the skill's row; (default, latest, held), None for an unknown skill."""
        row = conn.execute(select(*_POINTERS, _S.default_held).where(_S.skill == skill_id).with_for_update()).first()
        return tuple(row) if row is not None else None
