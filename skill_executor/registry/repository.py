"""The repository every entry point reads skills from: the catalog of the roots (found
and loaded by :mod:`.discovery`), cached in memory, plus installs and removals in the
install root and the registry's versions.

The catalog is a snapshot: parsing happens once per changed ``SKILL.md`` (mtime and
size), and reads in between cost nothing.  A rescan runs on :meth:`SkillRepository.reload`,
or when the snapshot is older than ``refresh_interval`` seconds -- then in the
background while readers keep getting the current snapshot (a rescan of 1,000 skills
walks 1,000 folders: it must not sit on a request's path).  With an interval of 0
every read rescans first, synchronously.

The roots come in two kinds: the read-only roots (``SKILLS_DIRS``: shipped skills,
never written to) and at most one install root, searched last, where
:meth:`SkillRepository.install` puts packages (a skill is exactly a top folder ``<id>/``
whose ``SKILL.md`` has that id) and the only place :meth:`SkillRepository.remove`
deletes from.  Read-only roots may not overlap the install root, the registry or the
service's data folders (:mod:`.roots`, refused at start), so nothing a tenant uploads or
writes is discovered.  Opening a repository with an install root sweeps the staging
folders a crashed install left there (see :mod:`.installdir`).
"""

from __future__ import annotations

import builtins
import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ..envs import SkillEnvs
from ..errors import Conflict, ExecutorError, Forbidden, NotFound
from ..paths import is_within
from ..skills.loader import find_skill_file
from ..skills.model import Skill
from ..skills.search import Hit
from .discovery import Catalog, Rejected, build_catalog, discover, installed_dirs, load_dir
from .installdir import sweep
from .package import InstallOutcome, install_package, uninstall
from .refs import InvalidVersion, SkillRef, VersionRef, parse_ref
from .roots import check_layout
from .store import Registry, Version
from .unpacking import PackageLimits

log = logging.getLogger(__name__)


