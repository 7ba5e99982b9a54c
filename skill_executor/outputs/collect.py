"""Collect a run's output files: globs over the workspace, caps applied while reading.

* Globs are workspace-relative with ``**`` (pathspec, anchored at the workspace:
  ``*.txt`` is a top-level file, ``**/*.txt`` any depth, ``out`` everything in
  ``out/``).  ``$OUTPUT_DIR/x`` means ``out/x`` (likewise ``$WORK_DIR``,
  ``$WORKSPACE_DIR``, ``$RUN_DIR``), but only on a real path boundary.
* The walk never follows a symbolic link: a matching link yields a warning, never
  content.  Only regular files are collected, opened without blocking (a FIFO is
  refused on its descriptor).  The trees are run-writable: they are walked and read
  only through :mod:`skill_executor.workspace.fs`.
* ``max_files``, ``max_file_bytes`` and ``max_total_bytes`` bound what is read: no
  byte past the caps is read or hashed (``sha256`` is that of the whole file, and
  absent for a truncated one); every cap that bites is named in ``limits_hit``.
* A file whose name is not valid UTF-8 cannot be returned as JSON: it is skipped
  with a warning.
* Files the run wrote in its skill folder (``SKILL_DIR``, the default working directory:
  scripts save charts and configs where they run) are matched too, by their path in that
  folder (``*.png`` is ``$SKILL_DIR/chart.png``), given the installed skill to tell them
  from the skill's own files (``skill_source``: new, or not as installed).  Collected under
  that path; one the globs do not match is named in a warning, as is a glob that matched
  nothing.
"""

from __future__ import annotations

import hashlib
import heapq
import os
import stat
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import pathspec

from ..errors import BadRequest, ExecutorError
from ..paths import MAX_PATH_BYTES, clean_relative
from ..skills.files import is_text
from ..workspace.fs import Tree
from ..workspace.layout import Workspace, expand_path_variable
from .mime import detect

_SNIFF = 8192
if TYPE_CHECKING:
    Globs = pathspec.PathSpec[pathspec.Pattern]
MAX_WALK_ENTRIES = 200_000


def normalise_glob(pattern: str) -> str:
    """Map a caller's glob to a workspace-relative one, or refuse it."""
    text = pattern.strip()
    expanded = expand_path_variable(text)
    if expanded is not None:
        text = expanded
    elif text.startswith("$"):
        raise BadRequest(
            f"output glob {pattern!r} starts with an unknown variable; use $OUTPUT_DIR, $WORK_DIR, "
            "$RUN_DIR or $WORKSPACE_DIR followed by '/'",
            code="invalid_glob",
        )
    while text.startswith("./"):
        text = text[2:]
    if not text or text.startswith("/"):
        raise BadRequest(f"output glob {pattern!r} must be workspace-relative", code="invalid_glob")
    if ".." in text.split("/"):
        raise BadRequest(f"output glob {pattern!r} must not contain '..'", code="invalid_glob")
    if text == "inputs" or text.startswith("inputs/"):
        text = "work/" + text
    return text


@lru_cache(maxsize=512)
def compile_globs(patterns: tuple[str, ...]) -> Globs:
    """Compiled once per distinct glob list (agents reuse the same few). Matched by RE2
    (linear time: a glob such as ``*a*a*a...*b`` cannot backtrack for minutes), never by
    the ``re`` fallback pathspec would pick silently without google-re2."""
    return pathspec.PathSpec.from_lines("gitignore", ["/" + p for p in patterns], backend="re2")


@dataclass(slots=True)
class CollectLimits:
    max_files: int
    max_file_bytes: int
    max_total_bytes: int


@dataclass(slots=True)
class CollectedFile:
    name: str
    size: int
    mime_type: str
    sha256: str | None
    data: bytes
    truncated: bool

    @property
    def is_text(self) -> bool:
        return is_text(self.data, partial=self.truncated)


@dataclass(slots=True)
class Collection:
    files: list[CollectedFile] = field(default_factory=list)
    limits_hit: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def hit(self, limit: str) -> None:
        if limit not in self.limits_hit:
            self.limits_hit.append(limit)


