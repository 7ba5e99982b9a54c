"""Build the runner image, with or without a registry, and reuse it when up to date.

The runner comes in three flavours, stages of one Dockerfile, the full one built on the
minimal one: ``full`` (the default, tagged ``skill-executor/runner:<hash>``, ``:full``
and ``:latest``), ``minimal`` (``skill-executor/runner:minimal-<hash>`` and
``:minimal``) and the Python 3.13 tier ``python3.13`` (the minimal one, uv and common
tools on Debian trixie; ``:python3.13-<hash>`` and ``:python3.13``).  ``<hash>``
covers the flavour's build inputs -- the Dockerfile, the launcher, the pinned
requirements and npm lock (and, offline, the base-building script) -- never the
downloaded bytes.  An image whose hash tag exists is reused.

Python wheels and npm packages are fetched on the host with their own clients (pip,
npm), before the build, into git-ignored folders of the build context
(``images/runner/wheelhouse/`` and ``images/runner/npm/cache/``) that the Dockerfile
installs from without a registry.  They are fetched again only when the pins change.

* online: ``FROM debian:bookworm-slim`` as written in the Dockerfile (the tier:
  ``debian:trixie-slim``);
* offline: ``images/build-base.sh`` makes the base from a Debian root file system
  (debootstrap from the mirror apt uses, then ``docker import``), and the same
  Dockerfile builds ``FROM`` it.  Build steps use host networking to reach the mirror.

``runner_versions`` lists what an image holds (system tools, Python and npm packages)
by running commands in it, as a Markdown table.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import docker
from docker.errors import BuildError, DockerException, ImageNotFound

from ..errors import ExecutorError
from .inputs import (
    ABSENT,
    BASE_REPOSITORY,
    DEFAULT_TIER,
    FLAVOURS,
    NPM_CACHE,
    PODSERVER,
    REPOSITORY,
    RUNNER_PINS,
    SERVICE_EXTRAS,
    SERVICE_PUBLIC_BASE,
    SERVICE_REPOSITORY,
    SYSTEM_TOOLS,
    TIER_DOCKERFILE,
    Flavour,
    Mode,
    direct_packages,
    flavour_inputs,
    flavour_parts,
    flavour_tier,
    images_dir,
    parse_versions,
    pin_sets,
    pip_download_command,
    podserver_sources,
    runner_aliases,
    runner_tag,
    tree_hash,
    versions_script,
    wheelhouse_dir,
)


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


def _offline_base(client: docker.DockerClient, root: Path, suite: str = DEFAULT_TIER.suite) -> str:
    """The debootstrapped base image of a Debian release (built once per version of build-base.sh)."""
    script = root / "build-base.sh"
    tag = f"{BASE_REPOSITORY}:{suite}-{tree_hash([script], root)[:12]}"
    if not _has_image(client, tag):
        _log(f"building the base {tag} with debootstrap (no registry needed)")
        proc = subprocess.run(["bash", str(script), tag, suite], check=False)
        if proc.returncode != 0:
            raise ExecutorError(f"building the base image failed (exit {proc.returncode})", code="image_build_failed")
    return tag


def _docker_build(
    client: docker.DockerClient,
    *,
    path: Path,
    dockerfile: str,
    tag: str,
    base: str,
    repository: str,
    aliases: Sequence[str] = ("latest",),
    target: str | None = None,
    buildargs: dict[str, str] | None = None,
) -> None:
    _log(f"building {tag} FROM {base}" + (f" (stage {target})" if target else ""))
    try:
        stream = client.api.build(
            path=str(path),
            dockerfile=dockerfile,
            tag=tag,
            buildargs={"BASE": base, **(buildargs or {})},
            target=target,
            network_mode="host",
            rm=True,
            forcerm=True,
            decode=True,
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


def _stamp(*parts: str | bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update((part.encode() if isinstance(part, str) else part) + b"\0")
    return digest.hexdigest()


def _up_to_date(folder: Path, stamp: Path, want: str) -> bool:
    return folder.is_dir() and stamp.is_file() and stamp.read_text().strip() == want


def prepare_wheelhouse(runner: Path, flavour: Flavour, *, python: str = sys.executable) -> None:
    """Download the flavour's wheels for its tier's Python into ``<wheelhouse>/<part>/``
    (once per set of pins; :func:`wheelhouse_dir`)."""
    sets = pin_sets(runner)
    tier = flavour_tier(flavour)
    for part in flavour_parts(flavour):
        pins = sets[part]
        folder = runner / wheelhouse_dir(tier) / part
        stamp = folder.with_name(f"{part}.sha256")
        want = _stamp(tier.python, tier.abi, *tier.platforms, *pins)
        if _up_to_date(folder, stamp, want):
            continue
        _log(f"downloading {len(pins)} wheels ({part}) for Python {tier.python} with pip")
        partial = folder.with_name(f"{part}.partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        with tempfile.NamedTemporaryFile("w", suffix=".txt") as requirements:
            requirements.write("\n".join(pins) + "\n")
            requirements.flush()
            proc = subprocess.run(pip_download_command(python, Path(requirements.name), partial, tier), check=False)
        if proc.returncode != 0:
            shutil.rmtree(partial, ignore_errors=True)
            raise ExecutorError(
                f"pip download of the runner image's wheels ({part}) failed (exit {proc.returncode}); every pin "
                f"needs a wheel for CPython {tier.python} on manylinux x86_64",
                code="image_build_failed",
            )
        shutil.rmtree(folder, ignore_errors=True)
        partial.rename(folder)
        stamp.write_text(want + "\n")


def stage_podserver(runner: Path) -> None:
    """Copy the in-pod server's modules into the build context (``runner/podserver/``)."""
    folder = runner / PODSERVER
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    for source in podserver_sources():
        shutil.copy2(source, folder / source.name)


