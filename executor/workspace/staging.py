"""Stage ``inputs[]`` into a run's workspace before its command runs.

Sources (``from``):

* ``artifact://name[@version]`` -- the artifact store; latest when no version;
  ``pin: true`` with a session reuses the version first staged in that session.
* ``host:///abs/path`` -- refused unless it resolves (symlinks followed) inside one of
  the configured allowed host roots; there are none by default.
* ``workspace://rel/path`` -- the run's (or its session's) workspace.
* ``skill://name/rel/path`` -- a file or folder of any installed skill.

Targets (``to``) are workspace-relative and land under ``work/``, ``out/`` or ``run/``
(default ``work/inputs/<basename>``).  Nothing outside the workspace is created,
deleted or overwritten: existing links on the way are refused, files are opened with
``O_NOFOLLOW``, and no shell is ever involved.  ``mode: link`` stages a read-only
copy: the run can read it but never write through it to the source.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ..artifacts.store import ArtifactInfo, ArtifactStore, parse_ref
from ..errors import BadRequest, ExecutorError, Forbidden, NotFound, TooLarge
from ..paths import clean_relative, is_within, resolve_within
from ..runs.models import InputSpec
from ..skills import SkillRepository
from .layout import Workspace
from .sessions import SessionStore

_CHUNK = 1024 * 1024
SCHEMES = ("artifact://", "host://", "workspace://", "skill://")


@dataclass(frozen=True, slots=True)
class StagedInput:
    source: str
    target: str
    size: int
    version: int | None = None


@dataclass(slots=True)
class StagingReport:
    staged: list[StagedInput] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _PathSource:
    path: Path
    basename: str


@dataclass(frozen=True, slots=True)
class _ArtifactSource:
    info: ArtifactInfo

    @property
    def basename(self) -> str:
        return self.info.name.rsplit("/", 1)[-1]


class Stager:
    """Resolves input sources and copies them into a workspace, safely."""

    def __init__(
        self,
        repository: SkillRepository,
        artifacts: ArtifactStore,
        sessions: SessionStore,
        *,
        allowed_host_roots: Sequence[Path] = (),
        max_bytes: int,
        owner: tuple[int, int] | None = None,
    ) -> None:
        self.repository = repository
        self.artifacts = artifacts
        self.sessions = sessions
        self.allowed_host_roots = [Path(r).resolve() for r in allowed_host_roots]
        self.max_bytes = max_bytes
        self.owner = owner

    def stage(self, workspace: Workspace, inputs: Sequence[InputSpec]) -> StagingReport:
        report = StagingReport()
        budget = self.max_bytes
        for index, spec in enumerate(inputs):
            label = f"inputs[{index}] ({spec.from_})"
            try:
                source = self._resolve(workspace, spec, label)
                target = self._target(workspace, spec, source.basename, label)
                size = self._size(source, report, label)
                if size > budget:
                    raise TooLarge(
                        f"{label}: staging {size} bytes would exceed the cap of {self.max_bytes} bytes for all inputs",
                        code="inputs_too_large",
                    )
                budget -= size
                readonly = spec.mode == "link"
                host_target = workspace.host_path(target, what=f"{label} target")
                if isinstance(source, _ArtifactSource):
                    with self.artifacts.open(source.info) as handle:
                        self._write_stream(handle, host_target, readonly, label)
                    version = source.info.version
                else:
                    self._copy_path(source.path, host_target, readonly, label, report)
                    version = None
            except ExecutorError as exc:
                if not exc.message.startswith("inputs["):
                    exc.message = f"{label}: {exc.message}"
                    exc.args = (exc.message,)
                exc.details.setdefault("input", index)
                raise
            report.staged.append(StagedInput(spec.from_, str(target), size, version))
        return report

    # -- sources -----------------------------------------------------------------------

    def _resolve(self, workspace: Workspace, spec: InputSpec, label: str) -> _PathSource | _ArtifactSource:
        ref = spec.from_
        if ref.startswith("artifact://"):
            name, version = parse_ref(ref[len("artifact://") :])
            if spec.pin and version is None and workspace.session:
                version = self.sessions.pinned(workspace.session, name)
            info = self.artifacts.info(name, version)
            if spec.pin and workspace.session:
                pinned = self.sessions.pin(workspace.session, name, info.version)
                if pinned != info.version:
                    info = self.artifacts.info(name, pinned)
            return _ArtifactSource(info)
        if ref.startswith("host://"):
            return self._host_source(ref[len("host://") :], label)
        if ref.startswith("workspace://"):
            logical = workspace.logical(ref[len("workspace://") :], what="workspace source")
            path = workspace.host_path(logical, what="workspace source")
            if not path.exists():
                raise NotFound(f"workspace has no {str(logical)!r}", code="input_not_found")
            return _PathSource(path, logical.name)
        if ref.startswith("skill://"):
            rest = ref[len("skill://") :]
            name, _, rel = rest.partition("/")
            skill = self.repository.get(name)
            relative = clean_relative(rel, what="skill source", allow_empty=True)
            path = resolve_within(skill.path, relative, what="skill source")
            if not path.exists():
                raise NotFound(f"skill {skill.id!r} has no {str(relative)!r}", code="input_not_found")
            return _PathSource(path, relative.name if str(relative) != "." else skill.id)
        raise BadRequest(
            f"unknown input scheme in {ref!r}; use one of {', '.join(SCHEMES)}", code="invalid_input_scheme"
        )

    def _host_source(self, raw: str, label: str) -> _PathSource:
        if not self.allowed_host_roots:
            raise Forbidden(
                "host inputs are disabled: no allowed host roots are configured "
                "(SKILL_EXECUTOR_ALLOWED_HOST_ROOTS)",
                code="host_input_refused",
            )
        relative = clean_relative(raw.lstrip("/"), what="host path")
        path = Path("/", str(relative)).resolve()
        if not any(is_within(path, root) for root in self.allowed_host_roots):
            raise Forbidden(
                f"host path {'/' + str(relative)!r} resolves outside the allowed host roots",
                code="host_input_refused",
            )
        if not path.exists():
            raise NotFound(f"host path {'/' + str(relative)!r} does not exist", code="input_not_found")
        return _PathSource(path, path.name)

    def _target(self, workspace: Workspace, spec: InputSpec, basename: str, label: str) -> PurePosixPath:
        if spec.to is None:
            return PurePosixPath("work", "inputs", basename)
        return workspace.logical(spec.to, what="target 'to'")

    def _size(self, source: _PathSource | _ArtifactSource, report: StagingReport, label: str) -> int:
        if isinstance(source, _ArtifactSource):
            return source.info.size
        total = 0
        for _, st in _walk(source.path):
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
        return total

    # -- writing -----------------------------------------------------------------------

    def _copy_path(self, source: Path, target: Path, readonly: bool, label: str, report: StagingReport) -> None:
        st = source.stat()
        if stat.S_ISREG(st.st_mode):
            with open(source, "rb") as handle:
                self._write_stream(handle, target, readonly, label)
            return
        if not stat.S_ISDIR(st.st_mode):
            raise BadRequest(f"{source.name!r} is neither a file nor a folder", code="invalid_input")
        if is_within(target.resolve(), source.resolve()):
            raise BadRequest("the target lies inside the folder being copied", code="target_conflict")
        self._mkdir(target, label)
        for rel, entry_st in _walk(source):
            if rel == ".":
                continue
            dest = target / rel
            if stat.S_ISLNK(entry_st.st_mode):
                report.warnings.append(f"{label}: skipped symbolic link {rel!r} (links are never followed)")
            elif stat.S_ISDIR(entry_st.st_mode):
                self._mkdir(dest, label)
            elif stat.S_ISREG(entry_st.st_mode):
                with open(source / rel, "rb") as handle:
                    self._write_stream(handle, dest, readonly, label)
            else:
                report.warnings.append(f"{label}: skipped special file {rel!r}")
        if readonly:
            for rel, entry_st in _walk(target):
                if stat.S_ISDIR(entry_st.st_mode):
                    os.chmod(target / rel, 0o555)

    def _mkdir(self, path: Path, label: str) -> None:
        if path.is_symlink():
            raise Forbidden(f"target {path.name!r} is a symbolic link", code="path_escape")
        if path.exists() and not path.is_dir():
            raise BadRequest(f"target {path.name!r} exists and is not a folder", code="target_conflict")
        path.mkdir(parents=True, exist_ok=True)
        self._chown(path)

    def _write_stream(self, handle, target: Path, readonly: bool, label: str) -> None:  # type: ignore[no-untyped-def]
        parent = target.parent
        if not parent.exists():
            self._mkdir_chain(parent)
        if target.is_symlink():
            raise Forbidden(f"target {target.name!r} is a symbolic link", code="path_escape")
        if target.is_dir():
            raise BadRequest(f"target {target.name!r} exists and is a folder", code="target_conflict")
        if target.exists():
            os.chmod(target, 0o644)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(target, flags, 0o644)
        with os.fdopen(fd, "wb") as out:
            while chunk := handle.read(_CHUNK):
                out.write(chunk)
        if readonly:
            os.chmod(target, 0o444)
        else:
            self._chown(target)

    def _mkdir_chain(self, path: Path) -> None:
        missing = []
        current = path
        while not current.exists():
            if current.is_symlink():
                raise Forbidden(f"target folder {current.name!r} is a dangling symbolic link", code="path_escape")
            missing.append(current)
            current = current.parent
        for directory in reversed(missing):
            directory.mkdir()
            self._chown(directory)

    def _chown(self, path: Path) -> None:
        if self.owner is not None:
            os.chown(path, *self.owner, follow_symlinks=False)


def _walk(root: Path):  # type: ignore[no-untyped-def]
    """Yield (relative path, lstat) for root and everything below it, links not followed."""
    yield ".", os.lstat(root)
    if not stat.S_ISDIR(os.lstat(root).st_mode):
        return
    stack = [root]
    while stack:
        current = stack.pop()
        with os.scandir(current) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                st = entry.stat(follow_symlinks=False)
                rel = os.path.relpath(entry.path, root)
                yield rel, st
                if stat.S_ISDIR(st.st_mode):
                    stack.append(Path(entry.path))
