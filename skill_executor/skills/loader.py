"""Load one skill directory: parse ``SKILL.md``, apply the spec rules, build a :class:`Skill`.

Every rule is checked and every violation reported (not just the first).  Loading is
tolerant: a skill loads whenever it has a usable description, and what deviates from
the spec is attached as diagnostics.  :func:`check` turns those into a strict or a
tolerant verdict.
"""

from __future__ import annotations

import os
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .model import Skill
from .parser import MAX_SKILL_FILE_BYTES, ParsedFile, SkillFileError, parse_skill_file
from .rules import (
    ALLOWED_FIELDS,
    COMPATIBILITY_MAX,
    DESCRIPTION_MAX,
    LOWERCASE_SKILL_FILE,
    NAME_MAX,
    NAME_PATTERN,
    SKILL_FILE,
    Diagnostic,
    derive_id,
    split_verdict,
)


class SkillLoadError(Exception):
    """The skill cannot be loaded; ``diagnostics`` holds the fatal finding and notes."""

    def __init__(self, path: Path, diagnostics: list[Diagnostic]) -> None:
        fatal = next((d for d in diagnostics if d.severity == "fatal"), diagnostics[0])
        super().__init__(f"{path}: {fatal.message}")
        self.path = path
        self.diagnostics = diagnostics


def find_skill_file(directory: Path) -> Path | None:
    """``SKILL.md`` if present, else ``skill.md`` or another casing (tolerated), else None.

    The directory is listed rather than probed so that a case-insensitive file system
    cannot make ``skill.md`` pass for ``SKILL.md``.
    """
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return None
    ranked = [SKILL_FILE, LOWERCASE_SKILL_FILE, *(n for n in names if n.lower() == LOWERCASE_SKILL_FILE)]
    for candidate in ranked:
        if candidate in names and (directory / candidate).is_file():
            return directory / candidate
    return None


def resolve_target(path: Path) -> tuple[Path, Path]:
    """Accept a skill directory or its ``SKILL.md``; return (directory, skill file)."""
    if path.is_dir():
        skill_file = find_skill_file(path)
        if skill_file is None:
            raise SkillLoadError(
                path,
                [Diagnostic("skill-file-missing", f"no {SKILL_FILE} in directory {path}", "fatal")],
            )
        return path, skill_file
    if path.is_file():
        return path.parent, path
    raise SkillLoadError(path, [Diagnostic("not-found", f"no such file or directory: {path}", "fatal")])


def load_skill(path: Path | str) -> Skill:
    """Load a skill (tolerant mode); raises :class:`SkillLoadError` when unusable."""
    directory, skill_file = resolve_target(Path(path))
    try:
        with skill_file.open("rb") as handle:  # never more than the parser accepts
            data = handle.read(MAX_SKILL_FILE_BYTES + 1)
    except OSError as exc:
        raise SkillLoadError(
            skill_file, [Diagnostic("unreadable", f"cannot read {skill_file}: {exc.strerror}", "fatal")]
        ) from None
    try:
        parsed = parse_skill_file(data)
    except SkillFileError as exc:
        raise SkillLoadError(skill_file, [exc.diagnostic, *exc.notes]) from None
    return build_skill(parsed, directory, skill_file)


def build_skill(parsed: ParsedFile, directory: Path, skill_file: Path) -> Skill:
    """Apply the spec rules to parsed frontmatter; raises when no usable description."""
    diags: list[Diagnostic] = list(parsed.diagnostics)
    fm = _normalise_keys(parsed.frontmatter, diags)

    if skill_file.name != SKILL_FILE:
        diags.append(Diagnostic("file-name", f"the file must be named exactly {SKILL_FILE}, not {skill_file.name}"))
    for key in sorted(k for k in fm if k not in ALLOWED_FIELDS):
        diags.append(
            Diagnostic(
                "unknown-field",
                f"unknown frontmatter key {key!r}; allowed keys are {', '.join(sorted(ALLOWED_FIELDS))}",
            )
        )

    description = _check_description(fm, diags)
    if description is None:
        raise SkillLoadError(skill_file, diags)
    name, skill_id = _check_name(fm, directory, diags)

    license_ = fm.get("license")
    if "license" in fm and not isinstance(license_, str):
        diags.append(Diagnostic("license-type", "'license' must be a string"))
        license_ = None

    compatibility = fm.get("compatibility")
    if "compatibility" in fm:
        if not isinstance(compatibility, str):
            diags.append(Diagnostic("compatibility-type", "'compatibility' must be a string"))
            compatibility = None
        elif not 1 <= len(compatibility) <= COMPATIBILITY_MAX:
            diags.append(
                Diagnostic(
                    "compatibility-length",
                    f"'compatibility' must be 1-{COMPATIBILITY_MAX} characters, not {len(compatibility)}",
                )
            )

    metadata = fm.get("metadata")
    if "metadata" in fm:
        if not isinstance(metadata, dict):
            diags.append(Diagnostic("metadata-type", "'metadata' must be a mapping of strings to strings"))
            metadata = {}
        else:
            bad = sorted(k for k, v in metadata.items() if not isinstance(v, str))
            if bad:
                diags.append(
                    Diagnostic(
                        "metadata-value",
                        f"'metadata' values must be strings; not so for {', '.join(map(repr, bad))}",
                    )
                )

    allowed_tools = _check_allowed_tools(fm, diags)
    extras = {k: v for k, v in fm.items() if k not in ALLOWED_FIELDS}

    return Skill(
        id=skill_id,
        name=name,
        description=description,
        path=directory,
        skill_file=skill_file,
        body=parsed.body,
        raw=parsed.raw,
        license=license_,
        compatibility=compatibility,
        metadata=metadata or {},
        allowed_tools=allowed_tools,
        extras=extras,
        diagnostics=diags,
    )


