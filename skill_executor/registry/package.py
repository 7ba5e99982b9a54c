"""Install a skill from an uploaded ``.zip`` or ``.tar[.gz|.bz2|.xz]``, safely and atomically.

An archive is untrusted input: :mod:`.archive` unpacks it with bounded work (no
links, devices or unsafe paths; sizes counted while decompressing, against a
per-file, a total and a compression-ratio cap; at most ``max_entries`` entries).
The package must hold exactly one skill: ``SKILL.md`` at the root or inside a single
top folder.

Unpacking goes to a locked staging folder inside the install root
(:mod:`.installdir`); the skill is loaded and validated there, then goes live in one
atomic step -- a rename for a first install, ``renameat2(RENAME_EXCHANGE)`` with the
live folder for a replacement -- so a failed install, or a crash at any point, leaves
the previous version or the new one complete, never neither.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..errors import BadRequest, Conflict, NotFound
from ..paths import clean_relative
from ..skills.files import FileEntry, inventory
from ..skills.loader import SkillLoadError, load_skill
from ..skills.model import Skill
from ..skills.rules import SKILL_FILE, split_verdict
from .archive import unpack
from .installdir import STAGING_PREFIX, Staging, exchange
from .store import Version
from .unpacking import PackageError, PackageLimits

__all__ = ["InstallOutcome", "PackageError", "PackageLimits", "install_package", "uninstall"]

#: Names the hosted platforms keep for themselves (refused when SKILL_EXECUTOR_SKILL_REFUSE_RESERVED_NAMES).
RESERVED_WORDS = ("anthropic", "claude")

#: Where a package is unpacked inside the staging folder; a skill id is ``[a-z0-9-]+``, so it cannot clash.
_UNPACKED = ".unpacked"


@dataclass(slots=True)
class InstallOutcome:
    skill: Skill
    replaced: bool
    files: list[FileEntry]
    #: the registry version the install published (None without a registry)
    version: Version | None = None
    #: False when the content equals the latest version's, which was returned instead
    created: bool = True


def refuse_reserved(skill: Skill) -> None:
    """400 ``reserved_name`` for a skill whose name holds one of :data:`RESERVED_WORDS`."""
    lowered = skill.name.lower()
    for word in RESERVED_WORDS:
        if word in lowered:
            raise BadRequest(f"the skill name {skill.name!r} holds the reserved word {word!r}", code="reserved_name")


def _skill_prefix(files: list[PurePosixPath]) -> PurePosixPath:
    """Where SKILL.md lives: the root, or a single top folder holding everything."""
    if PurePosixPath(SKILL_FILE) in files:
        return PurePosixPath(".")
    tops = {p.parts[0] for p in files}
    if len(tops) == 1:
        top = PurePosixPath(next(iter(tops)))
        if top / SKILL_FILE in files:
            return top
    skill_files = [str(p) for p in files if p.name == SKILL_FILE]
    if len(skill_files) > 1:
        raise PackageError(f"a package must hold exactly one skill; found {SKILL_FILE} at {', '.join(skill_files)}")
    raise PackageError(f"no {SKILL_FILE} at the archive root or in a single top folder")


def _set_modes(root: Path, files: list[PurePosixPath], prefix: PurePosixPath) -> None:
    """Scripts executable, everything else read-write for the owner and readable."""
    for path in files:
        rel = path if prefix == PurePosixPath(".") else path.relative_to(prefix)
        os.chmod(root / str(rel), 0o755 if len(rel.parts) > 1 and rel.parts[0] == "scripts" else 0o644)


def install_package(
    data: bytes,
    root: Path,
    *,
    strict: bool = False,
    replace: bool = True,
    limits: PackageLimits = PackageLimits(),
    admit: Callable[[Skill], None] | None = None,
) -> InstallOutcome:
    """Install the one skill in an archive under ``root/<id>``; a replacement is atomic.

    ``admit`` sees the validated skill before it goes live and may refuse it by raising.
    """
    with Staging(root) as staging:
        unpacked = staging.path / _UNPACKED
        unpacked.mkdir()
        files = unpack(data, unpacked, limits)
        prefix = _skill_prefix(files)
        _set_modes(unpacked / str(prefix), files, prefix)
        unpacked = unpacked / str(prefix)
        try:
            # Load once to learn the id, then again under the directory name it will have.
            skill_id = load_skill(unpacked).id
            named = staging.path / skill_id
            os.rename(unpacked, named)
            unpacked = named
            skill = load_skill(unpacked)
        except SkillLoadError as exc:
            raise PackageError(
                f"the packaged skill cannot be loaded: {exc.diagnostics[0].message}",
                code="invalid_skill",
                details={"errors": [d.to_dict() for d in exc.diagnostics if d.severity == "fatal"]},
            ) from None
        errors, _ = split_verdict(skill.diagnostics, strict=strict)
        if errors:
            raise PackageError(
                "the packaged skill breaks the spec: " + "; ".join(d.message for d in errors),
                code="invalid_skill",
                details={"errors": [d.to_dict() for d in errors]},
            )
        if admit is not None:
            admit(skill)
        target = root / skill.id
        replaced = _go_live(unpacked, target, replace=replace)
        installed = load_skill(target)
        return InstallOutcome(installed, replaced, inventory(installed))


def _go_live(staged: Path, target: Path, *, replace: bool) -> bool:
    """Put ``staged`` at ``target``: a rename, or an exchange with the live version; True if replaced.

    Either way one atomic step: a crash before it leaves the old version, after it the
    new one (the old one then sits in the staging folder, which goes with it).
    """
    if not (target.exists() or target.is_symlink()):
        try:
            os.rename(staged, target)
            return False
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            # installed meanwhile by someone else: replace that
    if not replace:
        raise Conflict(f"skill {target.name!r} is already installed", code="skill_exists")
    exchange(staged, target)
    return True


def uninstall(root: Path, skill_id: str) -> None:
    """Remove an installed skill: renamed into a staging folder in one step, then deleted."""
    rel = clean_relative(skill_id, what="skill id")
    if len(rel.parts) != 1 or rel.parts[0].startswith(STAGING_PREFIX):
        raise BadRequest(f"invalid skill id {skill_id!r}")
    target = root / rel.parts[0]
    if not (target.exists() or target.is_symlink()):
        raise NotFound(f"no skill {skill_id!r} is installed in {root}", code="skill_not_found")
    with Staging(root) as staging:
        os.rename(target, staging.path / rel.parts[0])
