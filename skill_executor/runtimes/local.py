"""The local runtime: a plain subprocess on the service's machine (development only).

It isolates nothing beyond a fresh workspace, a private copy of the skill and a clean
environment: the command runs as the service's user, with its network and its view
of the file system (so no ``/mnt/...`` paths of the hosted products either).  Use it
to develop skills, never to run untrusted ones.

What it does guarantee: ``bash -c`` in its own process group, stdin from the request
(closed otherwise), stdout/stderr bounded while read, the service's environment never
passed on, and on timeout or cancellation the whole process group killed.  It
enforces no disk cap.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from typing import Any

from ..activity import Activity
from ..config import Settings
from ..workers import Supervisor
from ..workspace.layout import Workspace, WorkspaceManager
from .base import Command, ExecResult, SandboxPlan
from .host import HostSandbox
from .janitor import Janitor
from .limits import Guard
from .skillcopy import make_view
from .streams import BoundedBuffer, pump

log = logging.getLogger(__name__)

WARNING = (
    "the local runtime isolates nothing: commands run as this service's user with its "
    "network and file system; use it for development only"
)
#: How long to wait for output pipes to drain once the command has ended.
DRAIN_SECONDS = 2.0


class LocalRuntime:
    name = "local"
    owner: tuple[int, int] | None = None
    #: Runs see skills at per-run host paths; the overview shows the source path.
    visible_skills_dir: str | None = None
    #: Runs use the skills' dependency environments at their host paths.
    visible_envs_dir: str | None = None
    #: No disk cap at all (development only; SKILL_EXECUTOR_DISK_CAP does not apply).
    disk_cap = "none"

    def __init__(self, settings: Settings, *, path: str = "/usr/local/bin:/usr/bin:/bin") -> None:
        self.settings = settings
        self.path = path
        self.activity = Activity()
        self.workspaces = WorkspaceManager(settings.workspaces, instance=settings.instance_id)
        swept = self.workspaces.sweep()
        if swept:
            log.warning("removed %d workspace(s) left by a crashed process", len(swept))
        self.supervisor = Supervisor("local")
        self.janitor = Janitor(self.activity, self.supervisor, workers=settings.cleanup_workers, name="janitor")
        log.warning(WARNING)

    def open(self, plan: SandboxPlan) -> LocalSandbox:
        workspace = self.workspaces.create(
            plan.run_id, plan.skill.id, session_work=plan.session_work, session=plan.session, tenant=plan.tenant
        )
        sandbox = LocalSandbox(self, workspace, keep=self.settings.keep_workspaces)
        try:
            if plan.session_work is not None:
                # The session's work dir stands in for the run's own (a link locally).
                os.rmdir(workspace.root / "work/inputs")
                os.rmdir(workspace.root / "work")
                os.symlink(plan.session_work, workspace.root / "work")
            # The run's private copy of the skill, as on Docker (no /mnt/... paths here:
            # the local runtime shares the host's file system).
            sandbox.warnings += make_view(workspace, plan.skill.path, None)
        except BaseException:
            sandbox.close()
            raise
        return sandbox

    def health(self) -> dict[str, tuple[bool, str]]:
        return {"runtime": (True, "local subprocesses (no isolation)")}

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


class LocalSandbox(HostSandbox):
    def __init__(self, runtime: LocalRuntime, workspace: Workspace, *, keep: bool) -> None:
        super().__init__(workspace, str(workspace.root), runtime.janitor, discard=runtime.workspaces.discard, keep=keep)
        self.path = runtime.path

    def execute(self, command: Command) -> ExecResult:
        env = {"PATH": self.path, **command.env}
        started = time.monotonic()
        proc = subprocess.Popen(
            ["bash", "-c", command.command],
            cwd=command.cwd,
            env=env,
            stdin=subprocess.PIPE if command.stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
        )
        assert proc.stdout is not None and proc.stderr is not None
        out, err = BoundedBuffer(command.stdout_max), BoundedBuffer(command.stderr_max)
        readers = [
            pump(proc.stdout, out, "stdout", command.listener),
            pump(proc.stderr, err, "stderr", command.listener),
        ]
        if command.stdin is not None:
            threading.Thread(target=_feed, args=(proc, command.stdin), daemon=True).start()

        guard = Guard(started=started, timeout=command.timeout, cancel=command.cancel, disk=None)
        while True:
            try:
                proc.wait(timeout=max(0.001, min(guard.wait_time(), 0.05)))
                break
            except subprocess.TimeoutExpired:
                if guard.breached():
                    break
        # Kill the whole group: on timeout, on cancel, and leftovers after a normal exit.
        _kill_group(proc.pid)
        proc.wait()
        duration_ms = int((time.monotonic() - started) * 1000)
        drained = time.monotonic() + DRAIN_SECONDS
        warnings = []
        for reader in readers:
            reader.join(timeout=max(0.0, drained - time.monotonic()))
            if reader.is_alive():
                warnings.append("a process that left the run's process group still holds its output open")
        code = proc.returncode
        sig = None
        if code is not None and code < 0:
            sig = signal.Signals(-code).name
            code = 128 - code
        if guard.timed_out or guard.cancelled:
            code, sig = 128 + signal.SIGKILL, "SIGKILL"
        return ExecResult(
            exit_code=code,
            stdout=out.data,
            stderr=err.data,
            duration_ms=duration_ms,
            stdout_truncated=out.truncated,
            stderr_truncated=err.truncated,
            timed_out=guard.timed_out,
            cancelled=guard.cancelled,
            signal=sig,
            warnings=warnings,
        )


def _feed(proc: subprocess.Popen[bytes], data: bytes) -> None:
    stdin = proc.stdin
    if stdin is None:
        return
    try:
        stdin.write(data)
    except OSError:
        pass
    finally:
        try:
            stdin.close()
        except OSError:
            pass


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