#: The npm projects of the full flavour whose packages the npm cache holds: its modules
#: (``npm/``, on NODE_PATH) and Node.js itself with npm (``node/``).
NPM_PROJECTS = ("npm", "node")


def prepare_npm_cache(runner: Path) -> None:
    """Fill ``npm/cache/`` with the locked npm packages of :data:`NPM_PROJECTS` (``npm ci``
    of each on the host, into one cache)."""
    files = [runner / project / name for project in NPM_PROJECTS for name in ("package.json", "package-lock.json")]
    folder, stamp = runner / NPM_CACHE, runner / "npm" / "cache.sha256"
    want = _stamp(*(path.read_bytes() for path in files))
    if _up_to_date(folder, stamp, want):
        return
    npm = shutil.which("npm")
    if npm is None:
        raise ExecutorError(
            "npm is not installed on this host; the runner image's npm packages are fetched on the host "
            "(Debian: apt-get install npm)",
            code="image_build_failed",
        )
    _log("fetching the locked npm packages with npm ci")
    partial = folder.with_name("cache.partial")
    shutil.rmtree(partial, ignore_errors=True)
    for project in NPM_PROJECTS:
        with tempfile.TemporaryDirectory(prefix="skill-executor-npm-") as work:
            shutil.copy2(runner / project / "package.json", Path(work) / "package.json")
            shutil.copy2(runner / project / "package-lock.json", Path(work) / "package-lock.json")
            proc = subprocess.run(
                [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error", "--cache", str(partial)],
                cwd=work,
                check=False,
                stdout=sys.stderr,
            )
        if proc.returncode != 0:
            shutil.rmtree(partial, ignore_errors=True)
            raise ExecutorError(
                f"npm ci of the runner image's npm packages ({project}/) failed (exit {proc.returncode})",
                code="image_build_failed",
            )
    shutil.rmtree(partial / "_logs", ignore_errors=True)
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)
    stamp.write_text(want + "\n")


#: An installed package (not an editable one) has no images/ next to it.
_CONTEXT_HINT = " (pass --context: the images/ folder of skill-executor's source tree)"


