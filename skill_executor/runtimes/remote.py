"""The runtime of an API replica (``serve --role api``): runs execute on workers, never here.

It claims no box (a run reaching :meth:`RemoteRuntime.claim` is a bug, refused) and needs
no Docker engine; it only says where runs see skills (the workers' Docker paths), so the
skill overviews an API replica serves name the same locations the runs see.
"""

from __future__ import annotations

from typing import Any

from ..activity import Activity
from ..config import Settings
from ..errors import ExecutorError
from ..workspace.layout import WorkspaceManager
from .base import Box, SandboxPlan
from .docker.engine import CONTAINER_ENVS, CONTAINER_WORKSPACE


class RemoteRuntime:
    name = "remote"
    owner: tuple[int, int] | None = None
    visible_skills_dir: str | None = f"{CONTAINER_WORKSPACE}/skills"
    visible_envs_dir: str | None = CONTAINER_ENVS
    skill_envs = True
    disk_cap = "none"
    #: The workers' runtime enforces it (each worker checks again when it takes a run).
    exec_policy = True

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.activity = Activity()
        self.workspaces = WorkspaceManager(settings.workspaces, instance=settings.instance_id)

    def claim(self, plan: SandboxPlan) -> Box:
        raise ExecutorError("an API replica executes no run: runs go to workers", code="internal", status=500)

    def health(self) -> dict[str, tuple[bool, str]]:
        return {"runtime": (True, "runs execute on workers (role api)")}

    def stats(self) -> dict[str, Any]:
        return {
            "containers": None,
            "cleanup_backlog": 0,
            "cleanup_leftovers": 0,
            "workspaces": 0,
            "workers": {},
            "engine_up": None,
        }

    def settle(self) -> None:
        pass

    def close(self, timeout: float = 300.0) -> None:
        self.workspaces.close()
