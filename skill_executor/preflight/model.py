"""What a skill uses, as the static scan (:mod:`.scan`) reports it: commands, Python
imports, Node modules and network, each with where it is used."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from .vocabulary import (
    COMMAND_NAME,
    DISTRIBUTIONS,
    MAX_REASONS,
    MAX_USES,
    NODE_BUILTINS,
    NODE_NAME,
    SHELL_BUILTINS,
    Level,
    Sure,
)


@dataclass(frozen=True, slots=True, order=True)
class Use:
    """Where something is used: a file of the skill (relative) and a 1-based line."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True, slots=True)
class Reason:
    """Why the skill may need network."""

    file: str
    line: int
    why: str
    level: Sure


@dataclass(frozen=True, slots=True)
class Note:
    """Something the scan noticed about a file (a syntax error, a file too large, ...)."""

    code: str
    message: str
    file: str | None = None
    line: int | None = None


@dataclass(slots=True)
class Need:
    """A command or a Python module, where it is used, and whether the skill copes without it."""

    uses: list[Use] = field(default_factory=list)
    #: True while every use is guarded: an import in ``try/except ImportError`` or under
    #: ``if TYPE_CHECKING``; a command only checked for (``shutil.which``, ``command -v``)
    #: or run in ``try/except FileNotFoundError``.
    optional: bool = True
    #: False while every use is a guess: a command read from prose (an untagged block, a line a
    #: parse error touches, an installer's line in the docs) rather than from code.
    sure: bool = False
    seen: set[Use] = field(default_factory=set, repr=False, compare=False)


@dataclass(slots=True)
class ImageNeeds:
    commands: dict[str, Need] = field(default_factory=dict)
    python: dict[str, Need] = field(default_factory=dict)
    #: Distributions ``pip install`` lines install (a requirement, normalised: ``pandas>=2``):
    #: what skills that declare nothing else rely on.
    packages: dict[str, Need] = field(default_factory=dict)
    node: dict[str, list[Use]] = field(default_factory=dict)
    #: Interpreter versions the skill asks for (``node``, ``python``) -> specifier -> where:
    #: ``requires-python`` of a PEP 723 block or a pyproject.toml, ``engines.node`` of a
    #: package.json, and the docs' prose ("Node.js 22+", "Python >= 3.12").
    runtimes: dict[str, dict[str, list[Use]]] = field(default_factory=dict)
    #: Files of the skill its instructions run (``python {baseDir}/scripts/x.py``, ``node
    #: scripts/x.mjs`` in SKILL.md) that the skill does not hold: path relative to the skill.
    files: dict[str, list[Use]] = field(default_factory=dict)
    network: list[Reason] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    seen_reasons: set[Reason] = field(default_factory=set, repr=False, compare=False)
    seen_node: set[tuple[str, Use]] = field(default_factory=set, repr=False, compare=False)

    @property
    def network_needed(self) -> Level:
        levels = {r.level for r in self.network}
        return "yes" if "yes" in levels else "maybe" if levels else "no"

    def command(self, name: str, file: str, line: int, *, optional: bool = False, sure: bool = True) -> None:
        if COMMAND_NAME.match(name) and name not in SHELL_BUILTINS:
            add_use(self.commands.setdefault(name, Need()), Use(file, line), optional, sure)

    def package(self, requirement: str, file: str, line: int, *, sure: bool) -> None:
        add_use(self.packages.setdefault(requirement, Need()), Use(file, line), False, sure)

    def module(self, name: str, file: str, line: int, *, optional: bool) -> None:
        add_use(self.python.setdefault(name, Need()), Use(file, line), optional, True)

    def node_module(self, name: str, file: str, line: int) -> None:
        uses = self.node.setdefault(name, [])
        if (name, Use(file, line)) not in self.seen_node:
            self.seen_node.add((name, Use(file, line)))
            if len(uses) < MAX_USES:
                uses.append(Use(file, line))

    def runtime(self, name: str, specifier: str, file: str, line: int) -> None:
        uses = self.runtimes.setdefault(name, {}).setdefault(specifier, [])
        if Use(file, line) not in uses and len(uses) < MAX_USES:
            uses.append(Use(file, line))

    def missing_file(self, name: str, file: str, line: int) -> None:
        uses = self.files.setdefault(name, [])
        if Use(file, line) not in uses and len(uses) < MAX_USES:
            uses.append(Use(file, line))

    def reason(self, file: str, line: int, why: str, level: Sure) -> None:
        reason = Reason(file, line, why, level)
        if reason in self.seen_reasons:
            return
        self.seen_reasons.add(reason)
        if len(self.network) < MAX_REASONS:
            self.network.append(reason)
        elif level == "yes" and all(r.level == "maybe" for r in self.network):
            self.network[-1] = reason  # the verdict must not be lost to the bound


def add_use(need: Need, use: Use, optional: bool, sure: bool) -> None:
    need.optional = need.optional and optional
    need.sure = need.sure or sure
    if use not in need.seen:
        need.seen.add(use)
        if len(need.uses) < MAX_USES:
            need.uses.append(use)


def python_distribution(module: str) -> str | None:
    """The distribution that usually provides ``module`` when its name differs (a hint)."""
    return DISTRIBUTIONS.get(module)


def node_package(spec: str) -> str | None:
    """The package a ``require``/``import`` specifier names: ``@a/b/c`` -> ``@a/b``,
    ``x/y`` -> ``x``; None for relative or absolute paths, URLs, ``node:`` and builtins."""
    if not spec or spec.startswith((".", "/", "#")) or ":" in spec or "\\" in spec:
        return None
    parts = spec.split("/")
    name = "/".join(parts[:2]) if spec.startswith("@") else parts[0]
    if not NODE_NAME.match(name) or name in NODE_BUILTINS:
        return None
    return name


def locations(uses: Iterable[Use]) -> list[str]:
    """``file:line`` strings, sorted."""
    return [str(u) for u in sorted(uses)]
