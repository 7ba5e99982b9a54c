"""The runtime interface: where and how a run's command executes.

The pipeline does not know which runtime runs it.  A runtime

* ``prepare``s a fresh workspace: materialises the skill's read-only files under
  ``.skill/`` and tells how the command will see the workspace (``paths``);
* ``execute``s one command with bounded stdout/stderr, a wall-clock timeout that
  kills everything the command started, and the real elapsed time;
* ``cleanup``s whatever it attached to the workspace (containers, mounts).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from pathlib import Path

from ..activity import Activity
from ..skills import Skill
from ..workspace.layout import Workspace, WorkspaceManager, environment

#: Called with ("stdout" | "stderr", chunk) as output arrives (for streaming).
OutputListener = Callable[[str, bytes], None]


@dataclass(frozen=True, slots=True)
class RuntimePaths:
    """How the command sees the workspace (host paths locally, /workspace in Docker)."""

    workspace: str

    def env(self, skill_id: str) -> dict[str, str]:
        return environment(self.workspace, skill_id)


@dataclass(slots=True)
class ExecSpec:
    run_id: str
    command: str
    cwd: str
    env: dict[str, str]
    stdin: bytes | None
    timeout: float
    workspace: Workspace
    skill: Skill
    stdout_max: int
    stderr_max: int
    listener: OutputListener | None = None
    cancel: threading.Event | None = None
    #: The most a session's ``work/`` may hold (across its runs), when the run has one.
    session_disk_max: int | None = None


@dataclass(slots=True)
class ExecResult:
    exit_code: int | None
    stdout: bytes
    stderr: bytes
    duration_ms: int
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    timed_out: bool = False
    cancelled: bool = False
    signal: str | None = None
    oom_killed: bool = False
    disk_limit_hit: bool = False
    warnings: list[str] = field(default_factory=list)


class Runtime(Protocol):
    name: str
    #: uid/gid the command runs as, for files the service creates in the workspace.
    owner: tuple[int, int] | None
    #: Runs in progress; background housekeeping yields to them.
    activity: Activity

    def create_workspace(
        self,
        manager: WorkspaceManager,
        run_id: str,
        skill_id: str,
        *,
        session_work: Path | None,
        session: str | None,
        tenant: str,
    ) -> Workspace: ...

    def paths(self, workspace: Workspace) -> RuntimePaths: ...

    def prepare(self, workspace: Workspace, skill: Skill) -> list[str]: ...

    def execute(self, spec: ExecSpec) -> ExecResult: ...

    def cleanup(self, workspace: Workspace) -> None: ...

    def close(self) -> None: ...
