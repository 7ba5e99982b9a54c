"""Install a skill from an uploaded ``.zip`` or ``.tar.gz``, safely and atomically.

An archive is untrusted input.  Every entry is checked before anything is written:
no symlinks, hardlinks, devices or FIFOs; no absolute or ``..`` paths; at most
``max_entries`` entries.  Sizes are counted while decompressing (headers of a zip
bomb lie), against a per-file and a total cap.  The package must hold exactly one
skill: ``SKILL.md`` at the root or inside a single top folder.

Extraction goes to a staging directory inside the target root; the skill is loaded
and validated there, then swapped into place with renames, so a failed install
leaves the previous version untouched.
"""

from __future__ import annotations

import io
import os
import shutil
import stat
import tarfile
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from ..errors import BadRequest, Conflict, ExecutorError, TooLarge
from ..paths import clean_relative
from .files import FileEntry, inventory
from .loader import SkillLoadError, load_skill
from .model import Skill
from .repository import STAGING_PREFIX
from .spec import SKILL_FILE, split_verdict

_CHUNK = 64 * 1024


@dataclass(frozen=True, slots=True)
class PackageLimits:
    max_entries: int = 2000
    max_file_bytes: int = 32 * 1024 * 1024
    max_total_bytes: int = 128 * 1024 * 1024


@dataclass(slots=True)
class Installed:
    skill: Skill
    replaced: bool
    files: list[FileEntry]


class PackageError(ExecutorError):
    code = "invalid_package"
    status = 400


@dataclass(slots=True)
class _Member:
    path: PurePosixPath
    is_dir: bool
    open: object  # callable returning a binary stream


def _zip_members(data: bytes, limits: PackageLimits) -> Iterator[_Member]:
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as exc:
        raise PackageError(f"not a valid zip archive: {exc}") from None
    infos = archive.infolist()
    _check_count(len(infos), limits)
    for info in infos:
        mode = info.external_attr >> 16
        if mode and stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR):
            kind = "symlink" if stat.S_ISLNK(mode) else "special file"
            raise PackageError(f"archive entry {info.filename!r} is a {kind}; only files and folders are allowed")
        if info.flag_bits & 0x1:
            raise PackageError(f"archive entry {info.filename!r} is encrypted")
        path = _entry_path(info.filename)
        yield _Member(path, info.is_dir(), lambda info=info: archive.open(info))


def _tar_members(data: bytes, limits: PackageLimits) -> Iterator[_Member]:
    try:
        archive = tarfile.open(fileobj=io.BytesIO(data), mode="r:*")
        members = archive.getmembers()
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise PackageError(f"not a valid tar archive: {exc}") from None
    _check_count(len(members), limits)
    for member in members:
        if member.issym() or member.islnk():
            raise PackageError(f"archive entry {member.name!r} is a link; links are not allowed")
        if not (member.isreg() or member.isdir()):
            raise PackageError(f"archive entry {member.name!r} is a special file; only files and folders are allowed")
        path = _entry_path(member.name)
        yield _Member(path, member.isdir(), lambda member=member: archive.extractfile(member))


def _check_count(count: int, limits: PackageLimits) -> None:
    if count > limits.max_entries:
        raise TooLarge(f"archive has {count} entries; the limit is {limits.max_entries}", code="package_too_large")


def _entry_path(name: str) -> PurePosixPath:
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        raise PackageError(f"archive entry {name!r} has an absolute path")
    try:
        return clean_relative(name, what="archive entry", allow_empty=True)
    except ExecutorError:
        raise PackageError(f"archive entry {name!r} has an unsafe path ('..' or NUL)") from None


def _members(data: bytes, limits: PackageLimits) -> list[_Member]:
    if data[:4] == b"PK\x03\x04" or data[:4] == b"PK\x05\x06":
        return list(_zip_members(data, limits))
    return list(_tar_members(data, limits))


def _skill_prefix(members: list[_Member]) -> PurePosixPath:
    """Where SKILL.md lives: the root, or a single top folder holding everything."""
    files = [m.path for m in members if not m.is_dir and m.path != PurePosixPath(".")]
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


def _extract(members: list[_Member], prefix: PurePosixPath, dest: Path, limits: PackageLimits) -> None:
    total = 0
    for member in members:
        try:
            rel = member.path.relative_to(prefix) if prefix != PurePosixPath(".") else member.path
        except ValueError:
            continue
        target = dest / str(rel)
        if member.is_dir:
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        written = 0
        source: IO[bytes] = member.open()  # type: ignore[operator]
        with source, open(target, "xb") as out:
            while chunk := source.read(_CHUNK):
                written += len(chunk)
                total += len(chunk)
                if written > limits.max_file_bytes:
                    raise TooLarge(
                        f"archive entry {str(member.path)!r} unpacks to more than {limits.max_file_bytes} bytes",
                        code="package_too_large",
                    )
                if total > limits.max_total_bytes:
                    raise TooLarge(
                        f"archive unpacks to more than {limits.max_total_bytes} bytes", code="package_too_large"
                    )
                out.write(chunk)
        os.chmod(target, 0o755 if str(rel).startswith("scripts/") else 0o644)


def install_package(
    data: bytes,
    root: Path,
    *,
    strict: bool = False,
    replace: bool = True,
    limits: PackageLimits = PackageLimits(),
) -> Installed:
    """Install the one skill in an archive under ``root/<id>``; atomic replace."""
    members = _members(data, limits)
    prefix = _skill_prefix(members)
    root.mkdir(parents=True, exist_ok=True)
    staging = root / f"{STAGING_PREFIX}{uuid.uuid4().hex}"
    staging.mkdir()
    try:
        unpacked = staging / "pkg"
        unpacked.mkdir()
        try:
            _extract(members, prefix, unpacked, limits)
        except FileExistsError as exc:
            raise PackageError(f"archive holds the same path twice: {exc.filename}") from None
        except (NotADirectoryError, IsADirectoryError) as exc:
            raise PackageError(f"archive holds a file and a folder at the same path: {exc.filename}") from None
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
            old = staging / "old"
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
