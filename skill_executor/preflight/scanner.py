"""The scanner: each file read by its kind (docs, Python, Node, shell, a manifest), what it
uses added to one :class:`ImageNeeds`."""

from __future__ import annotations

import ast
import bisect
import re
import sys
from pathlib import PurePosixPath
from typing import Literal

from packaging.requirements import InvalidRequirement

from ..shell import shell_commands
from ..skills.files import FileEntry
from ..skills.requirements import format_requirement, normalise_requirement, safe_python_need
from .model import ImageNeeds, Note, node_package
from .python import PythonVisitor
from .text import fenced_blocks, looks_like_shell, prompt_lines, session_output, strip_js_comments
from .versions import manifest_versions, prose_versions, script_version
from .vocabulary import (
    CHECKS,
    DOC_SUFFIXES,
    INSTALLERS,
    LOOPBACK,
    MODULE_NAME,
    NETWORK_COMMANDS,
    NETWORK_SUBCOMMANDS,
    NODE_SUFFIXES,
    NODE_TAGS,
    OTHER_SYSTEMS,
    PIP_REASON,
    PIP_VALUED,
    PYTHON_TAGS,
    SHELL_SUFFIXES,
    SHELL_TAGS,
    URL,
)

Kind = Literal["doc", "python", "node", "shell", "other"]
#: Programs whose first argument (after ``uv run``'s own options) is a script to run.
INTERPRETER = re.compile(r"^(python(3(\.\d+)?)?|node|bash|sh|uv|tsx|deno|bun)$")
#: A script's name: what the skill's instructions run by path.
SCRIPT_SUFFIX = re.compile(r"\.(py|js|mjs|cjs|ts|sh|bash)$")
#: The skill's own folder as instructions name it: ``{baseDir}`` (Claude Code),
#: ``${CLAUDE_SKILL_DIR}``, ``$SKILL_DIR`` (this service's runs).
SKILL_DIR_PREFIX = re.compile(r"^(?:\{baseDir\}|__baseDir__|\$\{?(?:CLAUDE_SKILL_DIR|SKILL_DIR)\}?)/(.+)$")
#: What ``{baseDir}`` is read as in shell code (a plain word).
BASE_DIR_WORD = "__baseDir__"
CONSOLE_TAGS = frozenset({"console", "shell-session", "shellsession", "terminal"})


def file_kind(path: str) -> Kind | None:
    if PurePosixPath(path).name in ("package.json", "pyproject.toml"):
        return "other"  # read for the interpreter version they ask for
    lower = path.lower()
    if lower.endswith(DOC_SUFFIXES):
        return "doc"
    if lower.endswith(".py"):
        return "python"
    if lower.endswith(NODE_SUFFIXES):
        return "node"
    if lower.endswith(SHELL_SUFFIXES):
        return "shell"
    if "." not in PurePosixPath(path).name or path.startswith("scripts/"):
        return "other"  # only its shebang says what it is
    return None


BY_INTERPRETER: dict[str, Kind] = {
    "python": "python",
    "python3": "python",
    "node": "node",
    "bash": "shell",
    "sh": "shell",
}


