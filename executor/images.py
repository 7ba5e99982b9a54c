"""Build the runner image, with or without a registry, and reuse it when up to date.

The image is tagged ``skill-executor/runner:<hash>`` -- a hash of the Dockerfile and
every other file of its build context (and, offline, of the base-building script) --
and ``skill-executor/runner:latest``.  An image whose hash tag exists is reused.

* online: ``FROM debian:bookworm-slim`` as written in the Dockerfile;
* offline: ``images/build-base.sh`` makes the base from a Debian root file system
  (debootstrap from the mirror apt uses, then ``docker import``), and the same
  Dockerfile builds ``FROM`` it.  Build steps use host networking to reach the mirror.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
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


def _docker_build(client: docker.DockerClient, *, path: Path, dockerfile: str, tag: str, base: str, repository: str) -> None:
    _log(f"building {tag} FROM {base}")
    try:
        stream = client.api.build(
            path=str(path), dockerfile=dockerfile, tag=tag, buildargs={"BASE": base},
            network_mode="host", rm=True, forcerm=True, decode=True,
        )
        for chunk in stream:
            if "error" in chunk:
                raise ExecutorError(f"image build failed: {chunk['error'].strip()}", code="image_build_failed")
            line = chunk.get("stream", "").rstrip()
            if line.startswith("Step "):
                _log(line)
    except (BuildError, DockerException) as exc:
        raise ExecutorError(f"image build failed: {exc}", code="image_build_failed") from None
    client.images.get(tag).tag(repository, "latest")
    _log(f"built {tag}")


def build_image(client: docker.DockerClient, *, mode: Mode = "auto", context: Path | None = None) -> BuildResult:
    """Build (or reuse) the runner image; return its hash tag."""
    root = context or images_dir()
    runner = root / "runner"
    if not (runner / "Dockerfile").is_file():
        raise ExecutorError(f"no runner Dockerfile at {runner}", code="image_context_missing")
    mode = _resolve_mode(client, mode, PUBLIC_BASE)
    inputs = [p for p in runner.rglob("*") if p.is_file()]
    if mode == "offline":
        inputs.append(root / "build-base.sh")
    tag = f"{REPOSITORY}:{tree_hash(inputs, root)[:16]}"
    if _has_image(client, tag):
        client.images.get(tag).tag(REPOSITORY, "latest")
        _log(f"{tag} is up to date")
        return BuildResult(tag, False, PUBLIC_BASE if mode == "online" else "offline")
    base = _offline_base(client, root) if mode == "offline" else PUBLIC_BASE
    _docker_build(client, path=runner, dockerfile="Dockerfile", tag=tag, base=base, repository=REPOSITORY)
    return BuildResult(tag, True, base)


def build_service_image(client: docker.DockerClient, *, mode: Mode = "auto", context: Path | None = None) -> BuildResult:
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
        return BuildResult(tag, False, SERVICE_PUBLIC_BASE if mode == "online" else "offline")
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
    return BuildResult(tag, True, base)
