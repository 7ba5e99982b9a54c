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

import ast
import bisect
import json
import re
import sys
import time
from pathlib import PurePosixPath
from typing import Literal

from packaging.requirements import InvalidRequirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet

from ..errors import ExecutorError
from ..shell import shell_commands
from ..skills.files import DEFAULT_MAX_READ, FileEntry, inventory, read_file
from ..skills.model import Skill
from ..skills.requirements import format_requirement, normalise_requirement, safe_python_need
from .model import (
    API_CLIENT_MODULES,
    CHECKS,
    DOC_SUFFIXES,
    EXEC_EXCEPTIONS,
    IMPORT_EXCEPTIONS,
    INSTALLERS,
    LOOPBACK,
    MAX_FILES,
    MAX_SECONDS,
    MAX_TOTAL_BYTES,
    MODULE_NAME,
    NETWORK_COMMANDS,
    NETWORK_MODULES,
    NETWORK_SUBCOMMANDS,
    NODE_SUFFIXES,
    NODE_TAGS,
    OS_EXEC_CALLS,
    OS_SHELL_CALLS,
    OTHER_SYSTEMS,
    PIP_REASON,
    PIP_VALUED,
    PYTHON_TAGS,
    REQUEST_CALLS,
    SHELL_SUFFIXES,
    SHELL_TAGS,
    SUBPROCESS_CALLS,
    URL,
    ImageNeeds,
    Note,
    node_package,
)
from .text import fenced_blocks, looks_like_shell, prompt_lines, session_output, strip_js_comments


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
    scanner = _Scanner(needs, entries, {PurePosixPath(p).name for p in paths})
    scanner.skill_file = skill.skill_file.name
    scanner.complete = len(entries) < max_files
    for path in paths:
        kind = _kind(path)
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
    scanner = _Scanner(needs, entries, {PurePosixPath(p).name for p in files})
    scanner.skill_file = skill_file
    for path in sorted(files, key=lambda p: (p != skill_file, p)):
        kind = _kind(path)
        if kind is not None:
            scanner.scan_text(path, kind, files[path])
    scanner.drop_defined_functions()
    return needs


Kind = Literal["doc", "python", "node", "shell", "other"]
#: ``requires-python = ">=3.12"`` of a pyproject.toml, and of a PEP 723 block (``# `` lines).
REQUIRES_PYTHON = re.compile(r"""^requires-python\s*=\s*["']([^"'\n]{1,64})["']""", re.M)
SCRIPT_REQUIRES_PYTHON = re.compile(r"""^#\s*requires-python\s*=\s*["']([^"'\n]{1,64})["']""", re.M)
#: A version the docs ask for: "Node.js 22+", "Node 22 or later", "Node.js >= 18", "Python 3.12+".
PROSE_VERSION = re.compile(
    r"\b(Node(?:\.js)?|Python)[ \t]*(?:v|version[ \t]*)?"
    r"(?:(\d{1,2}(?:\.\d{1,2})?)(?:\+|[ \t]+or[ \t]+(?:later|newer|higher|above))"
    r"|>=[ \t]*v?(\d{1,2}(?:\.\d{1,2})?))"
)
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


def _kind(path: str) -> Kind | None:
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


