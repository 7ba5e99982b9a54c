"""The local runtime: a plain subprocess on the service's machine (development only).

It isolates nothing beyond a fresh workspace, a copy of the skill and a clean
environment: the command runs as the service's user, with its network and its view
of the file system.  Use it to develop skills, never to run untrusted ones.

What it does guarantee: ``bash -c`` in its own process group, stdin from the request
(closed otherwise), stdout/stderr bounded while read, the service's environment never
passed on, and on timeout the whole process group killed.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from ..activity import Activity
from ..skills import Skill
from ..workspace.layout import Workspace, WorkspaceManager, build_view
from .base import ExecResult, ExecSpec, RuntimePaths
from .skillcopy import copy_skill, make_read_only
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

    def __init__(self, *, path: str = "/usr/local/bin:/usr/bin:/bin") -> None:
        self.path = path
        self.activity = Activity()
        log.warning(WARNING)

    def create_workspace(
        self,
        manager: WorkspaceManager,
        run_id: str,
        skill_id: str,
        *,
        session_work: Path | None,
        session: str | None,
        tenant: str,
    ) -> Workspace:
        return manager.create(
            run_id, skill_id, session_work=session_work, session=session, owner=self.owner, tenant=tenant
        )

    def paths(self, workspace: Workspace) -> RuntimePaths:
        return RuntimePaths(str(workspace.root))

    def prepare(self, workspace: Workspace, skill: Skill) -> list[str]:
        warnings = copy_skill(skill.path, workspace.skill_source)
        make_read_only(workspace.skill_source)
        if workspace.session is not None:
            # The session's work dir stands in for the run's own (a link locally).
            os.rmdir(workspace.root / "work/inputs")
            os.rmdir(workspace.root / "work")
            os.symlink(workspace.work, workspace.root / "work")
        return warnings + build_view(workspace, sorted(os.listdir(workspace.skill_source)))

    def execute(self, spec: ExecSpec) -> ExecResult:
        env = {"PATH": self.path, **spec.env}
        started = time.monotonic()
        proc = subprocess.Popen(
            ["bash", "-c", spec.command],
            cwd=spec.cwd,
            env=env,
            stdin=subprocess.PIPE if spec.stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
        )
        out, err = BoundedBuffer(spec.stdout_max), BoundedBuffer(spec.stderr_max)
        readers = [pump(proc.stdout, out, "stdout", spec.listener), pump(proc.stderr, err, "stderr", spec.listener)]  # type: ignore[arg-type]
        if spec.stdin is not None:
            threading.Thread(target=_feed, args=(proc, spec.stdin), daemon=True).start()

        timed_out = cancelled = False
        deadline = started + spec.timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            try:
                proc.wait(timeout=min(remaining, 0.05))
                break
            except subprocess.TimeoutExpired:
                if spec.cancel is not None and spec.cancel.is_set():
                    cancelled = True
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
        if timed_out or cancelled:
            code, sig = 128 + signal.SIGKILL, "SIGKILL"
        return ExecResult(
            exit_code=code,
            stdout=out.data,
            stderr=err.data,
            duration_ms=duration_ms,
            stdout_truncated=out.truncated,
            stderr_truncated=err.truncated,
            timed_out=timed_out,
            cancelled=cancelled,
            signal=sig,
            warnings=warnings,
        )

    def cleanup(self, workspace: Workspace) -> None:
        return None

    def close(self) -> None:
        return None


def _feed(proc: subprocess.Popen[bytes], data: bytes) -> None:
    try:
        assert proc.stdin is not None
        proc.stdin.write(data)
    except (BrokenPipeError, OSError):
        pass
    finally:
        try:
            proc.stdin.close()  # type: ignore[union-attr]
        except OSError:
            pass


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
