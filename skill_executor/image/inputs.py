"""The runner image's inputs (pure: no engine, no process): where they are, the pins, the
tag a flavour's inputs hash to, and how to read what an image holds.  The image's Python
(:data:`IMAGE_PYTHON`, :data:`IMAGE_ABI`, :data:`IMAGE_PLATFORMS`) is what skill
environments are resolved for (:mod:`skill_executor.envs`)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..errors import ExecutorError

REPOSITORY = "skill-executor/runner"
SERVICE_REPOSITORY = "skill-executor/service"
BASE_REPOSITORY = "skill-executor/base"
PUBLIC_BASE = "debian:bookworm-slim"
SERVICE_PUBLIC_BASE = "python:3.11-slim"
#: The service image's extras (images/service/Dockerfile says the same): compose and
#: Kubernetes run it on Postgres, S3 and the agent-sandbox runtime.
SERVICE_EXTRAS = "mcp,cluster,s3,kubernetes"

Mode = Literal["auto", "online", "offline"]
Flavour = Literal["full", "minimal", "python3.13"]
FLAVOURS: tuple[Flavour, ...] = ("full", "minimal", "python3.13")


@dataclass(frozen=True, slots=True)
class PythonTier:
    """One Python the runner images offer, with the Debian release that ships it: skills
    whose ``requires-python`` the default tier's Python does not meet run on another tier
    (its own image).  Skill environments are resolved for the tier's interpreter."""

    #: The tier's name: its Python's major.minor (``3.11``).
    name: str
    #: The interpreter's full version (Debian's python3 of ``suite``).
    python: str
    abi: str
    #: The Debian release the tier's image is built on (its base, its mirror's packages).
    suite: str
    #: Its glibc's minor version: the newest manylinux wheels it runs.
    glibc_minor: int
    #: The image flavour that carries it (``skill-executor image build --flavour ...``).
    flavour: Flavour
    #: The image built FROM where a registry is reachable.
    public_base: str

    @property
    def platforms(self) -> tuple[str, ...]:
        return (
            *(f"manylinux_2_{minor}_x86_64" for minor in range(self.glibc_minor, 16, -1)),
            "manylinux2014_x86_64",
            "manylinux_2_5_x86_64",
            "manylinux1_x86_64",
        )

    @property
    def target(self) -> str:
        """The tag environments are built for."""
        return f"{self.abi}-manylinux-x86_64"

    @property
    def version(self) -> tuple[int, int]:
        major, minor = self.name.split(".")
        return int(major), int(minor)


#: The default tier: Debian bookworm's python3 (the full and minimal flavours).
DEFAULT_TIER = PythonTier("3.11", "3.11.2", "cp311", "bookworm", 36, "full", "debian:bookworm-slim")
#: Every tier, oldest first.  3.13: Debian trixie's python3, in the ``python3.13`` flavour
#: (the minimal flavour's packages, uv and the common command-line tools; see the Dockerfile).
PYTHON_TIERS: dict[str, PythonTier] = {
    tier.name: tier
    for tier in (
        DEFAULT_TIER,
        PythonTier("3.13", "3.13.5", "cp313", "trixie", 41, "python3.13", "debian:trixie-slim"),
    )
}


def flavour_tier(flavour: Flavour) -> PythonTier:
    """The tier a flavour's image carries."""
    return next((tier for tier in PYTHON_TIERS.values() if tier.flavour == flavour), DEFAULT_TIER)


# The default tier's Python (Debian bookworm's python3) and the wheels that fit it.
IMAGE_PYTHON = DEFAULT_TIER.python
IMAGE_ABI = DEFAULT_TIER.abi
IMAGE_PLATFORMS: tuple[str, ...] = DEFAULT_TIER.platforms
#: A Python tier's own steps, on the minimal flavour built FROM the tier's Debian release.
TIER_DOCKERFILE = "Dockerfile.tier"
# Made on the host by prepare_*: git-ignored, not part of the tag hash.
WHEELHOUSE = "wheelhouse"
NPM_CACHE = "npm/cache"
# The in-pod server (skill_executor/podserver/, ``sandboxd`` in the image), copied into the
# build context by stage_podserver; the tag hash covers the sources under their context names.
PODSERVER = "podserver"
PODSERVER_SOURCE = Path(__file__).resolve().parent.parent / "podserver"
_GENERATED = (WHEELHOUSE, NPM_CACHE, "npm/cache.partial", "npm/cache.sha256", PODSERVER)


#: The runner image's pins as the package ships them (``pins/``: links to
#: ``images/runner``'s files in the source tree, copies of them in a built wheel), laid
#: out as in ``images/runner``: what :class:`skill_executor.envs.plan.ImagePackages`
#: reads, so an installed package judges skills' needs against the image without
#: ``images/`` at hand.
RUNNER_PINS = Path(__file__).resolve().parent / "pins"


