"""Per-skill dependencies: what a skill declares, what the runner image already has, and
a content-addressed environment with the rest, resolved on the host (never in a run).

A skill may declare needs in five places (:func:`declared`):

* ``requirements.txt`` and ``scripts/requirements.txt`` (requirement lines; options such
  as ``--hash`` or ``-i`` are ignored, ``-r``/``-c`` includes are not followed, and
  editable installs, URLs and local paths are refused with a finding);
* ``pyproject.toml``'s ``[project].dependencies``;
* PEP 723 ``# /// script`` blocks in any ``*.py`` of the skill;
* ``package.json``'s ``dependencies`` (``name@range``; URLs, git and file specs refused).

Python needs are PEP 508 requirements, normalised (canonical name, sorted extras) and
judged for the image's interpreter (CPython 3.11 on Linux x86_64): a requirement whose
markers are false there is no need at all, and one whose specifier accepts the version
the image pins (``images/runner/requirements-full.txt``) is *provided by the image*.
npm needs are provided when the image's ``npm/package.json`` pins a version the range
accepts.  What is left is resolved by :class:`SkillEnvs` into
``<data_dir>/envs/<key>/{python,node/node_modules}`` plus a ``manifest.json``, where
``key`` hashes the remaining needs, the image's Python tag and pins, and the configured
package sources.  An environment is built in a temporary folder next to its place and
renamed there in one step: it is complete or absent, and immutable once in place.

pip and npm run only through :mod:`executor.hosttools` (a fresh working directory, an
allow-listed environment, an unprivileged user when the service is root, redacted
output), with their own isolation switches: ``python -I -m pip --isolated`` with
``PIP_CONFIG_FILE=/dev/null``, npm with empty user and global ``npmrc`` files.  Nothing
the service records (manifest, refusals, logs) carries a source's credentials.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import stat
import sys
import tarfile
import threading
import time
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..config import Settings
from ..errors import ExecutorError
from ..hosttools import HostTools, Scratch, ToolResult, ToolUser, reclaim, redact, tool_user, url_secrets
from ..images import IMAGE_ABI, IMAGE_PLATFORMS, IMAGE_PYTHON, images_dir, read_pins

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
TEMP_PREFIX = ".tmp-"
#: The Python tag environments are built for (the runner image's interpreter).
TARGET = f"{IMAGE_ABI}-manylinux-x86_64"
#: The marker environment of the runner image's Python.
IMAGE_MARKERS: dict[str, str] = {
    "python_version": ".".join(IMAGE_PYTHON.split(".")[:2]),
    "python_full_version": IMAGE_PYTHON,
    "implementation_name": "cpython",
    "implementation_version": IMAGE_PYTHON,
    "platform_python_implementation": "CPython",
    "os_name": "posix",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "platform_release": "",
    "platform_version": "",
    "extra": "",
}
REQUIREMENTS_FILES = ("requirements.txt", "scripts/requirements.txt")
SKIP_DIRS = frozenset({".git", "node_modules", "__pycache__", ".venv", "venv"})
#: Bounds on the scan for PEP 723 blocks (a skill is a few scripts, not a source tree).
MAX_SCRIPTS = 1000
MAX_SCRIPT_BYTES = 1024 * 1024
#: How much of pip's / npm's output a refusal quotes.
ERROR_LINES = 15
#: How long a resolution may take.
RESOLVE_TIMEOUT = 900.0
#: A temporary build folder older than this was left by a crash (swept at start).
STALE_TEMP_SECONDS = 3600.0

# PEP 723's reference regular expression.
_PEP723 = re.compile(r"(?m)^# /// (?P<type>[a-zA-Z0-9-]+)$\s(?P<content>(^#(| .*)$\s)+)^# ///$")
_NPM_NAME = re.compile(r"^(@[a-z0-9][a-z0-9._~-]*/)?[a-z0-9][a-z0-9._~-]*$")
#: What an npm spec may be: a registry version, range or tag -- nothing npm could read as a
#: URL, a git or file spec, an alias or a tarball (npm matches schemes in any case).
_NPM_SPEC = re.compile(r"^[0-9A-Za-z.+^~<>=|* -]{0,256}$")
#: File names pip or npm would read as a package file rather than a name on the index.
_ARCHIVE = (".tgz", ".tar", ".tar.gz", ".tar.bz2", ".tar.xz", ".tbz", ".txz", ".zip", ".whl")
#: What a formatted Python need may be before its marker: a name, extras and PEP 440
#: specifiers (no ``===``, nothing pip could read as a path or a URL).
_PY_NEED = re.compile(
    r"^[a-z0-9]([a-z0-9._-]*[a-z0-9])?(\[[a-z0-9._,-]+\])?"
    r"((~=|==|!=|<=|>=|<|>)[0-9A-Za-z.*+!_-]+(,(~=|==|!=|<=|>=|<|>)[0-9A-Za-z.*+!_-]+)*)?$"
)
_URL = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)

Mode = Literal["install", "off"]


class DependenciesUnmet(ExecutorError):
    """A skill's declared needs cannot be met: it is refused, not half-installed."""

    status = 422
    code = "skill_dependencies_unmet"


