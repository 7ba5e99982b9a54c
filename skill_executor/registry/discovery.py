"""Finding skills under the roots and loading them into one catalog snapshot.

In a read-only root, any directory that holds a ``SKILL.md`` (or a tolerated
``skill.md``) is a skill.  The walk goes at most :data:`MAX_DEPTH` levels deep, skips
``.git``, ``node_modules`` and ``__pycache__`` but *not* other dot-directories (real
collections keep skills under ``.curated/`` or ``.system/``), and follows a symlinked
directory only when it resolves inside the same root.

The install root is not walked: its skills are exactly its top folders ``<id>/`` whose
``SKILL.md`` has that id (:func:`installed_dirs`).  A ``SKILL.md`` deeper inside an
installed skill is a plain file of that skill, never a skill of its own.  Of two skills
with one name, the first by root order then path order wins (:func:`build_catalog`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..paths import is_within
from ..skills.loader import SkillLoadError, find_skill_file, load_skill
from ..skills.model import Skill
from ..skills.rules import Diagnostic
from ..skills.search import SearchIndex
from .installdir import STAGING_PREFIX

MAX_DEPTH = 6
SKIP_DIRS = frozenset({".git", "node_modules", "__pycache__"})


@dataclass(frozen=True, slots=True)
class Rejected:
    path: Path
    diagnostics: list[Diagnostic]

    def to_dict(self) -> dict[str, object]:
        return {"path": str(self.path), "errors": [d.to_dict() for d in self.diagnostics if d.severity == "fatal"]}


@dataclass(slots=True)
class Catalog:
    """One consistent snapshot of the skills under the roots."""

    skills: list[Skill] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    by_id: dict[str, Skill] = field(default_factory=dict)
    #: ids (lower case) of skills published without a default and given none since: callable
    #: only pinned (``name@N``), in no overview, search or tool list
    undefaulted: frozenset[str] = frozenset()
    _index: SearchIndex | None = None

    @property
    def index(self) -> SearchIndex:
        if self._index is None:
            self._index = SearchIndex(self.visible())
        return self._index

    def visible(self) -> list[Skill]:
        """The skills offered in the overview (hidden ones stay callable by name; those
        without a default version, by a pinned name only)."""
        return [s for s in self.skills if not s.hidden and s.id.lower() not in self.undefaulted]


def discover(roots: Sequence[Path]) -> list[Path]:
    """Skill directories under ``roots``, in root order then path order."""
    found: list[Path] = []
    for root in roots:
        real_root = Path(root).resolve()
        if not real_root.is_dir():
            continue
        found.extend(_walk(real_root, real_root, 0, {real_root}))
    return found


def installed_dirs(install_root: Path) -> list[Path]:
    """The install root's candidate skills: its top folders (real ones, not links), by name;
    staging folders excluded.  Nothing below them is looked at."""
    real_root = install_root.resolve()
    try:
        entries = sorted(os.scandir(real_root), key=lambda e: e.name)
    except OSError:
        return []
    found: list[Path] = []
    for entry in entries:
        if entry.name.startswith(STAGING_PREFIX):
            continue
        try:
            if entry.is_dir(follow_symlinks=False) and find_skill_file(Path(entry.path)) is not None:
                found.append(Path(entry.path))
        except OSError:
            continue
    return found


def _walk(directory: Path, root: Path, depth: int, seen: set[Path]) -> Iterable[Path]:
    if find_skill_file(directory) is not None:
        yield directory
    if depth >= MAX_DEPTH:
        return
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        if entry.name in SKIP_DIRS or entry.name.startswith(STAGING_PREFIX):  # staging folders are never skills
            continue
        try:
            if not entry.is_dir(follow_symlinks=True):
                continue
        except OSError:
            continue
        child = Path(entry.path)
        if entry.is_symlink():
            target = child.resolve()
            if not is_within(target, root) or target in seen:
                continue
            seen.add(target)
        yield from _walk(child, root, depth + 1, seen)


def load_dir(directory: Path, *, installed: bool) -> Skill | Rejected:
    try:
        skill = load_skill(directory)
    except SkillLoadError as exc:
        return Rejected(directory, exc.diagnostics)
    if installed and skill.id != directory.name:  # not what an install makes: not a skill of the registry
        return Rejected(
            directory,
            [
                Diagnostic(
                    "install-dir-mismatch",
                    f"the installed folder {directory.name!r} holds the skill {skill.id!r}; "
                    "an installed skill's folder is named by its id",
                    "fatal",
                )
            ],
        )
    return skill


def build_catalog(items: list[Skill | Rejected]) -> Catalog:
    """Resolve duplicate names: the first by root order then path order wins."""
    catalog = Catalog()
    for item in items:
        if isinstance(item, Rejected):
            catalog.rejected.append(item)
            continue
        keys = {item.id.lower(), item.name.lower()}
        winner = next((catalog.by_id[k] for k in keys if k in catalog.by_id), None)
        if winner is not None:
            winner.diagnostics = [
                d for d in winner.diagnostics if not (d.code == "duplicate-name" and str(item.path) in d.message)
            ] + [
                Diagnostic(
                    "duplicate-name",
                    f"another skill named {item.name!r} at {item.path} is shadowed by this one",
                    "note",
                )
            ]
            continue
        catalog.skills.append(item)
        for key in keys:
            catalog.by_id.setdefault(key, item)
    return catalog