def _normalise_keys(fm: dict[str, Any], diags: list[Diagnostic]) -> dict[str, Any]:
    """Read ``Description:`` or ``allowed_tools:`` as the spec key they mean (with a finding).

    Only when the exact key is absent, so a file holding both keeps the exact one (and
    the variant is then an unknown key).
    """
    out = dict(fm)
    for key in list(fm):
        if not isinstance(key, str) or key in ALLOWED_FIELDS:
            continue
        meant = key.strip().lower().replace("_", "-")
        if meant in ALLOWED_FIELDS and meant not in out:
            out[meant] = out.pop(key)
            diags.append(Diagnostic("key-spelling", f"key {key!r} should be spelled {meant!r}; read as {meant!r}"))
    return out


def _check_description(fm: dict[str, Any], diags: list[Diagnostic]) -> str | None:
    if "description" not in fm:
        diags.append(Diagnostic("description-missing", "the required key 'description' is missing", "fatal"))
        return None
    value = fm["description"]
    if not isinstance(value, str):
        diags.append(Diagnostic("description-type", "'description' must be a string, not a list or mapping", "fatal"))
        return None
    text = value.strip()
    if not text:
        diags.append(Diagnostic("description-empty", "'description' is blank", "fatal"))
        return None
    if len(text) > DESCRIPTION_MAX:
        diags.append(
            Diagnostic(
                "description-too-long",
                f"'description' is {len(text)} characters; the limit is {DESCRIPTION_MAX}",
            )
        )
    return text


def _check_name(fm: dict[str, Any], directory: Path, diags: list[Diagnostic]) -> tuple[str, str]:
    """Return (display name, id); fall back to the directory name when unusable."""
    dir_name = directory.resolve().name if directory.name in ("", ".") else directory.name
    value = fm.get("name")
    if "name" not in fm or not isinstance(value, str) or not value.strip():
        problem = "missing" if "name" not in fm else "blank or not a string"
        diags.append(
            Diagnostic(
                "name-missing",
                f"the required key 'name' is {problem}; using the directory name {dir_name!r}",
            )
        )
        return dir_name, derive_id(dir_name) or "skill"

    name = value.strip()
    skill_id = name
    if len(name) > NAME_MAX:
        diags.append(Diagnostic("name-too-long", f"'name' is {len(name)} characters; the limit is {NAME_MAX}"))
    if not NAME_PATTERN.match(name):
        skill_id = derive_id(name) or derive_id(dir_name) or "skill"
        diags.append(
            Diagnostic(
                "name-format",
                f"'name' {name!r} must be lowercase letters, digits and single hyphens "
                f"(not at the start or end); using the id {skill_id!r}",
            )
        )
    elif len(name) > NAME_MAX:
        skill_id = derive_id(name)
    if unicodedata.normalize("NFKC", name) != unicodedata.normalize("NFKC", dir_name):
        diags.append(Diagnostic("name-dir-mismatch", f"'name' {name!r} differs from the directory name {dir_name!r}"))
    return name, skill_id


def split_tools(text: str) -> tuple[list[str], bool]:
    """Split on whitespace or commas outside parentheses: ``Bash(git diff *)`` is one entry.

    Returns the entries and whether a comma served as a separator.
    """
    entries: list[str] = []
    current: list[str] = []
    depth = 0
    saw_comma = False
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")" and depth:
            depth -= 1
        elif depth == 0 and (char == "," or char.isspace()):
            saw_comma = saw_comma or char == ","
            if current:
                entries.append("".join(current))
                current = []
            continue
        current.append(char)
    if current:
        entries.append("".join(current))
    return entries, saw_comma


def _check_allowed_tools(fm: dict[str, Any], diags: list[Diagnostic]) -> list[str]:
    if "allowed-tools" not in fm:
        return []
    value = fm["allowed-tools"]
    if isinstance(value, list):
        diags.append(Diagnostic("allowed-tools-list", "'allowed-tools' must be a space-separated string, not a list"))
        tools: list[str] = []
        for item in value:
            if isinstance(item, str):
                tools.extend(split_tools(item)[0] if "," in item else [item.strip()])
        return [t for t in tools if t]
    if not isinstance(value, str):
        diags.append(Diagnostic("allowed-tools-type", "'allowed-tools' must be a space-separated string"))
        return []
    tools, saw_comma = split_tools(value)
    if saw_comma:
        diags.append(
            Diagnostic(
                "allowed-tools-commas",
                "'allowed-tools' should be separated by spaces; commas were read as separators",
                "note",
            )
        )
    return tools


@dataclass(slots=True)
class Verdict:
    """The result of checking one path, in the CLI's JSON shape."""

    path: str
    name: str | None
    valid: bool
    errors: list[Diagnostic] = field(default_factory=list)
    warnings: list[Diagnostic] = field(default_factory=list)
    skill: Skill | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "name": self.name,
            "valid": self.valid,
            "errors": [d.to_dict() for d in self.errors],
            "warnings": [d.to_dict() for d in self.warnings],
        }


def check(path: Path | str, *, strict: bool = False) -> Verdict:
    """Strict verdict (spec rules are errors) or tolerant one ("does it load?")."""
    try:
        skill = load_skill(path)
    except SkillLoadError as exc:
        errors, warnings = split_verdict(exc.diagnostics, strict=strict)
        return Verdict(str(path), None, False, errors, warnings)
    errors, warnings = split_verdict(skill.diagnostics, strict=strict)
    return Verdict(str(path), skill.name, not errors, errors, warnings, skill)
