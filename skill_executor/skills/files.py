"""Layers 2 and 3 of progressive disclosure: a skill's inventory and single-file reads."""

from __future__ import annotations

import difflib
import os
import stat
from dataclasses import dataclass
from typing import BinaryIO, Literal

from ..errors import NotFound, TooLarge
from ..paths import clean_relative, resolve_within
from .model import Skill

DOC_SUFFIXES = (".md", ".txt")
SKIP_DIRS = frozenset({".git", "node_modules", "__pycache__"})
DEFAULT_MAX_READ = 1024 * 1024

Kind = Literal["doc", "script", "reference", "asset", "test", "other"]
#: Top folders for the skill's author, not its agent: the skill's own tests (skill-executor
#: test) and skill-creator's evals. Listed in the inventory, never offered as docs.
AUTHOR_DIRS = frozenset({"tests", "evals"})


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
    if top in AUTHOR_DIRS and "/" in rel:
        return "test"
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
    """The docs an agent may select: every ``.md``/``.txt`` file except SKILL.md and the
    author's ``tests/`` and ``evals/``."""
    return [e for e in entries if e.path.lower().endswith(DOC_SUFFIXES) and e.kind != "test"]


@dataclass(frozen=True, slots=True)
class Match:
    """The path a requested name resolved to; ``note`` says why when it is not the name itself."""

    requested: str
    path: str
    note: str | None = None


def suggestions(wanted: str, available: list[str], *, limit: int = 3) -> list[str]:
    """Paths close to ``wanted``: equal ignoring case, the same file name in another
    folder (ignoring case), then difflib's closest (ignoring case)."""
    folded = wanted.casefold()
    base = folded.rsplit("/", 1)[-1]
    by_fold: dict[str, list[str]] = {}
    for path in available:
        by_fold.setdefault(path.casefold(), []).append(path)
    found = [p for p in available if p.casefold() == folded]
    found += [p for p in available if p.casefold().rsplit("/", 1)[-1] == base]
    for close in difflib.get_close_matches(folded, list(by_fold), n=limit, cutoff=0.6):
        found += by_fold[close]
    return list(dict.fromkeys(found))[:limit]


def match_path(skill: Skill, wanted: str, available: list[str], *, what: str = "doc") -> Match:
    """Resolve a requested name against ``available`` paths: the exact path wins;
    otherwise the one path equal to it ignoring case (``FORMS.md`` -> ``forms.md``)
    is served with a note; none, or several such, is 404 ``<what>_not_found`` with a
    "did you mean" suggestion."""
    if wanted in available:
        return Match(wanted, wanted)
    folded = [p for p in available if p.casefold() == wanted.casefold()]
    if len(folded) == 1:
        return Match(wanted, folded[0], f"{wanted!r} matched {folded[0]!r} ignoring case")
    raise NotFound(_missing(skill, what, wanted, suggestions(wanted, available)), code=f"{what}_not_found")


def _missing(skill: Skill, what: str, wanted: str, close: list[str]) -> str:
    message = f"skill {skill.id!r} has no {what} {wanted!r}"
    if close:
        message += f"; did you mean {' or '.join(map(repr, close))}?"
    return message


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


def find_file(skill: Skill, relative: str) -> Match:
    """:func:`match_path` for any file of the skill (``SKILL.md`` included): an
    existing path is itself; otherwise the one file equal to it ignoring case."""
    rel = str(clean_relative(relative, what="file path"))
    if resolve_within(skill.path, rel, what="file path").exists():
        return Match(relative, rel)
    available = [skill.skill_file.name, *(e.path for e in inventory(skill))]
    found = match_path(skill, rel, available, what="file")
    return Match(relative, found.path, found.note)


def open_file(skill: Skill, relative: str) -> tuple[str, int, BinaryIO]:
    """Open one regular file of a skill by relative path, safely: ``(path, size, handle)``.

    Refuses absolute paths, ``..`` and anything whose resolved path (symlinks included)
    leaves the skill directory; anything but a regular file is 404 (checked on the open
    descriptor, which is opened non-blocking: a FIFO cannot hang the reader).
    """
    rel = clean_relative(relative, what="file path")
    target = resolve_within(skill.path, rel, what="file path")
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        close = suggestions(str(rel), [e.path for e in inventory(skill)])
        raise NotFound(_missing(skill, "file", str(rel), close), code="file_not_found") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise NotFound(f"{str(rel)!r} in skill {skill.id!r} is not a regular file", code="file_not_found")
    return str(rel), st.st_size, os.fdopen(fd, "rb")


def read_file(skill: Skill, relative: str, *, max_bytes: int = DEFAULT_MAX_READ) -> FileContent:
    """Read one file of a skill by relative path, safely (the rules of :func:`open_file`).
    Reads at most ``max_bytes`` and says so."""
    if max_bytes <= 0:
        raise TooLarge("max_bytes must be positive")
    rel, size, handle = open_file(skill, relative)
    with handle:
        data = handle.read(max_bytes + 1)
    truncated = len(data) > max_bytes
    return FileContent(rel, size, data[:max_bytes], truncated)