def build_image(
    client: docker.DockerClient,
    *,
    mode: Mode = "auto",
    context: Path | None = None,
    flavour: Flavour = "full",
) -> BuildResult:
    """Build (or reuse) the runner image of a flavour; return its hash tag."""
    if flavour not in FLAVOURS:
        raise ExecutorError(f"unknown image flavour {flavour!r} (one of: {', '.join(FLAVOURS)})", code="bad_request")
    root = context or images_dir()
    runner = root / "runner"
    if not (runner / "Dockerfile").is_file():
        raise ExecutorError(
            f"no runner Dockerfile at {runner}{_CONTEXT_HINT if context is None else ''}", code="image_context_missing"
        )
    tier = flavour_tier(flavour)
    mode = _resolve_mode(client, mode, tier.public_base)
    inputs = flavour_inputs(runner, flavour)
    if mode == "offline":
        inputs.append(root / "build-base.sh")
    tag = runner_tag(flavour, tree_hash(inputs, root))
    aliases = runner_aliases(flavour)
    if _has_image(client, tag):
        for alias in aliases:
            client.images.get(tag).tag(REPOSITORY, alias)
        _log(f"{tag} is up to date")
        return BuildResult(tag, False, tier.public_base if mode == "online" else "offline", flavour)
    prepare_wheelhouse(runner, flavour)
    stage_podserver(runner)
    if flavour == "full":
        prepare_npm_cache(runner)
    base = _offline_base(client, root, tier.suite) if mode == "offline" else tier.public_base
    wheels = {"WHEELHOUSE": wheelhouse_dir(tier)}
    if tier == DEFAULT_TIER:
        _docker_build(
            client,
            path=runner,
            dockerfile="Dockerfile",
            tag=tag,
            base=base,
            repository=REPOSITORY,
            aliases=aliases,
            target=flavour,
            buildargs=wheels,
        )
        return BuildResult(tag, True, base, flavour)
    # A Python tier: the minimal flavour FROM the tier's Debian release, then its own steps.
    minimal = tag.replace(f":{flavour}-", f":{flavour}-minimal-", 1)
    _docker_build(
        client,
        path=runner,
        dockerfile="Dockerfile",
        tag=minimal,
        base=base,
        repository=REPOSITORY,
        aliases=(),
        target="minimal",
        buildargs=wheels,
    )
    _docker_build(
        client,
        path=runner,
        dockerfile=TIER_DOCKERFILE,
        tag=tag,
        base=minimal,
        repository=REPOSITORY,
        aliases=aliases,
        buildargs={**wheels, "TIER": tier.name},
    )
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
        raise ExecutorError(
            f"no service Dockerfile at {dockerfile}{_CONTEXT_HINT if context is None else ''}",
            code="image_context_missing",
        )
    mode = _resolve_mode(client, mode, SERVICE_PUBLIC_BASE)
    egress_lock = root / "requirements" / "egress-lock.txt"
    inputs = [dockerfile, root / "pyproject.toml", egress_lock, *sorted((root / "skill_executor").rglob("*.py"))]
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
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(wheels), f"{root}[{SERVICE_EXTRAS}]"],
        check=False,
    )
    if proc.returncode != 0:
        raise ExecutorError(f"pip wheel failed (exit {proc.returncode})", code="image_build_failed")
    _log("building the egress gateway's wheels (requirements/egress-lock.txt, hashes checked)")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--require-hashes",
         "--wheel-dir", str(wheels / "egress"), "-r", str(egress_lock)],
        check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise ExecutorError(f"pip wheel of the egress lock failed (exit {proc.returncode})", code="image_build_failed")
    base = _offline_base(client, root / "images") if mode == "offline" else SERVICE_PUBLIC_BASE
    _docker_build(
        client, path=root, dockerfile="images/service/Dockerfile", tag=tag, base=base, repository=SERVICE_REPOSITORY
    )
    return BuildResult(tag, True, base, "service")


def runner_versions(client: docker.DockerClient, images: Sequence[str], *, context: Path | None = None) -> str:
    """A Markdown table of the tool and package versions in each image, one column each."""
    python, npm = direct_packages(context / "runner" if context is not None else RUNNER_PINS)
    script = versions_script(python, npm)
    columns: list[tuple[str, dict[str, str]]] = []
    for image in images:
        try:
            label = client.images.get(image).labels.get("io.skill-executor.flavour") or image
            output = client.containers.run(
                image,
                ["bash", "-c", script],
                remove=True,
                network_mode="none",
                user="1000:1000",
                stdout=True,
                stderr=False,
            )
        except DockerException as exc:
            raise ExecutorError(f"cannot list the versions in {image}: {exc}", code="image_versions_failed") from None
        columns.append(
            (
                f"{label} (`{image}`)" if label != image else f"`{image}`",
                parse_versions(output.decode(errors="replace")),
            )
        )
    rows = [(name, name) for name, _, _ in SYSTEM_TOOLS]
    rows += [(f"python:{name}", f"Python `{name}`") for name in python]
    rows += [(f"npm:{name}", f"npm `{name}`") for name in npm]
    out = ["| component | " + " | ".join(title for title, _ in columns) + " |", "|---|" + "---|" * len(columns)]
    for key, title in rows:
        out.append(f"| {title} | " + " | ".join(found.get(key, ABSENT) for _, found in columns) + " |")
    return "\n".join(out) + "\n"
