"""The seam between the pipeline and every runtime: ``Runtime.open(plan) -> Sandbox``.

In the spirit of httpx's transports, the pipeline knows nothing of containers or
processes.  It asks a :class:`Runtime` to open a :class:`Sandbox` for one run and talks
only to that object:

* ``sandbox.workspace`` -- the run's folders on the service's side (for the path rules);
* ``sandbox.root`` -- where the command sees its workspace (``/workspace`` in Docker);
* ``sandbox.stage(stager, inputs)`` -- put the inputs in, before the command runs;
* ``sandbox.execute(command)`` -- run it with bounded output, a deadline that kills
  everything it started, cancellation and the disk cap;
* ``sandbox.collect(globs, limits, failed=...)`` -- bring outputs back, once nothing of
  the run is alive any more;
* ``sandbox.close()`` -- release everything (containers, folders); a sandbox is a context
  manager and owns its cleanup, also after errors.

``Runtime.health()`` reports the runtime's dependencies and ``Runtime.close()`` stops
it.  A new runtime (bubblewrap, a remote engine, Kubernetes Jobs) implements these two
protocols and passes ``tests/test_sandbox_contract.py``; the pipeline does not change.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Self

from ..access import LOCAL_TENANT
from ..activity import Activity
from ..outputs.collect import Collection, CollectLimits
from ..skills import Skill
from ..workspace.layout import Workspace, WorkspaceManager
from ..workspace.schema import InputSpec
from ..workspace.staging import Stager, StagingReport

#: Called with ("stdout" | "stderr", chunk) as output arrives (for streaming).
OutputListener = Callable[[str, bytes], None]


@dataclass(frozen=True, slots=True)
class SandboxPlan:
    """What a run needs from its sandbox before anything is staged."""

    run_id: str
    skill: Skill
    session: str | None = None
    #: The session's persistent ``work/`` (held exclusively by this run), if any.
    session_work: Path | None = None
    tenant: str = LOCAL_TENANT
    #: The most the session's ``work/`` may hold across runs (None: no session).
    session_disk_max: int | None = None


@dataclass(slots=True)
class Command:
    """One command to execute in a sandbox."""

    command: str
    cwd: str
    env: dict[str, str]
    stdin: bytes | None
    timeout: float
    stdout_max: int
    stderr_max: int
    listener: OutputListener | None = None
    cancel: threading.Event | None = None


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


class Sandbox(Protocol):
    """One run's isolated place; see the module docstring."""

    workspace: Workspace
    #: Where the command sees its workspace.
    root: str
    #: What preparing the sandbox had to say (a skill file that could not be copied, ...).
    warnings: list[str]

    def stage(self, stager: Stager, inputs: Sequence[InputSpec]) -> StagingReport: ...

    def execute(self, command: Command) -> ExecResult: ...

    def collect(self, globs: list[str], limits: CollectLimits, *, failed: bool) -> Collection: ...

    def close(self) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...


class Runtime(Protocol):
    name: str
    #: uid/gid the command runs as, for files the service creates in the workspace.
    owner: tuple[int, int] | None
    #: Runs in progress; background housekeeping yields to them.
    activity: Activity
    #: The run folders this runtime makes and removes.
    workspaces: WorkspaceManager
    #: Where runs see the skills (for an overview's ``<location>``); None: host paths.
    visible_skills_dir: str | None
    #: Where runs see the skills' dependency environments; None: their host folder.
    visible_envs_dir: str | None
    #: How the disk cap is enforced: ``hard`` (a file system per workspace and per
    #: session's ``work/``), ``soft`` (polled), ``none`` (the local runtime).
    disk_cap: str

    def open(self, plan: SandboxPlan) -> Sandbox: ...

    def health(self) -> dict[str, tuple[bool, str]]:
        """Each dependency's (ok, detail); never raises."""
        ...

    def stats(self) -> dict[str, Any]:
        """Figures for the metrics: ``containers`` (by state; None when unknown),
        ``cleanup_backlog``, ``cleanup_leftovers``, ``workspaces``, ``workers``
        (:class:`~skill_executor.workers.WorkerStats` by name), ``engine_up`` (None: no engine)."""
        ...

    def settle(self) -> None:
        """Wait until the folders (and containers) of finished runs are removed."""
        ...

    def close(self, timeout: float = 300.0) -> None:
        """Release everything within ``timeout`` seconds (leftovers: swept at the next start)."""
        ...
