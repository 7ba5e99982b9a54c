"""The Docker runtime itself: connecting (or waiting for the engine), claiming a box per
run (a warm container's or one of its own), the pool's start and staging callbacks, a
session's host container, health and figures, and closing.  Removing what is left over
(dead owners', expired, stray containers) is :mod:`.cleanup`'s."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import docker
from docker.types import Mount

from ...activity import Activity
from ...config import Settings
from ...errors import Unavailable
from ...image.inputs import DEFAULT_TIER, PYTHON_TIERS
from ...workers import Causes, Supervisor
from ...workspace.layout import LAUNCHER_SOCKET, PREPARED, SKILLS, WorkspaceManager
from ...workspace.remove import remove_tree
from ..base import RuntimeHost, SandboxPlan
from ..egress import EgressPath
from ..janitor import Janitor
from ..limits import DISK_POLL_SECONDS, describe_disk_cap, workspace_volume_bytes
from ..skillcopy import provide, stage
from .cleanup import reap_expired, remove_all, stray_containers, sweep_dead_owners
from .egress import check_egress
from .engine import (
    CONTAINER_ENVS,
    CONTAINER_WORKSPACE,
    LABEL_DEADLINE,
    LABEL_RUN,
    Engine,
    connect,
    launcher_argv,
    parse_user,
)
from .hostview import InitProcess
from .pool import WarmContainer, WarmPool
from .processes import DockerHost
from .sandboxes import ColdBox, WarmBox
from .warmhome import warm_home

log = logging.getLogger(__name__)

#: How often the reaper runs, and how often this instance reconciles what it should
#: have removed with what is there (a cleanup that failed while the engine was away).
REAP_SECONDS = 30.0
RECONCILE_SECONDS = 10.0
#: The containers' /etc/hosts, in the workspaces root (next to ``runs/``).
HOSTS_FILE = "hosts"
#: How often a runtime that started without its engine tries again.
ENGINE_RETRY_SECONDS = 2.0


class DockerRuntime:
    name = "docker"
    #: Where a run sees the skills (for the overview's ``<location>``).
    visible_skills_dir: str | None = f"{CONTAINER_WORKSPACE}/skills"
    #: Where every container sees the skills' dependency environments (read-only).
    visible_envs_dir: str | None = CONTAINER_ENVS
    skill_envs = True
    #: The launcher's exec supervisor enforces a rule's allow/deny (warm and cold).
    exec_policy = True

    def __init__(
        self, settings: Settings, client: docker.DockerClient | None = None, *, wait_for_engine: bool = False
    ) -> None:
        """Connect, check the image and the OCI runtime, sweep what dead owners left, and
        start the workers.  Without an engine (or image) this raises ``Unavailable``,
        unless ``wait_for_engine``: then the runtime starts degraded (runs are refused
        with 503, health says why) and completes its start once the engine answers."""
        self.settings = settings
        self.owner: tuple[int, int] | None = parse_user(settings.docker_user)
        self.activity = Activity()
        self.disk_cap: str = settings.disk_cap
        self.workspaces = WorkspaceManager(
            settings.workspaces, instance=settings.instance_id, volume_bytes=workspace_volume_bytes(settings)
        )
        self.token = self.workspaces.token
        self.supervisor = Supervisor("docker")
        self.janitor = Janitor(self.activity, self.supervisor, workers=settings.cleanup_workers, name="janitor")
        self._running: dict[str, str] = {}  # run id -> container id, while a run executes
        self._running_lock = threading.Lock()
        self._start_lock = threading.Lock()
        #: The skill of the latest run (id, folder): what a warm container is prepared for.
        self._wanted: tuple[str, Path] | None = None
        self._client = client
        self._engine: Engine | None = None
        self._problem: Unavailable | None = None
        self.pool: WarmPool | None = None
        self.leftovers = 0
        #: What this start removed of a crashed predecessor's (containers, workspaces, volumes).
        self.crash_cleanup: dict[str, int] = {"containers": 0, "workspaces": 0, "volumes": 0}
        self._causes = Causes()
        if settings.disk_cap == "hard":
            try:
                self.workspaces.probe_volumes()  # refuses to start (never degraded) without it
            except BaseException:
                self.close()
                raise
        else:
            log.warning(
                "the disk cap is soft (SKILL_EXECUTOR_DISK_CAP=soft): polled every %.1f s, so a fast "
                "writer can pass it before its run is stopped",
                DISK_POLL_SECONDS,
            )
        try:
            self._start()
        except Unavailable as exc:
            if not wait_for_engine:
                self.close()
                raise
            self._problem = exc
            self._causes.first(exc.message)
            log.warning(
                "starting without the Docker engine (%s); retrying every %.0f s", exc.message, ENGINE_RETRY_SECONDS
            )
            self.supervisor.every(
                "engine-watch", ENGINE_RETRY_SECONDS, self._retry_start, initial_delay=ENGINE_RETRY_SECONDS
            )
        except BaseException:
            self.close()
            raise

    def _start(self) -> None:
        """Everything that needs the engine, once (idempotent)."""
        with self._start_lock:
            if self._engine is not None:
                return
            client = self._client or connect()
            engine = Engine(
                self.settings, client, self.token, self.workspaces.root / HOSTS_FILE, self.workspaces.identity
            )
            engine.check_image()
            for name in self.settings.python_tier_images:
                try:
                    engine.image_for(PYTHON_TIERS[name])
                except Unavailable as exc:  # that tier's runs are refused with it; the rest run
                    log.warning("%s", exc.message)
            engine.check_oci_runtime()
            # every run's HOME starts as a long-lived container's would (font caches, an office profile)
            self.workspaces.home_template = warm_home(
                client, self.settings.docker_image, self.settings.data_dir / "warm"
            )
            # First the containers of dead owners, then (nothing runs in them any more) their folders.
            containers = sweep_dead_owners(engine, self.workspaces.lease)
            swept = self.workspaces.sweep()
            if swept:
                log.warning("removed %d workspace(s) left by a crashed process", len(swept))
            self.crash_cleanup = {
                "containers": containers,
                "workspaces": len(swept),
                "volumes": self.workspaces.released_volumes,
            }
            if containers or swept:
                log.warning(
                    "start-up: released what a crashed predecessor on this data dir left: %d container(s), "
                    "%d workspace(s), %d volume(s) (mount and loop device)",
                    containers,
                    len(swept),
                    self.workspaces.released_volumes,
                )
            if self.supervisor.closed:
                return  # closed while it connected: start nothing
            self._engine = engine
            self._problem = None
            self.supervisor.every("reaper", REAP_SECONDS, self.reap, initial_delay=REAP_SECONDS)
            self.supervisor.every("reconcile", RECONCILE_SECONDS, self.reconcile, initial_delay=RECONCILE_SECONDS)
            if self.settings.pool_size > 0:
                self.pool = WarmPool(
                    start=self._start_warm,
                    discard=self.discard,
                    workspaces=self.workspaces,
                    owner=self.owner,
                    activity=self.activity,
                    supervisor=self.supervisor,
                    size=self.settings.pool_size,
                    max_idle=self.settings.pool_max_idle_seconds,
                    prepare=self._prepare_warm,
                )

    def _retry_start(self) -> None:
        """Every ``ENGINE_RETRY_SECONDS`` until the engine answers (no backoff: the engine's
        return is noticed at once); each distinct problem is logged once."""
        if self._engine is not None or self.supervisor.closed:
            return
        try:
            self._start()
        except Unavailable as exc:
            self._problem = exc
            if self._causes.first(exc.message):
                log.warning("still waiting for the Docker engine: %s", exc.message)
            return
        if self._engine is not None:
            log.info("the Docker engine answers: the runtime is ready")

    @property
    def engine(self) -> Engine:
        """The engine, or ``Unavailable`` (503) while the runtime waits for it."""
        engine = self._engine
        if engine is None:
            raise self._problem or Unavailable("the Docker engine is not reachable", code="engine_unavailable")
        return engine

    @property
    def client(self) -> docker.DockerClient:
        return self.engine.client

    @property
    def ready(self) -> bool:
        return self._engine is not None

    # -- the seam ------------------------------------------------------------------------

    def claim(self, plan: SandboxPlan) -> ColdBox | WarmBox:
        """A warm container's box when one is ready (not for sessions), else a new one;
        either way the skill is the run's private copy (:func:`~..skillcopy.make_view`),
        on a warm container made ahead of the run when it was prepared for this skill
        and the skill has not changed since (:func:`~..skillcopy.place`)."""
        engine = self.engine
        skill = plan.skill
        if plan.egress is not None:
            check_egress(engine, plan.egress)
        self._wanted = (skill.id, skill.path)
        warm = None
        default_python = plan.python == DEFAULT_TIER
        if not default_python:
            engine.image_for(plan.python)  # refused before a workspace is made
        elif self.pool is not None and plan.session_work is None and plan.egress is None:
            # Warm containers are the default image's, their mounts made before the run was known
            # (so never the egress gateway's socket: a run with a grant takes a cold container).
            warm = self.pool.acquire(prefer=lambda w: w.staged is not None and w.staged.skill_id == skill.id)
        box: ColdBox | WarmBox
        if warm is None:
            workspace = self.workspaces.create(
                plan.run_id,
                skill.id,
                session_work=plan.session_work,
                session=plan.session,
                owner=self.owner,
                tenant=plan.tenant,
                warm_home=default_python,  # the warm HOME is the default image's
            )
            box = ColdBox(
                workspace,
                plan=plan,
                engine=engine,
                janitor=self.janitor,
                settings=self.settings,
                track=self._track,
                discard=self.workspaces.discard,
            )
        else:
            self._track(plan.run_id, warm.id)  # the run's from now on (untracked at its release)
            workspace = self.workspaces.adopt(warm.root, plan.run_id, skill.id, plan.tenant)
            box = WarmBox(
                workspace,
                warm,
                plan=plan,
                engine=engine,
                janitor=self.janitor,
                settings=self.settings,
                track=self._track,
                discard=self.workspaces.discard,
            )
        staged = None
        if warm is not None:
            staged, warm.staged = warm.staged, None
        try:
            box.warnings += provide(workspace, skill.id, skill.path, self.owner, staged)
        except BaseException:
            box.release()
            raise
        return box

    def health(self) -> dict[str, tuple[bool, str]]:
        engine = self._engine
        if engine is None:
            problem = self._problem.message if self._problem is not None else "not connected"
            return {
                "engine": (False, f"waiting for the engine: {problem}"),
                "image": (False, "unknown"),
                "disk_cap": describe_disk_cap(self.settings),
            }
        checks = engine.health()
        checks["disk_cap"] = describe_disk_cap(self.settings)
        alive = self.supervisor.alive()
        dead = sorted(name for name, ok in alive.items() if not ok)
        checks["workers"] = (
            not dead,
            f"dead: {', '.join(dead)} (restarting)" if dead else f"{len(alive)} background workers running",
        )
        return checks

    def stats(self) -> dict[str, Any]:
        """Figures for the metrics: containers by state (when the engine answers), the
        cleanup backlog, the workers' failures and restarts."""
        engine = self._engine
        by_state: dict[str, int] | None = None
        if engine is not None:
            try:
                by_state = engine.by_state()
            except Unavailable:
                by_state = None
        return {
            "containers": by_state,
            "cleanup_backlog": self.janitor.backlog,
            "cleanup_leftovers": self.leftovers,
            "crash_cleanup": dict(self.crash_cleanup),
            "workspaces": self.workspaces.count(),
            "workers": self.supervisor.stats(),
            "engine_up": by_state is not None,
        }

    def settle(self) -> None:
        self.janitor.settle()

    def close(self, timeout: float = 300.0) -> None:
        """Discard the pool, finish the cleanup within ``timeout`` (what is left then is
        swept at the next start), stop the workers, give up the lease."""
        deadline = time.monotonic() + timeout
        if self.pool is not None:
            self.pool.close()
        self.janitor.close(timeout=max(0.5, deadline - time.monotonic()))
        left = self.janitor.backlog
        self.supervisor.close(timeout=max(0.5, deadline - time.monotonic()))
        with self._running_lock:
            running = bool(self._running)
        if not left and not running and (self.settings.keep_workspaces or not self.workspaces.in_use()):
            self.workspaces.close()  # else the lease stays until the process ends; the next start sweeps

    # -- a session's processes -----------------------------------------------------------

    def host(self, work: Path, key: str, lifetime: float, egress: EgressPath | None = None) -> DockerHost:
        """A session's long-lived container for its processes (:mod:`.processes`), tracked
        under ``key`` (so the reconciliation leaves it alone) until :meth:`unhost`
        (:class:`~skill_executor.runtimes.base.SupportsProcesses`)."""
        if egress is not None:
            check_egress(self.engine, egress)
        host = DockerHost(self.engine, self.settings, work, key=key, lifetime=lifetime, egress=egress)
        self._track(key, host.id)
        return host

    def unhost(self, host: RuntimeHost) -> None:
        if not isinstance(host, DockerHost):
            raise TypeError(f"not a host of the docker runtime: {host!r}")
        host.close()
        self._track(host.key, None)

    # -- containers ------------------------------------------------------------------------

    def container_of(self, run_id: str) -> str | None:
        """The container executing ``run_id`` right now (warm containers carry no run label)."""
        with self._running_lock:
            return self._running.get(run_id)

    def _track(self, run_id: str, container_id: str | None) -> None:
        with self._running_lock:
            if container_id is None:
                self._running.pop(run_id, None)
            else:
                self._running[run_id] = container_id

    def _start_warm(self, root: Path) -> tuple[str, InitProcess | None]:
        """Create and start a pool container on an empty workspace; its id and init."""
        deadline = time.time() + self.settings.pool_max_idle_seconds + self.settings.max_timeout
        config = self.engine.config(
            command=[*launcher_argv(self.settings, "--container"), f"{CONTAINER_WORKSPACE}/{LAUNCHER_SOCKET}"],
            cwd=CONTAINER_WORKSPACE,
            env={},
            mounts=[Mount(CONTAINER_WORKSPACE, str(root), type="bind", read_only=False)],
            labels={LABEL_RUN: "warm", LABEL_DEADLINE: f"{deadline:.0f}"},
        )
        container_id = self.engine.create(config)
        try:
            self.engine.start(container_id)
            return container_id, InitProcess.of(self.engine, container_id)
        except BaseException:
            self.engine.remove(container_id)  # or, the engine being away, by the reconciliation
            raise

    def _prepare_warm(self, warm: WarmContainer) -> None:
        """Stage a copy of the latest run's skill for a new warm container's run (the pool
        fillers' quiet moment), in its workspace's ``skills/.prepared``: the service's,
        mode 0700, which the container's user cannot enter (and on the same file system,
        so the copy moves into place with one rename)."""
        wanted = self._wanted
        if wanted is None:
            return
        skill_id, source = wanted
        folder = warm.root / SKILLS / PREPARED
        folder.mkdir(mode=0o700)
        try:
            warm.staged = stage(folder, skill_id, source, self.owner)
        except BaseException:
            remove_tree(folder)
            raise

    def discard(self, warm: WarmContainer) -> None:
        """Remove an unused warm container and its folder, in the background."""
        engine = self.engine
        discard = self.workspaces.discard
        warm.staged = None  # in its folder

        def job() -> None:
            try:
                if warm.init is not None:
                    warm.init.close()
                engine.remove(warm.id, strict=True)
            finally:
                discard(warm.root)

        self.janitor.submit(job)

    def sweep(self) -> int:
        """Remove what dead owners of this workspace root left: containers, then folders."""
        removed = sweep_dead_owners(self.engine, self.workspaces.lease)
        self.workspaces.sweep()
        return removed

    def reap(self, now: float | None = None) -> int:
        """Remove containers of any owner that are past their deadline."""
        return reap_expired(self.engine, time.time() if now is None else now)

    def reconcile(self) -> int:
        """Remove what this instance itself should have removed and did not (a cleanup
        that failed, e.g. while the engine was away): its containers that belong to no
        run -- ended, never started, or (a warm container whose removal failed) running
        but neither in the pool nor a run's -- and its folders in no use.  Returns how
        many it removed."""
        engine = self.engine
        with self._running_lock:
            busy = set(self._running.values())
        pooled = self.pool.known() if self.pool is not None else set()
        leftovers = stray_containers(engine, busy | pooled, time.time())
        folders = self.workspaces.stale()
        self.leftovers = len(leftovers) + len(folders)
        with self._running_lock:
            leftovers = [c for c in leftovers if c not in self._running.values()]
        removed, failed = remove_all(engine, leftovers)
        for folder in folders:
            try:
                self.workspaces.discard(folder)
                removed += 1
            except OSError as exc:
                failed.append(Unavailable(f"removing {folder} failed: {exc}"))
        self.leftovers = len(failed)
        if failed:
            raise failed[0]
        return removed
