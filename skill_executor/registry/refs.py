"""Skill references: the one parser of ``name``, ``name@<n>``, ``name@latest``, ``name@default``
and ``name@sha256:<hex>``.

Every way a skill is named -- the REST routes' ``{name}`` and ``{version}``, ``PATCH``'s
``default_version``, a run's ``skill``, ``skill://`` inputs, tool calls, MCP, the CLI --
reaches :func:`parse_ref` or :func:`parse_version` (through ``SkillRepository.get``,
``SkillRepository.found`` and ``Registry.version``).  The grammar is ASCII only, with
bounded lengths, so a reference is either one of these or a 400 with a stable code:

* ``invalid_skill_name``: the name is 1-128 of ``A-Z a-z 0-9 . _ -``, starting with a
  letter or digit (an id, or a display name written with those characters; matched
  ignoring case);
* ``invalid_version``: after ``@`` comes ``1``-``999999999`` (no sign, no leading zero),
  ``latest`` or ``default`` (any case), or ``sha256:`` and exactly 64 hex digits.

Nothing is stripped, decoded or normalised first: ``" pdf"``, ``pdf@²`` (a Unicode
digit), ``pdf@1.2.3`` and ``pdf@%31`` are refused as written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from ..errors import BadRequest

NAME_MAX_CHARS = 128
VERSION_MAX = 999_999_999
DIGEST_PREFIX = "sha256:"

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_NUMBER = re.compile(r"[1-9][0-9]{0,8}")
_DIGEST = re.compile(r"sha256:[0-9A-Fa-f]{64}")
_KEYWORDS = ("latest", "default")


class InvalidSkillName(BadRequest):
    code = "invalid_skill_name"


class InvalidVersion(BadRequest):
    code = "invalid_version"


VersionKind = Literal["number", "latest", "default", "digest"]


@dataclass(frozen=True, slots=True)
class VersionRef:
    """A version of some skill: a number, a pointer (``latest``/``default``) or a digest."""

    kind: VersionKind
    number: int | None = None
    digest: str | None = None

    def __str__(self) -> str:
        if self.kind == "number":
            return str(self.number)
        if self.kind == "digest":
            return str(self.digest)
        return self.kind


DEFAULT = VersionRef("default")
LATEST = VersionRef("latest")


@dataclass(frozen=True, slots=True)
class SkillRef:
    """A parsed reference: the name as written and the version it pins (None: the default)."""

    name: str
    version: VersionRef | None = None

    @property
    def key(self) -> str:
        """What the catalog is looked up by (ids and names match ignoring case)."""
        return self.name.lower()

    def __str__(self) -> str:
        return self.name if self.version is None else f"{self.name}@{self.version}"


def shown(value: object, limit: int = 80) -> str:
    """``value`` for an error message: ``repr``, cut short (a reference may be megabytes)."""
    text = value if isinstance(value, str) else str(type(value).__name__)
    return repr(text[:limit] + "...") if len(text) > limit else repr(text)


def parse_ref(text: object, *, versioned: bool = True) -> SkillRef:
    """``name`` or ``name@version``; ``versioned=False`` refuses a version (where only a skill is meant)."""
    if not isinstance(text, str):
        raise InvalidSkillName(f"a skill reference is a string, not {shown(text)}")
    name, at, version = text.partition("@")  # each part is bounded by its own pattern, never scanned further
    if _NAME.fullmatch(name) is None:
        raise InvalidSkillName(
            f"invalid skill name {shown(name)}: 1-{NAME_MAX_CHARS} ASCII letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    if not at:
        return SkillRef(name)
    if not versioned:
        raise InvalidVersion(f"name the skill without a version here: {shown(text)}")
    return SkillRef(name, parse_version(version))


def parse_version(value: object) -> VersionRef:
    """A version: an int, or the text after ``@`` (``3``, ``latest``, ``default``, ``sha256:<hex>``)."""
    if isinstance(value, VersionRef):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        if not 1 <= value <= VERSION_MAX:
            raise InvalidVersion(f"invalid version {shown(str(value))}: a version number is 1 to {VERSION_MAX}")
        return VersionRef("number", number=value)
    if not isinstance(value, str):
        raise InvalidVersion(f"a version is a number or a string, not {shown(value)}")
    if len(value) > len(DIGEST_PREFIX) + 64:
        raise InvalidVersion(f"invalid version {shown(value)}: longer than any version")
    if _NUMBER.fullmatch(value):
        return VersionRef("number", number=int(value))
    lowered = value.lower() if value.isascii() else ""
    if lowered in _KEYWORDS:
        return LATEST if lowered == "latest" else DEFAULT
    if _DIGEST.fullmatch(value):
        return VersionRef("digest", digest=value.lower())
    raise InvalidVersion(
        f"invalid version {shown(value)}: use 1-{VERSION_MAX} (no leading zero), latest, default or "
        "sha256:<64 hex digits>"
    )