@dataclass(frozen=True, slots=True)
class Finding:
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
    findings: tuple[Finding, ...] = ()
    #: The files that declared something (relative to the skill).
    sources: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.python or self.node or self.findings)


# -- reading what a skill declares ---------------------------------------------------


#: A resolved pin as pip's report gives it (canonical name, a version).
_PIN = re.compile(r"^[a-z0-9][a-z0-9._-]*==[A-Za-z0-9.+!_-]+$")
#: What a need may not contain: pip expands ``${VAR}`` in requirement files (the service's
#: environment, so a skill could read it back from pip's error), and characters that
#: ``str.splitlines`` (pip's line splitting) treats as line breaks would smuggle options.
_UNSAFE_TEXT = re.compile(r"[$\x00-\x1f\x7f-\x9f\u2028\u2029]")


def normalise_requirement(text: str) -> Requirement:
    """A PEP 508 requirement without URL, canonically named; ``InvalidRequirement`` else."""
    if _UNSAFE_TEXT.search(text):
        raise InvalidRequirement("'$', control characters and line separators are not allowed in a need")
    req = Requirement(text)
    if req.url:
        raise InvalidRequirement("a URL requirement is not allowed (needs come from the configured index)")
    for spec in req.specifier:
        if spec.operator == "===":
            # Arbitrary equality takes any text, paths included, which pip reads as a local project.
            raise InvalidRequirement("'===' (arbitrary equality) is not allowed; use '=='")
    req.name = canonicalize_name(req.name)
    req.extras = {canonicalize_name(e) for e in req.extras}
    return req


def safe_python_need(need: str) -> bool:
    """Whether pip can only read ``need`` as a requirement on the index (never a path or URL)."""
    head = need.split(";", 1)[0].strip()
    name = re.split(r"[\[<>=!~]", head, maxsplit=1)[0]
    return bool(_PY_NEED.match(head)) and not name.endswith(_ARCHIVE) and not _UNSAFE_TEXT.search(need)


def safe_npm_spec(spec: str) -> bool:
    """Whether npm can only read ``spec`` as a registry version, range or tag."""
    return bool(_NPM_SPEC.match(spec)) and not spec.lower().endswith(_ARCHIVE)


def format_requirement(req: Requirement) -> str:
    text = req.name
    if req.extras:
        text += "[" + ",".join(sorted(req.extras)) + "]"
    if req.specifier:
        text += ",".join(sorted(str(s) for s in req.specifier))
    if req.marker is not None:
        text += f"; {req.marker}"
    return text


def _python_need(text: str, source: str, needs: list[str], findings: list[Finding]) -> None:
    stripped = text.strip()
    looks_local = stripped.startswith((".", "/", "~")) or stripped.lower().endswith(_ARCHIVE)
    if _URL.match(stripped) or stripped.startswith("git+") or looks_local:
        findings.append(Finding(source, stripped, "URLs and local paths are not allowed; name a package "
                                                  "the configured index or wheelhouse has"))
        return
    try:
        need = format_requirement(normalise_requirement(stripped))
        if not safe_python_need(need):
            raise InvalidRequirement("only a package name, extras and PEP 440 versions are allowed")
        needs.append(need)
    except InvalidRequirement as exc:
        findings.append(Finding(source, stripped, f"not a valid requirement: {exc}"))


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


def parse_requirements(text: str, source: str) -> tuple[list[str], list[Finding]]:
    needs: list[str] = []
    findings: list[Finding] = []
    for line in _requirement_lines(text):
        if line.startswith("-"):
            option = line.split(None, 1)[0].split("=", 1)[0]
            if option in ("-e", "--editable"):
                findings.append(Finding(source, line, "editable installs are not allowed"))
            # Every other option (-r, -c, -i, --hash, --find-links, ...) is ignored: the
            # operator chooses the sources, and includes are not followed.
            continue
        # A requirement may carry per-requirement options (``--hash=...``): drop them.
        requirement = re.split(r"\s+--?[a-zA-Z]", line, maxsplit=1)[0]
        _python_need(requirement, source, needs, findings)
    return needs, findings