class _Scanner:
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
            self.manifest(path, text)
            return
        if kind == "doc":
            self.doc(path, text)
            self.prose_runtimes(path, text)
            return
        if kind == "python":
            self.script_runtime(path, text)
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

    # -- interpreter versions -------------------------------------------------------------------

    def manifest(self, path: str, text: str) -> None:
        """``engines.node`` of a package.json, ``requires-python`` of a pyproject.toml."""
        if path.endswith("package.json"):
            try:
                engines = json.loads(text).get("engines", {})
            except (ValueError, AttributeError):
                return
            spec = engines.get("node") if isinstance(engines, dict) else None
            if isinstance(spec, str):
                self.version_need("node", spec, path, _line_of(text, '"node"'))
            return
        match = REQUIRES_PYTHON.search(text)
        if match:
            self.version_need("python", match.group(1), path, text.count("\n", 0, match.start()) + 1)

    def script_runtime(self, path: str, text: str) -> None:
        """``requires-python`` of a PEP 723 ``# /// script`` block."""
        match = SCRIPT_REQUIRES_PYTHON.search(text)
        if match:
            self.version_need("python", match.group(1), path, text.count("\n", 0, match.start()) + 1)

    def prose_runtimes(self, path: str, text: str) -> None:
        """ "Node.js 22+", "Node >= 18", "Python 3.12+", "Python >= 3.12" in the docs."""
        for match in PROSE_VERSION.finditer(text):
            name = "node" if match.group(1).lower().startswith("node") else "python"
            version = match.group(2) or match.group(3)
            if name == "python" and "." not in version:
                continue  # "Python 3+": no requirement worth a check
            self.version_need(name, f">={version}", path, text.count("\n", 0, match.start()) + 1)

    def version_need(self, name: str, spec: str, path: str, line: int) -> None:
        spec = spec.strip().replace(" ", "")
        if spec.startswith("^"):  # npm's ^22: the major's floor (the upper bound is no check)
            spec = ">=" + spec[1:]
        try:
            SpecifierSet(spec)
        except InvalidSpecifier:
            return  # an npm range pip's grammar does not read ("18 || 20"): not checked
        self.needs.runtime(name, spec, path, line)

    # -- shell ----------------------------------------------------------------------------------

    def drop_defined_functions(self) -> None:
        """A shell function one of the skill's files defines (a script the docs source:
        ``. scripts/build_log.sh`` then ``log_step ...``) is no command the image must have."""
        for name in self.functions & set(self.needs.commands):
            del self.needs.commands[name]

    def shell(self, path: str, text: str, offset: int, *, sure: bool = True) -> None:
        """Commands of shell code; in the docs (``path`` a doc), installers' lines and whatever
        the parser marks unsure are guesses; ``sure`` False: all of it is."""
        functions: set[str] = set()
        doc = _kind(path) == "doc"
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
            _PythonVisitor(self, path, offset, local).visit(tree)
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