class SkillRepository:
    """Skills under a list of roots, parsed once and kept in memory.

    Thread-safe: readers get an immutable :class:`Catalog` snapshot.
    """

    def __init__(
        self,
        roots: Sequence[Path | str],
        *,
        install_root: Path | str | None = None,
        refresh_interval: float = 2.0,
        deps: SkillEnvs | None = None,
        registry: Registry | None = None,
        service_dirs: Sequence[Path | str] = (),
    ) -> None:
        #: where skills are shipped: discovered, never written to
        self.read_only_roots = [Path(r) for r in roots]
        #: where :meth:`install` puts skills and the only place :meth:`remove` deletes from
        self.install_root = Path(install_root) if install_root is not None else None
        self.roots = [*self.read_only_roots, *([self.install_root] if self.install_root is not None else [])]
        self.refresh_interval = refresh_interval
        #: the skills' dependency environments (None: dependencies are not resolved)
        self.deps = deps
        #: immutable versions of every skill (None: skills are served from their folders, unversioned)
        self.registry = registry
        self._lock = threading.Lock()
        self._cache: dict[Path, tuple[tuple[int, int], Skill | Rejected]] = {}
        self._catalog: Catalog | None = None
        self._scanned_at = 0.0
        self._refreshing = threading.Lock()
        private = [*([registry.root] if registry is not None else []), *map(Path, service_dirs)]
        check_layout(self.read_only_roots, self.install_root, private)
        if self.install_root is not None:
            try:
                sweep(self.install_root)  # what a crashed install or removal left behind
            except OSError as exc:
                log.warning("cannot sweep the install root %s: %s", self.install_root, exc)

    @property
    def catalog(self) -> Catalog:
        catalog = self._catalog
        if catalog is None or self.refresh_interval <= 0:
            return self.reload()
        if time.monotonic() - self._scanned_at > self.refresh_interval and self._refreshing.acquire(blocking=False):
            threading.Thread(target=self._refresh, name="skills-refresh", daemon=True).start()
        return catalog

    def _refresh(self) -> None:
        try:
            self.reload()
        except Exception:  # a failed rescan keeps the previous snapshot
            log.exception("rescanning the skill roots failed")
        finally:
            self._refreshing.release()

    def reload(self) -> Catalog:
        """Rescan the roots; re-parse only the ``SKILL.md`` files that changed."""
        with self._lock:
            cache: dict[Path, tuple[tuple[int, int], Skill | Rejected]] = {}
            loaded: list[Skill | Rejected] = []
            installed = installed_dirs(self.install_root) if self.install_root is not None else []
            in_install_root = set(installed)
            deleted = self._deleted_elsewhere() if installed else set()
            for directory in [*discover(self.read_only_roots), *installed]:
                skill_file = find_skill_file(directory)
                if skill_file is None:
                    continue
                try:
                    st = skill_file.stat()
                except OSError:
                    continue
                key = (st.st_mtime_ns, st.st_size)
                previous = self._cache.get(directory)
                if previous is not None and previous[0] == key:
                    item = previous[1]
                else:
                    item = load_dir(directory, installed=directory in in_install_root)
                gone = item.id if isinstance(item, Skill) and directory in in_install_root else None
                if gone in deleted and gone is not None and self._still_deleted(gone):  # deleted elsewhere, not back
                    self._drop_local(directory)
                    continue
                cache[directory] = (key, item)
                loaded.append(item)
            self._cache = cache
            others, undefaulted = self._installed_through_others({i.id.lower() for i in loaded if isinstance(i, Skill)})
            loaded += others
            catalog = build_catalog(loaded)
            catalog.undefaulted = undefaulted
            self._catalog = catalog
            self._scanned_at = time.monotonic()
            return self._catalog

    # -- skills installed through other processes sharing the database ---------------

    def _installed_through_others(self, have: set[str]) -> tuple[list[Skill], frozenset[str]]:
        """Skills installed (uploaded) through another process sharing the registry's database
        and absent from this install root: their default version, fetched from the object
        store (a cluster's replicas and workers all list every installed skill); and the ids
        (lower case) of every installed skill without a default (in the catalog, so that its
        versions can be managed here, but listed nowhere)."""
        registry = self.registry
        if registry is None or self.install_root is None:
            return [], frozenset()
        try:
            versions = registry.index.installed()
        except ExecutorError as exc:
            log.warning("skills installed through other processes are not listed now: %s", exc.message)
            # never listed by mistake meanwhile: those this snapshot had without a default stay so
            return [], self._catalog.undefaulted if self._catalog is not None else frozenset()
        undefaulted = frozenset(v.skill.lower() for v in versions if not v.is_default)
        found = []
        for version in versions:
            if version.skill.lower() in have:
                continue
            try:
                found.append(registry.load(version))
            except ExecutorError as exc:
                log.warning("skill %s (version %d) is not listed now: %s", version.skill, version.number, exc.message)
        return found, undefaulted

    def _deleted_elsewhere(self) -> set[str]:
        if self.registry is None:
            return set()
        try:
            return self.registry.index.deleted()
        except ExecutorError as exc:
            log.warning("cannot tell which installed skills were deleted elsewhere: %s", exc.message)
            return set()

    def _still_deleted(self, skill_id: str) -> bool:
        assert self.registry is not None
        try:
            return self.registry.pointers(skill_id) == (None, None)
        except ExecutorError:
            return False

    def _drop_local(self, directory: Path) -> None:
        """This install root's copy of a skill deleted through another process."""
        assert self.install_root is not None
        try:
            uninstall(self.install_root, directory.name)
            log.info("installed skill %s was deleted through another process: removed here too", directory.name)
        except OSError as exc:
            log.warning("cannot remove %s, deleted through another process: %s", directory, exc)

    # -- convenience reads over the current snapshot -------------------------------

    def list(self, *, include_hidden: bool = False) -> list[Skill]:
        catalog = self.catalog
        return list(catalog.skills) if include_hidden else catalog.visible()

    def get(self, name: str) -> Skill:
        """Look a skill up by id or name, case-insensitively, optionally pinned (``name@3``,
        ``name@latest``, ``name@sha256:<hex>``); 400 for a malformed reference (the one
        parser, :mod:`.refs`), 404 when unknown.

        With a registry the skill returned is a version (``version``/``digest`` set, its
        path the immutable version folder): the default one unless pinned.
        """
        ref = parse_ref(name)
        try:
            skill = self._lookup(ref)
        except NotFound:
            if self.registry is None:
                raise
            return self._installed_elsewhere(ref)
        if self.registry is None:
            if ref.version is not None:
                raise InvalidVersion(f"{name!r}: this service keeps no skill versions (no registry)")
            return skill
        return self.registry.load(self._version_of(skill, ref.version))

    def _installed_elsewhere(self, ref: SkillRef) -> Skill:
        """A skill this machine's install root lacks, installed through another process that
        shares the database: its version from the registry (the folder fetched from the object
        store).  A read-only root's skill of another machine is not (its versions' source is
        ``folder``): those are each machine's own."""
        registry = self.registry
        assert registry is not None
        for skill_id in dict.fromkeys((ref.name, ref.key)):
            try:
                version = registry.version(skill_id, ref.version)
            except NotFound:
                continue
            if version.source != "folder":
                return registry.load(version)
        raise NotFound(f"unknown skill {ref.name!r}", code="skill_not_found")

    def found(self, name: str) -> Skill:
        """The catalog's skill (its folder under a root) by id or name; 400 for a malformed
        name or one with a version, 404 when unknown."""
        return self._lookup(parse_ref(name, versioned=False))

    def _lookup(self, ref: SkillRef) -> Skill:
        skill = self.catalog.by_id.get(ref.key)
        if skill is None:
            raise NotFound(f"unknown skill {ref.name!r}", code="skill_not_found")
        return skill

    def _version_of(self, skill: Skill, ref: VersionRef | None) -> Version:
        """Folder-root skills: a change on disk is a new version; installed ones: the registry's pointers."""
        registry = self.registry
        assert registry is not None
        if self.installed_here(skill):
            try:
                return registry.version(skill.id, ref)  # one lookup on the warm path
            except NotFound:
                if registry.pointers(skill.id) != (None, None):
                    raise
                if registry.index.known(skill.id):  # deleted (here, or through another process)
                    if self.install_root is not None and skill.path.parent == self.install_root.resolve():
                        self._drop_local(skill.path)
                    raise NotFound(f"unknown skill {skill.id!r}", code="skill_not_found") from None
            # installed before the registry kept versions: observe it
            registry.observe(skill.id, skill.path, max_age=self.refresh_interval)
            return registry.version(skill.id, ref)
        observed = registry.observe(skill.id, skill.path, max_age=self.refresh_interval)
        kind = "default" if ref is None else ref.kind
        if kind == "default" and observed.is_default or kind == "latest" and observed.is_latest:
            return observed  # the observation's own lookup answers it: no second one
        return registry.version(skill.id, ref)

    def search(self, query: str, limit: int = 10) -> builtins.list[Hit]:
        return self.catalog.index.search(query, limit)

    # -- the install root: the only place skills are written ------------------------

    def installed_here(self, skill: Skill) -> bool:
        """True for an installed skill (one that :meth:`remove` may delete): in this install
        root, or installed through another process (its path a registry version's folder)."""
        if self.install_root is None:
            return False
        if skill.path.parent == self.install_root.resolve():
            return True
        return self.registry is not None and is_within(skill.path, self.registry.versions_dir.resolve())

    def root_of(self, skill: Skill) -> Path | None:
        """The configured root a skill was discovered under."""
        for root in self.roots:
            if is_within(skill.path, root.resolve()):
                return root
        return None

    def install(
        self,
        data: bytes,
        *,
        strict: bool = False,
        limits: PackageLimits = PackageLimits(),
        actor: str = "local",
        set_default: bool = True,
        check: Callable[[Skill], None] | None = None,
    ) -> InstallOutcome:
        """Install a package into the install root (replacing an installed skill of that id).

        A skill whose id or name is taken by a skill of a read-only root is refused
        (409 ``shadows_read_only_skill``): it would either be shadowed by the shipped
        one or, were the order reversed, silently replace it.  A skill whose declared
        dependencies cannot be resolved is refused (422 ``skill_dependencies_unmet``)
        and nothing is installed.
        """
        install_root = self._require_install_root()
        catalog = self.reload()

        def admit(skill: Skill) -> None:
            for key in (skill.id.lower(), skill.name.lower()):
                other = catalog.by_id.get(key)
                if other is not None and not self.installed_here(other):
                    raise Conflict(
                        f"skill {skill.id!r} would shadow the skill {other.id!r} shipped in the read-only root "
                        f"{self.root_of(other) or other.path.parent}; rename the packaged skill",
                        code="shadows_read_only_skill",
                    )
            if check is not None:
                check(skill)
            if self.deps is not None and self.deps.mode == "install":
                self.deps.ensure(skill.path, install=True)

        registry = self.registry
        if registry is None:
            result = install_package(data, install_root, strict=strict, limits=limits, admit=admit)
            self.reload()
            return result
        published: list[tuple[Version, bool]] = []

        def admit_and_publish(skill: Skill) -> None:
            admit(skill)
            published.append(registry.publish(skill.id, skill.path, actor=actor, set_default=set_default))

        with registry.writing():  # the install root and the pointers change together
            result = install_package(data, install_root, strict=strict, limits=limits, admit=admit_and_publish)
        self.reload()
        result.version, result.created = published[0]
        return result

    def remove(self, name: str, *, actor: str = "local") -> Skill:
        """Delete an installed skill; one of a read-only root is refused (403 ``read_only_skill``)."""
        install_root = self._require_install_root()
        skill = self.found(name)
        if not self.installed_here(skill):
            raise Forbidden(
                f"skill {skill.id!r} is shipped in the read-only root {self.root_of(skill) or skill.path.parent}; "
                f"only skills installed in {install_root} can be deleted",
                code="read_only_skill",
            )
        if self.registry is not None:
            with self.registry.writing():
                self.registry.delete_skill(skill.id, actor=actor)
                if skill.path.parent == install_root.resolve():  # else installed through another process
                    try:
                        uninstall(install_root, skill.path.name)
                    except NotFound:  # a rescan saw the delete first and removed this copy itself
                        pass
        else:
            uninstall(install_root, skill.path.name)
        self.reload()
        return skill

    def _require_install_root(self) -> Path:
        if self.install_root is None:
            raise Forbidden(
                "no install root is configured: skills cannot be installed or deleted here", code="install_disabled"
            )
        return self.install_root