def parse_pyproject(text: str, source: str) -> tuple[list[str], list[Finding]]:
    needs: list[str] = []
    findings: list[Finding] = []
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return [], [Finding(source, "", f"not valid TOML: {exc}")]
    project = data.get("project")
    deps = project.get("dependencies", []) if isinstance(project, dict) else []
    if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
        return [], [Finding(source, "", "[project].dependencies must be a list of strings")]
    for dep in deps:
        _python_need(dep, source, needs, findings)
    return needs, findings


def script_metadata(text: str) -> dict[str, Any] | None:
    """The PEP 723 ``script`` block of a Python file as TOML data (None: none)."""
    blocks = [m for m in _PEP723.finditer(text) if m.group("type") == "script"]
    if not blocks:
        return None
    if len(blocks) > 1:
        raise ValueError("more than one '# /// script' block")
    content = "".join(
        line[2:] if line.startswith("# ") else line[1:]
        for line in blocks[0].group("content").splitlines(keepends=True)
    )
    return tomllib.loads(content)


def parse_script(text: str, source: str) -> tuple[list[str], list[Finding]]:
    needs: list[str] = []
    findings: list[Finding] = []
    try:
        meta = script_metadata(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        return [], [Finding(source, "", f"invalid '# /// script' block: {exc}")]
    if meta is None:
        return [], []
    deps = meta.get("dependencies", [])
    if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
        return [], [Finding(source, "", "'dependencies' of the script block must be a list of strings")]
    for dep in deps:
        _python_need(dep, source, needs, findings)
    return needs, findings


def parse_package_json(text: str, source: str) -> tuple[list[str], list[Finding]]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return [], [Finding(source, "", f"not valid JSON: {exc}")]
    deps = data.get("dependencies", {}) if isinstance(data, dict) else {}
    if not isinstance(deps, dict):
        return [], [Finding(source, "", "'dependencies' must be an object")]
    needs: list[str] = []
    findings: list[Finding] = []
    for name, spec in deps.items():
        spec_text = str(spec).strip() if isinstance(spec, str) else ""
        if not _NPM_NAME.match(str(name)):
            findings.append(Finding(source, f"{name}@{spec}", "not a valid npm package name"))
        elif not isinstance(spec, str) or not safe_npm_spec(spec_text):
            findings.append(Finding(source, f"{name}@{spec}", "only registry versions and ranges are allowed "
                                                              "(no URLs, git, file or alias specs)"))
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
    yield "pyproject", skill / "pyproject.toml"
    yield "package", skill / "package.json"
    for script in _scripts(skill):
        yield "script", script


_PARSERS = {"requirements": parse_requirements, "pyproject": parse_pyproject, "script": parse_script,
            "package": parse_package_json}


def declared(skill_path: Path) -> Needs:
    """Everything a skill declares, normalised, deduplicated and sorted."""
    python: set[str] = set()
    node: set[str] = set()
    findings: list[Finding] = []
    sources: list[str] = []
    for kind, path in _sources(skill_path):
        text = _read(path)
        if text is None:
            continue
        rel = path.relative_to(skill_path).as_posix()
        needs, found = _PARSERS[kind](text, rel)
        if needs or found:
            sources.append(rel)
        (node if kind == "package" else python).update(needs)
        findings += found
    return Needs(tuple(sorted(python)), tuple(sorted(node)), tuple(findings), tuple(sorted(sources)))


def signature(skill_path: Path) -> str:
    """Changes when any file that may declare needs changes (size, mtime, name)."""
    digest = hashlib.sha256()
    for _, path in _sources(skill_path):
        try:
            st = path.stat()
        except OSError:
            continue
        digest.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return digest.hexdigest()


# -- what the runner image provides --------------------------------------------------


def _npm_version(text: str) -> tuple[int, int, int] | None:
    match = re.fullmatch(r"v?(\d+)\.(\d+)\.(\d+)(?:[-+].*)?", text.strip())
    return (int(match.group(1)), int(match.group(2)), int(match.group(3))) if match else None


def _partial(text: str) -> tuple[list[int], bool] | None:
    """``1``, ``1.2``, ``1.x``, ``1.2.3`` -> (numbers given, had a wildcard)."""
    parts = text.strip().lstrip("v=").split(".")
    numbers: list[int] = []
    for part in parts[:3]:
        part = re.split(r"[-+]", part, maxsplit=1)[0]
        if part in ("x", "X", "*"):
            return numbers, True
        if not part.isdigit():
            return None
        numbers.append(int(part))
    return numbers, False


def _comparator(comp: str, version: tuple[int, int, int]) -> bool | None:
    """One npm comparator (``^1.2``, ``~1.2.3``, ``>=1``, ``1.x``, ``1.2.3``); None: not understood."""
    match = re.fullmatch(r"(\^|~|>=|<=|>|<|=)?\s*(.+)", comp)
    if not match:
        return None
    op, rest = match.group(1) or "", match.group(2)
    parsed = _partial(rest)
    if parsed is None:
        return None
    numbers, _ = parsed
    if not numbers:
        return True
    padded = tuple([*numbers, 0, 0, 0][:3])
    if op in ("", "="):
        return list(version[: len(numbers)]) == numbers
    if op == "^":
        first = next((i for i, n in enumerate(numbers) if n != 0), len(numbers) - 1)
        return version >= padded and list(version[: first + 1]) == numbers[: first + 1]
    if op == "~":
        keep = 2 if len(numbers) >= 2 else 1
        return version >= padded and list(version[:keep]) == numbers[:keep]
    ops = {">=": version >= padded, ">": version > padded, "<=": version <= padded, "<": version < padded}
    return ops[op]


def npm_range_accepts(spec: str, version: str) -> bool:
    """Whether an npm range accepts a version (the common forms; anything else: False)."""
    parsed = _npm_version(version)
    if parsed is None:
        return False
    spec = spec.strip()
    if spec in ("", "*", "latest", "x"):
        return True
    for alternative in spec.split("||"):
        alternative = alternative.strip()
        hyphen = re.fullmatch(r"(\S+)\s+-\s+(\S+)", alternative)
        if hyphen:
            upper = _partial(hyphen.group(2))
            if upper is None or not upper[0]:
                return False
            numbers = upper[0]
            # A partial upper bound takes the whole of its last part: ``1 - 2`` is ``>=1 <3``.
            bound = f"<={hyphen.group(2)}" if len(numbers) == 3 else \
                "<" + ".".join(map(str, [*numbers[:-1], numbers[-1] + 1]))
            comps = [f">={hyphen.group(1)}", bound]
        else:
            comps = re.findall(r"(?:\^|~|>=|<=|>|<|=)?\s*[^\s]+", alternative)
        results = [_comparator(c.strip(), parsed) for c in comps] or [True]
        if all(r is True for r in results):
            return True
    return False


def _split_npm(need: str) -> tuple[str, str]:
    at = need.rfind("@")
    return (need[:at], need[at + 1:]) if at > 0 else (need, "*")


@dataclass(frozen=True, slots=True)
class ImagePackages:
    """The runner image's pinned packages (Python: canonical name -> (version, extras))."""

    python: dict[str, tuple[Version, frozenset[str]]] = field(default_factory=dict)
    node: dict[str, str] = field(default_factory=dict)
    #: A digest of the pins (part of every environment's key).
    digest: str = ""

    @classmethod
    def load(cls, runner: Path, *, minimal: bool = False) -> ImagePackages:
        """Read the pins the image is built from; a missing file pins nothing."""
        python: dict[str, tuple[Version, frozenset[str]]] = {}
        node: dict[str, str] = {}
        digest = hashlib.sha256(TARGET.encode())
        pins_file = runner / ("requirements-minimal.txt" if minimal else "requirements-full.txt")
        try:
            for pin in read_pins(pins_file):
                req = Requirement(pin)
                version = next(iter(req.specifier)).version
                python[canonicalize_name(req.name)] = (Version(version),
                                                       frozenset(canonicalize_name(e) for e in req.extras))
                digest.update(pin.encode() + b"\0")
        except (OSError, ExecutorError, InvalidRequirement, InvalidVersion) as exc:
            log.warning("cannot read the runner image's Python pins from %s (%s): none counts as provided",
                        pins_file, exc)
        if not minimal:
            try:
                package = json.loads((runner / "npm" / "package.json").read_text())
                node = {str(k): str(v) for k, v in (package.get("dependencies") or {}).items()}
            except (OSError, ValueError, AttributeError):
                node = {}
            digest.update(json.dumps(node, sort_keys=True).encode())
        return cls(python, node, digest.hexdigest())

    def provides_python(self, need: str) -> bool:
        req = Requirement(need)
        pinned = self.python.get(canonicalize_name(req.name))
        if pinned is None:
            return False
        version, extras = pinned
        return {canonicalize_name(e) for e in req.extras} <= extras and req.specifier.contains(
            version, prereleases=True)

    def provides_node(self, need: str) -> bool:
        name, spec = _split_npm(need)
        pinned = self.node.get(name)
        return pinned is not None and npm_range_accepts(spec, pinned)


def applies(need: str) -> bool:
    """Whether a Python need's markers hold for the image's interpreter."""
    marker = Requirement(need).marker
    return marker is None or Marker(str(marker)).evaluate(IMAGE_MARKERS)


# -- planning and resolving environments -------------------------------------------


@dataclass(frozen=True, slots=True)
class Sources:
    """Where needs are resolved from (the operator's settings)."""

    index_url: str | None = None
    wheelhouse: Path | None = None
    npm_registry: str | None = None
    npm_wheelhouse: Path | None = None

    def describe(self) -> dict[str, str | None]:
        """The sources as every run may read them (the manifest) and the key hashes them:
        URLs without credentials, query strings or fragments (:func:`redact`)."""
        return {
            "index_url": redact(self.index_url) if self.index_url else None,
            "wheelhouse": str(self.wheelhouse) if self.wheelhouse else None,
            "npm_registry": redact(self.npm_registry) if self.npm_registry else None,
            "npm_wheelhouse": str(self.npm_wheelhouse) if self.npm_wheelhouse else None,
        }

    def secrets(self) -> set[str]:
        """What of the sources must never leave the host process (see :func:`url_secrets`)."""
        return url_secrets(self.index_url) | url_secrets(self.npm_registry)


@dataclass(frozen=True, slots=True)
class EnvPlan:
    """A skill's needs, split into what the image provides and what its environment holds."""

    needs: Needs
    provided: tuple[str, ...]
    python: tuple[str, ...]
    node: tuple[str, ...]
    #: The environment's folder name under the envs root; None: nothing to install.
    key: str | None


def env_key(python: Iterable[str], node: Iterable[str], image: ImagePackages, sources: Sources) -> str:
    data = {"python": sorted(python), "node": sorted(node), "target": TARGET, "image": image.digest,
            "sources": sources.describe()}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:32]


