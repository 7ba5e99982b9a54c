"""Helpers for tests that attack the host side as a hostile skill author would: folders the
unprivileged tool user can reach, marker files that prove (by their absence) that nothing
ran, and an interpreter that user can run."""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

#: The user host tools run as by default when the service is root.
TOOL_USER = "nobody"
AS_ROOT = os.geteuid() == 0


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A fresh folder every user can reach (pytest's own folders are private to their user)."""
    path = Path(tempfile.mkdtemp(prefix="skill-executor-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


class Markers:
    """Paths in /tmp that hostile code would create; none may ever exist."""

    def __init__(self) -> None:
        self.prefix = f"/tmp/pwned-{secrets.token_hex(6)}"

    def path(self, what: str) -> str:
        return f"{self.prefix}-{what}"

    def python(self, what: str) -> str:
        """A Python statement that creates the marker ``what``."""
        return f"open({self.path(what)!r}, 'w').close()"

    def shell(self, what: str) -> str:
        return f"#!/bin/sh\ntouch {self.path(what)}\n"

    def js(self, what: str) -> str:
        return f"require('fs').writeFileSync({self.path(what)!r}, 'x');\n"

    def found(self) -> list[str]:
        folder, stem = os.path.split(self.prefix)
        return sorted(name for name in os.listdir(folder) if name.startswith(stem))

    def clear(self) -> None:
        for name in self.found():
            os.unlink(os.path.join("/tmp", name))


@pytest.fixture
def markers() -> Iterator[Markers]:
    found = Markers()
    yield found
    found.clear()


def usable_by(user: str, argv: list[str]) -> bool:
    """Whether ``argv`` exits 0 when run as ``user`` (from /, no supplementary groups: as
    skill_executor/envs/hosttools.py runs tools)."""
    try:
        entry = pwd.getpwnam(user)
        done = subprocess.run(
            argv,
            cwd="/",
            capture_output=True,
            timeout=60,
            check=False,
            user=entry.pw_uid,
            group=entry.pw_gid,
            extra_groups=[],
            env={"PATH": "/usr/local/bin:/usr/bin:/bin"},
        )
    except (KeyError, OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def python_for(user: str) -> str | None:
    """A Python with pip >= 22.2 (``--report``) that ``user`` can run: this interpreter
    when it can, else the system's; None: none here."""
    check = "import sys, pip; sys.exit(tuple(map(int, pip.__version__.split('.')[:2])) < (22, 2))"
    for python in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"):
        if os.path.exists(python) and usable_by(user, [python, "-I", "-c", check]):
            return python
    return None
