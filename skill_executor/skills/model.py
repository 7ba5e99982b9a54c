"""The in-memory form of a loaded skill."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .rules import HIDE_FROM_MODEL, Diagnostic


def estimate_tokens(text: str) -> int:
    """Token estimate used everywhere: one token per 4 code points, rounded up.

    It is the usual rule of thumb for English prose with BPE tokenizers; good enough
    to budget a prompt, and the same on every machine (no tokenizer download).
    """
    return math.ceil(len(text) / 4) if text else 0


@dataclass(slots=True)
class Skill:
    """A skill that loaded (possibly with warnings).

    ``name`` is the display name as written (stripped); ``id`` is the safe identifier
    used in URLs, directory names and ``skill_run`` (equal to ``name`` for spec-valid
    skills).
    """

    id: str
    name: str
    description: str
    path: Path
    skill_file: Path
    body: str
    raw: str
    license: str | None = None
    compatibility: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    allowed_tools: list[str] = field(default_factory=list)
    extras: dict[str, Any] = field(default_factory=dict)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    _location: str | None = None
    #: the registry version this is (None: served from its folder, unversioned)
    version: int | None = None
    #: that version's digest, ``sha256:<hex>``
    digest: str | None = None

    @property
    def location(self) -> str:
        """Resolved absolute path of the skill file (computed once: resolving costs syscalls)."""
        if self._location is None:
            self._location = str(self.path.resolve() / self.skill_file.name)
        return self._location

    @property
    def hidden(self) -> bool:
        """True when the skill asks not to be offered to the model on its own."""
        value = self.extras.get(HIDE_FROM_MODEL)
        return isinstance(value, str) and value.strip().lower() in {"true", "yes", "on", "1"}

    @property
    def warnings(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity != "fatal"]

    @property
    def overview_tokens(self) -> int:
        return estimate_tokens(f"{self.name}: {self.description}")

    @property
    def body_tokens(self) -> int:
        return estimate_tokens(self.body)