def plan(needs: Needs, image: ImagePackages, sources: Sources) -> EnvPlan:
    provided: list[str] = []
    python: list[str] = []
    for need in needs.python:
        if not applies(need):
            continue
        (provided if image.provides_python(need) else python).append(need)
    node: list[str] = []
    for need in needs.node:
        (provided if image.provides_node(need) else node).append(need)
    key = env_key(python, node, image, sources) if python or node else None
    return EnvPlan(needs, tuple(provided), tuple(python), tuple(node), key)


def _tail(text: str) -> list[str]:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-ERROR_LINES:]


def _unmet(items: list[dict[str, str]], log_lines: list[str] | None = None) -> DependenciesUnmet:
    names = ", ".join(item["need"] or item.get("source", "?") for item in items)
    return DependenciesUnmet(
        f"the skill's dependencies cannot be met: {names}",
        details={"unmet": items, **({"log": log_lines} if log_lines else {})},
    )


_PIP_MISSING = re.compile(r"(?:No matching distribution found for|satisfies the requirement) ([^\s(]+)")


def pip_target_args(sources: Sources) -> list[str]:
    """pip options choosing wheels for the image's Python (as the image build does) from the sources."""
    args = ["--disable-pip-version-check", "--only-binary=:all:", "--python-version", IMAGE_PYTHON,
            "--implementation", "cp", "--abi", IMAGE_ABI, "--abi", "abi3", "--abi", "none"]
    for platform in (*IMAGE_PLATFORMS, "any"):
        args += ["--platform", platform]
    if sources.wheelhouse is not None:
        args += ["--no-index", "--find-links", str(sources.wheelhouse)]
    elif sources.index_url:
        args += ["--index-url", sources.index_url]
    return args


