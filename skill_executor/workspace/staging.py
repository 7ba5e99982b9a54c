"""Stage ``inputs[]`` into a run's workspace before its command runs.

Sources (``from``):

* ``artifact://name[@version]`` -- the artifact store; latest when no version;
  ``pin: true`` with a session reuses the version first staged in that session.
* ``file://<file id>`` (or ``file_id``) -- the artifact version a file id names (the
  caller's own: another key's id is 404 ``file_not_found``).
* ``host:///abs/path`` -- refused unless it resolves (symlinks followed) inside one of
  the configured allowed host roots; there are none by default.
* ``workspace://rel/path`` -- the run's (or its session's) workspace.
* ``skill://name/rel/path`` -- a file or folder of any installed skill.

Targets (``to``) are workspace-relative and land under ``work/``, ``out/`` or ``run/``
(default ``work/inputs/<basename>``).  Nothing outside the workspace is created,
deleted or overwritten: existing links on the way are refused, files are opened with
``O_NOFOLLOW``, and no shell is ever involved.  ``mode: link`` stages a read-only
copy: the run can read it but never write through it to the source.

Targets and ``workspace://`` sources lie in run-writable trees: they are written and
read only through :mod:`skill_executor.workspace.fs` (descriptor-relative, no link ever
followed, fresh files created exclusively).  Skill and host sources are trees the
service trusts; links in them are skipped, never followed.
"""

from __future__ import annotations

import functools
import os
import stat
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from ..artifacts.names import parse_ref
from ..artifacts.store import ArtifactInfo, ArtifactStore
from ..errors import BadRequest, ExecutorError, Forbidden, NotFound, TooLarge
from ..paths import clean_relative, is_within, resolve_within
from ..registry import SkillRepository
from .fs import PathEscape, Tree
from .layout import Workspace
from .schema import InputSpec
from .sessions import SessionStore

SCHEMES = ("artifact://", "file://", "host://", "workspace://", "skill://")
_Opener = Callable[[], BinaryIO]
_Entries = Generator[tuple[str, os.stat_result, _Opener], None, None]
#: What all inputs of one request may make: entries, and folder levels below a target.
MAX_STAGED_ENTRIES = 50_000
MAX_STAGED_DEPTH = 256
#: What a folder costs against the staged-bytes cap (a block and an inode).
FOLDER_BYTES = 4096


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
    """A file or folder of a tree the service trusts (a skill, an allowed host root)."""

    path: Path
    basename: str