class _PythonVisitor(ast.NodeVisitor):
    def __init__(self, scanner: _Scanner, path: str, offset: int, local: set[str]) -> None:
        self.scanner = scanner
        self.needs = scanner.needs
        self.path = path
        self.offset = offset
        self.local = local
        self.guarded = 0
        #: Inside a ``try`` that catches a missing program (FileNotFoundError, OSError, ...).
        self.exec_guarded = 0
        #: Names bound to the subprocess/os/shutil modules or their functions.
        self.aliases: dict[str, str] = {}

    def line(self, node: ast.AST) -> int:
        return int(getattr(node, "lineno", 1)) + self.offset

    def visit_Try(self, node: ast.Try) -> None:
        guarded = any(_catches(h, IMPORT_EXCEPTIONS) for h in node.handlers)
        exec_guarded = any(_catches(h, EXEC_EXCEPTIONS) for h in node.handlers)
        self.guarded += guarded
        self.exec_guarded += exec_guarded
        for statement in node.body:
            self.visit(statement)
        self.guarded -= guarded
        self.exec_guarded -= exec_guarded
        for part in (*node.handlers, *node.orelse, *node.finalbody):
            self.visit(part)

    visit_TryStar = visit_Try  # type: ignore[assignment]

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        checking = (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
            isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
        )
        self.guarded += checking
        for statement in node.body:
            self.visit(statement)
        self.guarded -= checking
        self.visit(node.test)
        for statement in node.orelse:
            self.visit(statement)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.imported(alias.name, node)
            if alias.name in ("subprocess", "os", "shutil"):
                self.aliases[alias.asname or alias.name] = alias.name

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level or not node.module:
            return
        self.imported(node.module, node)
        if node.module in ("subprocess", "os", "shutil"):
            for alias in node.names:
                self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        if node.module in ("urllib", "http", "google"):  # `from google import genai`
            for alias in node.names:
                self.network_module(f"{node.module}.{alias.name}", node)

    def imported(self, dotted: str, node: ast.AST) -> None:
        self.scanner.python_module(dotted, self.path, self.line(node), self.guarded > 0, self.local)
        self.network_module(dotted, node)

    def network_module(self, dotted: str, node: ast.AST) -> None:
        for name in NETWORK_MODULES:
            if dotted == name or dotted.startswith(name + "."):
                self.needs.reason(self.path, self.line(node), f"imports {name} (an HTTP client)", "maybe")
        for name in API_CLIENT_MODULES:
            if dotted == name or dotted.startswith(name + "."):
                self.needs.reason(self.path, self.line(node), f"imports {name} (a hosted API's client)", "maybe")

    def visit_Call(self, node: ast.Call) -> None:
        name = self.call_name(node.func)
        first = node.args[0] if node.args else None
        line = self.line(node)
        literal = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None
        if name in {f"subprocess.{c}" for c in SUBPROCESS_CALLS}:
            if isinstance(first, (ast.List, ast.Tuple)) and first.elts:
                head = first.elts[0]
                if isinstance(head, ast.Constant) and isinstance(head.value, str):
                    words = [e.value for e in first.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
                    self.command_words(words, line)
            elif literal is not None:
                self.scanner.shell(self.path, literal, line - 1)
        elif name in {f"os.{c}" for c in OS_SHELL_CALLS} and literal is not None:
            self.scanner.shell(self.path, literal, line - 1)
        elif name == "shutil.which" and literal is not None:
            self.needs.command(PurePosixPath(literal).name, self.path, line, optional=True)
        elif name in {f"os.{c}" for c in OS_EXEC_CALLS} and literal is not None:
            self.needs.command(PurePosixPath(literal).name, self.path, line, optional=self.exec_guarded > 0)
        elif name in ("importlib.import_module", "__import__") and literal and not literal.startswith("."):
            self.imported(literal, node)
        attr = (
            node.func.attr
            if isinstance(node.func, ast.Attribute)
            else (node.func.id if isinstance(node.func, ast.Name) else "")
        )
        if attr in REQUEST_CALLS:
            target = (
                first
                if first is not None
                else next((k.value for k in node.keywords if k.arg in ("url", "base_url")), None)
            )
            if isinstance(target, ast.Constant) and isinstance(target.value, str):
                self.scanner.url(self.path, line, target.value)
            elif isinstance(target, ast.JoinedStr) and target.values:
                head = target.values[0]
                if isinstance(head, ast.Constant) and isinstance(head.value, str):
                    self.scanner.url(self.path, line, head.value)
        self.generic_visit(node)

    def command_words(self, words: list[str], line: int) -> None:
        name = PurePosixPath(words[0]).name if words[0].startswith("/") else words[0]
        if "/" in name or name in self.scanner.file_names:
            return
        self.needs.command(name, self.path, line, optional=self.exec_guarded > 0)
        self.scanner.shell_needs(self.path, name, words, line)

    def call_name(self, func: ast.expr) -> str:
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            base = self.aliases.get(func.value.id, func.value.id)
            return f"{base}.{func.attr}"
        if isinstance(func, ast.Name):
            return self.aliases.get(func.id, func.id)
        return ""


def _line_of(text: str, needle: str) -> int:
    at = text.find(needle)
    return 1 if at < 0 else text.count("\n", 0, at) + 1


def _catches(handler: ast.ExceptHandler, exceptions: frozenset[str]) -> bool:
    kind = handler.type
    if kind is None:
        return True
    names = kind.elts if isinstance(kind, ast.Tuple) else [kind]
    return any(
        (isinstance(n, ast.Name) and n.id in exceptions) or (isinstance(n, ast.Attribute) and n.attr in exceptions)
        for n in names
    )
