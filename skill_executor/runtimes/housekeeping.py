"""What a runtime without a Docker engine keeps for its runs: their folders on this host
(swept of a crashed process's at start), the janitor that removes them off the runs' path,
and the figures, settling and closing over both (the local and agent-sandbox runtimes)."""

from __future__ import annotations

import logging
import time
from typing import Any

from ..activity import Activity
from ..config import Settings
from ..workers import Supervisor
from ..workspace.layout import WorkspaceManager
from .janitor import Janitor

log = logging.getLogger(__name__)


class Housekeeping:
    def __init__(self, settings: Settings, name: str) -> None:
        self.activity = Activity()
        self.workspaces = WorkspaceManager(settings.workspaces, instance=settings.instance_id)
        swept = self.workspaces.sweep()
        if swept:
            log.warning("removed %d workspace(s) left by a crashed process", len(swept))
        self.supervisor = Supervisor(name)
        self.janitor = Janitor(self.activity, self.supervisor, workers=settings.cleanup_workers, name="janitor")

    def stats(self) -> dict[str, Any]:
        return {
            "containers": None,
            "cleanup_backlog": self.janitor.backlog,
            "cleanup_leftovers": 0,
            "workspaces": self.workspaces.count(),
            "workers": self.supervisor.stats(),
            "engine_up": None,
        }

    def settle(self) -> None:
        self.janitor.settle()

    def close(self, timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        self.janitor.close(timeout=timeout)
        left = self.janitor.backlog
        self.supervisor.close(timeout=max(0.5, deadline - time.monotonic()))
        if not left and not self.workspaces.in_use():
            self.workspaces.close()
