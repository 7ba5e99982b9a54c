"""Inline skill bundles: a skill sent with a run request instead of installed.

A bundle is an archive as an install takes it (``.zip``, ``.tar[.gz|.bz2|.xz]``) and is
checked exactly as an install is -- :func:`~.package.install_package` with the same limits,
the same ``SKILL.md`` validation, the same refusals and error codes -- only its install
root is private to the key that sent it::

    <data_dir>/bundles/<tenant>/<sha256 of the archive>/<skill id>/

so it is content-addressed per key: the same archive sent again is not unpacked again, and
another key neither lists, finds nor reuses it (its digest is unknown there:
``bundle_not_found``).  It is never in the catalog, the registry or the skills listing.
Unpacking goes through the install's staging folder and goes live with one rename, so two
runs sending the same archive at once both end up with the one complete copy.

With an object store the archive is kept there too (``bundles/<tenant>/<hex>``), so a
cluster's worker, or this machine after its folder was removed, builds the same folder from
it: a run accepted with the bundle's data executes anywhere.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import logging
import os
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

from ..access import check_tenant
from ..envs import DependenciesUnmet, SkillEnvs
from ..errors import BadRequest, Conflict, NotFound, TooLarge
from ..image.inputs import PythonTier
from ..objects import ObjectNotFound, ObjectStore
from ..skills.loader import load_skill
from ..skills.model import Skill
from .installdir import STAGING_PREFIX
from .package import install_package
from .unpacking import PackageLimits

log = logging.getLogger(__name__)

#: Skills kept loaded in memory (the folder is read once per bundle and process).
_LOADED = 256


def bundle_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def decode_bundle(text: str, *, max_bytes: int) -> bytes:
    """A bundle's base64 ``data`` as bytes: 400 ``invalid_bundle`` when it is not base64,
    413 ``upload_too_large`` over ``max_bytes`` (the install's upload cap)."""
    if len(text) > (max_bytes + 2) // 3 * 4 + 4:
        raise TooLarge(f"an upload may hold at most {max_bytes} bytes", code="upload_too_large")
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest("bundle.data is not base64", code="invalid_bundle") from None
    if len(data) > max_bytes:
        raise TooLarge(f"an upload may hold at most {max_bytes} bytes", code="upload_too_large")
    if not data:
        raise BadRequest("the bundle is empty; send a .zip or .tar.gz", code="invalid_package")
    return data


def refuse_unprovided(deps: SkillEnvs, skill: Skill) -> PythonTier:
    """``skill_dependencies_unmet`` for a bundle that declares what the runner image does not
    provide (SKILL_EXECUTOR_BUNDLE_DEPS=image: nothing is fetched on the host for a bundle);
    else the Python tier it runs on."""
    needed = deps.plan(skill.path)
    if needed.key is not None:
        unmet = [*needed.python, *needed.node]
        raise DependenciesUnmet(
            f"the inline bundle {skill.id!r} needs what the runner image does not provide ({', '.join(unmet[:10])}); "
            "a bundle's dependencies are not installed on the service's host (SKILL_EXECUTOR_BUNDLE_DEPS=image): "
            "install the skill, or ask the operator for SKILL_EXECUTOR_BUNDLE_DEPS=install",
            details={"unmet": unmet},
        )
    return needed.tier


class BundleStore:
    """Bundles per key under ``root``; thread-safe, and safe for processes sharing ``root``."""

    def __init__(
        self,
        root: Path,
        *,
        objects: ObjectStore | None = None,
        deps: SkillEnvs | None = None,
        limits: PackageLimits = PackageLimits(),
        strict: bool = False,
        check: Callable[[Skill], None] | None = None,
        resolve_deps: bool = False,
    ) -> None:
        self.root = root
        self.objects = objects
        self.deps = deps
        #: whether a bundle's declared dependencies are resolved on the host (else: refused
        #: unless the image provides them -- any key may send a bundle)
        self.resolve_deps = resolve_deps
        self.limits = limits
        self.strict = strict
        #: what an install's upload check refuses (reserved names), applied to bundles too
        self.check = check
        self._lock = threading.Lock()
        self._loaded: OrderedDict[tuple[str, str], Skill] = OrderedDict()

    def _folder(self, tenant: str, digest: str) -> Path:
        return self.root / check_tenant(tenant) / digest.removeprefix("sha256:")

    def _key(self, tenant: str, digest: str) -> str:
        return f"bundles/{check_tenant(tenant)}/{digest.removeprefix('sha256:')}"

    def add(self, tenant: str, data: bytes) -> Skill:
        """The skill in ``data``, sent by ``tenant``: checked and unpacked once, then the cached copy."""
        digest = bundle_digest(data)
        found = self._cached(tenant, digest)
        if found is not None:
            return found
        skill = self._install(tenant, digest, data)
        if self.objects is not None:
            try:
                if not self.objects.exists(self._key(tenant, digest)):
                    self._upload(tenant, digest, data)
            except Exception as exc:  # the run goes on here; only another machine would miss it
                log.warning("bundle %s is not kept in the object store: %s", digest, exc)
        return skill

    def get(self, tenant: str, digest: str) -> Skill:
        """A bundle ``tenant`` sent before, by digest; 404 ``bundle_not_found`` otherwise."""
        found = self._cached(tenant, digest)
        if found is not None:
            return found
        missing = NotFound(f"no bundle {digest} was sent with this key", code="bundle_not_found")
        if self.objects is None:
            raise missing
        try:
            with self.objects.open(self._key(tenant, digest)) as handle:
                data = handle.read()
        except ObjectNotFound:
            raise missing from None
        if bundle_digest(data) != digest:
            raise missing
        return self._install(tenant, digest, data)

    def _cached(self, tenant: str, digest: str) -> Skill | None:
        key = (tenant, digest)
        with self._lock:
            skill = self._loaded.get(key)
            if skill is not None:
                if skill.path.is_dir():
                    self._loaded.move_to_end(key)
                    return skill
                del self._loaded[key]  # its folder was removed: built again (or bundle_not_found)
        folder = self._folder(tenant, digest)
        try:
            entries = [e for e in os.scandir(folder) if not e.name.startswith(STAGING_PREFIX) and e.is_dir()]
        except FileNotFoundError:
            return None
        if len(entries) != 1:
            return None
        return self._remember(key, load_skill(Path(entries[0].path)), digest)

    def _remember(self, key: tuple[str, str], skill: Skill, digest: str) -> Skill:
        skill.digest = digest  # what the run reports (skill_digest), and a later request names
        with self._lock:
            self._loaded[key] = skill
            while len(self._loaded) > _LOADED:
                self._loaded.popitem(last=False)
        return skill

    def _install(self, tenant: str, digest: str, data: bytes) -> Skill:
        folder = self._folder(tenant, digest)
        folder.mkdir(parents=True, exist_ok=True)

        def admit(skill: Skill) -> None:
            if self.check is not None:
                self.check(skill)
            if self.deps is not None and self.deps.mode == "install":
                if self.resolve_deps:
                    self.deps.ensure(skill.path, install=True)
                else:
                    refuse_unprovided(self.deps, skill)

        try:
            outcome = install_package(data, folder, strict=self.strict, replace=False, limits=self.limits, admit=admit)
        except Conflict as exc:
            found = self._cached(tenant, digest) if exc.code == "skill_exists" else None
            if found is None:
                raise
            return found  # unpacked by a concurrent request meanwhile
        except BaseException:
            with contextlib.suppress(OSError):
                folder.rmdir()  # a refused bundle leaves nothing (unless another request's copy is there)
            raise
        return self._remember((tenant, digest), outcome.skill, digest)

    def _upload(self, tenant: str, digest: str, data: bytes) -> None:
        assert self.objects is not None
        with tempfile.NamedTemporaryFile(dir=self.root, prefix=".upload-") as spool:
            spool.write(data)
            spool.flush()
            self.objects.put_file(self._key(tenant, digest), Path(spool.name))