@dataclass(frozen=True, slots=True)
class _WorkspaceSource:
    """A file or folder of the run's own (run-writable) workspace."""

    top: str
    rel: PurePosixPath
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
        """Stage every input, or refuse.  All inputs of a request together may hold at
        most ``max_bytes`` (a folder counts 4 KiB) in :data:`MAX_STAGED_ENTRIES` entries,
        none deeper than :data:`MAX_STAGED_DEPTH` levels."""
        report = StagingReport()
        budget, entries_left = self.max_bytes, MAX_STAGED_ENTRIES
        for index, spec in enumerate(inputs):
            label = f"inputs[{index}] ({spec.from_})"
            try:
                source = self._resolve(workspace, spec, label)
                target = self._target(workspace, spec, source.basename)
                size, entries, depth = self._size(workspace, source)
                if size > budget:
                    raise TooLarge(
                        f"{label}: staging {size} bytes would exceed the cap of {self.max_bytes} bytes for all inputs",
                        code="inputs_too_large",
                    )
                if entries > entries_left:
                    raise TooLarge(
                        f"{label}: staging {entries} files and folders would exceed the cap of "
                        f"{MAX_STAGED_ENTRIES} for all inputs",
                        code="inputs_too_large",
                    )
                if len(target.parts) + depth > MAX_STAGED_DEPTH:
                    raise BadRequest(
                        f"{label}: staging would nest folders deeper than {MAX_STAGED_DEPTH} levels",
                        code="inputs_too_deep",
                    )
                budget -= size
                entries_left -= entries
                readonly = spec.mode == "link"
                top, rest = workspace.locate(target, what=f"{label} target")
                with workspace.tree(top) as tree:
                    version = self._copy(workspace, source, tree, rest, readonly, label, report)
            except ExecutorError as exc:
                if not exc.message.startswith("inputs["):
                    exc.message = f"{label}: {exc.message}"
                    exc.args = (exc.message,)
                exc.details.setdefault("input", index)
                raise
            report.staged.append(StagedInput(spec.from_, str(target), size, version))
        return report

    # -- sources -----------------------------------------------------------------------

    def _resolve(
        self, workspace: Workspace, spec: InputSpec, label: str
    ) -> _PathSource | _ArtifactSource | _WorkspaceSource:
        ref = spec.from_
        if ref.startswith("artifact://"):
            name, version = parse_ref(ref[len("artifact://") :])
            session, tenant = workspace.session, workspace.tenant
            if spec.pin and version is None and session:
                version = self.sessions.pinned(session, tenant, name)
            info = self.artifacts.info(name, version, tenant=tenant)
            if spec.pin and session:
                pinned = self.sessions.pin(session, tenant, name, info.version)
                if pinned != info.version:
                    info = self.artifacts.info(name, pinned, tenant=tenant)
            return _ArtifactSource(info)
        if ref.startswith("file://"):
            return _ArtifactSource(self.artifacts.by_file_id(ref[len("file://") :], tenant=workspace.tenant))
        if ref.startswith("host://"):
            return self._host_source(ref[len("host://") :], label)
        if ref.startswith("workspace://"):
            logical = workspace.logical(ref[len("workspace://") :], what="workspace source")
            top, rest = workspace.locate(logical, what="workspace source")
            with workspace.tree(top) as tree:
                found = tree.lstat(rest, what=f"workspace source {str(logical)!r}")
                if found is None:
                    hint = (
                        "; a run's out/ and run/ end with it: stage an earlier run's output by its artifact:// ref "
                        "(tool calls save every output; POST /v1/runs with outputs.save)"
                        if logical.parts[0] != "work"
                        else ""
                    )
                    raise NotFound(f"workspace has no {str(logical)!r}{hint}", code="input_not_found")
                if stat.S_ISLNK(found.st_mode):
                    raise PathEscape(f"workspace source {str(logical)!r} is a symbolic link")
            return _WorkspaceSource(top, rest, logical.name)
        if ref.startswith("skill://"):
            rest_ref = ref[len("skill://") :]
            name, _, rel = rest_ref.partition("/")
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
                "host inputs are disabled: no allowed host roots are configured (SKILL_EXECUTOR_ALLOWED_HOST_ROOTS)",
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

    def _target(self, workspace: Workspace, spec: InputSpec, basename: str) -> PurePosixPath:
        if spec.to is None:
            return PurePosixPath("work", "inputs", basename)
        return workspace.logical(spec.to, what="target 'to'")

    def _size(
        self, workspace: Workspace, source: _PathSource | _ArtifactSource | _WorkspaceSource
    ) -> tuple[int, int, int]:
        """(bytes, entries, folder depth) that copying ``source`` makes."""
        if isinstance(source, _ArtifactSource):
            return source.info.size, 1, 0
        if isinstance(source, _WorkspaceSource):
            with workspace.tree(source.top) as tree:
                st = tree.lstat(source.rel)
                if st is None or not stat.S_ISDIR(st.st_mode):
                    return (st.st_size if st is not None and stat.S_ISREG(st.st_mode) else 0), 1, 0
                with closing(tree.walk(source.rel)) as walk:
                    return _total((e.stat, e.depth) for e in walk)
        with closing(_walk(source.path)) as entries:
            return _total((st, rel.count("/") + 1) for rel, st in entries)

    # -- writing -----------------------------------------------------------------------

    def _copy(
        self,
        workspace: Workspace,
        source: _PathSource | _ArtifactSource | _WorkspaceSource,
        tree: Tree,
        target: PurePosixPath,
        readonly: bool,
        label: str,
        report: StagingReport,
    ) -> int | None:
        """Copy ``source`` to ``target`` in ``tree``; return the artifact version staged."""
        mode = 0o444 if readonly else 0o644
        what = f"target {str(target)!r}"
        if isinstance(source, _ArtifactSource):
            with self.artifacts.open(source.info) as handle:
                tree.write(target, handle, owner=self.owner, mode=mode, what=what)
            return source.info.version
        if isinstance(source, _WorkspaceSource):
            with workspace.tree(source.top) as origin:
                if source.top == _tree_top(workspace, tree) and _inside(target, source.rel):
                    raise BadRequest("the target lies inside the folder being copied", code="target_conflict")
                with closing(_tree_entries(origin, source.rel)) as entries:
                    self._copy_entries(entries, tree, target, mode, label, report)
            return None
        if stat.S_ISDIR(os.stat(source.path).st_mode) and _host_inside(workspace, tree, target, source.path):
            raise BadRequest("the target lies inside the folder being copied", code="target_conflict")
        with closing(_path_entries(source.path)) as trusted:
            self._copy_entries(trusted, tree, target, mode, label, report)
        return None

    def _copy_entries(
        self,
        entries: _Entries,
        tree: Tree,
        target: PurePosixPath,
        mode: int,
        label: str,
        report: StagingReport,
    ) -> None:
        folders: list[PurePosixPath] = []
        for rel, st, opener in entries:
            dest = target if rel == "." else target / rel
            what = f"target {str(dest)!r}"
            if stat.S_ISLNK(st.st_mode):
                report.warnings.append(f"{label}: skipped symbolic link {rel!r} (links are never followed)")
            elif stat.S_ISDIR(st.st_mode):
                if tree.lstat(dest, what=what) is not None and not tree.is_dir(dest, what=what):
                    raise BadRequest(f"{what} exists and is not a folder", code="target_conflict")
                tree.make_dirs(dest, owner=self.owner, what=what)
                folders.append(dest)
            elif stat.S_ISREG(st.st_mode):
                with opener() as handle:
                    tree.write(dest, handle, owner=self.owner, mode=mode, what=what)
            elif rel == ".":
                raise BadRequest("the source is neither a file nor a folder", code="invalid_input")
            else:
                report.warnings.append(f"{label}: skipped special file {rel!r}")
        if mode == 0o444 and folders:
            tree.make_read_only(folders[0])


