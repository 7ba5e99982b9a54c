"""Build the runner image, with or without a registry, and reuse it when up to date.

The runner comes in two flavours, stages of one Dockerfile, the full one built on the
minimal one: ``full`` (the default, tagged ``skill-executor/runner:<hash>``, ``:full``
and ``:latest``) and ``minimal`` (``skill-executor/runner:minimal-<hash>`` and
``:minimal``).  ``<hash>`` covers the flavour's build inputs -- the Dockerfile, the
launcher, the pinned requirements and npm lock (and, offline, the base-building
script) -- never the downloaded bytes.  An image whose hash tag exists is reused.

Python wheels and npm packages are fetched on the host with their own clients (pip,
npm), before the build, into git-ignored folders of the build context
(``images/runner/wheelhouse/`` and ``images/runner/npm/cache/``) that the Dockerfile
installs from without a registry.  They are fetched again only when the pins change.

* online: ``FROM debian:bookworm-slim`` as written in the Dockerfile;
* offline: ``images/build-base.sh`` makes the base from a Debian root file system
  (debootstrap from the mirror apt uses, then ``docker import``), and the same
  Dockerfile builds ``FROM`` it.  Build steps use host networking to reach the mirror.

``runner_versions`` lists what an image holds (system tools, Python and npm packages)
by running commands in it, as a Markdown table.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import docker
from docker.errors import BuildError, DockerException, ImageNotFound

from .errors import ExecutorError

REPOSITORY = "skill-executor/runner"
SERVICE_REPOSITORY = "skill-executor/service"
BASE_REPOSITORY = "skill-executor/base"
PUBLIC_BASE = "debian:bookworm-slim"
SERVICE_PUBLIC_BASE = "python:3.11-slim"

Mode = Literal["auto", "online", "offline"]
Flavour = Literal["full", "minimal"]
FLAVOURS: tuple[Flavour, ...] = ("full", "minimal")

# The image's Python (Debian bookworm's python3) and the wheels that fit it.
IMAGE_PYTHON = "3.11.2"
IMAGE_ABI = "cp311"
IMAGE_PLATFORMS: tuple[str, ...] = (
    *(f"manylinux_2_{minor}_x86_64" for minor in range(36, 16, -1)),
    "manylinux2014_x86_64", "manylinux_2_5_x86_64", "manylinux1_x86_64",
)
# Made on the host by prepare_*: git-ignored, not part of the tag hash.
WHEELHOUSE = "wheelhouse"
NPM_CACHE = "npm/cache"
_GENERATED = (WHEELHOUSE, NPM_CACHE, "npm/cache.partial", "npm/cache.sha256")


def images_dir() -> Path:
    """``images/`` of the source tree (next to the package), else ``./images``."""
    candidate = Path(__file__).resolve().parent.parent / "images"
    return candidate if candidate.is_dir() else Path.cwd() / "images"


def tree_hash(paths: list[Path], root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


@dataclass(frozen=True, slots=True)
class BuildResult:
    tag: str
    built: bool
    base: str
    flavour: str = "full"


def _has_image(client: docker.DockerClient, ref: str) -> bool:
    try:
        client.images.get(ref)
        return True
    except ImageNotFound:
        return False


def _log(message: str) -> None:
    print(f"[image] {message}", file=sys.stderr, flush=True)


def _resolve_mode(client: docker.DockerClient, mode: Mode, public_base: str) -> Mode:
    if mode != "auto":
        return mode
    if _has_image(client, public_base):
        return "online"
    return "offline" if shutil.which("debootstrap") else "online"


def _offline_base(client: docker.DockerClient, root: Path) -> str:
    """The debootstrapped base image (built once per version of build-base.sh)."""
    script = root / "build-base.sh"
    tag = f"{BASE_REPOSITORY}:bookworm-{tree_hash([script], root)[:12]}"
    if not _has_image(client, tag):
        _log(f"building the base {tag} with debootstrap (no registry needed)")
        proc = subprocess.run(["bash", str(script), tag], check=False)
        if proc.returncode != 0:
            raise ExecutorError(f"building the base image failed (exit {proc.returncode})", code="image_build_failed")
    return tag


def _docker_build(
    client: docker.DockerClient, *, path: Path, dockerfile: str, tag: str, base: str, repository: str,
    aliases: Sequence[str] = ("latest",), target: str | None = None,
) -> None:
    _log(f"building {tag} FROM {base}" + (f" (stage {target})" if target else ""))
    try:
        stream = client.api.build(
            path=str(path), dockerfile=dockerfile, tag=tag, buildargs={"BASE": base}, target=target,
            network_mode="host", rm=True, forcerm=True, decode=True,
        )
        for chunk in stream:
            if "error" in chunk:
                raise ExecutorError(f"image build failed: {chunk['error'].strip()}", code="image_build_failed")
            line = chunk.get("stream", "").rstrip()
            if line.startswith("Step "):
                _log(line[:200])
    except (BuildError, DockerException) as exc:
        raise ExecutorError(f"image build failed: {exc}", code="image_build_failed") from None
    for alias in aliases:
        client.images.get(tag).tag(repository, alias)
    _log(f"built {tag}")


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
    """Wheelhouse part -> pins: ``minimal`` (the minimal flavour's) and ``full`` (what
    the full flavour adds).  Every minimal pin must be a pin of the full set as is."""
    minimal = read_pins(runner / "requirements-minimal.txt")
    full = read_pins(runner / "requirements-full.txt")
    missing = [pin for pin in minimal if pin not in full]
    if missing:
        raise ExecutorError(
            f"requirements-minimal.txt pins {', '.join(missing)}, which requirements-full.txt does not pin "
            "identically (the full flavour is built on the minimal one)", code="image_pins_invalid")
    return {"minimal": minimal, "full": [pin for pin in full if pin not in minimal]}


def flavour_inputs(runner: Path, flavour: Flavour) -> list[Path]:
    """The files a flavour's tag hash covers: the build context without what the host
    downloads (and, for ``minimal``, without what only ``full`` uses)."""
    skipped = {runner / name for name in _GENERATED}
    if flavour == "minimal":
        skipped |= {runner / "requirements-full.txt", runner / "npm"}
    return [path for path in runner.rglob("*")
            if path.is_file() and not any(path == s or s in path.parents for s in skipped)]


def runner_tag(flavour: Flavour, digest: str) -> str:
    return f"{REPOSITORY}:{digest[:16]}" if flavour == "full" else f"{REPOSITORY}:{flavour}-{digest[:16]}"


def runner_aliases(flavour: Flavour) -> tuple[str, ...]:
    """``latest`` is the full flavour (the service's default image)."""
    return ("full", "latest") if flavour == "full" else (flavour,)


def pip_download_command(python: str, requirements: Path, dest: Path) -> list[str]:
    """``pip download`` of exactly the pinned wheels for the image's Python, whatever
    the host's Python is."""
    command = [python, "-m", "pip", "download", "--quiet", "--quiet", "--disable-pip-version-check", "--no-deps",
               "--only-binary=:all:", "--python-version", IMAGE_PYTHON, "--implementation", "cp",
               "--abi", IMAGE_ABI]
    for platform in IMAGE_PLATFORMS:
        command += ["--platform", platform]
    return [*command, "--dest", str(dest), "--requirement", str(requirements)]


def _stamp(*parts: str | bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update((part.encode() if isinstance(part, str) else part) + b"\0")
    return digest.hexdigest()


def _up_to_date(folder: Path, stamp: Path, want: str) -> bool:
    return folder.is_dir() and stamp.is_file() and stamp.read_text().strip() == want


def prepare_wheelhouse(runner: Path, flavour: Flavour, *, python: str = sys.executable) -> None:
    """Download the flavour's wheels into ``wheelhouse/<part>/`` (once per set of pins)."""
    sets = pin_sets(runner)
    parts = ["minimal"] if flavour == "minimal" else ["minimal", "full"]
    for part in parts:
        pins = sets[part]
        folder = runner / WHEELHOUSE / part
        stamp = runner / WHEELHOUSE / f"{part}.sha256"
        want = _stamp(IMAGE_PYTHON, IMAGE_ABI, *IMAGE_PLATFORMS, *pins)
        if _up_to_date(folder, stamp, want):
            continue
        _log(f"downloading {len(pins)} wheels ({part}) for Python {IMAGE_PYTHON} with pip")
        partial = folder.with_name(f"{part}.partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        with tempfile.NamedTemporaryFile("w", suffix=".txt") as requirements:
            requirements.write("\n".join(pins) + "\n")
            requirements.flush()
            proc = subprocess.run(pip_download_command(python, Path(requirements.name), partial), check=False)
        if proc.returncode != 0:
            shutil.rmtree(partial, ignore_errors=True)
            raise ExecutorError(
                f"pip download of the runner image's wheels ({part}) failed (exit {proc.returncode}); every pin "
                f"needs a wheel for CPython {IMAGE_PYTHON} on manylinux x86_64", code="image_build_failed")
        shutil.rmtree(folder, ignore_errors=True)
        partial.rename(folder)
        stamp.write_text(want + "\n")


def prepare_npm_cache(runner: Path) -> None:
    """Fill ``npm/cache/`` with the locked npm packages (``npm ci`` on the host)."""
    package, lock = runner / "npm" / "package.json", runner / "npm" / "package-lock.json"
    folder, stamp = runner / NPM_CACHE, runner / "npm" / "cache.sha256"
    want = _stamp(package.read_bytes(), lock.read_bytes())
    if _up_to_date(folder, stamp, want):
        return
    npm = shutil.which("npm")
    if npm is None:
        raise ExecutorError(
            "npm is not installed on this host; the runner image's npm packages are fetched on the host "
            "(Debian: apt-get install npm)", code="image_build_failed")
    _log("fetching the locked npm packages with npm ci")
    partial = folder.with_name("cache.partial")
    shutil.rmtree(partial, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="skill-executor-npm-") as work:
        shutil.copy2(package, Path(work) / "package.json")
        shutil.copy2(lock, Path(work) / "package-lock.json")
        proc = subprocess.run(
            [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error", "--cache", str(partial)],
            cwd=work, check=False, stdout=sys.stderr)
    if proc.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        raise ExecutorError(f"npm ci of the runner image's npm packages failed (exit {proc.returncode})",
                            code="image_build_failed")
    shutil.rmtree(partial / "_logs", ignore_errors=True)
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)
    stamp.write_text(want + "\n")


def build_image(
    client: docker.DockerClient, *, mode: Mode = "auto", context: Path | None = None, flavour: Flavour = "full",
) -> BuildResult:
    """Build (or reuse) the runner image of a flavour; return its hash tag."""
    if flavour not in FLAVOURS:
        raise ExecutorError(f"unknown image flavour {flavour!r} (one of: {', '.join(FLAVOURS)})", code="bad_request")
    root = context or images_dir()
    runner = root / "runner"
    if not (runner / "Dockerfile").is_file():
        raise ExecutorError(f"no runner Dockerfile at {runner}", code="image_context_missing")
    mode = _resolve_mode(client, mode, PUBLIC_BASE)
    inputs = flavour_inputs(runner, flavour)
    if mode == "offline":
        inputs.append(root / "build-base.sh")
    tag = runner_tag(flavour, tree_hash(inputs, root))
    aliases = runner_aliases(flavour)
    if _has_image(client, tag):
        for alias in aliases:
            client.images.get(tag).tag(REPOSITORY, alias)
        _log(f"{tag} is up to date")
        return BuildResult(tag, False, PUBLIC_BASE if mode == "online" else "offline", flavour)
    prepare_wheelhouse(runner, flavour)
    if flavour == "full":
        prepare_npm_cache(runner)
    base = _offline_base(client, root) if mode == "offline" else PUBLIC_BASE
    _docker_build(client, path=runner, dockerfile="Dockerfile", tag=tag, base=base, repository=REPOSITORY,
                  aliases=aliases, target=flavour)
    return BuildResult(tag, True, base, flavour)


def build_service_image(
    client: docker.DockerClient, *, mode: Mode = "auto", context: Path | None = None
) -> BuildResult:
    """Build (or reuse) the service's own image for docker-compose.yml.

    Python packages go in as a wheelhouse made on this host (``pip wheel``, with the
    host's pip configuration), so the image build needs no access to PyPI.
    """
    root = (context or images_dir()).parent
    dockerfile = root / "images" / "service" / "Dockerfile"
    if not dockerfile.is_file():
        raise ExecutorError(f"no service Dockerfile at {dockerfile}", code="image_context_missing")
    mode = _resolve_mode(client, mode, SERVICE_PUBLIC_BASE)
    inputs = [dockerfile, root / "pyproject.toml", *sorted((root / "executor").rglob("*.py"))]
    if mode == "offline":
        inputs.append(root / "images" / "build-base.sh")
    tag = f"{SERVICE_REPOSITORY}:{tree_hash(inputs, root)[:16]}"
    if _has_image(client, tag):
        client.images.get(tag).tag(SERVICE_REPOSITORY, "latest")
        _log(f"{tag} is up to date")
        return BuildResult(tag, False, SERVICE_PUBLIC_BASE if mode == "online" else "offline", "service")
    wheels = root / "build" / "wheels"
    shutil.rmtree(wheels, ignore_errors=True)
    _log("building the wheelhouse with pip (host configuration)")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(wheels), str(root)],
                          check=False)
    if proc.returncode != 0:
        raise ExecutorError(f"pip wheel failed (exit {proc.returncode})", code="image_build_failed")
    base = _offline_base(client, root / "images") if mode == "offline" else SERVICE_PUBLIC_BASE
    _docker_build(client, path=root, dockerfile="images/service/Dockerfile", tag=tag, base=base,
                  repository=SERVICE_REPOSITORY)
    return BuildResult(tag, True, base, "service")


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
    ("7-Zip (p7zip)", "7z", "7z i | grep -m1 7-Zip"),
    ("unzip", "unzip", "unzip -v"),
    ("zip", "zip", "zip -v | sed -n 2p"),
)
_VERSION = re.compile(r"\d+\.\d+[\w.+~:-]*")
_ABSENT = "—"


