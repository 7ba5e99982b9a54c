"""What a skill uses, as the static scan (:mod:`.scan`) reports it: commands, Python
imports, Node modules and network, each with where it is used."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

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
NODE_BUILTINS = frozenset(
    {
        "assert",
        "async_hooks",
        "buffer",
        "child_process",
        "cluster",
        "console",
        "constants",
        "crypto",
        "dgram",
        "diagnostics_channel",
        "dns",
        "domain",
        "events",
        "fs",
        "http",
        "http2",
        "https",
        "inspector",
        "module",
        "net",
        "os",
        "path",
        "perf_hooks",
        "process",
        "punycode",
        "querystring",
        "readline",
        "repl",
        "stream",
        "string_decoder",
        "sys",
        "timers",
        "tls",
        "trace_events",
        "tty",
        "url",
        "util",
        "v8",
        "vm",
        "wasi",
        "worker_threads",
        "zlib",
        "test",
        "sqlite",
        "sea",
    }
)

#: Shell words that are no command of their own: builtins and keywords.
SHELL_BUILTINS = frozenset(
    {
        ".",
        ":",
        "[",
        "[[",
        "]]",
        "{",
        "}",
        "!",
        "alias",
        "bg",
        "bind",
        "break",
        "builtin",
        "caller",
        "case",
        "cd",
        "command",
        "compgen",
        "complete",
        "continue",
        "declare",
        "dirs",
        "disown",
        "do",
        "done",
        "echo",
        "elif",
        "else",
        "enable",
        "esac",
        "eval",
        "exec",
        "exit",
        "export",
        "false",
        "fc",
        "fg",
        "fi",
        "for",
        "function",
        "getopts",
        "hash",
        "help",
        "history",
        "if",
        "in",
        "jobs",
        "kill",
        "let",
        "local",
        "logout",
        "mapfile",
        "popd",
        "printf",
        "pushd",
        "pwd",
        "read",
        "readarray",
        "readonly",
        "return",
        "select",
        "set",
        "shift",
        "shopt",
        "source",
        "suspend",
        "test",
        "then",
        "time",
        "times",
        "trap",
        "true",
        "type",
        "typeset",
        "ulimit",
        "umask",
        "unalias",
        "unset",
        "until",
        "wait",
        "while",
        "coproc",
    }
)

#: Commands that look for others (``command -v X``): X is optional there.
CHECKS = frozenset({"command", "which", "type", "hash"})
#: The network reason of a ``pip install`` line (the doctor drops it when all it names is there).
PIP_REASON = "pip install downloads packages"
#: Options of ``pip install`` that take a value (``-r file``: a file, not a package).
PIP_VALUED = frozenset(
    {
        "-r",
        "--requirement",
        "-c",
        "--constraint",
        "-e",
        "--editable",
        "-t",
        "--target",
        "-i",
        "--index-url",
        "--extra-index-url",
        "-f",
        "--find-links",
        "--prefix",
        "--root",
        "--python",
        "-p",
        "--platform",
        "--python-version",
        "--implementation",
        "--abi",
        "--src",
        "--upgrade-strategy",
        "--progress-bar",
        "--cache-dir",
        "--log",
        "--proxy",
        "--timeout",
        "--retries",
        "--trusted-host",
        "--cert",
        "--client-cert",
        "--exists-action",
        "--report",
        "--only-binary",
        "--no-binary",
        "-C",
        "--config-settings",
        "--group",
    }
)
#: Package managers of the reader's machine: in the docs, their lines set up a machine (a
#: guess about the sandbox); in a script, they run.
INSTALLERS = frozenset(
    {"brew", "apt", "apt-get", "yum", "dnf", "zypper", "pacman", "apk", "port", "snap", "winget", "choco", "scoop"}
)
#: Commands of macOS and Windows only: in the docs, they show the reader's machine (a guess
#: about a Linux sandbox); in a script, they run.
OTHER_SYSTEMS = frozenset(
    {
        "codesign",
        "security",
        "osascript",
        "pbcopy",
        "pbpaste",
        "defaults",
        "xcrun",
        "xcodebuild",
        "sw_vers",
        "launchctl",
        "plutil",
        "ditto",
        "lipo",
        "diskutil",
        "open",
        "mdfind",
        "softwareupdate",
        "powershell",
        "pwsh",
        "cmd",
        "cmd.exe",
        "reg",
        "taskkill",
        "tasklist",
        "wsl",
        "explorer",
    }
)
SHELL_TAGS = frozenset({"bash", "sh", "shell", "console", "zsh", "shell-session", "shellsession", "terminal"})
PYTHON_TAGS = frozenset({"python", "py", "python3"})
NODE_TAGS = frozenset({"javascript", "js", "node", "mjs", "cjs", "typescript", "ts", "jsx", "tsx"})
NODE_SUFFIXES = (".js", ".mjs", ".cjs", ".ts", ".mts", ".cts", ".jsx", ".tsx")
SHELL_SUFFIXES = (".sh", ".bash")
DOC_SUFFIXES = (".md", ".markdown", ".mdx")

COMMAND_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,99}$")
MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")
NODE_NAME = re.compile(r"^(@[A-Za-z0-9][A-Za-z0-9._-]{0,99}/)?[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
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
    "pip": {"install": ("yes", PIP_REASON)},
    "pip3": {"install": ("yes", PIP_REASON)},
    "npm": {k: ("yes", f"npm {k} downloads packages") for k in ("install", "i", "ci", "add", "update", "exec")},
    "pnpm": {k: ("yes", f"pnpm {k} downloads packages") for k in ("install", "i", "add", "dlx")},
    "yarn": {k: ("yes", f"yarn {k} downloads packages") for k in ("install", "add", "dlx")},
    "uv": {
        "run": ("maybe", "uv run may download the script's dependencies"),
        "pip": ("yes", PIP_REASON),
        "add": ("yes", "uv add downloads packages"),
        "sync": ("yes", "uv sync downloads packages"),
        "tool": ("yes", "uv tool downloads tools"),
    },
    "git": {k: ("yes", f"git {k} needs a remote") for k in ("clone", "fetch", "pull", "push")},
    "apt": {"install": ("yes", "apt install downloads packages")},
    "apt-get": {"install": ("yes", "apt-get install downloads packages")},
    "conda": {"install": ("yes", "conda install downloads packages")},
    "playwright": {"install": ("yes", "playwright install downloads browsers")},
}
#: Python modules whose import suggests HTTP traffic.
NETWORK_MODULES = frozenset(
    {
        "requests",
        "httpx",
        "aiohttp",
        "urllib3",
        "urllib.request",
        "http.client",
        "websockets",
        "websocket",
        "ftplib",
        "smtplib",
    }
)
#: Python clients of hosted APIs (a model provider's SDK): a script importing one calls out.
API_CLIENT_MODULES = frozenset(
    {
        "anthropic",
        "openai",
        "google.genai",
        "google.generativeai",
        "cohere",
        "mistralai",
        "groq",
        "replicate",
    }
)
#: Call names (the last attribute) that send a request to their first argument.
REQUEST_CALLS = frozenset(
    {
        "get",
        "post",
        "put",
        "patch",
        "delete",
        "head",
        "options",
        "request",
        "urlopen",
        "Request",
        "urlretrieve",
        "fetch",
        "stream",
        "Client",
        "AsyncClient",
        "ws_connect",
        "connect",
    }
)
SUBPROCESS_CALLS = frozenset({"run", "call", "check_call", "check_output", "Popen", "getoutput", "getstatusoutput"})
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