class SkillEnvs:
    """The environments under one root: planned per skill, resolved once per key."""

    def __init__(
        self,
        root: Path,
        *,
        mode: Mode = "install",
        sources: Sources = Sources(),
        image: ImagePackages | None = None,
        python: str = sys.executable,
        npm: str | None = None,
        user: ToolUser | None = None,
    ) -> None:
        self.root = root
        self.mode = mode
        self.sources = sources
        self.image = image if image is not None else ImagePackages()
        self.python = python
        # The service's npm: on its PATH, skipping relative entries (``node_modules/.bin``,
        # ``.``), which would name a folder of whatever the working directory is.
        self.npm = npm or shutil.which("npm", path=os.pathsep.join(
            entry for entry in os.environ.get("PATH", os.defpath).split(os.pathsep) if os.path.isabs(entry)))
        #: pip and npm run through this (isolated; as ``user`` when the service is root).
        self.tools = HostTools(user, sources.secrets())
        #: The tools checked to run as they must (checked once, before their first use).
        self._usable: set[str] = set()
        self._lock = threading.Lock()
        self._key_locks: dict[str, threading.Lock] = {}
        #: (skill path, signature) -> the plan, or the refusal (not retried until the skill changes)
        self._cache: dict[tuple[str, str], EnvPlan | DependenciesUnmet] = {}
        root.mkdir(parents=True, exist_ok=True)
        try:
            os.chmod(root, 0o755)  # runs (another uid) read it through a bind mount
        except OSError:
            pass
        self._sweep()

    @classmethod
    def from_settings(cls, settings: Settings) -> SkillEnvs:
        minimal = ":minimal" in settings.docker_image
        return cls(
            settings.envs_dir,
            mode=settings.skill_deps,
            sources=Sources(settings.package_index_url, settings.wheelhouse, settings.npm_registry,
                            settings.npm_wheelhouse),
            image=ImagePackages.load(images_dir() / "runner", minimal=minimal),
            user=tool_user(settings.host_tools_user),
            python=settings.host_tools_python or sys.executable,
        )

    def _sweep(self) -> None:
        """Remove build folders a crashed resolution left (old enough not to be in progress)."""
        now = time.time()
        try:
            entries = list(os.scandir(self.root))
        except OSError:
            return
        for entry in entries:
            try:
                if entry.name.startswith(TEMP_PREFIX) and now - entry.stat().st_mtime > STALE_TEMP_SECONDS:
                    shutil.rmtree(entry.path, ignore_errors=True)
            except OSError:
                continue

    def path(self, key: str) -> Path:
        return self.root / key

    def plan(self, skill_path: Path) -> EnvPlan:
        return plan(declared(skill_path), self.image, self.sources)

    def ensure(self, skill_path: Path) -> EnvPlan:
        """Plan a skill's environment and resolve it when absent; ``DependenciesUnmet`` when it cannot be."""
        planned = self.plan(skill_path)
        if planned.needs.findings:
            raise _unmet([f.to_dict() for f in planned.needs.findings])
        if planned.key is not None and self.mode == "install":
            self._resolve(planned)
        return planned

    def for_run(self, skill_path: Path, digest: str | None = None) -> str | None:
        """The environment key a run of the skill uses (None: none), resolving it on first
        use; a refusal is remembered until a file that declares needs changes.

        ``digest``: the registry's digest of an immutable version folder -- it names the
        content, so the folder is not walked on every run.
        """
        if self.mode == "off":
            return None
        cache_key = (str(skill_path), digest or signature(skill_path))
        with self._lock:
            cached = self._cache.get(cache_key)
        if isinstance(cached, DependenciesUnmet):
            raise cached
        if cached is not None and (cached.key is None or self.path(cached.key).is_dir()):
            return cached.key
        try:
            planned = self.ensure(skill_path)
        except DependenciesUnmet as exc:
            with self._lock:
                self._cache[cache_key] = exc
            raise
        with self._lock:
            self._cache = {k: v for k, v in self._cache.items() if k[0] != cache_key[0]}
            self._cache[cache_key] = planned
        return planned.key

    def _resolve(self, planned: EnvPlan) -> Path:
        assert planned.key is not None
        final = self.path(planned.key)
        with self._lock:
            key_lock = self._key_locks.setdefault(planned.key, threading.Lock())
        with key_lock:
            if (final / MANIFEST).is_file():
                return final
            temp = self.root / f"{TEMP_PREFIX}{planned.key}-{secrets.token_hex(4)}"
            temp.mkdir(mode=0o755)
            try:
                resolved = {"python": self._pip(planned, temp), "node": self._npm(planned, temp)}
                manifest = {
                    "key": planned.key, "needs": {"python": list(planned.needs.python),
                                                  "node": list(planned.needs.node)},
                    "sources": list(planned.needs.sources), "provided_by_image": list(planned.provided),
                    "installed": {"python": list(planned.python), "node": list(planned.node)},
                    "resolved": resolved, "target": TARGET, "package_sources": self.sources.describe(),
                    "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                }
                (temp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
                reclaim(temp)  # the service's, folders 0755 and files 0644/0755: runs (another uid) read it
                try:
                    os.rename(temp, final)
                except OSError as exc:
                    if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                        raise
                    shutil.rmtree(temp, ignore_errors=True)  # another process won: use its environment
                log.info("resolved the skill environment %s (%d Python, %d npm)", planned.key,
                         len(planned.python), len(planned.node))
                return final
            except BaseException:
                shutil.rmtree(temp, ignore_errors=True)
                raise

    def _usable_or_refuse(self, tool: str, argv: list[str], sources: list[Path | None]) -> None:
        """Check once that ``argv`` runs as the tools run, and the source folders (and their
        files) are readable there: ``host_tools_unusable`` (503) otherwise, never a refusal
        of the skill."""
        if tool in self._usable:
            return
        readable: list[Path] = []
        for folder in sources:
            if folder is not None:
                readable.append(folder)
                readable += sorted(p for p in folder.iterdir() if p.is_file()) if folder.is_dir() else []
        where = self.root / f"{TEMP_PREFIX}check-{secrets.token_hex(4)}"
        where.mkdir(mode=0o755)
        try:
            self.tools.check(argv, where, readable)
        finally:
            shutil.rmtree(where, ignore_errors=True)
        self._usable.add(tool)

    def _run_pip(self, args: list[str], scratch: Scratch) -> ToolResult:
        # -I: no PYTHON* variable, no user site, no working directory on the path; --isolated
        # and PIP_CONFIG_FILE=/dev/null: no PIP_* variable and no configuration file.
        argv = [self.python, "-I", "-m", "pip", "--isolated", "install", "--no-input", "--no-cache-dir",
                "--quiet", *args]
        return self.tools.run(argv, scratch, timeout=RESOLVE_TIMEOUT, env={"PIP_CONFIG_FILE": os.devnull})

    def _pip(self, planned: EnvPlan, temp: Path) -> dict[str, str]:
        """Resolve the Python needs (preferring the image's pins), then install what the image lacks."""
        if not planned.python:
            return {}
        # The needs go as arguments, never in a requirements file (whose lines pip expands
        # and parses as options); format_requirement wrote each from a parsed requirement.
        needs = [need for need in planned.python if safe_python_need(need)]
        if len(needs) != len(planned.python):
            raise _unmet([{"need": n, "source": "python", "error": "refused: not a plain requirement on the index"}
                          for n in planned.python if n not in needs])
        self._usable_or_refuse("pip", [self.python, "-I", "-c", "import pip"], [self.sources.wheelhouse])
        pins = "".join(f"{name}=={version}\n" for name, (version, _) in sorted(self.image.python.items()))

        def dry_run(attempt: str, constrained: bool) -> tuple[ToolResult, Path]:
            scratch = self.tools.scratch(temp / f".resolve-{attempt}")
            (scratch.folder / "constraints.txt").write_text(pins)
            report = scratch.folder / "report.json"
            args = ["--dry-run", "--ignore-installed", "--target", str(scratch.folder / "dry"),
                    *pip_target_args(self.sources), "--report", str(report)]
            args += ["-c", str(scratch.folder / "constraints.txt")] if constrained else []
            return self._run_pip([*args, "--", *needs], scratch), report

        result, report = dry_run("pinned", True)
        if result.returncode != 0 and "ResolutionImpossible" in result.output:
            # The needs conflict with the image's pins: honour the skill's wish.
            result, report = dry_run("free", False)
        if result.returncode != 0:
            raise self._pip_failure(planned, result)
        items = json.loads(_read_bounded(report)).get("install", [])
        chosen: dict[str, str] = {str(canonicalize_name(i["metadata"]["name"])): str(i["metadata"]["version"])
                                  for i in items}
        wanted = [f"{name}=={version}" for name, version in sorted(chosen.items())
                  if not (name in self.image.python and str(self.image.python[name][0]) == version)]
        if any(_UNSAFE_TEXT.search(w) or not _PIN.match(w) for w in wanted):
            raise _unmet([{"need": w, "source": "python", "error": "pip resolved an unexpected name or version"}
                          for w in wanted if _UNSAFE_TEXT.search(w) or not _PIN.match(w)])
        if wanted:
            scratch = self.tools.scratch(temp / ".install")
            result = self._run_pip(["--no-deps", "--no-compile", "--target", str(scratch.folder / "python"),
                                    *pip_target_args(self.sources), "--", *wanted], scratch)
            if result.returncode != 0:
                raise self._pip_failure(planned, result)
            os.rename(scratch.folder / "python", temp / "python")
            shutil.rmtree(temp / "python" / "bin", ignore_errors=True)
        for folder in temp.glob(".resolve-*"):
            shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(temp / ".install", ignore_errors=True)
        return chosen

    def _pip_failure(self, planned: EnvPlan, result: ToolResult) -> DependenciesUnmet:
        output = result.output
        missing = {canonicalize_name(re.split(r"[<>=!~\[;]", m, maxsplit=1)[0]) for m in _PIP_MISSING.findall(output)}
        unmet = [n for n in planned.python if canonicalize_name(Requirement(n).name) in missing] or list(planned.python)
        return _unmet([{"need": n, "source": "python", "error": "pip could not resolve it"} for n in unmet],
                      _tail(output))

    def _npm_tarballs(self) -> dict[str, list[tuple[tuple[int, int, int], Path]]]:
        """name -> [(version, tarball)] of the npm wheelhouse's ``*.tgz`` files."""
        found: dict[str, list[tuple[tuple[int, int, int], Path]]] = {}
        folder = self.sources.npm_wheelhouse
        if folder is None or not folder.is_dir():
            return found
        for tgz in sorted(folder.glob("*.tgz")):
            try:
                with tarfile.open(tgz) as archive:
                    member = archive.extractfile("package/package.json")
                    meta = json.loads(member.read()) if member is not None else {}
            except (OSError, tarfile.TarError, KeyError, ValueError):
                continue
            version = _npm_version(str(meta.get("version", "")))
            if isinstance(meta.get("name"), str) and version is not None:
                found.setdefault(meta["name"], []).append((version, tgz))
        return found

    def _npm(self, planned: EnvPlan, temp: Path) -> dict[str, str]:
        if not planned.node:
            return {}
        if self.npm is None:
            raise _unmet([{"need": n, "source": "node", "error": "npm is not installed on the service's "
                                    "host"} for n in planned.node])
        split = [(need, *_split_npm(need)) for need in planned.node]
        unsafe = [need for need, name, spec in split if not (_NPM_NAME.match(name) and safe_npm_spec(spec))]
        if unsafe:
            raise _unmet([{"need": n, "source": "node", "error": "refused: not a registry version, range or tag"}
                          for n in unsafe])
        specs: list[str] = []
        if self.sources.npm_wheelhouse is not None:
            tarballs = self._npm_tarballs()
            missing: list[dict[str, str]] = []
            for need in planned.node:
                name, spec = _split_npm(need)
                fits = sorted(((v, p) for v, p in tarballs.get(name, [])
                               if npm_range_accepts(spec, ".".join(map(str, v)))), reverse=True)
                if fits:
                    specs.append(str(fits[0][1]))
                else:
                    missing.append({"need": need, "source": "node",
                                    "error": f"no tarball in {self.sources.npm_wheelhouse} fits"})
            if missing:
                raise _unmet(missing)
        else:
            specs = list(planned.node)
        self._usable_or_refuse("npm", [self.npm, "--version"], [self.sources.npm_wheelhouse])
        scratch = self.tools.scratch(temp / ".npm")
        node = scratch.folder / "node"
        node.mkdir()
        (node / "package.json").write_text('{"name": "skill-env", "private": true}\n')
        for rc in ("user.npmrc", "global.npmrc"):
            (scratch.folder / rc).write_text("")
        # No git (a registry package's git dependency would be cloned, and some npm versions
        # run its `prepare` despite --ignore-scripts), no links to local folders, and no
        # configuration but these options (empty user and global npmrc; the project's is
        # the fresh prefix's, which has none).
        argv = [self.npm, "install", "--prefix", str(node), "--ignore-scripts", "--no-audit", "--no-fund",
                "--no-package-lock", "--no-update-notifier", "--loglevel=error",
                "--cache", str(scratch.folder / "cache"), "--userconfig", str(scratch.folder / "user.npmrc"),
                "--globalconfig", str(scratch.folder / "global.npmrc"), "--git=false", "--install-links=false",
                "--", *specs]
        if self.sources.npm_wheelhouse is not None:
            argv.insert(2, "--offline")
        elif self.sources.npm_registry:
            argv.insert(2, f"--registry={self.sources.npm_registry}")
        result = self.tools.run(argv, scratch, timeout=RESOLVE_TIMEOUT)
        if result.returncode != 0:
            raise _unmet([{"need": n, "source": "node", "error": "npm could not install it"}
                          for n in planned.node], _tail(result.output))
        os.rename(node, temp / "node")
        shutil.rmtree(scratch.folder, ignore_errors=True)
        node = temp / "node"
        resolved: dict[str, str] = {}
        for need in planned.node:
            name, _ = _split_npm(need)
            try:
                meta = json.loads(_read_bounded(node / "node_modules" / name / "package.json"))
                resolved[name] = str(meta.get("version")) if isinstance(meta, dict) else "?"
            except (OSError, ValueError):
                resolved[name] = "?"
        return resolved


#: The most of a tool's answer file (pip's report, a package.json) that is read.
MAX_ANSWER_BYTES = 16 * 1024 * 1024


def _read_bounded(path: Path) -> str:
    """A file a tool wrote (regular, not a link, at most :data:`MAX_ANSWER_BYTES`); ``ValueError`` else."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"not a regular file: {path.name}")
        data = handle.read(MAX_ANSWER_BYTES + 1)
    if len(data) > MAX_ANSWER_BYTES:
        raise ValueError(f"{path.name} is over {MAX_ANSWER_BYTES} bytes")
    return data.decode("utf-8", errors="replace")
