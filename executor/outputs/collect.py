"""Collect a run's output files: globs over the workspace, caps applied while reading.

* Globs are workspace-relative with ``**`` (pathspec, anchored at the workspace:
  ``*.txt`` is a top-level file, ``**/*.txt`` any depth, ``out`` everything in
  ``out/``).  ``$OUTPUT_DIR/x`` means ``out/x`` (likewise ``$WORK_DIR``,
  ``$WORKSPACE_DIR``, ``$RUN_DIR``), but only on a real path boundary.
* The walk never follows a symbolic link: a matching link yields a warning, never
  content.  Only regular files are collected.
* ``max_files``, ``max_file_bytes`` and ``max_total_bytes`` bound what is read; every
  cap that bites is named in ``limits_hit``.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import pathspec

from ..errors import BadRequest
from ..paths import clean_relative
from ..skills.files import is_text
from ..workspace.layout import Workspace
from .mime import detect

_CHUNK = 1024 * 1024
_SNIFF = 8192
MAX_WALK_ENTRIES = 200_000

_VARIABLES = {
    "OUTPUT_DIR": "out",
    "WORK_DIR": "work",
    "RUN_DIR": "run",
    "WORKSPACE_DIR": "",
}
_VAR = re.compile(r"^\$(\{)?(OUTPUT_DIR|WORK_DIR|RUN_DIR|WORKSPACE_DIR)(?(1)\})(?=/|$)")


def normalise_glob(pattern: str, *, runtime_root: str | None = None) -> str:
    """Map a caller's glob to a workspace-relative one, or refuse it."""
    text = pattern.strip()
    match = _VAR.match(text)
    if match:
        prefix = _VARIABLES[match.group(2)]
        rest = text[match.end() :].lstrip("/")
        text = f"{prefix}/{rest}" if prefix and rest else (prefix or rest)
    elif text.startswith("$"):
        raise BadRequest(
            f"output glob {pattern!r} starts with an unknown variable; use $OUTPUT_DIR, $WORK_DIR, "
            "$RUN_DIR or $WORKSPACE_DIR followed by '/'",
            code="invalid_glob",
        )
    elif runtime_root and (text == runtime_root or text.startswith(runtime_root.rstrip("/") + "/")):
        text = text[len(runtime_root) :].lstrip("/")
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
def compile_globs(patterns: tuple[str, ...]) -> pathspec.PathSpec:
    """Compiled once per distinct glob list (agents reuse the same few)."""
    return pathspec.PathSpec.from_lines("gitignore", ["/" + p for p in patterns])


@dataclass(slots=True)
class CollectLimits:
    max_files: int
    max_file_bytes: int
    max_total_bytes: int


@dataclass(slots=True)
class CollectedFile:
    name: str
    path: Path
    size: int
    mime_type: str
    sha256: str
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


def _walk(workspace: Workspace, collection: Collection) -> Iterator[tuple[str, Path, os.stat_result]]:
    """(logical path, host path, lstat) of every entry under the writable roots."""
    seen = 0
    for top, base in workspace.roots().items():
        stack: list[tuple[str, Path]] = [(top, base)]
        while stack:
            logical_dir, host_dir = stack.pop()
            try:
                entries = sorted(os.scandir(host_dir), key=lambda e: e.name, reverse=True)
            except OSError:
                continue
            for entry in entries:
                seen += 1
                if seen > MAX_WALK_ENTRIES:
                    collection.hit("walk_entries")
                    return
                st = entry.stat(follow_symlinks=False)
                logical = f"{logical_dir}/{entry.name}"
                if stat.S_ISDIR(st.st_mode):
                    stack.append((logical, Path(entry.path)))
                yield logical, Path(entry.path), st


def collect(
    workspace: Workspace,
    globs: list[str],
    limits: CollectLimits,
    *,
    failed: bool = False,
) -> Collection:
    """Find, type and read the files matching ``globs``; caps applied while reading."""
    collection = Collection()
    if not globs:
        return collection
    spec = compile_globs(tuple(globs))
    remaining = limits.max_total_bytes
    matches: list[tuple[str, Path, os.stat_result]] = []
    for logical, host, st in _walk(workspace, collection):
        if stat.S_ISDIR(st.st_mode) or not spec.match_file(logical):
            continue
        if stat.S_ISLNK(st.st_mode):
            collection.warnings.append(f"output {logical!r} is a symbolic link; links are never followed")
            continue
        if not stat.S_ISREG(st.st_mode):
            collection.warnings.append(f"output {logical!r} is not a regular file; skipped")
            continue
        if failed and st.st_size == 0:
            collection.warnings.append(f"output {logical!r} is empty and the command failed; dropped")
            continue
        matches.append((logical, host, st))
    matches.sort(key=lambda m: m[0])
    if len(matches) > limits.max_files:
        collection.hit("max_files")
        collection.warnings.append(
            f"{len(matches)} files matched; only the first {limits.max_files} (by path) are returned"
        )
        matches = matches[: limits.max_files]
    for logical, host, st in matches:
        budget = min(limits.max_file_bytes, remaining)
        try:
            item = _read(logical, host, budget)
        except OSError as exc:
            collection.warnings.append(f"output {logical!r} could not be read: {exc.strerror}")
            continue
        if item.truncated:
            collection.hit("max_file_bytes" if budget == limits.max_file_bytes else "max_total_bytes")
        remaining -= len(item.data)
        collection.files.append(item)
    return collection


def _read(logical: str, host: Path, budget: int) -> CollectedFile:
    """Read up to ``budget`` bytes (no link followed); hash the whole file."""
    fd = os.open(host, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        digest = hashlib.sha256()
        kept = bytearray()
        total = 0
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
            total += len(chunk)
            if len(kept) < budget:
                kept += chunk[: budget - len(kept)]
    data = bytes(kept)
    truncated = total > len(data)
    head = data[:_SNIFF] if data else b""
    mime = detect(logical, head, complete=not truncated and total <= _SNIFF)
    return CollectedFile(logical, host, max(total, st.st_size), mime, digest.hexdigest(), data, truncated)


def resolve_globs(workspace_globs: list[str], *, runtime_root: str | None = None) -> list[str]:
    """Normalise a request's globs (order kept, duplicates dropped)."""
    out: list[str] = []
    for pattern in workspace_globs:
        normal = normalise_glob(pattern, runtime_root=runtime_root)
        clean_relative(normal.replace("*", "x").replace("?", "x"), what="output glob")
        if normal not in out:
            out.append(normal)
    return out
