"""What a skill declares it needs, read and judged on the host (never run).

A skill may declare needs in five places (:func:`declared`):

* ``requirements.txt`` and ``scripts/requirements.txt`` (requirement lines; options such
  as ``--hash`` or ``-i`` are ignored, ``-r``/``-c`` includes are not followed, and
  editable installs, URLs and local paths are refused with a finding);
* ``pyproject.toml``'s and ``scripts/pyproject.toml``'s ``[project].dependencies``;
* PEP 723 ``# /// script`` blocks in any ``*.py`` of the skill;
* ``package.json``'s and ``scripts/package.json``'s ``dependencies`` (``name@range``; URLs,
  git and file specs refused).

Python needs are PEP 508 requirements, normalised (canonical name, sorted extras);
:func:`~skill_executor.skills.requirements.safe_python_need` and
:func:`~skill_executor.skills.requirements.safe_npm_spec` are the only gates a need passes
before pip or npm sees it (here, and again in :mod:`.store`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet

from ..errors import ExecutorError
from ..preflight import scan_texts
from ..skills.requirements import (
    ARCHIVE,
    NPM_NAME,
    UNSAFE_TEXT,
    format_requirement,
    normalise_requirement,
    safe_npm_spec,
    safe_python_need,
)

REQUIREMENTS_FILES = ("requirements.txt", "scripts/requirements.txt")
PYPROJECT_FILES = ("pyproject.toml", "scripts/pyproject.toml")
PACKAGE_FILES = ("package.json", "scripts/package.json")
SKIP_DIRS = frozenset({".git", "node_modules", "__pycache__", ".venv", "venv"})
#: Bounds on the scan for PEP 723 blocks (a skill is a few scripts, not a source tree).
MAX_SCRIPTS = 1000
MAX_SCRIPT_BYTES = 1024 * 1024
#: How much of pip's / npm's output a refusal quotes.
# PEP 723's reference regular expression.
_PEP723 = re.compile(r"(?m)^# /// (?P<type>[a-zA-Z0-9-]+)$\s(?P<content>(^#(| .*)$\s)+)^# ///$")
_URL = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)


class DependenciesUnmet(ExecutorError):
    """A skill's declared needs cannot be met: it is refused, not half-installed."""

    status = 422
    code = "skill_dependencies_unmet"


@dataclass(frozen=True, slots=True)
class RefusedNeed:
    """A declared need that is refused or unreadable, with where it was declared."""

    source: str
    need: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"source": self.source, "need": self.need, "error": self.message}


@dataclass(frozen=True, slots=True)
class Needs:
    """A skill's declared needs, normalised and sorted."""

    python: tuple[str, ...] = ()
    node: tuple[str, ...] = ()
    #: Needs that were refused (editable installs, URLs, local paths) or unreadable.
    findings: tuple[RefusedNeed, ...] = ()
    #: The files that declared something (relative to the skill).
    sources: tuple[str, ...] = ()
    #: (file, specifier) of every ``requires-python`` (a pyproject.toml's ``[project]``, a
    #: PEP 723 block): what chooses the skill's Python tier (:func:`.plan.choose_tier`).
    requires_python: tuple[tuple[str, str], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.python or self.node or self.findings)


# -- reading what a skill declares ---------------------------------------------------


def _python_need(text: str, source: str, needs: list[str], findings: list[RefusedNeed]) -> None:
    stripped = text.strip()
    looks_local = stripped.startswith((".", "/", "~")) or stripped.lower().endswith(ARCHIVE)
    if _URL.match(stripped) or stripped.startswith("git+") or looks_local:
        findings.append(
            RefusedNeed(
                source,
                stripped,
                "URLs and local paths are not allowed; name a package the configured index or wheelhouse has",
            )
        )
        return
    try:
        need = format_requirement(normalise_requirement(stripped))
        if not safe_python_need(need):
            raise InvalidRequirement("only a package name, extras and PEP 440 versions are allowed")
        needs.append(need)
    except InvalidRequirement as exc:
        findings.append(RefusedNeed(source, stripped, f"not a valid requirement: {exc}"))