def _versions_script(python: Sequence[str], npm: Sequence[str]) -> str:
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
    probe = ('const fs = require("fs"), path = require("path");'
             ' for (const dir of (process.env.NODE_PATH || "").split(":")) {'
             ' try { console.log(JSON.parse(fs.readFileSync(path.join(dir, process.argv[1], "package.json"))).version);'
             ' break; } catch (e) {} }')
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
            found[name] = _ABSENT
        elif name is not None and found[name] == _ABSENT:
            match = _VERSION.search(line.removeprefix("v"))
            if match:
                found[name] = match.group(0).rstrip(".:-")
    return found


def direct_packages(runner: Path) -> tuple[list[str], list[str]]:
    """The directly wanted Python packages (the ``# direct`` block of
    requirements-full.txt) and npm packages (package.json's dependencies)."""
    text = (runner / "requirements-full.txt").read_text()
    direct = text.split("\n# direct\n", 1)[-1].split("\n# dependencies", 1)[0]
    names = [re.split(r"[\[=]", line, maxsplit=1)[0] for line in map(str.strip, direct.splitlines())
             if line and not line.startswith("#")]
    package = json.loads((runner / "npm" / "package.json").read_text())
    return names, sorted(package.get("dependencies", {}))


def runner_versions(client: docker.DockerClient, images: Sequence[str], *, context: Path | None = None) -> str:
    """A Markdown table of the tool and package versions in each image, one column each."""
    python, npm = direct_packages((context or images_dir()) / "runner")
    script = _versions_script(python, npm)
    columns: list[tuple[str, dict[str, str]]] = []
    for image in images:
        try:
            label = client.images.get(image).labels.get("io.skill-executor.flavour") or image
            output = client.containers.run(
                image, ["bash", "-c", script], remove=True, network_mode="none", user="1000:1000",
                stdout=True, stderr=False,
            )
        except DockerException as exc:
            raise ExecutorError(f"cannot list the versions in {image}: {exc}", code="image_versions_failed") from None
        columns.append((f"{label} (`{image}`)" if label != image else f"`{image}`",
                        parse_versions(output.decode(errors="replace"))))
    rows = [(name, name) for name, _, _ in SYSTEM_TOOLS]
    rows += [(f"python:{name}", f"Python `{name}`") for name in python]
    rows += [(f"npm:{name}", f"npm `{name}`") for name in npm]
    out = ["| component | " + " | ".join(title for title, _ in columns) + " |",
           "|---|" + "---|" * len(columns)]
    for key, title in rows:
        out.append(f"| {title} | " + " | ".join(found.get(key, _ABSENT) for _, found in columns) + " |")
    return "\n".join(out) + "\n"
