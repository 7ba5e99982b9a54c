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
import secrets
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Literal

from ..config import Settings
from ..image.inputs import DEFAULT_TIER, PYTHON_TIERS, RUNNER_PINS
from ..objects import ObjectStore
from .declared import DependenciesUnmet, declared, signature, with_documented
from .hosttools import HostTools, ToolUser, reclaim, tool_user
from .npm import resolve_node
from .pip import resolve_python
from .plan import (
    EnvPlan,
    ImagePackages,
    Sources,
    choose_tier,
    plan,
)
from .resolving import unmet
from .shared import MANIFEST, fetch_env, store_env, stored

log = logging.getLogger(__name__)

Mode = Literal["install", "off"]
TEMP_PREFIX = ".tmp-"
#: A temporary build folder older than this was left by a crash (swept at start).
STALE_TEMP_SECONDS = 3600.0


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
            raise unmet([f.to_dict() for f in planned.needs.findings])
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
                resolved = {
                    "python": resolve_python(
                        planned,
                        temp,
                        python=self.python,
                        tools=self.tools,
                        sources=self.sources,
                        image=self.tiers[planned.tier.name],
                        usable=self.usable_or_refuse,
                    ),
                    "node": resolve_node(
                        planned,
                        temp,
                        npm=self.npm,
                        tools=self.tools,
                        sources=self.sources,
                        usable=self.usable_or_refuse,
                    ),
                }
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

    def usable_or_refuse(self, tool: str, argv: list[str], sources: list[Path | None]) -> None:
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