def _requirement_lines(text: str) -> Iterator[str]:
    """Logical lines of a requirements file: continuations joined, comments dropped."""
    pending = ""
    for raw in text.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", raw).rstrip()
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = (pending + line).strip(), ""
        if line:
            yield line
    if pending.strip():
        yield pending.strip()


def parse_requirements(text: str, source: str) -> tuple[list[str], list[RefusedNeed]]:
    needs: list[str] = []
    findings: list[RefusedNeed] = []
    for line in _requirement_lines(text):
        if line.startswith("-"):
            option = line.split(None, 1)[0].split("=", 1)[0]
            if option in ("-e", "--editable"):
                findings.append(RefusedNeed(source, line, "editable installs are not allowed"))
            # Every other option (-r, -c, -i, --hash, --find-links, ...) is ignored: the
            # operator chooses the sources, and includes are not followed.
            continue
        # A requirement may carry per-requirement options (``--hash=...``): drop them.
        requirement = re.split(r"\s+--?[a-zA-Z]", line, maxsplit=1)[0]
        _python_need(requirement, source, needs, findings)
    return needs, findings


def parse_pyproject(text: str, source: str) -> tuple[list[str], list[RefusedNeed]]:
    needs: list[str] = []
    findings: list[RefusedNeed] = []
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return [], [RefusedNeed(source, "", f"not valid TOML: {exc}")]
    project = data.get("project")
    deps = project.get("dependencies", []) if isinstance(project, dict) else []
    if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
        return [], [RefusedNeed(source, "", "[project].dependencies must be a list of strings")]
    for dep in deps:
        _python_need(dep, source, needs, findings)
    return needs, findings


def requires_python(meta: object, source: str, findings: list[RefusedNeed]) -> str | None:
    """The ``requires-python`` of a ``[project]`` table or a PEP 723 block (None: none); an
    invalid one is a finding."""
    value = meta.get("requires-python") if isinstance(meta, dict) else None
    if value is None:
        return None
    text = value.strip() if isinstance(value, str) else ""
    try:
        if not text or UNSAFE_TEXT.search(text):
            raise InvalidSpecifier(repr(value))
        SpecifierSet(text)
    except InvalidSpecifier:
        findings.append(RefusedNeed(source, f"python{value}", "'requires-python' is not a PEP 440 version specifier"))
        return None
    return text


def _requires_python(kind: str, text: str, source: str, findings: list[RefusedNeed]) -> str | None:
    try:
        if kind == "pyproject":
            return requires_python(tomllib.loads(text).get("project"), source, findings)
        if kind == "script":
            return requires_python(script_metadata(text), source, findings)
    except (ValueError, tomllib.TOMLDecodeError):
        pass  # reported by the needs' parser
    return None


def script_metadata(text: str) -> dict[str, Any] | None:
    """The PEP 723 ``script`` block of a Python file as TOML data (None: none)."""
    blocks = [m for m in _PEP723.finditer(text) if m.group("type") == "script"]
    if not blocks:
        return None
    if len(blocks) > 1:
        raise ValueError("more than one '# /// script' block")
    content = "".join(
        line[2:] if line.startswith("# ") else line[1:] for line in blocks[0].group("content").splitlines(keepends=True)
    )
    return tomllib.loads(content)


