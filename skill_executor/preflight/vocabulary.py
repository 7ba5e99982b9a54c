"""What the scan knows of the world it reads: its limits, import names whose distribution is
called otherwise, Node's and the shell's builtins, installers, programs and modules that reach
the network, the calls that run commands.  Data tables, kept together so one place says what
the scan recognises."""

from __future__ import annotations

import re
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
