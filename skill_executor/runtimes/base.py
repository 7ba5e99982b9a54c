"""The seam between the pipeline and every runtime: ``Runtime.claim(plan) -> Box``.

It has the shape of Kubernetes agent-sandbox's in-pod daemon (sandboxd): claim a sandbox
for a run's plan (its tier and limits), put files in, start one process with streamed
output, a kill to its group and a deadline kept by the caller, get files out, release.

* :class:`Box` -- one run's sandbox, single use: ``workspace`` (the run's folders on the
  service's side, where staging and collection happen), ``root`` (where the command sees
  them), ``shared`` (True: the command sees ``workspace`` itself, a bind mount or the host
  folder, so ``put``/``get`` have nothing to copy), ``start(spec)`` once, ``verdict()``
  after the process has ended, ``release()`` (idempotent; off the run's path).
* :class:`Process` -- the started command: ``events(timeout)`` yields its stdout/stderr
  chunks as they arrive, ``ended`` once its output is over, ``kill()`` ends it and
  everything it started, ``wait()`` ends whatever is left and gives the exit status.

The one runtime-neutral user of a box is :mod:`skill_executor.runs.sandbox`: staging,
the deadline, cancellation, the disk cap, bounded output, partial output on a kill, and
collection live there, once, above every runtime.  The pipeline sees only the
:class:`Sandbox` it makes.  A new runtime implements :class:`Runtime` and :class:`Box`
and passes ``tests/unit/test_runtime_contract.py``; the pipeline does not change.

A runtime may also keep a session's sandbox for interactive processes
(:mod:`skill_executor.processes`): the optional capability :class:`SupportsProcesses`
(``host`` -> :class:`RuntimeHost`, whose ``exec`` -> :class:`RuntimeProcess`).  A runtime
without it has no interactive processes; nothing else changes for it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Self, runtime_checkable

from ..access import LOCAL_TENANT
from ..activity import Activity
from ..image.inputs import DEFAULT_TIER, PythonTier
from ..outputs.collect import Collection, CollectLimits
from ..policy import ExecRule
from ..skills import Skill
from ..workspace.layout import Workspace, WorkspaceManager
from ..workspace.schema import InputSpec
from ..workspace.staging import Stager, StagingReport
from .egress import EgressPath
from .limits import Cap

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
    #: The Python tier the run needs (its skill's requires-python): the runtime's sandbox
    #: has that Python or the claim is refused (``python_tier_unavailable``).
    python: PythonTier = DEFAULT_TIER
    #: The sandbox of the session's processes, whose loopback the run shares (None: its own).
    network_of: str | None = None
    #: The command-policy rule's allow/deny the sandbox enforces at every exec (None: none
    #: applies); a runtime that cannot enforce it refuses the claim (``policy_unenforceable``).
    exec_rule: ExecRule | None = None
    #: The run's path to the egress gateway (:mod:`.egress`: its socket and CA certificate
    #: mounted read-only, a loopback bridge, the proxy variables); None: no network at all.
    #: A runtime that cannot give it refuses the claim (``egress_unsupported``).
    egress: EgressPath | None = None


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
    #: the exec the sandbox refused under the command policy ({rule, program, path, reason}), if any
    policy_denied_exec: dict[str, str] | None = None


@dataclass(frozen=True, slots=True)
class ProcessSpec:
    """One process to start in a box: its argv (a shell command is ``["bash", "-c", text]``),
    working folder (as the command sees it), environment (only this: nothing is inherited
    but what the runtime itself must set, like ``PATH`` locally), stdin (None: closed) and
    its deadline in seconds (kept by the caller, which kills it; a runtime may set a
    backstop from it, such as a container's reaper label)."""

    argv: list[str]
    cwd: str
    env: dict[str, str]
    stdin: bytes | None = None
    timeout: float | None = None


#: One piece of output: ("stdout" | "stderr", bytes valid until the next chunk is asked for).
Chunk = tuple[str, bytes | memoryview]


class Process(Protocol):
    """A started command (see the module docstring)."""

    #: When it started (``time.monotonic()``): its deadline counts from here.
    started: float
    #: The disk cap to poll while it runs (None: nothing to poll; a hard cap needs no poll
    #: to hold, but is checked all the same to report it).
    disk: Cap | None
    #: True once its output is over (its exit status is known, or its stream broke).
    ended: bool

    def events(self, timeout: float) -> Iterator[Chunk]:
        """The output that arrives within ``timeout`` seconds; returns as soon as some did
        (or the output is over).  A chunk is valid until the next one is asked for."""
        ...

    def kill(self) -> None:
        """SIGKILL the process and everything it started (its group, or its sandbox)."""
        ...

    def wait(self) -> int | None:
        """Called once the output is over or given up: end whatever of the run is still
        alive (leftovers of a normal exit too), then its exit status (128+N for signal
        N; None: unknown).  Nothing of the run is alive when this returns."""
        ...

    #: What the caller should know (a broken stream, output held open by an escapee).
    warnings: list[str]


@dataclass(frozen=True, slots=True)
class BoxEntry:
    """One entry of a box's folder: its name, size and kind (``file``, ``directory``, ``other``)."""

    name: str
    size: int
    kind: str


@dataclass(frozen=True, slots=True)
class BoxVerdict:
    """What a box knows about its ended process beyond the exit status."""

    oom_killed: bool = False
    disk_limit_hit: bool = False
    warnings: tuple[str, ...] = ()
    #: the exec refused under the command policy ({rule, program, path, reason}), if any
    policy_denied_exec: dict[str, str] | None = None


class Box(Protocol):
    """One run's sandbox, claimed from a runtime; single use (see the module docstring)."""

    workspace: Workspace
    #: Where the command sees its workspace.
    root: str
    #: True: the command sees ``workspace`` itself (put/get copy nothing).
    shared: bool
    #: What claiming the box had to say (a skill file that could not be copied, ...).
    warnings: list[str]

    def put(self, tops: Sequence[str]) -> None:
        """Copy these top folders of ``workspace`` (``skills``, ``work``, ``run``) into the box."""
        ...

    def list(self, folder: str) -> list[BoxEntry]:
        """The entries of one folder of the box (``out``, ``out/sub``), as the command left them."""
        ...

    def read(self, path: str, limit: int) -> bytes:
        """The first ``limit`` bytes of the box's file ``path`` (``out/a.txt``)."""
        ...

    def get(self, top: str, limit: int) -> int:
        """Copy the box's ``top`` folder back into ``workspace`` (at most ``limit`` bytes); bytes copied."""
        ...

    def start(self, spec: ProcessSpec) -> Process:
        """Start the run's one process (a second start is refused: a box is single use)."""
        ...

    def verdict(self) -> BoxVerdict:
        """After :meth:`Process.wait`: an OOM kill, a disk cap reached."""
        ...

    def release(self) -> None:
        """Give everything back (idempotent): the sandbox and its folders, in the background."""
        ...


class Sandbox(Protocol):
    """One run's isolated place as the pipeline drives it (:class:`skill_executor.runs.sandbox.RunSandbox`
    over any :class:`Box`)."""

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
    #: Whether runs can use skills' dependency environments at all.
    skill_envs: bool
    #: Whether the runtime enforces a command-policy rule's allow/deny at every exec in the
    #: sandbox (False: a run under such a rule is refused, ``policy_unenforceable``).
    exec_policy: bool
    #: How the disk cap is enforced: ``hard`` (a file system per workspace and per
    #: session's ``work/``), ``soft`` (polled), ``none`` (the local runtime).
    disk_cap: str

    def claim(self, plan: SandboxPlan) -> Box:
        """A fresh box for this run (single use); may wait (bounded), or refuse (503)."""
        ...

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


class RuntimeProcess(Protocol):
    """One interactive process as a runtime runs it in a session's sandbox
    (:class:`~skill_executor.runtimes.docker.processes.DockerProcess`)."""

    def read(self) -> bytes: ...
    def write(self, data: bytes) -> None: ...
    def close_stdin(self) -> None: ...
    def signal(self, signum: int) -> bool: ...
    def kill(self) -> None: ...
    def exit_code(self) -> int | None: ...
    def close(self) -> None: ...


class RuntimeHost(Protocol):
    """A session's sandbox for interactive processes
    (:class:`~skill_executor.runtimes.docker.processes.DockerHost`)."""

    id: str

    @property
    def network_of(self) -> str:
        """What a run of the session joins to reach the sandbox's loopback (:attr:`SandboxPlan.network_of`)."""
        ...

    def exec(self, argv: list[str], *, cwd: str, env: dict[str, str], pty: bool) -> RuntimeProcess:
        """Start ``argv`` in the sandbox, stdin open (a TTY when ``pty``)."""
        ...


@runtime_checkable
class SupportsProcesses(Protocol):
    """The optional capability of a :class:`Runtime` to keep a session's sandbox for its
    interactive processes (:mod:`skill_executor.processes`; Docker has it).  Without it a
    process start is refused (501 ``processes_unsupported``)."""

    def host(self, work: Path, key: str, lifetime: float, egress: EgressPath | None = None) -> RuntimeHost:
        """A new sandbox with the session's ``work/`` (``work``), tracked under ``key`` until
        :meth:`unhost`, living at most ``lifetime`` seconds (a backstop for the runtime's reaper);
        with ``egress``, the path to the egress gateway (:mod:`.egress`): one bridge on the
        sandbox's loopback, which the session's runs share (their plans' ``egress`` with the
        same port), and its variables in every process's environment."""
        ...

    def unhost(self, host: RuntimeHost) -> None:
        """Remove a sandbox :meth:`host` made (everything in it killed)."""
        ...
