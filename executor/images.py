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
BASE_REPOSITORY = "skill-executor/base"
PUBLIC_BASE = "debian:bookworm-slim"

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


def build_image(client: docker.DockerClient, *, mode: Mode = "auto", context: Path | None = None) -> BuildResult:
    """Build (or reuse) the runner image; return its hash tag."""
    root = context or images_dir()
    runner = root / "runner"
    base_script = root / "build-base.sh"
    if not (runner / "Dockerfile").is_file():
        raise ExecutorError(f"no runner Dockerfile at {runner}", code="image_context_missing")
    if mode == "auto":
        if _has_image(client, PUBLIC_BASE):
            mode = "online"
        elif shutil.which("debootstrap"):
            mode = "offline"
        else:
            mode = "online"
    context_files = [p for p in runner.rglob("*") if p.is_file()]
    if mode == "offline":
        base_tag = f"{BASE_REPOSITORY}:bookworm-{tree_hash([base_script], root)[:12]}"
        digest = tree_hash([*context_files, base_script], root)
    else:
        base_tag = PUBLIC_BASE
        digest = tree_hash(context_files, root)
    tag = f"{REPOSITORY}:{digest[:16]}"
    if _has_image(client, tag):
        client.images.get(tag).tag(REPOSITORY, "latest")
        _log(f"{tag} is up to date")
        return BuildResult(tag, False, base_tag)
    if mode == "offline" and not _has_image(client, base_tag):
        _log(f"building the base {base_tag} with debootstrap (no registry needed)")
        proc = subprocess.run(["bash", str(base_script), base_tag], check=False)
        if proc.returncode != 0:
            raise ExecutorError(f"building the base image failed (exit {proc.returncode})", code="image_build_failed")
    _log(f"building {tag} FROM {base_tag}")
    try:
        stream = client.api.build(
            path=str(runner),
            tag=tag,
            buildargs={"BASE": base_tag},
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
                _log(line)
    except (BuildError, DockerException) as exc:
        raise ExecutorError(f"image build failed: {exc}", code="image_build_failed") from None
    client.images.get(tag).tag(REPOSITORY, "latest")
    _log(f"built {tag}")
    return BuildResult(tag, True, base_tag)
