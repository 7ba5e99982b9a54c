"""Install a skill from an uploaded ``.zip`` or ``.tar[.gz|.bz2|.xz]``, safely and atomically.

An archive is untrusted input: :mod:`.archive` unpacks it with bounded work (no
links, devices or unsafe paths; sizes counted while decompressing, against a
per-file, a total and a compression-ratio cap; at most ``max_entries`` entries).
The package must hold exactly one skill: ``SKILL.md`` at the root or inside a single
top folder.

Unpacking goes to a staging directory inside the target root; the skill is loaded
and validated there, then swapped into place with renames, so a failed install
leaves the previous version untouched.
"""

from __future__ import annotations

import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..errors import BadRequest, Conflict
from ..paths import clean_relative
from .archive import PackageError, PackageLimits, unpack
from .files import FileEntry, inventory
from .loader import SkillLoadError, load_skill
from .model import Skill
from .repository import STAGING_PREFIX
from .spec import SKILL_FILE, split_verdict

__all__ = ["Installed", "PackageError", "PackageLimits", "install_package", "uninstall"]

#: Names inside the staging folder; a skill id is ``[a-z0-9-]+``, so neither can clash.
_UNPACKED = ".unpacked"
_OLD = ".old"


@dataclass(slots=True)
class Installed:
    skill: Skill
    replaced: bool
    files: list[FileEntry]


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
) -> Installed:
    """Install the one skill in an archive under ``root/<id>``; atomic replace."""
    root.mkdir(parents=True, exist_ok=True)
    staging = root / f"{STAGING_PREFIX}{uuid.uuid4().hex}"
    staging.mkdir()
    try:
        unpacked = staging / _UNPACKED
        unpacked.mkdir()
        files = unpack(data, unpacked, limits)
        prefix = _skill_prefix(files)
        _set_modes(unpacked / str(prefix), files, prefix)
        unpacked = unpacked / str(prefix)
        try:
            # Load once to learn the id, then again under the directory name it will have.
            skill_id = load_skill(unpacked).id
            named = staging / skill_id
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
        target = root / skill.id
        replaced = target.exists() or target.is_symlink()
        if replaced and not replace:
            raise Conflict(f"skill {skill.id!r} is already installed", code="skill_exists")
        if replaced:
            old = staging / _OLD
            os.rename(target, old)
            try:
                os.rename(unpacked, target)
            except OSError:
                os.rename(old, target)
                raise
        else:
            os.rename(unpacked, target)
        installed = load_skill(target)
        return Installed(installed, replaced, inventory(installed))
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def uninstall(root: Path, skill_id: str) -> None:
    """Remove an installed skill directory (atomically renamed away first)."""
    rel = clean_relative(skill_id, what="skill id")
    if len(rel.parts) != 1:
        raise BadRequest(f"invalid skill id {skill_id!r}")
    target = root / rel.parts[0]
    trash = root / f"{STAGING_PREFIX}{uuid.uuid4().hex}"
    os.rename(target, trash)
    shutil.rmtree(trash, ignore_errors=True)