def images_dir() -> Path:
    """``images/`` of the source tree (next to the package), else ``./images`` (an
    installed package has no ``images/``: the image build needs ``--context``)."""
    candidate = Path(__file__).resolve().parent.parent / "images"
    return candidate if candidate.is_dir() else Path.cwd() / "images"


def tree_hash(paths: list[Path], root: Path) -> str:
    """A digest of the files' names (as in the build context) and contents."""
    digest = hashlib.sha256()
    for name, path in sorted((_context_name(path, root), path) for path in paths):
        digest.update(name.encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def _context_name(path: Path, root: Path) -> str:
    if path.is_relative_to(PODSERVER_SOURCE):  # staged as runner/podserver/ (see stage_podserver)
        return f"runner/{PODSERVER}/{path.relative_to(PODSERVER_SOURCE)}"
    return str(path.relative_to(root))


def podserver_sources() -> list[Path]:
    """The in-pod server's modules, as the image gets them."""
    return sorted(PODSERVER_SOURCE.glob("*.py"))


# -- the runner's inputs: pins, tag, host-side preparation ---------------------------


def read_pins(path: Path) -> list[str]:
    """The requirement lines of a pins file (``name==version``), comments dropped."""
    pins: list[str] = []
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,-]+\])?==[A-Za-z0-9.+!_-]+", line):
            raise ExecutorError(f"{path.name}: {line!r} is not an exact pin (name==version)", code="image_pins_invalid")
        pins.append(line)
    return pins


def pin_sets(runner: Path) -> dict[str, list[str]]:
    """Wheelhouse part -> pins: ``minimal`` (the minimal flavour's), ``full`` (what the full
    flavour adds), ``tier`` (what the other Python tiers' flavour adds to the minimal one)
    and ``podserver`` (the in-pod server's, installed apart from the skills' packages in
    every flavour).  Every minimal pin must be a pin of the full set as is, and so must
    every tier pin (one version of a package across the images)."""
    minimal = read_pins(runner / "requirements-minimal.txt")
    full = read_pins(runner / "requirements-full.txt")
    tier = read_pins(runner / "requirements-tier.txt")
    for name, pins in (("requirements-minimal.txt", minimal), ("requirements-tier.txt", tier)):
        missing = [pin for pin in pins if pin not in full]
        if missing:
            raise ExecutorError(
                f"{name} pins {', '.join(missing)}, which requirements-full.txt does not pin identically "
                "(one version of a package across the flavours)",
                code="image_pins_invalid",
            )
    podserver = read_pins(runner / "requirements-podserver.txt")
    return {
        "minimal": minimal,
        "full": [pin for pin in full if pin not in minimal],
        "tier": [pin for pin in tier if pin not in minimal],
        "podserver": podserver,
    }


def flavour_parts(flavour: Flavour) -> list[str]:
    """The wheelhouse parts a flavour installs."""
    if flavour == "minimal":
        return ["minimal", "podserver"]
    return ["minimal", "full" if flavour == "full" else "tier", "podserver"]


def wheelhouse_dir(tier: PythonTier) -> str:
    """The build context's folder of a tier's wheels (``wheelhouse``, ``wheelhouse/python3.13``)."""
    return WHEELHOUSE if tier == DEFAULT_TIER else f"{WHEELHOUSE}/python{tier.name}"


def flavour_inputs(runner: Path, flavour: Flavour) -> list[Path]:
    """The files a flavour's tag hash covers: the build context without what the host
    downloads and without what only other flavours use."""
    skipped = {runner / name for name in _GENERATED}
    if flavour != "full":
        skipped |= {runner / "requirements-full.txt", runner / "npm", runner / "node"}
    if flavour != "python3.13":
        skipped |= {runner / "requirements-tier.txt", runner / TIER_DOCKERFILE}
    return [
        path
        for path in runner.rglob("*")
        if path.is_file() and not any(path == s or s in path.parents for s in skipped)
    ] + podserver_sources()


def runner_tag(flavour: Flavour, digest: str) -> str:
    return f"{REPOSITORY}:{digest[:16]}" if flavour == "full" else f"{REPOSITORY}:{flavour}-{digest[:16]}"


def runner_aliases(flavour: Flavour) -> tuple[str, ...]:
    """``latest`` is the full flavour (the service's default image)."""
    return ("full", "latest") if flavour == "full" else (flavour,)


