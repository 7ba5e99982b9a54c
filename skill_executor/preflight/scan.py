"""What a skill needs from its image: commands, Python imports, Node modules, network.

A static scan of the skill folder (pure: nothing runs).  Files are listed with
:func:`~skill_executor.skills.files.inventory` (links are not followed) and read with
:func:`~skill_executor.skills.files.read_file` (nothing outside the skill, at most
``max_bytes`` each).  The scan only says what is *used*; whether the image has it is
the probe's business (:mod:`skill_executor.doctor`), so nothing here lists what exists.

Sources:

* commands -- the first word of each command of shell code in the docs (fenced blocks
  tagged ``bash``/``sh``/``shell``/``console``/..., or untagged blocks that look like
  shell), shell scripts, shebangs, ``subprocess``/``os.system``/``shutil.which`` literals
  in Python and ``child_process`` literals in JavaScript;
* Python -- absolute imports of every ``.py`` (and of ``python`` blocks in the docs),
  minus the standard library and the skill's own modules; imports guarded by
  ``try/except ImportError`` (or ``if TYPE_CHECKING``) are optional;
* Node -- ``require``/``import`` of ``.js``/``.mjs``/``.cjs``/``.ts`` (and of JavaScript
  blocks in the docs) and ``npx NAME``, minus relative paths and Node's builtins;
* network -- installs and downloads (``pip install``, ``npm install``, ``curl``, ...),
  HTTP(S) URLs scripts request, and HTTP client imports.
"""

from __future__ import annotations

import time
from pathlib import PurePosixPath

from ..errors import ExecutorError
from ..skills.files import DEFAULT_MAX_READ, FileEntry, inventory, read_file
from ..skills.model import Skill
from .model import ImageNeeds, Note
from .scanner import Scanner, file_kind
from .vocabulary import MAX_FILES, MAX_SECONDS, MAX_TOTAL_BYTES


def scan(
    skill: Skill,
    *,
    max_bytes: int = DEFAULT_MAX_READ,
    max_files: int = MAX_FILES,
    max_total: int = MAX_TOTAL_BYTES,
    max_seconds: float = MAX_SECONDS,
) -> ImageNeeds:
    """Everything ``skill`` uses, read from its files (SKILL.md first); files past
    ``max_total`` bytes or ``max_seconds`` of reading are skipped with a note."""
    needs = ImageNeeds()
    deadline = time.monotonic() + max_seconds
    total = 0
    entries = inventory(skill, limit=max_files)
    if len(entries) >= max_files:
        needs.notes.append(Note("too_many_files", f"only the first {max_files} files were scanned"))
    paths = [skill.skill_file.name, *(e.path for e in entries)]
    scanner = Scanner(needs, entries, {PurePosixPath(p).name for p in paths})
    scanner.skill_file = skill.skill_file.name
    scanner.complete = len(entries) < max_files
    for path in paths:
        kind = file_kind(path)
        if kind is None:
            continue
        if total >= max_total or time.monotonic() > deadline:
            needs.notes.append(
                Note(
                    "scan_budget",
                    f"the scan stopped after {total} bytes: {path} and the files after it were not read",
                    path,
                )
            )
            break
        try:
            content = read_file(skill, path, max_bytes=max_bytes)
        except ExecutorError as exc:  # gone meanwhile, or a link out of the skill
            needs.notes.append(Note("file_unreadable", exc.message, path))
            continue
        if content.truncated:
            needs.notes.append(Note("file_too_large", f"larger than {max_bytes} bytes: not scanned", path))
            continue
        text = content.text
        if text is None:
            continue
        total += len(content.data)
        scanner.scan_text(path, kind, text)
    scanner.drop_defined_functions()
    return needs


def scan_texts(files: dict[str, str], *, skill_file: str = "SKILL.md") -> ImageNeeds:
    """:func:`scan` over texts in memory (path -> text): for tests and previews."""
    needs = ImageNeeds()
    entries = [FileEntry(p, len(t), "other") for p, t in files.items() if p != skill_file]
    scanner = Scanner(needs, entries, {PurePosixPath(p).name for p in files})
    scanner.skill_file = skill_file
    for path in sorted(files, key=lambda p: (p != skill_file, p)):
        kind = file_kind(path)
        if kind is not None:
            scanner.scan_text(path, kind, files[path])
    scanner.drop_defined_functions()
    return needs
