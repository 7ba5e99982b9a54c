"""The local runtime: a plain subprocess on the service's machine (development only).

It isolates nothing beyond a fresh workspace, a private copy of the skill and a clean
environment: the command runs as the service's user, with its network and its view
of the file system (so no ``/mnt/...`` paths of the hosted products either).  Use it
to develop skills, never to run untrusted ones.

What its box guarantees: the command in its own session and process group, stdin from
the request (closed otherwise), stdout/stderr streamed as they arrive (bounded by the
caller, :mod:`skill_executor.runs.sandbox`), the service's environment never passed on,
and on a kill or at the command's exit the whole process group killed (a process that
left the group, ``setsid``, is not).  It enforces no disk cap.
"""

from __future__ import annotations

import logging
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Iterator

from ..config import Settings
from ..policy import unenforceable
from ..workspace.layout import Workspace
from . import egress
from .base import Chunk, ProcessSpec, SandboxPlan
from .host import SharedBox
from .hostpython import check_host_python
from .housekeeping import Housekeeping
from .limits import Cap
from .skillcopy import make_view

log = logging.getLogger(__name__)

WARNING = (
    "the local runtime isolates nothing: commands run as this service's user with its "
    "network and file system; use it for development only (--runtime bwrap isolates runs without Docker)"
)
#: How long to wait for output pipes to drain once the command has ended.
DRAIN_SECONDS = 2.0
#: The most read from a pipe at once.
CHUNK = 64 * 1024


class LocalRuntime(Housekeeping):
    name = "local"
    owner: tuple[int, int] | None = None
    #: Runs see skills at per-run host paths; the overview shows the source path.
    visible_skills_dir: str | None = None
    #: Runs use the skills' dependency environments at their host paths.
    visible_envs_dir: str | None = None
    skill_envs = True
    #: No disk cap at all (development only; SKILL_EXECUTOR_DISK_CAP does not apply).
    disk_cap = "none"
    #: No sandbox to enforce a rule's allow/deny in: such runs are refused (policy_unenforceable).
    exec_policy = False

    def __init__(self, settings: Settings, *, path: str = "/usr/local/bin:/usr/bin:/bin") -> None:
        super().__init__(settings, "local")
        self.settings = settings
        self.path = path
        log.warning(WARNING)

    def claim(self, plan: SandboxPlan) -> LocalBox:
        if plan.exec_rule is not None:
            raise unenforceable(plan.exec_rule, self.name)
        egress.refuse(self.name, plan.egress)  # no sandbox: nothing to keep its network to the gateway
        check_host_python(plan.python, "local", self.path)
        workspace = self.workspaces.create(
            plan.run_id, plan.skill.id, session_work=plan.session_work, session=plan.session, tenant=plan.tenant
        )
        box = LocalBox(self, workspace, keep=self.settings.keep_workspaces)
        try:
            if plan.session_work is not None:
                # The session's work dir stands in for the run's own (a link locally).
                os.rmdir(workspace.root / "work/inputs")
                os.rmdir(workspace.root / "work")
                os.symlink(plan.session_work, workspace.root / "work")
            # The run's private copy of the skill, as on Docker (no /mnt/... paths here:
            # the local runtime shares the host's file system).
            box.warnings += make_view(workspace, plan.skill.path, None)
        except BaseException:
            box.release()
            raise
        return box

    def health(self) -> dict[str, tuple[bool, str]]:
        return {"runtime": (True, "local subprocesses (no isolation)")}


class LocalBox(SharedBox):
    def __init__(self, runtime: LocalRuntime, workspace: Workspace, *, keep: bool) -> None:
        super().__init__(workspace, str(workspace.root), runtime.janitor, discard=runtime.workspaces.discard, keep=keep)
        self.path = runtime.path

    def _start(self, spec: ProcessSpec) -> LocalProcess:
        return LocalProcess(spec, {"PATH": self.path, **spec.env})


class LocalProcess:
    """``argv`` in its own session and process group; its pipes read without threads
    (a selector over both pipes and the process's pidfd)."""

    disk: Cap | None = None

    def __init__(self, spec: ProcessSpec, env: dict[str, str]) -> None:
        self.warnings: list[str] = []
        self.started = time.monotonic()
        self.proc = self._spawn(spec, env)
        assert self.proc.stdout is not None and self.proc.stderr is not None
        try:
            self._pidfd = os.pidfd_open(self.proc.pid)
        except OSError:
            self._end()
            self.proc.wait()
            raise
        self._selector = selectors.DefaultSelector()
        self._open = 0
        for name, stream in (("stdout", self.proc.stdout), ("stderr", self.proc.stderr)):
            os.set_blocking(stream.fileno(), False)
            self._selector.register(stream, selectors.EVENT_READ, name)
            self._open += 1
        self._selector.register(self._pidfd, selectors.EVENT_READ, None)
        self._drained = float("inf")
        self._exited = False
        self.ended = False
        if spec.stdin is not None:
            threading.Thread(target=_feed, args=(self.proc, spec.stdin), daemon=True).start()

    def _spawn(self, spec: ProcessSpec, env: dict[str, str]) -> subprocess.Popen[bytes]:
        """The started process (its stdout and stderr pipes; stdin a pipe when given)."""
        return subprocess.Popen(
            spec.argv,
            cwd=spec.cwd,
            env=env,
            stdin=subprocess.PIPE if spec.stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
        )

    def _end(self) -> None:
        """SIGKILL everything of the run this process can reach: its process group."""
        _kill_group(self.proc.pid)

    def _ended(self) -> None:
        """Called by :meth:`wait` once the process is reaped (nothing more to end here)."""

    def events(self, timeout: float) -> Iterator[Chunk]:
        if self.ended:
            return
        timeout = min(timeout, max(0.0, self._drained - time.monotonic()))
        for key, _ in self._selector.select(timeout=timeout):
            if key.data is None:
                # It exited: kill what is left of its group (leftovers of a normal exit
                # too), then read what they wrote until the pipes close, for a bounded time.
                self._selector.unregister(key.fileobj)
                self._exited = True
                self._end()
                self._drained = time.monotonic() + DRAIN_SECONDS
                continue
            try:
                chunk = os.read(key.fd, CHUNK)
            except BlockingIOError:
                continue
            except OSError:
                chunk = b""
            if chunk:
                yield key.data, chunk
            else:
                self._selector.unregister(key.fileobj)
                self._open -= 1
        if self._exited and (self._open == 0 or time.monotonic() >= self._drained):
            if self._open:
                self.warnings.append("a process that left the run's process group still holds its output open")
            self.ended = True

    def kill(self) -> None:
        self._end()

    def wait(self) -> int | None:
        # Kill the whole group: on timeout, on cancel, and leftovers after a normal exit.
        self._end()
        self.proc.wait()
        self._ended()
        self._selector.close()
        os.close(self._pidfd)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        code = self.proc.returncode
        return 128 - code if code < 0 else code


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