def pip_download_command(python: str, requirements: Path, dest: Path, tier: PythonTier = DEFAULT_TIER) -> list[str]:
    """``pip download`` of exactly the pinned wheels for a tier's Python, whatever the
    host's Python is."""
    command = [
        python,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--quiet",
        "--disable-pip-version-check",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        tier.python,
        "--implementation",
        "cp",
        "--abi",
        tier.abi,
    ]
    for platform in tier.platforms:
        command += ["--platform", platform]
    return [*command, "--dest", str(dest), "--requirement", str(requirements)]


# -- what an image holds ------------------------------------------------------------

# (name, program, command): the version is the first dotted number in the output's
# first line; a program the image lacks is reported as absent.
SYSTEM_TOOLS: tuple[tuple[str, str, str], ...] = (
    ("Debian", "cat", "cat /etc/debian_version"),
    ("Python", "python3", "python3 --version"),
    ("`python`", "python", "python --version"),
    ("pip", "pip", "python3 -m pip --version"),
    ("LibreOffice", "soffice", "soffice --version"),
    ("pandoc", "pandoc", "pandoc --version"),
    ("poppler-utils", "pdftoppm", "pdftoppm -v"),
    ("qpdf", "qpdf", "qpdf --version"),
    ("tesseract", "tesseract", "tesseract --version"),
    ("ImageMagick", "convert", "convert -version"),
    ("ffmpeg", "ffmpeg", "ffmpeg -version"),
    ("Chromium (headless shell)", "chromium-headless-shell", "chromium-headless-shell --version"),
    ("Node.js", "node", "node --version"),
    ("npm", "npm", "npm --version"),
    ("git", "git", "git --version"),
    ("jq", "jq", "jq --version"),
    ("sqlite3", "sqlite3", "sqlite3 --version"),
    ("ripgrep", "rg", "rg --version"),
    ("graphviz", "dot", "dot -V 2>&1"),
    ("curl", "curl", "curl --version"),
    ("7-Zip (p7zip)", "7z", "7z i | grep -m1 7-Zip"),
    ("unzip", "unzip", "unzip -v"),
    ("zip", "zip", "zip -v | sed -n 2p"),
)
_VERSION = re.compile(r"\d+\.\d+[\w.+~:-]*")
ABSENT = "—"


def versions_script(python: Sequence[str], npm: Sequence[str]) -> str:
    lines = ["export HOME=/tmp TMPDIR=/tmp"]
    for name, program, command in SYSTEM_TOOLS:
        lines.append(f"printf '@@%s\\n' '{name}'")
        lines.append(f"if command -v {program} >/dev/null; then {{ {command} ; }} 2>&1 | head -n 1; fi")
    code = (
        "import importlib.metadata as m, sys\n"
        "for name in sys.argv[1:]:\n"
        "    try: print('@@python:' + name + '\\n' + m.version(name))\n"
        "    except m.PackageNotFoundError: print('@@python:' + name)\n"
    )
    lines.append(f"python3 -c {_sh_quote(code)} {' '.join(_sh_quote(n) for n in python)}")
    # A package's package.json need not be exported: read it from the NODE_PATH folders.
    probe = (
        'const fs = require("fs"), path = require("path");'
        ' for (const dir of (process.env.NODE_PATH || "").split(":")) {'
        ' try { console.log(JSON.parse(fs.readFileSync(path.join(dir, process.argv[1], "package.json"))).version);'
        " break; } catch (e) {} }"
    )
    for name in npm:
        lines.append(f"printf '@@npm:%s\\n' {_sh_quote(name)}")
        lines.append(f"if command -v node >/dev/null; then node -e {_sh_quote(probe)} {_sh_quote(name)}; fi")
    return "\n".join(lines) + "\n"


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def parse_versions(output: str) -> dict[str, str]:
    """``@@name`` marker lines followed by a command's output -> name: version."""
    found: dict[str, str] = {}
    name: str | None = None
    for line in output.splitlines():
        if line.startswith("@@"):
            name = line[2:]
            found[name] = ABSENT
        elif name is not None and found[name] == ABSENT:
            match = _VERSION.search(line.removeprefix("v"))
            if match:
                found[name] = match.group(0).rstrip(".:-")
    return found


def direct_packages(runner: Path) -> tuple[list[str], list[str]]:
    """The directly wanted Python packages (the ``# direct`` block of
    requirements-full.txt) and npm packages (package.json's dependencies)."""
    text = (runner / "requirements-full.txt").read_text()
    direct = text.split("\n# direct\n", 1)[-1].split("\n# dependencies", 1)[0]
    names = [
        re.split(r"[\[=]", line, maxsplit=1)[0]
        for line in map(str.strip, direct.splitlines())
        if line and not line.startswith("#")
    ]
    package = json.loads((runner / "npm" / "package.json").read_text())
    return names, sorted(package.get("dependencies", {}))