class Scanner:
    """Reads one file after another into one :class:`ImageNeeds`, by kind."""

    def __init__(self, needs: ImageNeeds, entries: list[FileEntry], file_names: set[str]) -> None:
        self.needs = needs
        self.paths = [e.path for e in entries]
        self.file_names = file_names
        self._local: dict[str, set[str]] = {}
        #: shell functions any file of the skill defines
        self.functions: set[str] = set()
        self.skill_file = "SKILL.md"
        #: every file of the skill is in ``paths`` (the inventory was not cut short)
        self.complete = True

    def scan_text(self, path: str, kind: Kind, text: str) -> None:
        name = PurePosixPath(path).name
        if name in ("package.json", "pyproject.toml"):
            manifest_versions(self.needs, path, text)
            return
        if kind == "doc":
            self.doc(path, text)
            prose_versions(self.needs, path, text)
            return
        if kind == "python":
            script_version(self.needs, path, text)
        interpreter = self.shebang(path, text)
        if kind == "other":
            kind = BY_INTERPRETER.get(interpreter or "", "other")
        if kind == "python":
            self.python(path, text, 0, from_doc=False)
        elif kind == "node":
            self.node(path, text, 0)
        elif kind == "shell":
            self.shell(path, text, 0)

    def shebang(self, path: str, text: str) -> str | None:
        first = text.split("\n", 1)[0]
        if not first.startswith("#!"):
            return None
        words = first[2:].split()
        while words and (PurePosixPath(words[0]).name == "env" or words[0].startswith("-")):
            words = words[1:]
        if not words:
            return None
        name = PurePosixPath(words[0]).name
        self.needs.command(name, path, 1)
        return name

    # -- Markdown -------------------------------------------------------------------------------

    def doc(self, path: str, text: str) -> None:
        for tag, start, block in fenced_blocks(text):
            if tag in CONSOLE_TAGS:
                self.shell(path, prompt_lines(block, console=True), start)
            elif tag in SHELL_TAGS and any(line.lstrip().startswith("$ ") for line in block.split("\n")):
                # prompted lines are commands; the others are output or commands: guesses
                self.shell(path, prompt_lines(block, console=True), start)
                self.shell(path, session_output(block), start, sure=False)
            elif tag in SHELL_TAGS:
                self.shell(path, prompt_lines(block, console=False), start)
            elif tag in PYTHON_TAGS:
                self.python(path, block, start, from_doc=True)
            elif tag in NODE_TAGS:
                self.node(path, block, start)
            elif tag == "" and looks_like_shell(block):  # untagged: what it runs is a guess
                self.shell(path, prompt_lines(block, console=False), start, sure=False)

    def drop_defined_functions(self) -> None:
        """A shell function one of the skill's files defines (a script the docs source:
        ``. scripts/build_log.sh`` then ``log_step ...``) is no command the image must have."""
        for name in self.functions & set(self.needs.commands):
            del self.needs.commands[name]

    def shell(self, path: str, text: str, offset: int, *, sure: bool = True) -> None:
        """Commands of shell code; in the docs (``path`` a doc), installers' lines and whatever
        the parser marks unsure are guesses; ``sure`` False: all of it is."""
        functions: set[str] = set()
        doc = file_kind(path) == "doc"
        # ``{baseDir}`` (Claude Code's placeholder) as a bare word reads as an unclosed ``{``
        # group, which would make every later line of the block a guess.
        found = list(shell_commands(text.replace("{baseDir}", BASE_DIR_WORD), functions))
        self.functions |= functions
        for command in found:
            words, line = command.words, command.line + offset
            name = words[0]
            certain = sure and command.sure and not (doc and (name in INSTALLERS or name in OTHER_SYSTEMS))
            if name in CHECKS:  # command -v X, which X, ...: X is looked for, not relied on
                for checked in (w for w in words[1:] if not w.startswith("-")):
                    self.needs.command(checked, path, line, optional=True, sure=certain)
            if sure and command.sure:
                self.skill_script(path, words, line)
            if name in functions or "/" in name or name in self.file_names:
                continue
            self.needs.command(name, path, line, sure=certain)
            self.shell_needs(path, name, words, line, sure=certain)

    def skill_script(self, path: str, words: list[str], line: int) -> None:
        """A script of the skill the command runs (``python {baseDir}/scripts/x.py``, ``uv run
        "${CLAUDE_SKILL_DIR}/x.py"``, ``{baseDir}/scripts/x.sh``, and in SKILL.md ``node
        scripts/x.mjs``) that the skill does not hold: the instruction fails as written (code
        that lives beside the skill in its repository, a renamed script)."""
        if not self.complete:
            return
        script = words[0]
        if INTERPRETER.match(script):
            rest = words[2:] if script == "uv" and words[1:2] == ["run"] else words[1:]
            script = next((w for w in rest if not w.startswith("-")), "")
            if script == "" or rest[: rest.index(script)] and not SCRIPT_SUFFIX.search(script):
                return  # an option's value, not the script
        script = script.strip("\"'")
        anchored = SKILL_DIR_PREFIX.match(script)
        if anchored:
            relative = anchored.group(1)
        elif path == self.skill_file and script.startswith("scripts/"):
            relative = script
        else:
            return
        relative = str(PurePosixPath(relative))
        if SCRIPT_SUFFIX.search(relative) and ".." not in relative.split("/") and relative not in self.paths:
            self.needs.missing_file(relative, path, line)

    def shell_needs(self, path: str, name: str, words: list[str], line: int, *, sure: bool = True) -> None:
        args = [w for w in words[1:] if not w.startswith("-")]
        if name in NETWORK_COMMANDS:
            level, why = NETWORK_COMMANDS[name]
            self.needs.reason(path, line, why, level if sure else "maybe")
        sub = args[0] if args else ""
        if name in NETWORK_SUBCOMMANDS and sub in NETWORK_SUBCOMMANDS[name]:
            level, why = NETWORK_SUBCOMMANDS[name][sub]
            self.needs.reason(path, line, why, level if sure else "maybe")
        if name in ("npx", "pnpx", "bunx") and args:
            package = node_package(_strip_version(args[0]))
            if package:
                self.needs.node_module(package, path, line)
        installs = pip_install_args(words)
        if installs is not None:
            for requirement in installs:
                self.needs.package(requirement, path, line, sure=sure)
        if re.match(r"^python(3(\.\d+)?)?$", name) and "-m" in words:
            index = words.index("-m")
            module = words[index + 1].split(".")[0] if index + 1 < len(words) else ""
            rest = [w for w in words[index + 2 :] if not w.startswith("-")]
            if module in ("pip", "pip3") and rest[:1] == ["install"]:
                self.needs.reason(path, line, PIP_REASON, "yes" if sure else "maybe")
            if (
                MODULE_NAME.match(module)
                and module not in sys.stdlib_module_names
                and module not in self.local_modules(path)
            ):
                self.needs.module(module, path, line, optional=False)

    # -- Python ---------------------------------------------------------------------------------

    def python(self, path: str, text: str, offset: int, *, from_doc: bool) -> None:
        try:
            tree = ast.parse(text, filename=path)
        except RecursionError:
            self.needs.notes.append(Note("too_complex", f"{path}: nested too deeply to read", path))
            return
        except (SyntaxError, ValueError) as exc:
            if from_doc:  # a snippet with "..." in it: its import lines still count
                self.python_import_lines(path, text, offset)
                return
            line = getattr(exc, "lineno", None)
            self.needs.notes.append(
                Note("syntax_error", f"{path}: not valid Python: {getattr(exc, 'msg', exc)}", path, line)
            )
            return
        local = self.local_modules(path) if not from_doc else self.local_modules("SKILL.md")
        try:
            PythonVisitor(self, path, offset, local).visit(tree)
        except RecursionError:
            self.needs.notes.append(Note("too_complex", f"{path}: nested too deeply to read fully", path))

    def python_import_lines(self, path: str, text: str, offset: int) -> None:
        local = self.local_modules("SKILL.md")
        for number, line in enumerate(text.split("\n"), 1):
            match = re.match(r"^\s*(?:from\s+([A-Za-z_][\w.]*)\s+import\b|import\s+([A-Za-z_][\w.]*))", line)
            if match:
                self.python_module(match.group(1) or match.group(2), path, number + offset, False, local)

    def python_module(self, dotted: str, path: str, line: int, optional: bool, local: set[str]) -> None:
        top = dotted.split(".")[0]
        if not MODULE_NAME.match(top) or top in sys.stdlib_module_names or top in local:
            return
        self.needs.module(top, path, line, optional=optional)

    def local_modules(self, path: str) -> set[str]:
        """Top-level modules of the skill a script can import: ``.py`` files and folders in
        the script's folder and each folder above it, the skill root and ``scripts/``."""
        key = str(PurePosixPath(path).parent)
        if key not in self._local:
            self._local[key] = self._local_modules(path)
        return self._local[key]

    def _local_modules(self, path: str) -> set[str]:
        folders = {"", "scripts"}
        parent = PurePosixPath(path).parent
        while str(parent) not in (".", ""):
            folders.add(str(parent))
            parent = parent.parent
        names: set[str] = set()
        for candidate in self.paths:
            for folder in folders:
                prefix = f"{folder}/" if folder else ""
                if not candidate.startswith(prefix):
                    continue
                rest = candidate[len(prefix) :].split("/")
                if len(rest) > 1:
                    names.add(rest[0])
                elif rest[0].endswith((".py", ".so", ".pyd")):
                    names.add(rest[0].split(".")[0])
        return names

    # -- Node -----------------------------------------------------------------------------------

    def node(self, path: str, text: str, offset: int) -> None:
        code = strip_js_comments(text)
        starts = [0, *(m.end() for m in re.finditer("\n", code))]

        def line_of(index: int) -> int:
            return bisect.bisect_right(starts, index)

        patterns = (  # linear: no nested repetition (files come from untrusted skills)
            r"\brequire\s*\(\s*(['\"`])([^'\"`\n]+)\1\s*\)",
            r"\bimport\s*\(\s*(['\"`])([^'\"`\n]+)\1\s*\)",
            r"\bfrom\s*(['\"])([^'\"\n]+)\1",
            r"\bimport\s*(['\"])([^'\"\n]+)\1",
        )
        for pattern in patterns:
            for match in re.finditer(pattern, code, re.M):
                package = node_package(match.group(2))
                if package:
                    self.needs.node_module(package, path, line_of(match.start(2)) + offset)
        calls = r"\b(execSync|execFileSync|spawnSync|spawn|execFile|exec)\s*\(\s*(['\"`])([^'\"`\n]+)\2"
        for match in re.finditer(calls, code):
            line = line_of(match.start(3)) + offset
            if match.group(1).startswith("exec") and not match.group(1).startswith("execFile"):
                self.shell(path, match.group(3), line - 1)
            else:
                self.needs.command(PurePosixPath(match.group(3)).name, path, line)
        requests = r"\b(fetch|axios(?:\.\w+)?|got|request|get|post)\s*\(\s*(['\"`])(https?://[^'\"`\s]+)\2"
        for match in re.finditer(requests, code):
            self.url(path, line_of(match.start(3)) + offset, match.group(3))

    def url(self, path: str, line: int, url: str) -> None:
        host = URL.match(url)
        if host and not LOOPBACK.match(host.group(1)):
            self.needs.reason(path, line, f"requests {url[:200]}", "yes")


