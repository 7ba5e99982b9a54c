"""The Agent Skills format rules (agentskills.io) as data, and the diagnostics they yield.

Every deviation a loader can notice has a stable ``code``.  Whether a deviation is an
*error* depends on the mode:

* ``fatal`` deviations make a file unusable: it is rejected in every mode.
* ``spec`` deviations break a rule of the specification: errors under ``--strict``,
  warnings when loading tolerantly (real published skills break them all the time).
* the rest are hygiene notes (a BOM, blank lines before the frontmatter): warnings
  in both modes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

SKILL_FILE = "SKILL.md"
LOWERCASE_SKILL_FILE = "skill.md"

ALLOWED_FIELDS: frozenset[str] = frozenset(
    {"name", "description", "license", "compatibility", "metadata", "allowed-tools"}
)
NAME_MAX = 64
DESCRIPTION_MAX = 1024
COMPATIBILITY_MAX = 500
NAME_PATTERN = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")

#: The ``extras`` key that hides a skill from the overview (Claude Code's convention).
HIDE_FROM_MODEL = "disable-model-invocation"

Severity = Literal["fatal", "spec", "note"]


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One finding about a skill file, with a stable machine code."""

    code: str
    message: str
    severity: Severity = "spec"

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


def split_verdict(diagnostics: list[Diagnostic], *, strict: bool) -> tuple[list[Diagnostic], list[Diagnostic]]:
    """Split findings into (errors, warnings) for the given mode."""
    errors: list[Diagnostic] = []
    warnings: list[Diagnostic] = []
    for diag in diagnostics:
        is_error = diag.severity == "fatal" or (strict and diag.severity == "spec")
        (errors if is_error else warnings).append(diag)
    return errors, warnings


_ID_SEPARATORS = re.compile(r"[\s_.]+")
_ID_INVALID = re.compile(r"[^a-z0-9-]+")
_ID_HYPHENS = re.compile(r"-{2,}")


def derive_id(raw: str) -> str:
    """A safe skill id from a display name: lowercase, ``[ _.]`` -> ``-``, hyphens collapsed.

    Characters that can never appear in a spec name (``/``, ``:``, non-ASCII, ...)
    become hyphens too, so an id is always usable as a directory name and URL segment.
    Returns ``""`` when nothing usable is left.
    """
    text = _ID_SEPARATORS.sub("-", raw.strip().lower())
    text = _ID_INVALID.sub("-", text)
    return _ID_HYPHENS.sub("-", text).strip("-")[:NAME_MAX].strip("-")
