"""The Docker runtime: every run in its own fresh, hardened, network-less container.

A run gets a started container of the warm pool when one is ready (not for sessions,
whose ``work/`` must be mounted when the container starts), else a container of its
own (:mod:`.sandboxes`).  Every container is removed: after a normal exit, a timeout,
an error, and (through the start-up sweep and the deadline reaper) after a crash of
the service.  Containers carry their owner's token and a deadline as labels.

Modules: :mod:`.engine` (configuration and every engine call, errors mapped in one
place), :mod:`.launcher` (the warm launcher's protocol), :mod:`.sandboxes` (the two
ways to run), :mod:`.pool` (warm containers, private to this runtime).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

import docker
from docker.types import Mount

from ...activity import Activity
from ...config import Settings
from ...owners import owner_alive, owner_token
from ...workspace.fs import remove_tree
from ...workspace.layout import (
    LAUNCHER_SOCKET,
    RUN_LINKS,
    Workspace,
    WorkspaceManager,
    add_run_links,
    build_view,
    shadowed,
)
from ..base import SandboxPlan
from ..janitor import Janitor
from ..skillcopy import copy_skill
from .engine import (
    CONTAINER_WORKSPACE,
    LABEL_DEADLINE,
    LABEL_MANAGED,
    LABEL_OWNER,
    LABEL_RUN,
    Engine,
    InitProcess,
    connect,
    launcher_argv,
    parse_user,
)
from .pool import WarmContainer, WarmPool
from .sandboxes import ColdSandbox, WarmSandbox

__all__ = ["DockerRuntime", "LABEL_DEADLINE", "LABEL_MANAGED", "LABEL_OWNER", "LABEL_RUN", "connect"]

log = logging.getLogger(__name__)

#: Extra seconds past a container's deadline before the reaper removes it.
REAPER_GRACE_SECONDS = 30.0
RUN_LINK_NAMES = frozenset(RUN_LINKS)


class DockerRuntime:
    name = "docker"
    #: Where a run sees the skills (for the overview's ``<location>``).
    visible_skills_dir: str | None = f"{CONTAINER_WORKSPACE}/skills"

    def __init__(self, settings: Settings, client: docker.DockerClient | None = None) -> None:
        self.settings = settings
        self.client = client or connect()
        self.owner: tuple[int, int] | None = parse_user(settings.docker_user)
        self.token = owner_token()
        self.engine = Engine(settings, self.client, self.token)
        self.engine.check_image()
        self.engine.check_oci_runtime()
        self.activity = Activity()
        self.workspaces = WorkspaceManager(settings.workspaces)
        self.sweep()  # first the containers of a crashed service, then (nothing runs in them) their folders
        swept = self.workspaces.sweep()
        if swept:
            log.warning("removed %d workspace(s) left by a crashed process", len(swept))
        self.janitor = Janitor(self.activity, name="docker-janitor")
        self._closed = threading.Event()
        self._reaper = threading.Thread(target=self._reap_loop, name="docker-reaper", daemon=True)
        self._reaper.start()
        self._running: dict[str, str] = {}  # run id -> container id, while a run executes
        self._running_lock = threading.Lock()
        self.pool: WarmPool | None = None
        if settings.pool_size > 0:
            self.pool = WarmPool(
                start=self._start_warm,
                discard=self.discard,
                workspaces=self.workspaces,
                owner=self.owner,
                activity=self.activity,
                size=settings.pool_size,
                max_idle=settings.pool_max_idle_seconds,
            )

    # -- the seam ------------------------------------------------------------------------

    def open(self, plan: SandboxPlan) -> ColdSandbox | WarmSandbox:
        """A warm container's sandbox when one is ready (not for sessions), else a new one."""
        warm = self.pool.acquire() if self.pool is not None and plan.session_work is None else None
        sandbox: ColdSandbox | WarmSandbox
        if warm is None:
            workspace = self.workspaces.create(
                plan.run_id, plan.skill.id, session_work=plan.session_work, session=plan.session, owner=self.owner,
                tenant=plan.tenant,
            )
            sandbox = ColdSandbox(
                workspace, plan=plan, engine=self.engine, janitor=self.janitor, settings=self.settings,
                track=self._track,
            )
        else:
            workspace = self.workspaces.adopt(warm.root, plan.run_id, plan.skill.id, plan.tenant)
            sandbox = WarmSandbox(
                workspace, warm, plan=plan, engine=self.engine, janitor=self.janitor, settings=self.settings,
                track=self._track,
            )
        try:
            sandbox.warnings += self._skill_view(workspace, plan, warm=warm is not None)
        except BaseException:
            sandbox.close()
            raise
        return sandbox

    def _skill_view(self, workspace: Workspace, plan: SandboxPlan, *, warm: bool) -> list[str]:
        skill_path = plan.skill.path
        if warm:
            # The container is already running: the skill goes straight into the
            # workspace as its SKILL_DIR, files and folders owned by root and not
            # writable by the run's user (hard links where that user cannot write the
            # source), plus the out/work/inputs links.
            view = workspace.skill_view
            view.mkdir()
            warnings = copy_skill(skill_path, view, link_unless_writable_by=self.owner, skip_top=RUN_LINK_NAMES)
            add_run_links(view)
            return warnings + shadowed(os.listdir(skill_path))
        # A cold container mounts the skill read-only at .skill/; the view links into it.
        entries = sorted(e for e in os.listdir(skill_path) if e not in (".git", "__pycache__"))
        return build_view(workspace, entries)

    def health(self) -> dict[str, tuple[bool, str]]:
        return self.engine.health()

    def settle(self) -> None:
        self.janitor.settle()

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
        self._closed.set()
        self.janitor.close()

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

    def containers_alive(self) -> int:
        return self.engine.alive()

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
            self.engine.remove(container_id)
            raise

    def discard(self, warm: WarmContainer) -> None:
        """Remove an unused warm container and its folder, in the background."""
        engine = self.engine

        def job() -> None:
            try:
                if warm.init is not None:
                    warm.init.close()
                engine.remove(warm.id)
            finally:
                remove_tree(warm.root)

        self.janitor.submit(job)

    def sweep(self) -> int:
        """Remove containers left by dead processes of this host (a crashed service)."""
        removed = 0
        for container in self.engine.managed():
            if not owner_alive(container["Labels"].get(LABEL_OWNER, "")):
                removed += self.engine.remove(container["Id"])
        return removed

    def reap(self, now: float | None = None) -> int:
        """Remove containers of any owner that are past their deadline."""
        now = time.time() if now is None else now
        removed = 0
        for container in self.engine.managed():
            try:
                deadline = float(container["Labels"].get(LABEL_DEADLINE, "inf"))
            except ValueError:
                deadline = 0.0
            if now > deadline + REAPER_GRACE_SECONDS:
                removed += self.engine.remove(container["Id"])
        return removed

    def _reap_loop(self) -> None:
        while not self._closed.wait(30.0):
            try:
                self.reap()
            except Exception as exc:  # the reaper must never die
                log.warning("reaper: %s", exc)
