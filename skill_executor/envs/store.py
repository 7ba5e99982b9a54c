"""Content-addressed skill environments, resolved on the host (never in a run).

What a plan leaves is resolved by :class:`SkillEnvs` into
``<data_dir>/envs/<key>/{python,node/node_modules}`` plus a ``manifest.json``.  An
environment is built in a temporary folder next to its place and renamed there in one
step: it is complete or absent, and immutable once in place.

pip and npm run only through :mod:`skill_executor.envs.hosttools` (a fresh working directory, an
allow-listed environment, an unprivileged user when the service is root, redacted
output), with their own isolation switches: ``python -I -m pip --isolated`` with
``PIP_CONFIG_FILE=/dev/null``, npm with empty user and global ``npmrc`` files.  Nothing
the service records (manifest, refusals, logs) carries a source's credentials.
"""

from __future__ import annotations

import errno
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
from pathlib import Path
from typing import Literal

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from ..config import Settings
from ..image.inputs import DEFAULT_TIER, PYTHON_TIERS, RUNNER_PINS, PythonTier
from ..objects import ObjectStore
from ..skills.requirements import NPM_NAME, UNSAFE_TEXT, safe_npm_spec, safe_python_need
from .declared import DependenciesUnmet, declared, signature, with_documented
from .hosttools import HostToolResult, HostTools, Scratch, ToolUser, reclaim, tool_user
from .plan import (
    EnvPlan,
    ImagePackages,
    Sources,
    choose_tier,
    npm_range_accepts,
    npm_version,
    plan,
    split_npm,
)
from .shared import MANIFEST, fetch_env, store_env, stored

log = logging.getLogger(__name__)

Mode = Literal["install", "off"]
#: A resolved pin as pip's report gives it (canonical name, a version).
_PIN = re.compile(r"^[a-z0-9][a-z0-9._-]*==[A-Za-z0-9.+!_-]+$")
TEMP_PREFIX = ".tmp-"
#: How much of pip's / npm's output a refusal quotes.
ERROR_LINES = 15
#: How long a resolution may take.
RESOLVE_TIMEOUT = 900.0
#: A temporary build folder older than this was left by a crash (swept at start).
STALE_TEMP_SECONDS = 3600.0


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