def _total(stats: Iterator[tuple[os.stat_result, int]]) -> tuple[int, int, int]:
    """(bytes: regular files' sizes + 4 KiB a folder, entries, deepest level) of a source
    folder's (lstat, depth) pairs; stops counting past :data:`MAX_STAGED_ENTRIES`."""
    total = count = deepest = 0
    for st, depth in stats:
        count += 1
        if count > MAX_STAGED_ENTRIES:
            break
        deepest = max(deepest, depth)
        if stat.S_ISREG(st.st_mode):
            total += st.st_size
        elif stat.S_ISDIR(st.st_mode):
            total += FOLDER_BYTES
    return total, count, deepest


def _tree_top(workspace: Workspace, tree: Tree) -> str:
    for top, path in workspace.roots().items():
        if path == tree.path:
            return top
    return ""


def _inside(target: PurePosixPath, folder: PurePosixPath) -> bool:
    return str(folder) == "." or target == folder or folder in target.parents


def _host_inside(workspace: Workspace, tree: Tree, target: PurePosixPath, source: Path) -> bool:
    """A trusted source folder that contains the target (an allowed host root spanning the data dir)."""
    return is_within(tree.path.resolve() / str(target), source.resolve())


def _tree_entries(tree: Tree, rel: PurePosixPath) -> _Entries:
    """(relative path, lstat, opener) of a run-writable source, links never followed."""
    st = tree.lstat(rel)
    if st is None:
        raise NotFound(f"workspace has no {str(rel)!r}", code="input_not_found")
    yield ".", st, functools.partial(_open_tree_file, tree, rel)
    if not stat.S_ISDIR(st.st_mode):
        return
    for entry in tree.walk(rel):
        name = str(entry.path.relative_to(rel)) if str(rel) != "." else str(entry.path)
        yield name, entry.stat, functools.partial(_open_tree_file, tree, entry.path)


def _open_tree_file(tree: Tree, rel: PurePosixPath) -> BinaryIO:
    fd, _ = tree.open_file(rel, what=f"workspace source {str(rel)!r}")
    return os.fdopen(fd, "rb")


def _path_entries(root: Path) -> _Entries:
    for rel, st in _walk(root):
        path = root if rel == "." else root / rel
        yield rel, st, functools.partial(_open_trusted, path)


def _open_trusted(path: Path) -> BinaryIO:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise BadRequest(f"{path.name!r} is not a regular file", code="invalid_input")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def _walk(root: Path) -> Generator[tuple[str, os.stat_result], None, None]:
    """Yield (relative path, lstat) for root and everything below it, links not followed."""
    st = os.lstat(root)
    yield ".", st
    if not stat.S_ISDIR(st.st_mode):
        return
    stack = [root]
    while stack:
        current = stack.pop()
        with os.scandir(current) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                entry_st = entry.stat(follow_symlinks=False)
                yield os.path.relpath(entry.path, root), entry_st
                if stat.S_ISDIR(entry_st.st_mode):
                    stack.append(Path(entry.path))