def parse_script(text: str, source: str) -> tuple[list[str], list[RefusedNeed]]:
    needs: list[str] = []
    findings: list[RefusedNeed] = []
    try:
        meta = script_metadata(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        return [], [RefusedNeed(source, "", f"invalid '# /// script' block: {exc}")]
    if meta is None:
        return [], []
    deps = meta.get("dependencies", [])
    if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
        return [], [RefusedNeed(source, "", "'dependencies' of the script block must be a list of strings")]
    for dep in deps:
        _python_need(dep, source, needs, findings)
    return needs, findings


def parse_package_json(text: str, source: str) -> tuple[list[str], list[RefusedNeed]]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return [], [RefusedNeed(source, "", f"not valid JSON: {exc}")]
    deps = data.get("dependencies", {}) if isinstance(data, dict) else {}
    if not isinstance(deps, dict):
        return [], [RefusedNeed(source, "", "'dependencies' must be an object")]
    needs: list[str] = []
    findings: list[RefusedNeed] = []
    for name, spec in deps.items():
        spec_text = str(spec).strip() if isinstance(spec, str) else ""
        if not NPM_NAME.match(str(name)):
            findings.append(RefusedNeed(source, f"{name}@{spec}", "not a valid npm package name"))
        elif not isinstance(spec, str) or not safe_npm_spec(spec_text):
            findings.append(
                RefusedNeed(
                    source,
                    f"{name}@{spec}",
                    "only registry versions and ranges are allowed (no URLs, git, file or alias specs)",
                )
            )
        else:
            needs.append(f"{name}@{spec_text or '*'}")
    return needs, findings


def _scripts(skill: Path) -> Iterator[Path]:
    count = 0
    for folder, dirs, files in os.walk(skill):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for name in sorted(files):
            if name.endswith(".py"):
                count += 1
                if count > MAX_SCRIPTS:
                    return
                yield Path(folder) / name


def _read(path: Path) -> str | None:
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_SCRIPT_BYTES:
            return None
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _sources(skill: Path) -> Iterator[tuple[str, Path]]:
    """(kind, file) of every place a skill may declare needs."""
    for rel in REQUIREMENTS_FILES:
        yield "requirements", skill / rel
    for rel in PYPROJECT_FILES:
        yield "pyproject", skill / rel
    for rel in PACKAGE_FILES:
        yield "package", skill / rel
    for script in _scripts(skill):
        yield "script", script


_PARSERS = {
    "requirements": parse_requirements,
    "pyproject": parse_pyproject,
    "script": parse_script,
    "package": parse_package_json,
}


def declared(skill_path: Path) -> Needs:
    """Everything a skill declares, normalised, deduplicated and sorted."""
    python: set[str] = set()
    node: set[str] = set()
    findings: list[RefusedNeed] = []
    sources: list[str] = []
    pythons: list[tuple[str, str]] = []
    for kind, path in _sources(skill_path):
        text = _read(path)
        if text is None:
            continue
        rel = path.relative_to(skill_path).as_posix()
        needs, found = _PARSERS[kind](text, rel)
        wanted = _requires_python(kind, text, rel, found)
        if wanted is not None:
            pythons.append((rel, wanted))
        if needs or found or wanted is not None:
            sources.append(rel)
        (node if kind == "package" else python).update(needs)
        findings += found
    return Needs(
        tuple(sorted(python)), tuple(sorted(node)), tuple(findings), tuple(sorted(sources)), tuple(sorted(pythons))
    )


def with_documented(needs: Needs, skill_path: Path) -> Needs:
    """``needs`` plus the packages the ``pip install`` lines of the skill's SKILL.md name
    (its shell blocks; read by the doctor's scan, the same lines it reports)."""
    for name in ("SKILL.md", "skill.md"):
        text = _read(skill_path / name)
        if text is not None:
            break
    else:
        return needs
    found = scan_texts({name: text}, skill_file=name)
    documented = sorted(requirement for requirement, need in found.packages.items() if need.sure)
    if not documented:
        return needs
    python = tuple(sorted({*needs.python, *documented}))
    return Needs(python, needs.node, needs.findings, tuple(sorted({*needs.sources, name})), needs.requires_python)


def signature(skill_path: Path, *, docs: bool = False) -> str:
    """Changes when any file that may declare needs changes (size, mtime, name); ``docs``:
    SKILL.md too."""
    digest = hashlib.sha256()
    extra = [("docs", skill_path / "SKILL.md"), ("docs", skill_path / "skill.md")] if docs else []
    for _, path in [*_sources(skill_path), *extra]:
        try:
            st = path.stat()
        except OSError:
            continue
        digest.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return digest.hexdigest()


# -- what the runner image provides --------------------------------------------------