def pip_install_args(words: list[str]) -> list[str] | None:
    """The requirements a ``pip install`` (``pip3``, ``python -m pip``, ``uv pip``) command
    names, normalised (``Pandas>=2`` -> ``pandas>=2``); None when ``words`` is no such command.
    Files (``-r``), paths, URLs and anything pip could read as one are left out."""
    head = PurePosixPath(words[0]).name if words else ""
    if head in ("pip", "pip3"):
        rest = words[1:]
    elif head == "uv" and words[1:2] == ["pip"]:
        rest = words[2:]
    elif re.match(r"^python(3(\.\d+)?)?$", head) and words[1:3] in (["-m", "pip"], ["-m", "pip3"]):
        rest = words[3:]
    else:
        return None
    if rest[:1] != ["install"]:
        return None
    found: list[str] = []
    skip = False
    for word in rest[1:]:
        if skip:
            skip = False
        elif word.startswith("-"):
            skip = word in PIP_VALUED
        else:
            try:
                requirement = format_requirement(normalise_requirement(word))
            except InvalidRequirement:
                continue
            if safe_python_need(requirement) and not word.lower().endswith((".whl", ".zip", ".tar.gz", ".tgz")):
                found.append(requirement)
    return found


def _strip_version(spec: str) -> str:
    """``pkg@1.2`` -> ``pkg``; ``@scope/pkg@1`` -> ``@scope/pkg``."""
    at = spec.find("@", 1)
    return spec[:at] if at > 0 else spec
