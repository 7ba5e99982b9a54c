"""Node needs installed with npm on the host: from the registry, or offline from the npm
wheelhouse's tarballs; no scripts, no git, no configuration but its options."""

from __future__ import annotations

import json
import os
import shutil
import tarfile
from pathlib import Path

from ..skills.requirements import NPM_NAME, safe_npm_spec
from .hosttools import HostTools
from .plan import EnvPlan, Sources, npm_range_accepts, npm_version, split_npm
from .resolving import RESOLVE_TIMEOUT, Usable, read_bounded, tail, unmet


def npm_tarballs(folder: Path | None) -> dict[str, list[tuple[tuple[int, int, int], Path]]]:
    """name -> [(version, tarball)] of the npm wheelhouse's ``*.tgz`` files."""
    found: dict[str, list[tuple[tuple[int, int, int], Path]]] = {}
    if folder is None or not folder.is_dir():
        return found
    for tgz in sorted(folder.glob("*.tgz")):
        try:
            with tarfile.open(tgz) as archive:
                member = archive.extractfile("package/package.json")
                meta = json.loads(member.read()) if member is not None else {}
        except (OSError, tarfile.TarError, KeyError, ValueError):
            continue
        version = npm_version(str(meta.get("version", "")))
        if isinstance(meta.get("name"), str) and version is not None:
            found.setdefault(meta["name"], []).append((version, tgz))
    return found


def resolve_node(
    planned: EnvPlan, temp: Path, *, npm: str | None, tools: HostTools, sources: Sources, usable: Usable
) -> dict[str, str]:
    """Install the Node needs with npm (from the registry, or the npm wheelhouse's tarballs)."""
    if not planned.node:
        return {}
    if npm is None:
        raise unmet(
            [{"need": n, "source": "node", "error": "npm is not installed on the service's host"} for n in planned.node]
        )
    split = [(need, *split_npm(need)) for need in planned.node]
    unsafe = [need for need, name, spec in split if not (NPM_NAME.match(name) and safe_npm_spec(spec))]
    if unsafe:
        raise unmet(
            [{"need": n, "source": "node", "error": "refused: not a registry version, range or tag"} for n in unsafe]
        )
    specs: list[str] = []
    if sources.npm_wheelhouse is not None:
        tarballs = npm_tarballs(sources.npm_wheelhouse)
        missing: list[dict[str, str]] = []
        for need in planned.node:
            name, spec = split_npm(need)
            fits = sorted(
                ((v, p) for v, p in tarballs.get(name, []) if npm_range_accepts(spec, ".".join(map(str, v)))),
                reverse=True,
            )
            if fits:
                specs.append(str(fits[0][1]))
            else:
                missing.append(
                    {"need": need, "source": "node", "error": f"no tarball in {sources.npm_wheelhouse} fits"}
                )
        if missing:
            raise unmet(missing)
    else:
        specs = list(planned.node)
    usable("npm", [npm, "--version"], [sources.npm_wheelhouse])
    scratch = tools.scratch(temp / ".npm")
    node = scratch.folder / "node"
    node.mkdir()
    (node / "package.json").write_text('{"name": "skill-env", "private": true}\n')
    for rc in ("user.npmrc", "global.npmrc"):
        (scratch.folder / rc).write_text("")
    # No git (a registry package's git dependency would be cloned, and some npm versions
    # run its `prepare` despite --ignore-scripts), no links to local folders, and no
    # configuration but these options (empty user and global npmrc; the project's is
    # the fresh prefix's, which has none).
    argv = [
        npm,
        "install",
        "--prefix",
        str(node),
        "--ignore-scripts",
        "--no-audit",
        "--no-fund",
        "--no-package-lock",
        "--no-update-notifier",
        "--loglevel=error",
        "--cache",
        str(scratch.folder / "cache"),
        "--userconfig",
        str(scratch.folder / "user.npmrc"),
        "--globalconfig",
        str(scratch.folder / "global.npmrc"),
        "--git=false",
        "--install-links=false",
        "--",
        *specs,
    ]
    if sources.npm_wheelhouse is not None:
        argv.insert(2, "--offline")
    elif sources.npm_registry:
        argv.insert(2, f"--registry={sources.npm_registry}")
    result = tools.run(argv, scratch, timeout=RESOLVE_TIMEOUT)
    if result.returncode != 0:
        raise unmet(
            [{"need": n, "source": "node", "error": "npm could not install it"} for n in planned.node],
            tail(result.output),
        )
    os.rename(node, temp / "node")
    shutil.rmtree(scratch.folder, ignore_errors=True)
    node = temp / "node"
    resolved: dict[str, str] = {}
    for need in planned.node:
        name, _ = split_npm(need)
        try:
            meta = json.loads(read_bounded(node / "node_modules" / name / "package.json"))
            resolved[name] = str(meta.get("version")) if isinstance(meta, dict) else "?"
        except (OSError, ValueError):
            resolved[name] = "?"
    return resolved
