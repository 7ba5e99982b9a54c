"""Layers 2 and 3 of progressive disclosure: a skill's inventory and single-file reads."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import Literal

from ..errors import NotFound, TooLarge
from ..paths import clean_relative, resolve_within
from .model import Skill

DOC_SUFFIXES = (".md", ".txt")
SKIP_DIRS = frozenset({".git", "node_modules", "__pycache__"})
DEFAULT_MAX_READ = 1024 * 1024

Kind = Literal["doc", "script", "reference", "asset", "other"]


@dataclass(frozen=True, slots=True)
class FileEntry:
    path: str
    size: int
    kind: Kind


def _kind(rel: str) -> Kind:
    top = rel.split("/", 1)[0]
    if top == "scripts":
        return "script"
    if top == "references":
        return "reference"
    if top == "assets":
        return "asset"
    if rel.lower().endswith(DOC_SUFFIXES):
        return "doc"
    return "other"


def inventory(skill: Skill, *, limit: int = 5000) -> list[FileEntry]:
    """Every regular file of the skill (symlinks not followed), SKILL.md excluded.

    ``kind`` sorts them into scripts/references/assets by top folder and docs by
    suffix; :func:`docs` lists every ``.md``/``.txt`` wherever it lives.
    """
    entries: list[FileEntry] = []
    root = skill.path
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            if rel == skill.skill_file.name:
                continue
            try:
                st = os.lstat(full)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            entries.append(FileEntry(rel, st.st_size, _kind(rel)))
            if len(entries) >= limit:
                return entries
    return entries


def docs(entries: list[FileEntry]) -> list[FileEntry]:
    """The docs an agent may select: every ``.md``/``.txt`` file except SKILL.md."""
    return [e for e in entries if e.path.lower().endswith(DOC_SUFFIXES)]


@dataclass(frozen=True, slots=True)
class FileContent:
    path: str
    size: int
    data: bytes
    truncated: bool

    @property
    def is_text(self) -> bool:
        return is_text(self.data, partial=self.truncated)

    @property
    def text(self) -> str | None:
        if not self.is_text:
            return None
        return self.data.decode("utf-8", "ignore" if self.truncated else "strict")


def is_text(data: bytes, *, partial: bool = False) -> bool:
    """Valid UTF-8 with no NUL byte; a truncated read may cut one character short."""
    if b"\x00" in data:
        return False
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError as exc:
        return partial and exc.start >= len(data) - 3 and exc.reason == "unexpected end of data"


def read_file(skill: Skill, relative: str, *, max_bytes: int = DEFAULT_MAX_READ) -> FileContent:
    """Read one file of a skill by relative path, safely.

    Refuses absolute paths, ``..`` and anything whose resolved path (symlinks
    included) leaves the skill directory.  Reads at most ``max_bytes`` and says so.
    """
    rel = clean_relative(relative, what="file path")
    target = resolve_within(skill.path, rel, what="file path")
    try:
        st = target.stat()
    except OSError:
        raise NotFound(f"skill {skill.id!r} has no file {str(rel)!r}", code="file_not_found") from None
    if not stat.S_ISREG(st.st_mode):
        raise NotFound(f"{str(rel)!r} in skill {skill.id!r} is not a regular file", code="file_not_found")
    if max_bytes <= 0:
        raise TooLarge("max_bytes must be positive")
    with open(target, "rb") as handle:
        data = handle.read(max_bytes + 1)
    truncated = len(data) > max_bytes
    return FileContent(str(rel), st.st_size, data[:max_bytes], truncated)