def pip_target_args(sources: Sources, tier: PythonTier = DEFAULT_TIER) -> list[str]:
    """pip options choosing wheels for a tier's Python (as the image build does) from the sources."""
    args = [
        "--disable-pip-version-check",
        "--only-binary=:all:",
        "--python-version",
        tier.python,
        "--implementation",
        "cp",
        "--abi",
        tier.abi,
        "--abi",
        "abi3",
        "--abi",
        "none",
    ]
    for platform in (*tier.platforms, "any"):
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
        objects: ObjectStore | None = None,
        from_docs: bool = False,
        tiers: dict[str, ImagePackages] | None = None,
    ) -> None:
        self.root = root
        #: whether the packages SKILL.md's install lines name are needs too
        self.from_docs = from_docs
        #: where a resolved environment is stored before it is put in place, and fetched from
        #: by a process that lacks it (None: environments live on this machine only)
        self.objects = objects
        self.mode = mode
        self.sources = sources
        self.image = image if image is not None else ImagePackages()
        #: The Python tiers runs may have, the default first: tier name -> its image's pins.
        self.tiers: dict[str, ImagePackages] = {self.image.tier.name: self.image, **(tiers or {})}
        self.python = python
        # The service's npm: on its PATH, skipping relative entries (``node_modules/.bin``,
        # ``.``), which would name a folder of whatever the working directory is.
        self.npm = npm or shutil.which(
            "npm",
            path=os.pathsep.join(
                entry for entry in os.environ.get("PATH", os.defpath).split(os.pathsep) if os.path.isabs(entry)
            ),
        )
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
    def from_settings(cls, settings: Settings, objects: ObjectStore | None = None) -> SkillEnvs:
        minimal = ":minimal" in settings.docker_image
        return cls(
            settings.envs_dir,
            mode=settings.skill_deps,
            sources=Sources(
                settings.package_index_url, settings.wheelhouse, settings.npm_registry, settings.npm_wheelhouse
            ),
            image=ImagePackages.load(RUNNER_PINS, minimal=minimal),
            user=tool_user(settings.host_tools_user),
            python=settings.host_tools_python or sys.executable,
            objects=objects,
            from_docs=settings.skill_deps_from_docs,
            tiers={
                name: ImagePackages.load(RUNNER_PINS, tier=PYTHON_TIERS[name])
                for name in settings.python_tier_images
                if name != DEFAULT_TIER.name
            },
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
        """What the skill needs on the Python tier it runs on (``DependenciesUnmet`` when no
        tier meets its ``requires-python``)."""
        needs = declared(skill_path)
        if self.from_docs:
            needs = with_documented(needs, skill_path)
        tier = choose_tier(needs, [image.tier for image in self.tiers.values()])
        return plan(needs, self.tiers[tier.name], self.sources)

    def ensure(self, skill_path: Path, *, install: bool = False) -> EnvPlan:
        """Plan a skill's environment and resolve it when absent; ``DependenciesUnmet`` when it cannot be.

        ``install``: an install -- the environment must be in the object store when this
        returns (one resolved here before environments were stored is stored now)."""
        planned = self.plan(skill_path)
        if planned.needs.findings:
            raise _unmet([f.to_dict() for f in planned.needs.findings])
        if planned.key is not None and self.mode == "install":
            final = self._resolve(planned)
            if install and self.objects is not None and not stored(self.objects, planned.key):
                store_env(self.objects, planned.key, final)
        return planned

    def for_run(self, skill_path: Path, digest: str | None = None) -> str | None:
        """The environment key a run of the skill uses (None: none): :meth:`run_env`'s."""
        return self.run_env(skill_path, digest).key

    def run_env(self, skill_path: Path, digest: str | None = None) -> EnvPlan:
        """What a run of the skill uses: its Python tier and environment key (None: none),
        the environment resolved on first use; a refusal is remembered until a file that
        declares needs changes.  Mode ``off``: the tier only (nothing is resolved).

        ``digest``: the registry's digest of an immutable version folder -- it names the
        content, so the folder is not walked on every run.
        """
        cache_key = (str(skill_path), digest or signature(skill_path, docs=self.from_docs))
        with self._lock:
            cached = self._cache.get(cache_key)
        if isinstance(cached, DependenciesUnmet):
            raise cached
        if cached is not None and (cached.key is None or self.path(cached.key).is_dir()):
            return cached
        try:
            if self.mode == "off":
                planned = self.plan(skill_path)
                planned = EnvPlan(planned.needs, (), (), (), None, planned.tier)
            else:
                planned = self.ensure(skill_path)
        except DependenciesUnmet as exc:
            with self._lock:
                self._cache[cache_key] = exc
            raise
        with self._lock:
            self._cache = {k: v for k, v in self._cache.items() if k[0] != cache_key[0]}
            self._cache[cache_key] = planned
        return planned

    def _resolve(self, planned: EnvPlan) -> Path:
        assert planned.key is not None
        final = self.path(planned.key)
        with self._lock:
            key_lock = self._key_locks.setdefault(planned.key, threading.Lock())
        with key_lock:
            if (final / MANIFEST).is_file():
                return final
            if self.objects is not None and fetch_env(self.objects, planned.key, self.root, final):
                return final  # resolved by another process sharing the store: never resolved twice
            temp = self.root / f"{TEMP_PREFIX}{planned.key}-{secrets.token_hex(4)}"
            temp.mkdir(mode=0o755)
            try:
                resolved = {"python": self._pip(planned, temp), "node": self._npm(planned, temp)}
                manifest = {
                    "key": planned.key,
                    "needs": {"python": list(planned.needs.python), "node": list(planned.needs.node)},
                    "sources": list(planned.needs.sources),
                    "provided_by_image": list(planned.provided),
                    "installed": {"python": list(planned.python), "node": list(planned.node)},
                    "resolved": resolved,
                    "target": planned.tier.target,
                    "python": planned.tier.python,
                    "package_sources": self.sources.describe(),
                    "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                }
                (temp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
                reclaim(temp)  # the service's, folders 0755 and files 0644/0755: runs (another uid) read it
                if self.objects is not None:  # stored before it is in place: other processes fetch it
                    store_env(self.objects, planned.key, temp)
                try:
                    os.rename(temp, final)
                except OSError as exc:
                    if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                        raise
                    shutil.rmtree(temp, ignore_errors=True)  # another process won: use its environment
                log.info(
                    "resolved the skill environment %s (%d Python, %d npm)",
                    planned.key,
                    len(planned.python),
                    len(planned.node),
                )
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

    def _run_pip(self, args: list[str], scratch: Scratch) -> HostToolResult:
        # -I: no PYTHON* variable, no user site, no working directory on the path; --isolated
        # and PIP_CONFIG_FILE=/dev/null: no PIP_* variable and no configuration file.
        argv = [
            self.python,
            "-I",
            "-m",
            "pip",
            "--isolated",
            "install",
            "--no-input",
            "--no-cache-dir",
            "--quiet",
            *args,
        ]
        return self.tools.run(argv, scratch, timeout=RESOLVE_TIMEOUT, env={"PIP_CONFIG_FILE": os.devnull})

    def _pip(self, planned: EnvPlan, temp: Path) -> dict[str, str]:
        """Resolve the Python needs (preferring the image's pins), then install what the image lacks."""
        if not planned.python:
            return {}
        # The needs go as arguments, never in a requirements file (whose lines pip expands
        # and parses as options); format_requirement wrote each from a parsed requirement.
        needs = [need for need in planned.python if safe_python_need(need)]
        if len(needs) != len(planned.python):
            raise _unmet(
                [
                    {"need": n, "source": "python", "error": "refused: not a plain requirement on the index"}
                    for n in planned.python
                    if n not in needs
                ]
            )
        self._usable_or_refuse("pip", [self.python, "-I", "-c", "import pip"], [self.sources.wheelhouse])
        image = self.tiers[planned.tier.name]
        pins = "".join(f"{name}=={version}\n" for name, (version, _) in sorted(image.python.items()))

        def dry_run(attempt: str, constrained: bool) -> tuple[HostToolResult, Path]:
            scratch = self.tools.scratch(temp / f".resolve-{attempt}")
            (scratch.folder / "constraints.txt").write_text(pins)
            report = scratch.folder / "report.json"
            args = [
                "--dry-run",
                "--ignore-installed",
                "--target",
                str(scratch.folder / "dry"),
                *pip_target_args(self.sources, planned.tier),
                "--report",
                str(report),
            ]
            args += ["-c", str(scratch.folder / "constraints.txt")] if constrained else []
            return self._run_pip([*args, "--", *needs], scratch), report

        result, report = dry_run("pinned", True)
        if result.returncode != 0 and "ResolutionImpossible" in result.output:
            # The needs conflict with the image's pins: honour the skill's wish.
            result, report = dry_run("free", False)
        if result.returncode != 0:
            raise self._pip_failure(planned, result)
        items = json.loads(_read_bounded(report)).get("install", [])
        chosen: dict[str, str] = {
            str(canonicalize_name(i["metadata"]["name"])): str(i["metadata"]["version"]) for i in items
        }
        wanted = [
            f"{name}=={version}"
            for name, version in sorted(chosen.items())
            if not (name in image.python and str(image.python[name][0]) == version)
        ]
        if any(UNSAFE_TEXT.search(w) or not _PIN.match(w) for w in wanted):
            raise _unmet(
                [
                    {"need": w, "source": "python", "error": "pip resolved an unexpected name or version"}
                    for w in wanted
                    if UNSAFE_TEXT.search(w) or not _PIN.match(w)
                ]
            )
        if wanted:
            scratch = self.tools.scratch(temp / ".install")
            result = self._run_pip(
                [
                    "--no-deps",
                    "--no-compile",
                    "--target",
                    str(scratch.folder / "python"),
                    *pip_target_args(self.sources, planned.tier),
                    "--",
                    *wanted,
                ],
                scratch,
            )
            if result.returncode != 0:
                raise self._pip_failure(planned, result)
            os.rename(scratch.folder / "python", temp / "python")
            shutil.rmtree(temp / "python" / "bin", ignore_errors=True)
        for folder in temp.glob(".resolve-*"):
            shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(temp / ".install", ignore_errors=True)
        return chosen

    def _pip_failure(self, planned: EnvPlan, result: HostToolResult) -> DependenciesUnmet:
        output = result.output
        missing = {canonicalize_name(re.split(r"[<>=!~\[;]", m, maxsplit=1)[0]) for m in _PIP_MISSING.findall(output)}
        unmet = [n for n in planned.python if canonicalize_name(Requirement(n).name) in missing] or list(planned.python)
        return _unmet(
            [{"need": n, "source": "python", "error": "pip could not resolve it"} for n in unmet], _tail(output)
        )

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
            version = npm_version(str(meta.get("version", "")))
            if isinstance(meta.get("name"), str) and version is not None:
                found.setdefault(meta["name"], []).append((version, tgz))
        return found

    def _npm(self, planned: EnvPlan, temp: Path) -> dict[str, str]:
        if not planned.node:
            return {}
        if self.npm is None:
            raise _unmet(
                [
                    {"need": n, "source": "node", "error": "npm is not installed on the service's host"}
                    for n in planned.node
                ]
            )
        split = [(need, *split_npm(need)) for need in planned.node]
        unsafe = [need for need, name, spec in split if not (NPM_NAME.match(name) and safe_npm_spec(spec))]
        if unsafe:
            raise _unmet(
                [
                    {"need": n, "source": "node", "error": "refused: not a registry version, range or tag"}
                    for n in unsafe
                ]
            )
        specs: list[str] = []
        if self.sources.npm_wheelhouse is not None:
            tarballs = self._npm_tarballs()
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
                        {"need": need, "source": "node", "error": f"no tarball in {self.sources.npm_wheelhouse} fits"}
                    )
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
        argv = [
            self.npm,
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
        if self.sources.npm_wheelhouse is not None:
            argv.insert(2, "--offline")
        elif self.sources.npm_registry:
            argv.insert(2, f"--registry={self.sources.npm_registry}")
        result = self.tools.run(argv, scratch, timeout=RESOLVE_TIMEOUT)
        if result.returncode != 0:
            raise _unmet(
                [{"need": n, "source": "node", "error": "npm could not install it"} for n in planned.node],
                _tail(result.output),
            )
        os.rename(node, temp / "node")
        shutil.rmtree(scratch.folder, ignore_errors=True)
        node = temp / "node"
        resolved: dict[str, str] = {}
        for need in planned.node:
            name, _ = split_npm(need)
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