def printable(name: str) -> str:
    """A name as UTF-8-safe text (undecodable bytes shown as escapes)."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


#: Names a file the run wrote in its skill folder cannot be collected under (the workspace's own).
_WORKSPACE_NAMES = frozenset({"work", "out", "run", "inputs", "skills"})
#: At most this many files the run wrote in its skill folder are named in the warning.
NAMED_UNCOLLECTED = 5
#: The key of the skill folder among the trees walked.
SKILL_TREE = "."


def collect(
    workspace: Workspace,
    globs: list[str],
    limits: CollectLimits,
    *,
    failed: bool = False,
    skill_source: Path | None = None,
) -> Collection:
    """Find, type and read the files matching ``globs``; caps applied while reading.
    ``skill_source``: the installed skill, whose run-written files in the run's skill folder
    are matched too (see the module docstring)."""
    collection = Collection()
    if not globs:
        return collection
    spec = compile_globs(tuple(globs))
    with ExitStack() as stack:
        trees = {top: stack.enter_context(workspace.tree(top)) for top in workspace.roots()}
        written: list[Written] = []
        if skill_source is not None and workspace.skill_view.is_dir():
            trees[SKILL_TREE] = stack.enter_context(Tree(workspace.skill_view))
            written = written_by_run(trees[SKILL_TREE], skill_source, collection)
        matched, matches = _match(trees, spec, collection, failed, limits.max_files, written)
        if matched <= limits.max_files:  # every match is at hand
            _say_what_was_missed(globs, spec, matches, written, collection)
        if matched > limits.max_files:
            collection.hit("max_files")
            collection.warnings.append(
                f"{matched} files matched; only the first {limits.max_files} (by path) are returned"
            )
        remaining = limits.max_total_bytes
        for logical, top, rel in matches:
            budget = max(0, min(limits.max_file_bytes, remaining))
            try:
                item = _read(trees[top], logical, rel, budget)
            except ExecutorError as exc:
                collection.warnings.append(f"output {logical!r} could not be read: {exc.message}")
                continue
            except OSError as exc:
                collection.warnings.append(f"output {logical!r} could not be read: {exc.strerror}")
                continue
            if item.truncated:
                collection.hit("max_file_bytes" if budget == limits.max_file_bytes else "max_total_bytes")
            remaining -= len(item.data)
            collection.files.append(item)
    return collection


@dataclass(frozen=True, slots=True)
class Written:
    """A file the run wrote in its skill folder: its name there, its path in the tree, its size."""

    name: str
    path: PurePosixPath
    size: int


def written_by_run(tree: Tree, source: Path, collection: Collection) -> list[Written]:
    """(name, path) of the regular files of the run's skill folder (``tree``) that the run
    wrote: not in the installed skill ``source``, or not as installed (size, mtime: the copy
    keeps the installed file's).  Links are not followed; names of the workspace's own
    folders are skipped with a warning."""
    written: list[Written] = []
    seen = 0
    for entry in tree.walk():
        seen += 1
        if seen > MAX_WALK_ENTRIES:
            collection.hit("walk_entries")
            break
        if entry.is_dir or not stat.S_ISREG(entry.stat.st_mode):
            continue
        try:
            installed = os.lstat(source / entry.path)
        except OSError:
            installed = None
        if (
            installed is not None
            and stat.S_ISREG(installed.st_mode)
            and (installed.st_size, installed.st_mtime_ns) == (entry.stat.st_size, entry.stat.st_mtime_ns)
        ):
            continue
        name = str(entry.path)
        if entry.path.parts[0] in _WORKSPACE_NAMES:
            collection.warnings.append(
                f"the run wrote {printable(name)!r} in its skill folder, a name of the workspace's own; not collected"
            )
            continue
        written.append(Written(name, entry.path, entry.stat.st_size))
    return written


def _say_what_was_missed(
    globs: list[str],
    spec: Globs,
    matches: list[tuple[str, str, PurePosixPath]],
    written: Sequence[Written],
    collection: Collection,
) -> None:
    """Warnings: a glob that matched no file, files the run wrote in its skill folder that no glob matched."""
    names = [logical for logical, _, _ in matches]
    for pattern in globs:
        one = compile_globs((pattern,))
        if not any(one.match_file(name) for name in names):
            collection.warnings.append(f"output glob {pattern!r} matched no file")
    missed = [w.name for w in written if not spec.match_file(w.name)]
    if missed:
        shown = ", ".join(repr(printable(n)) for n in missed[:NAMED_UNCOLLECTED])
        more = f" and {len(missed) - NAMED_UNCOLLECTED} more" if len(missed) > NAMED_UNCOLLECTED else ""
        collection.warnings.append(
            f"the run wrote {len(missed)} file(s) in its skill folder (the working directory) that no output glob "
            f"matched: {shown}{more}; a glob names them by their path there (e.g. {missed[0]!r})"
        )


def _match(
    trees: dict[str, Tree],
    spec: Globs,
    collection: Collection,
    failed: bool,
    most: int,
    written: Sequence[Written] = (),
) -> tuple[int, list[tuple[str, str, PurePosixPath]]]:
    """(how many regular files match, the first ``most`` of them by path as (logical
    path, root, path in root)).  Only ``most`` matches are ever held; paths longer than
    a path may be are skipped.  ``written``: the run's files in its skill folder
    (:data:`SKILL_TREE`), matched by their path there."""
    kept: list[tuple[str, str, PurePosixPath]] = []  # trimmed to the ``most`` first whenever it doubles
    matched = seen = too_long = 0
    for item in written:
        if not spec.match_file(item.name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")):
            continue
        if printable(item.name) != item.name:
            collection.warnings.append(f"output {printable(item.name)!r} has a name that is not UTF-8; skipped")
        elif failed and item.size == 0:
            collection.warnings.append(f"output {item.name!r} is empty and the command failed; dropped")
        else:
            matched += 1
            kept.append((item.name, SKILL_TREE, item.path))
    for top, tree in trees.items():
        if top == SKILL_TREE:
            continue
        for entry in tree.walk():
            seen += 1
            if seen > MAX_WALK_ENTRIES:
                collection.hit("walk_entries")
                break
            if entry.is_dir:
                continue
            if entry.depth * 2 > MAX_PATH_BYTES or len(entry.path.parts[-1]) > MAX_PATH_BYTES:
                too_long += 1
                continue
            logical = f"{top}/{entry.path}"
            if len(logical.encode("utf-8", "surrogateescape")) > MAX_PATH_BYTES:
                too_long += 1
                continue
            # RE2 matches text: an undecodable byte is matched as U+FFFD (then skipped below, with a warning).
            if not spec.match_file(logical.encode("utf-8", "surrogateescape").decode("utf-8", "replace")):
                continue
            shown = printable(logical)
            mode = entry.stat.st_mode
            if shown != logical:
                collection.warnings.append(f"output {shown!r} has a name that is not UTF-8; skipped")
            elif stat.S_ISLNK(mode):
                collection.warnings.append(f"output {logical!r} is a symbolic link; links are never followed")
            elif not stat.S_ISREG(mode):
                collection.warnings.append(f"output {logical!r} is not a regular file; skipped")
            elif failed and entry.stat.st_size == 0:
                collection.warnings.append(f"output {logical!r} is empty and the command failed; dropped")
            else:
                matched += 1
                kept.append((logical, top, entry.path))
                if len(kept) >= 2 * most + 64:
                    kept = heapq.nsmallest(most, kept)
        else:
            continue
        break
    if too_long:
        collection.warnings.append(f"{too_long} file(s) with paths longer than {MAX_PATH_BYTES} bytes were skipped")
    return matched, heapq.nsmallest(most, kept)


def _read(tree: Tree, logical: str, rel: PurePosixPath, budget: int) -> CollectedFile:
    """Read at most ``budget`` bytes of a regular file; hash it only when read whole."""
    fd, st = tree.open_file(rel, what=f"output {logical!r}")
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(min(budget, st.st_size)) if budget and st.st_size else b""
    truncated = st.st_size > len(data)
    digest = None if truncated else hashlib.sha256(data).hexdigest()
    mime = detect(logical, data[:_SNIFF], complete=not truncated and len(data) <= _SNIFF)
    return CollectedFile(logical, st.st_size, mime, digest, data, truncated)


def resolve_globs(workspace_globs: list[str]) -> list[str]:
    """Normalise a request's globs (order kept, duplicates dropped)."""
    out: list[str] = []
    for pattern in workspace_globs:
        normal = normalise_glob(pattern)
        clean_relative(normal.replace("*", "x").replace("?", "x"), what="output glob")
        if normal not in out:
            out.append(normal)
    return out
