"""The calls on a session's processes as the API and the tools make them (:class:`Processes`),
their answers (:class:`ProcessView`, :class:`Poll`), errors and the limits every
implementation keeps (:mod:`skill_executor.processes`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from ..errors import Conflict, ExecutorError, NotFound

#: How long an ended process stays pollable.
KEEP_ENDED_SECONDS = 600.0
#: The longest one poll may wait for output.
MAX_WAIT_SECONDS = 30.0
#: The most bytes one write takes.
MAX_WRITE_BYTES = 1024 * 1024
#: The most bytes one poll answers.
MAX_POLL_BYTES = 1024 * 1024
#: A session's sandbox lives at most this many ``process_max_seconds`` (its container's
#: deadline label, for the runtime's reaper); a process started late in it gets less.
HOST_LIFETIMES = 4

Reason = Literal["exited", "killed", "timeout", "idle", "session_ended", "lost"]


class ProcessNotFound(NotFound):
    code = "process_not_found"


class ProcessEnded(Conflict):
    code = "process_ended"


class ProcessLost(ExecutorError):
    """In a cluster: the worker that ran the process is gone (with the process and its output)."""

    code = "process_lost"
    status = 410


@dataclass(frozen=True, slots=True)
class Poll:
    """One poll's answer (see :mod:`skill_executor.processes`)."""

    output: str
    offset: int
    next: int
    total: int
    dropped: int
    running: bool
    exit_code: int | None
    reason: str | None


class ProcessView(Protocol):
    """A process as the calls answer it (:class:`~skill_executor.processes.output.SessionProcess`,
    or a cluster worker's answer)."""

    @property
    def id(self) -> str: ...
    @property
    def ended(self) -> bool: ...
    @property
    def exit_code(self) -> int | None: ...
    def state(self) -> dict[str, Any]: ...


class Processes(Protocol):
    """A session's processes as the API and the tools call them:
    :class:`~skill_executor.processes.manager.ProcessManager` (executed here), or a cluster's
    replica's proxy to the worker running them
    (:class:`~skill_executor.processes.cluster.ClusterProcesses`)."""

    def start(
        self,
        tenant: str,
        session: str,
        command: str | list[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        pty: bool = False,
        timeout: float | None = None,
        idle_timeout: float | None = None,
    ) -> ProcessView: ...
    def list(self, tenant: str, session: str) -> Sequence[ProcessView]: ...
    def get(self, tenant: str, session: str, process_id: str) -> ProcessView: ...
    def write(self, tenant: str, session: str, process_id: str, data: bytes, *, eof: bool = False) -> ProcessView: ...
    def poll(
        self, tenant: str, session: str, process_id: str, *, after: int = 0, limit: int = 64 * 1024, wait: float = 0.0
    ) -> Poll: ...
    def signal(self, tenant: str, session: str, process_id: str, name: str) -> ProcessView: ...
    def kill(self, tenant: str, session: str, process_id: str) -> ProcessView: ...
