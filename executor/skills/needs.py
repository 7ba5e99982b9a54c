"""What a skill needs from its image: commands, Python imports, Node modules, network.

A static scan of the skill folder (pure: nothing runs).  Files are listed with
:func:`~executor.skills.files.inventory` (links are not followed) and read with
:func:`~executor.skills.files.read_file` (nothing outside the skill, at most
``max_bytes`` each).  The scan only says what is *used*; whether the image has it is
the probe's business (:mod:`executor.doctor`), so nothing here lists what exists.

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
import re
import shlex
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Literal

from ..errors import ExecutorError
from .files import DEFAULT_MAX_READ, FileEntry, inventory, read_file
from .model import Skill

#: At most this many files are scanned, this many bytes in all, for about this many seconds
#: (the files come from untrusted skills).
MAX_FILES = 2000
MAX_TOTAL_BYTES = 16 * 1024 * 1024
MAX_SECONDS = 20.0
#: At most this many places are kept per command or module, and network reasons per skill.
MAX_USES = 50
MAX_REASONS = 200

#: Import names whose distribution is called otherwise (a hint for the report).
DISTRIBUTIONS = {
    "PIL": "pillow",
    "yaml": "pyyaml",
    "docx": "python-docx",
    "pptx": "python-pptx",
    "cv2": "opencv-python",
    "fitz": "pymupdf",
    "bs4": "beautifulsoup4",
    "sklearn": "scikit-learn",
    "dateutil": "python-dateutil",
    "dotenv": "python-dotenv",
    "magic": "python-magic",
    "Crypto": "pycryptodome",
    "pdfminer": "pdfminer.six",
    "skimage": "scikit-image",
    "attr": "attrs",
    "google.protobuf": "protobuf",
    "OpenSSL": "pyopenssl",
    "serial": "pyserial",
    "usb": "pyusb",
    "markdown_it": "markdown-it-py",
    "jwt": "pyjwt",
    "git": "gitpython",
    "zmq": "pyzmq",
    "Bio": "biopython",
}

#: Node's builtin modules (``require('module').builtinModules`` of Node 22, top names).
NODE_BUILTINS = frozenset({
    "assert", "async_hooks", "buffer", "child_process", "cluster", "console", "constants", "crypto", "dgram",
    "diagnostics_channel", "dns", "domain", "events", "fs", "http", "http2", "https", "inspector", "module", "net",
    "os", "path", "perf_hooks", "process", "punycode", "querystring", "readline", "repl", "stream",
    "string_decoder", "sys", "timers", "tls", "trace_events", "tty", "url", "util", "v8", "vm", "wasi",
    "worker_threads", "zlib", "test", "sqlite", "sea",
})

#: Shell words that are no command of their own: builtins and keywords.
SHELL_BUILTINS = frozenset({
    ".", ":", "[", "[[", "]]", "{", "}", "!", "alias", "bg", "bind", "break", "builtin", "caller", "case", "cd",
    "command", "compgen", "complete", "continue", "declare", "dirs", "disown", "do", "done", "echo", "elif", "else",
    "enable", "esac", "eval", "exec", "exit", "export", "false", "fc", "fg", "fi", "for", "function", "getopts",
    "hash", "help", "history", "if", "in", "jobs", "kill", "let", "local", "logout", "mapfile", "popd", "printf",
    "pushd", "pwd", "read", "readarray", "readonly", "return", "select", "set", "shift", "shopt", "source",
    "suspend", "test", "then", "time", "times", "trap", "true", "type", "typeset", "ulimit", "umask", "unalias",
    "unset", "until", "wait", "while", "coproc",
})

#: Words that run the command after them (their options skipped).
WRAPPERS = frozenset({"sudo", "env", "exec", "time", "nohup", "nice", "stdbuf", "then", "do", "else", "if",
                      "while", "until", "!", "{", "elif"})

#: Commands that look for others (``command -v X``): X is optional there.
CHECKS = frozenset({"command", "which", "type", "hash"})
SHELL_TAGS = frozenset({"bash", "sh", "shell", "console", "zsh", "shell-session", "shellsession", "terminal"})
PYTHON_TAGS = frozenset({"python", "py", "python3"})
NODE_TAGS = frozenset({"javascript", "js", "node", "mjs", "cjs", "typescript", "ts", "jsx", "tsx"})
NODE_SUFFIXES = (".js", ".mjs", ".cjs", ".ts", ".mts", ".cts", ".jsx", ".tsx")
SHELL_SUFFIXES = (".sh", ".bash")
DOC_SUFFIXES = (".md", ".markdown", ".mdx")

COMMAND_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,99}$")
MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")
NODE_NAME = re.compile(r"^(@[A-Za-z0-9][A-Za-z0-9._-]{0,99}/)?[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=")
SEPARATORS = frozenset({";", "&&", "||", "|", "&", "|&", ";;", "(", ")", "((", "))", ";&", ";;&", "\n"})
REDIRECT = re.compile(r"^[<>&|]*[<>][<>&|]*$")
#: A quoted string spanning more lines than this is taken as an unbalanced quote.
MAX_QUOTED_LINES = 200
MAX_QUOTED_CHARS = 64 * 1024
HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})\s*([^\s`{]*)")
URL = re.compile(r"^https?://([^/:?#\s]+)", re.I)
LOOPBACK = re.compile(r"^(localhost|127\.[0-9.]+|\[::1\]|0\.0\.0\.0)$", re.I)

Level = Literal["yes", "maybe", "no"]
Sure = Literal["yes", "maybe"]

#: Shell commands that fetch from the network, with how sure that is.
NETWORK_COMMANDS: dict[str, tuple[Sure, str]] = {
    "curl": ("yes", "curl downloads"),
    "wget": ("yes", "wget downloads"),
    "uvx": ("yes", "uvx fetches the tool it runs"),
    "npx": ("maybe", "npx fetches the package unless it is installed"),
}
#: ``TOOL SUBCOMMAND`` pairs that install or download.
NETWORK_SUBCOMMANDS: dict[str, dict[str, tuple[Sure, str]]] = {
    "pip": {"install": ("yes", "pip install downloads packages")},
    "pip3": {"install": ("yes", "pip install downloads packages")},
    "npm": {k: ("yes", f"npm {k} downloads packages") for k in ("install", "i", "ci", "add", "update", "exec")},
    "pnpm": {k: ("yes", f"pnpm {k} downloads packages") for k in ("install", "i", "add", "dlx")},
    "yarn": {k: ("yes", f"yarn {k} downloads packages") for k in ("install", "add", "dlx")},
    "uv": {"run": ("maybe", "uv run may download the script's dependencies"),
           "pip": ("yes", "uv pip installs packages"), "add": ("yes", "uv add downloads packages"),
           "sync": ("yes", "uv sync downloads packages"), "tool": ("yes", "uv tool downloads tools")},
    "git": {k: ("yes", f"git {k} needs a remote") for k in ("clone", "fetch", "pull", "push")},
    "apt": {"install": ("yes", "apt install downloads packages")},
    "apt-get": {"install": ("yes", "apt-get install downloads packages")},
    "conda": {"install": ("yes", "conda install downloads packages")},
    "playwright": {"install": ("yes", "playwright install downloads browsers")},
}
#: Python modules whose import suggests HTTP traffic.
NETWORK_MODULES = frozenset({"requests", "httpx", "aiohttp", "urllib3", "urllib.request", "http.client",
                             "websockets", "websocket", "ftplib", "smtplib"})
#: Call names (the last attribute) that send a request to their first argument.
REQUEST_CALLS = frozenset({"get", "post", "put", "patch", "delete", "head", "options", "request", "urlopen",
                           "Request", "urlretrieve", "fetch", "stream", "Client", "AsyncClient", "ws_connect",
                           "connect"})
SUBPROCESS_CALLS = frozenset({"run", "call", "check_call", "check_output", "Popen", "getoutput",
                              "getstatusoutput"})
OS_SHELL_CALLS = frozenset({"system", "popen"})
OS_EXEC_CALLS = frozenset({"execvp", "execlp", "execv", "execl", "spawnlp", "spawnvp", "execvpe", "execlpe"})
IMPORT_EXCEPTIONS = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})
EXEC_EXCEPTIONS = frozenset({"FileNotFoundError", "OSError", "EnvironmentError", "Exception", "BaseException"})


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
    seen: set[Use] = field(default_factory=set, repr=False, compare=False)


@dataclass(slots=True)
class Needs:
    commands: dict[str, Need] = field(default_factory=dict)
    python: dict[str, Need] = field(default_factory=dict)
    node: dict[str, list[Use]] = field(default_factory=dict)
    network: list[Reason] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    seen_reasons: set[Reason] = field(default_factory=set, repr=False, compare=False)
    seen_node: set[tuple[str, Use]] = field(default_factory=set, repr=False, compare=False)

    @property
    def network_needed(self) -> Level:
        levels = {r.level for r in self.network}
        return "yes" if "yes" in levels else "maybe" if levels else "no"

    def command(self, name: str, file: str, line: int, *, optional: bool = False) -> None:
        if COMMAND_NAME.match(name) and name not in SHELL_BUILTINS:
            _use(self.commands.setdefault(name, Need()), Use(file, line), optional)

    def module(self, name: str, file: str, line: int, *, optional: bool) -> None:
        _use(self.python.setdefault(name, Need()), Use(file, line), optional)

    def node_module(self, name: str, file: str, line: int) -> None:
        uses = self.node.setdefault(name, [])
        if (name, Use(file, line)) not in self.seen_node:
            self.seen_node.add((name, Use(file, line)))
            if len(uses) < MAX_USES:
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


def _use(need: Need, use: Use, optional: bool) -> None:
    need.optional = need.optional and optional
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


# -- the scan ----------------------------------------------------------------------------------


def scan(
    skill: Skill,
    *,
    max_bytes: int = DEFAULT_MAX_READ,
    max_files: int = MAX_FILES,
    max_total: int = MAX_TOTAL_BYTES,
    max_seconds: float = MAX_SECONDS,
) -> Needs:
    """Everything ``skill`` uses, read from its files (SKILL.md first); files past
    ``max_total`` bytes or ``max_seconds`` of reading are skipped with a note."""
    needs = Needs()
    deadline = time.monotonic() + max_seconds
    total = 0
    entries = inventory(skill, limit=max_files)
    if len(entries) >= max_files:
        needs.notes.append(Note("too_many_files", f"only the first {max_files} files were scanned"))
    paths = [skill.skill_file.name, *(e.path for e in entries)]
    scanner = _Scanner(needs, entries, {PurePosixPath(p).name for p in paths})
    for path in paths:
        kind = _kind(path)
        if kind is None:
            continue
        if total >= max_total or time.monotonic() > deadline:
            needs.notes.append(Note("scan_budget", f"the scan stopped after {total} bytes: {path} and the files "
                                                   "after it were not read", path))
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
    return needs


def scan_texts(files: dict[str, str], *, skill_file: str = "SKILL.md") -> Needs:
    """:func:`scan` over texts in memory (path -> text): for tests and previews."""
    needs = Needs()
    entries = [FileEntry(p, len(t), "other") for p, t in files.items() if p != skill_file]
    scanner = _Scanner(needs, entries, {PurePosixPath(p).name for p in files})
    for path in sorted(files, key=lambda p: (p != skill_file, p)):
        kind = _kind(path)
        if kind is not None:
            scanner.scan_text(path, kind, files[path])
    return needs


Kind = Literal["doc", "python", "node", "shell", "other"]


def _kind(path: str) -> Kind | None:
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


BY_INTERPRETER: dict[str, Kind] = {"python": "python", "python3": "python", "node": "node", "bash": "shell",
                                   "sh": "shell"}


class _Scanner:
    def __init__(self, needs: Needs, entries: list[FileEntry], file_names: set[str]) -> None:
        self.needs = needs
        self.paths = [e.path for e in entries]
        self.file_names = file_names
        self._local: dict[str, set[str]] = {}

    def scan_text(self, path: str, kind: Kind, text: str) -> None:
        if kind == "doc":
            self.doc(path, text)
            return
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
            if tag in SHELL_TAGS:
                self.shell(path, prompt_lines(block, console=tag in {"console", "shell-session", "shellsession",
                                                                     "terminal"}), start)
            elif tag in PYTHON_TAGS:
                self.python(path, block, start, from_doc=True)
            elif tag in NODE_TAGS:
                self.node(path, block, start)
            elif tag == "" and looks_like_shell(block):
                self.shell(path, prompt_lines(block, console=False), start)

    # -- shell ----------------------------------------------------------------------------------

    def shell(self, path: str, text: str, offset: int) -> None:
        functions: set[str] = set()
        found: list[tuple[str, list[str], int]] = []
        for words, line in shell_commands(text, functions):
            found.append((words[0], words, line + offset))
        for name, words, line in found:
            if name in CHECKS:  # command -v X, which X, ...: X is looked for, not relied on
                for checked in (w for w in words[1:] if not w.startswith("-")):
                    self.needs.command(checked, path, line, optional=True)
            if name in functions or "/" in name or name in self.file_names:
                continue
            self.needs.command(name, path, line)
            self.shell_needs(path, name, words, line)

    def shell_needs(self, path: str, name: str, words: list[str], line: int) -> None:
        args = [w for w in words[1:] if not w.startswith("-")]
        if name in NETWORK_COMMANDS:
            level, why = NETWORK_COMMANDS[name]
            self.needs.reason(path, line, why, level)
        sub = args[0] if args else ""
        if name in NETWORK_SUBCOMMANDS and sub in NETWORK_SUBCOMMANDS[name]:
            level, why = NETWORK_SUBCOMMANDS[name][sub]
            self.needs.reason(path, line, why, level)
        if name in ("npx", "pnpx", "bunx") and args:
            package = node_package(_strip_version(args[0]))
            if package:
                self.needs.node_module(package, path, line)
        if re.match(r"^python(3(\.\d+)?)?$", name) and "-m" in words:
            index = words.index("-m")
            module = words[index + 1].split(".")[0] if index + 1 < len(words) else ""
            rest = [w for w in words[index + 2:] if not w.startswith("-")]
            if module in ("pip", "pip3") and rest[:1] == ["install"]:
                self.needs.reason(path, line, "pip install downloads packages", "yes")
            if MODULE_NAME.match(module) and module not in sys.stdlib_module_names and \
                    module not in self.local_modules(path):
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
            self.needs.notes.append(Note("syntax_error", f"{path}: not valid Python: {getattr(exc, 'msg', exc)}",
                                         path, line))
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
                rest = candidate[len(prefix):].split("/")
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
            isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
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
        if node.module in ("urllib", "http"):
            for alias in node.names:
                self.network_module(f"{node.module}.{alias.name}", node)

    def imported(self, dotted: str, node: ast.AST) -> None:
        self.scanner.python_module(dotted, self.path, self.line(node), self.guarded > 0, self.local)
        self.network_module(dotted, node)

    def network_module(self, dotted: str, node: ast.AST) -> None:
        for name in NETWORK_MODULES:
            if dotted == name or dotted.startswith(name + "."):
                self.needs.reason(self.path, self.line(node), f"imports {name} (an HTTP client)", "maybe")

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
        attr = node.func.attr if isinstance(node.func, ast.Attribute) else (
            node.func.id if isinstance(node.func, ast.Name) else "")
        if attr in REQUEST_CALLS:
            target = first if first is not None else next(
                (k.value for k in node.keywords if k.arg in ("url", "base_url")), None)
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


def _catches(handler: ast.ExceptHandler, exceptions: frozenset[str]) -> bool:
    kind = handler.type
    if kind is None:
        return True
    names = kind.elts if isinstance(kind, ast.Tuple) else [kind]
    return any(
        (isinstance(n, ast.Name) and n.id in exceptions) or (isinstance(n, ast.Attribute) and n.attr in exceptions)
        for n in names
    )


# -- text helpers (pure) -----------------------------------------------------------------------


def fenced_blocks(text: str) -> Iterator[tuple[str, int, str]]:
    """Markdown fenced code blocks: (lower-case tag, line number before the first line, content)."""
    lines = text.split("\n")
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        fence, tag = opening.group(1), opening.group(2).lower()
        start = index + 1
        end = start
        while end < len(lines) and not lines[end].strip().startswith(fence[0] * len(fence)):
            end += 1
        yield tag, start, "\n".join(lines[start:end])
        index = end + 1


def prompt_lines(block: str, *, console: bool) -> str:
    """A block's commands: ``$ `` prompts dropped; in a console block only prompted lines
    (and their continuations) are commands, the rest is output (blanked, keeping line numbers)."""
    out: list[str] = []
    continued = False
    for line in block.split("\n"):
        stripped = line.lstrip()
        if stripped.startswith(("$ ", "> ")) or stripped == "$":
            line = stripped[2:]
            continued = line.rstrip().endswith("\\")
        elif console and not continued:
            line = ""
        else:
            continued = line.rstrip().endswith("\\")
        out.append(line)
    return "\n".join(out)


NOT_SHELL_WORDS = frozenset({"import", "from", "def", "class", "const", "let", "var", "function", "return",
                             "async", "await", "try", "except", "with", "package", "public", "private", "print",
                             "elif", "else", "case", "switch", "module", "use", "fn", "int", "void"})


def looks_like_shell(block: str) -> bool:
    """An untagged block whose every line reads as a command: ``$ `` prompts, or a plain
    command word (or an assignment) followed by arguments."""
    lines = [line.strip() for line in block.split("\n") if line.strip() and not line.strip().startswith("#")]
    if not lines:
        return False
    if all(line.startswith("$ ") for line in lines):
        return True
    if not all(line.isascii() for line in lines):  # arrows, box drawing, prose: a diagram or text
        return False
    for line in lines:
        first = line.split()[0]
        if first in NOT_SHELL_WORDS:
            return False
        if not (re.match(r"^[a-z][a-z0-9._+-]*$", first) or ASSIGNMENT.match(first) or first.startswith("./")):
            return False
        if line.endswith((":", "{", ",", ";")) and not line.endswith(("do;", "then;")):
            return False
    return True


def shell_commands(text: str, functions: set[str] | None = None) -> Iterator[tuple[list[str], int]]:
    """The commands of shell code: (words from the command name on, 1-based line), for
    each part of pipelines and lists; assignments, wrappers (``sudo``, ``env``, ...),
    redirections and heredoc bodies skipped; names of functions it defines go into
    ``functions``."""
    functions = set() if functions is None else functions
    in_case = False
    for logical, line in _logical_lines(text):
        tokens = _tokens(logical)
        segment: list[str] = []
        tokens.append("\n")
        for index, token in enumerate(tokens):
            if token not in SEPARATORS:
                segment.append(token)
                continue
            words, in_case_after = _command_words(segment, in_case, token)
            if token == "(" and len(segment) == 1 and tokens[index + 1: index + 2] == [")"]:
                functions.add(segment[0])
                words = []
            if segment[:1] == ["function"] and len(segment) > 1:
                functions.add(segment[1].removesuffix("()"))
                words = []
            in_case = in_case_after
            if words:
                yield words, line
            segment = []


def _command_words(segment: list[str], in_case: bool, separator: str) -> tuple[list[str], bool]:
    if not segment:
        return [], in_case
    if segment[0] == "case":
        return [], True
    if segment[0] == "esac":
        return [], False
    if in_case and separator == ")":
        return [], in_case  # a pattern of a case
    words: list[str] = []
    skip_next = False
    for word in segment:
        if skip_next:
            skip_next = False
            continue
        if REDIRECT.match(word):
            skip_next = True
            continue
        words.append(word)
    while words:
        head = words[0]
        if ASSIGNMENT.match(head):
            words = words[1:]
        elif head in WRAPPERS:
            words = words[1:]
            while words and words[0].startswith("-"):
                words = words[1:]
        elif head in ("for", "select", "case", "function", "[[", "[", "((", "let", "local", "export",
                      "declare", "readonly"):
            return [], in_case
        else:
            break
    if not words:
        return [], in_case
    head = words[0]
    if head.startswith(("$", "`", "~", "-", "\"", "'")) or "$" in head or "=" in head:
        return [], in_case
    return words, in_case


def _logical_lines(text: str) -> Iterator[tuple[str, int]]:
    """Lines with ``\\`` continuations and quoted strings spanning lines joined, and heredoc
    bodies left out (linear: each physical line is scanned once per start)."""
    lines = text.split("\n")
    index = 0
    while index < len(lines):
        start = index
        parts = [lines[index]]
        quote = _quote_after(lines[index], None)
        size = len(lines[index])
        while index + 1 < len(lines) and size < MAX_QUOTED_CHARS:
            current = parts[-1].rstrip()
            if quote is None and current.endswith("\\"):
                parts[-1] = current[:-1] + " "
            elif quote is not None and index + 1 - start < MAX_QUOTED_LINES:
                parts.append("\n")  # a quoted string goes on
            else:
                break
            index += 1
            parts.append(lines[index])
            size += len(lines[index])
            quote = _quote_after(lines[index], quote)
        if quote is not None:  # never closed: the first line alone
            parts, index = [lines[start]], start
        index += 1
        line = "".join(parts)
        for heredoc in HEREDOC.finditer(line):
            terminator = heredoc.group(2)
            while index < len(lines) and lines[index].strip() != terminator:
                index += 1
            index += 1
        yield HEREDOC.sub(" ", line), start + 1


ARITHMETIC = re.compile(r"\$?\(\((?:[^()]|\([^()]*\))*\)\)")


def _quote_after(text: str, quote: str | None) -> str | None:
    """The quote still open at the end of ``text`` (``'``, ``"`` or None), starting inside
    ``quote``: a linear scan (``\\`` escapes outside single quotes, ``#`` comments)."""
    if quote is None and "'" not in text and '"' not in text:
        return None
    index, length = 0, len(text)
    while index < length:
        char = text[index]
        if quote is None:
            if char == "#" and (index == 0 or text[index - 1] in " \t\n;&|("):
                newline = text.find("\n", index)
                if newline < 0:
                    return None
                index = newline
            elif char in "'\"":
                quote = char
            elif char == "\\":
                index += 1
        elif char == quote:
            quote = None
        elif char == "\\" and quote == '"':
            index += 1
        index += 1
    return quote


PLAIN_WORDS = re.compile(r"[;&|()<>]+|[^\s;&|()<>]+")


def _tokens(line: str) -> list[str]:
    line = ARITHMETIC.sub(" : ", line)  # $(( ... )) and (( ... )) hold no command
    if not any(c in line for c in "'\"\\#"):  # nothing to unquote: a quick split
        return [part for token in PLAIN_WORDS.findall(line) for part in _operators(token)]
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        return [part for token in lexer for part in _operators(token)]
    except ValueError:  # an unbalanced quote: take the words up to it
        cut = min((i for i in (line.find("'"), line.find('"')) if i >= 0), default=len(line))
        return _tokens(line[:cut]) if cut < len(line) else line.split()


OPERATOR = re.compile(r";;&|;;|;&|&&|\|\||\|&|&>>|&>|>>|<<<|<<|>&|<&|>\||[;&|()<>]")


def _operators(token: str) -> list[str]:
    """shlex joins adjacent punctuation (``);``): split it into the shell's operators."""
    if token and all(c in ";&|()<>" for c in token):
        return OPERATOR.findall(token)
    return [token]


def strip_js_comments(text: str) -> str:
    """JavaScript with ``//`` and ``/* */`` comments blanked (line numbers kept; strings
    are respected roughly: a ``//`` right after ``:`` is a URL's). Linear."""
    parts: list[str] = []
    position = 0
    while (opening := text.find("/*", position)) >= 0:
        closing = text.find("*/", opening + 2)
        end = len(text) if closing < 0 else closing + 2
        parts += [text[position:opening], "\n" * text.count("\n", opening, end)]
        position = end
    parts.append(text[position:])
    return re.sub(r"(?<![:\\'\"`])//[^\n]*", "", "".join(parts))


def locations(uses: Iterable[Use]) -> list[str]:
    """``file:line`` strings, sorted."""
    return [str(u) for u in sorted(uses)]
