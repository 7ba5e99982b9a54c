"""Wheels of this tree and virtualenvs to install them into, for the packaging tests:
a clean copy of what a checkout holds, ``pip wheel`` of it, and virtualenvs of locked
requirements kept under ``build/test-venvs/`` keyed by their content."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

from .conftest import REPO

LOCK = REPO / "requirements" / "lock.txt"
VENVS = REPO / "build" / "test-venvs"


def venv_env() -> dict[str, str]:
    """This process's environment less what would show a virtualenv this checkout
    (PYTHONPATH: its package and metadata) or another environment."""
    drop = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
    return {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("SKILL_EXECUTOR_")}


def clean_copy(dest: Path) -> Path:
    """What a checkout of this tree holds (tracked and new files; links kept as links)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_symlink() or source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name, follow_symlinks=False)
    return dest


def build_wheel(source: Path, out: Path, pattern: str = "skill_executor-*.whl") -> Path:
    """``pip wheel`` of the source, as ``pip install <source>`` builds it."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = out.glob(pattern)
    return wheel


def locked_venv(name: str, requirements: str, then: tuple[str, ...] = ()) -> Path:
    """A virtualenv with exactly these (hashed) requirements, then ``then`` installed by
    pip's resolver (from the index), made once per content."""
    key = hashlib.sha256("\n".join([requirements, *then]).encode()).hexdigest()[:16]
    root = VENVS / f"{name}-{key}"
    VENVS.mkdir(parents=True, exist_ok=True)
    with open(VENVS / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / ".complete").is_file():
            shutil.rmtree(root, ignore_errors=True)
            venv.create(root, with_pip=True)
            (root / "requirements.txt").write_text(requirements)
            subprocess.run(
                [str(root / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
                + ["--require-hashes", "--no-deps", "-r", str(root / "requirements.txt")],
                check=True,
                capture_output=True,
                timeout=900,
                env=venv_env(),
            )
            if then:
                subprocess.run(
                    [
                        str(root / "bin" / "python"),
                        "-m",
                        "pip",
                        "install",
                        "--quiet",
                        "--disable-pip-version-check",
                        *then,
                    ],
                    check=True,
                    capture_output=True,
                    timeout=900,
                    env=venv_env(),
                )
            (root / ".complete").touch()
            # Old keys' virtualenvs are what an earlier lock file made.
            for old in VENVS.glob(f"{name}-*"):
                if old != root:
                    shutil.rmtree(old, ignore_errors=True)
    return root


def install_wheel(root: Path, wheel: Path) -> None:
    with open(VENVS / f".{root.name}.install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        subprocess.run(
            [str(root / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
            + ["--no-deps", "--force-reinstall", str(wheel)],
            check=True,
            capture_output=True,
            timeout=300,
            env=venv_env(),
        )


def without(lock: str, names: set[str]) -> str:
    """The lock file's text less the entries (``name==version`` and its hash lines) of names."""
    kept: list[str] = []
    skipping = False
    for line in lock.splitlines():
        if line and not line[0].isspace():
            skipping = line.split("==", 1)[0].strip().lower() in names
        if not skipping:
            kept.append(line)
    return "\n".join(kept) + "\n"


def only(lock: str, names: set[str]) -> str:
    """The lock file's entries (``name==version`` and its hash lines) of names, nothing else."""
    kept: list[str] = []
    keeping = False
    for line in lock.splitlines():
        if line and not line[0].isspace():
            keeping = line.split("==", 1)[0].strip().lower() in names
        if keeping:
            kept.append(line)
    return "\n".join(kept) + "\n"
