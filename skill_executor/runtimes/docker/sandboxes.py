"""The two Docker sandboxes: a container of its own per run (cold), or a started,
single-use container of the warm pool driven through its launcher (warm).

Both hold a run to the same limits (:mod:`skill_executor.runtimes.limits`) and leave nothing
of it alive before outputs are collected: a cold container has exited (its init ends
every process with it) and is removed; a warm container is killed as soon as the
command's exit status arrives.
"""

from __future__ import annotations

import selectors
import signal as signals
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from docker.types import Mount

from ...config import Settings
from ...errors import Unavailable
from ...workspace.layout import STDIN_FILE, Workspace
from ..base import Command, ExecResult, SandboxPlan
from ..host import HostSandbox
from ..janitor import Janitor
from ..limits import Cap, DiskCap, Guard, VolumeCap, signal_name
from ..streams import BoundedBuffer, Demux, ProtocolError, recv_loop
from .engine import CONTAINER_WORKSPACE, LABEL_DEADLINE, LABEL_RUN, Engine, launcher_argv, oom_kills
from .launcher import LauncherFrames, connect_unix, request_bytes, unpublish
from .pool import WarmContainer

#: Called with (run id, container id) while a run's container executes, (run id, None) after.
Track = Callable[[str, str | None], None]


class DockerSandbox(HostSandbox):
    """What both Docker sandboxes share: stdin, the disk cap, the result."""

    def __init__(
        self,
        workspace: Workspace,
        *,
        plan: SandboxPlan,
        engine: Engine,
        janitor: Janitor,
        settings: Settings,
        track: Track,
        discard: Callable[[Path], None],
    ) -> None:
        super().__init__(workspace, CONTAINER_WORKSPACE, janitor, discard=discard, keep=settings.keep_workspaces)
        self.plan = plan
        self.engine = engine
        self.settings = settings
        self._track = track

    def _write_stdin(self, stdin: bytes | None) -> str:
        """Put the command's stdin in the run folder; its path as the command sees it."""
        if stdin is None:
            return ""
        top, _, name = STDIN_FILE.partition("/")
        with self.workspace.tree(top) as tree:
            tree.write(PurePosixPath(name), stdin, owner=None, mode=0o444, what="the run's stdin")
        return f"{CONTAINER_WORKSPACE}/{STDIN_FILE}"

    def _disk_cap(self) -> Cap:
        """The run's disk cap, from now on (its skill copy, inputs and stdin are in)."""
        kind = VolumeCap if self.settings.disk_cap == "hard" else DiskCap
        return kind(self.workspace, self.settings.docker_disk_bytes, self.plan.session_disk_max)

    @staticmethod
    def _result(
        *,
        code: int | None,
        out: BoundedBuffer,
        err: BoundedBuffer,
        started: float,
        guard: Guard,
        disk: Cap,
        oom: bool,
        warnings: list[str],
    ) -> ExecResult:
        disk_hit = guard.disk_hit or disk.reached(code)
        return ExecResult(
            exit_code=code,
            stdout=out.data,
            stderr=err.data,
            duration_ms=int((time.monotonic() - started) * 1000),
            stdout_truncated=out.truncated,
            stderr_truncated=err.truncated,
            timed_out=guard.timed_out,
            cancelled=guard.cancelled,
            signal=signal_name(code),
            oom_killed=oom,
            disk_limit_hit=disk_hit,
            warnings=[*warnings, *([disk.warning()] if disk_hit else [])],
        )


class ColdSandbox(DockerSandbox):
    """A fresh container per run: create -> attach -> start -> wait (deadline) -> remove."""

    def _config(self, command: Command, stdin_path: str) -> dict[str, object]:
        ws = self.workspace
        # The skill is in the workspace already (the run's private copy, as on a warm container).
        mounts = [Mount(CONTAINER_WORKSPACE, str(ws.root), type="bind", read_only=False)]
        if ws.work != ws.root / "work":
            mounts.append(Mount(f"{CONTAINER_WORKSPACE}/work", str(ws.work), type="bind", read_only=False))
        argv = ["bash", "-c", command.command]
        if stdin_path:
            # A constant wrapper: the command and the file travel as arguments, never spliced.
            argv = ["bash", "-c", 'exec bash -c "$0" < "$1"', command.command, stdin_path]
        # The launcher's exec mode puts the command under the same seccomp filter as a warm run.
        argv = [*launcher_argv(self.settings, "--exec"), "--", *argv]
        return self.engine.config(
            command=argv,
            cwd=command.cwd,
            env=command.env,
            mounts=mounts,
            labels={LABEL_RUN: self.plan.run_id, LABEL_DEADLINE: f"{time.time() + command.timeout:.0f}"},
        )

    #: The run's container, once it has exited: removed by the janitor (:meth:`release`),
    #: off the run's path -- nothing of it is alive, it only holds the engine's records.
    _exited: str | None = None

    def release(self) -> Callable[[], None] | None:
        container_id, engine = self._exited, self.engine
        if container_id is None:
            return None

        def remove() -> None:
            engine.remove(container_id, strict=True)

        return remove

    def execute(self, command: Command) -> ExecResult:
        stdin_path = self._write_stdin(command.stdin)
        disk = self._disk_cap()
        started = time.monotonic()
        container_id = self.engine.create(self._config(command, stdin_path))
        self._track(self.plan.run_id, container_id)
        try:
            return self._supervise(container_id, command, started, disk)
        finally:
            self._track(self.plan.run_id, None)
            if self._exited != container_id:
                # Not seen to exit (an engine error, or the wait failed): kill and remove
                # it now, before anything reads the run's folders.
                self.engine.remove(container_id)

    def _supervise(self, container_id: str, command: Command, started: float, disk: Cap) -> ExecResult:
        out, err = BoundedBuffer(command.stdout_max), BoundedBuffer(command.stderr_max)
        raw = self.engine.attach(container_id)
        # Docker's stream multiplexing: 8-byte headers, [stream, 0, 0, 0, size (big-endian)].
        demux = Demux(8, _attach_header, {1: ("stdout", out), 2: ("stderr", err)}, command.listener)
        done = threading.Event()

        def pump() -> None:
            try:
                recv_loop(raw, demux)
            finally:
                done.set()

        reader = threading.Thread(target=pump, name="attach-reader", daemon=True)
        reader.start()
        try:
            self.engine.start(container_id)
        except Unavailable:
            _close(raw)
            raise
        guard = Guard(started=started, timeout=command.timeout, cancel=command.cancel, disk=disk)
        while not done.wait(timeout=guard.wait_time()):
            if guard.breached():
                self.engine.kill(container_id)
                break
        code = self.engine.wait(container_id)
        if code is not None and not self.engine.gvisor:
            # runc: the init's exit is reported after the kernel has reaped its whole PID
            # namespace, so nothing of the run is alive.  (gVisor is not relied on for that:
            # there the container is removed before the outputs are read.)
            self._exited = container_id
        reader.join(timeout=2.0)
        _close(raw)
        oom = False
        if code is None or code == 128 + signals.SIGKILL:
            # Only a SIGKILL can be the OOM killer's; ask the engine then (one call saved otherwise).
            state = self.engine.state(container_id)
            oom = bool(state.get("OOMKilled"))
            code = code if code is not None else state.get("ExitCode")
        return self._result(code=code, out=out, err=err, started=started, guard=guard, disk=disk, oom=oom, warnings=[])


class WarmSandbox(DockerSandbox):
    """A started pool container, used once through its launcher, then destroyed."""

    def __init__(
        self,
        workspace: Workspace,
        warm: WarmContainer,
        *,
        plan: SandboxPlan,
        engine: Engine,
        janitor: Janitor,
        settings: Settings,
        track: Track,
        discard: Callable[[Path], None],
    ) -> None:
        super().__init__(
            workspace, plan=plan, engine=engine, janitor=janitor, settings=settings, track=track, discard=discard
        )
        self.warm = warm

    def release(self) -> Callable[[], None] | None:
        self._track(self.plan.run_id, None)  # tracked since the runtime handed it out
        engine, warm = self.engine, self.warm

        def remove() -> None:
            if warm.init is not None:
                warm.init.close()
            engine.remove(warm.id, strict=True)

        return remove

    def _end_container(self) -> None:
        """Nothing of the run may outlive its exit status: end the whole container now
        (its init, and so its PID namespace; through the engine when the init is not held)."""
        init = self.warm.init
        if init is not None and init.kill():
            return
        self.engine.kill(self.warm.id)
        self.engine.wait(self.warm.id, timeout=5)

    def execute(self, command: Command) -> ExecResult:
        """Run the command through the launcher of a warm container.

        One thread does it all: send the request, read output frames as they come,
        and watch the deadline, cancellation and the disk cap in between.
        """
        stdin_path = self._write_stdin(command.stdin)
        disk = self._disk_cap()
        self._track(self.plan.run_id, self.warm.id)
        try:
            return self._drive(command, stdin_path, disk)
        finally:
            self._track(self.plan.run_id, None)

    def _drive(self, command: Command, stdin_path: str, disk: Cap) -> ExecResult:
        warm = self.warm
        started = time.monotonic()
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connect_unix(conn, warm.socket)
            unpublish(self.workspace)
            conn.sendall(request_bytes(command.command, command.cwd, stdin_path, command.env))
        except OSError as exc:
            conn.close()
            raise Unavailable(f"the warm container's launcher is unreachable: {exc}", code="engine_error") from None
        frames = LauncherFrames(command.stdout_max, command.stderr_max, command.listener)
        buffer = bytearray(256 * 1024)
        view = memoryview(buffer)
        guard = Guard(started=started, timeout=command.timeout, cancel=command.cancel, disk=disk)
        killed = False
        broken: str | None = None
        with conn, selectors.DefaultSelector() as selector:
            selector.register(conn, selectors.EVENT_READ)
            eof_deadline = float("inf")
            while not frames.exited:
                if time.monotonic() >= eof_deadline:
                    break  # killed, but the stream did not close: stop waiting
                wait = guard.wait_time() if not killed else max(0.0, eof_deadline - time.monotonic())
                if selector.select(timeout=wait):
                    try:
                        count = conn.recv_into(buffer)
                    except OSError:
                        count = 0
                    if not count:
                        break
                    try:
                        frames.feed(view[:count])
                    except ProtocolError as exc:
                        broken = str(exc)
                        break
                # Checked on every pass: a command that floods its output keeps the socket
                # readable, and must still meet its deadline.
                if not killed and guard.breached():
                    self.engine.kill(warm.id)
                    killed = True
                    eof_deadline = time.monotonic() + 5.0
        warnings = []
        oom = bool(oom_kills(warm.id))
        # Before anything reads the run's folders: whatever the command started (or a
        # launcher it subverted claims) is gone.
        self._end_container()
        if not oom and not frames.exited and broken is None:
            oom = self.engine.oom_killed(warm.id)
        code: int | None
        if broken is not None:
            code = None
            warnings.append(f"the run's launcher broke its protocol ({broken}); the run was stopped")
        elif frames.exited:
            code = frames.exit_code
        elif killed or oom:
            code = 128 + signals.SIGKILL
        else:
            code = None
            warnings.append("the run's launcher ended without reporting an exit status")
        return self._result(
            code=code,
            out=frames.out,
            err=frames.err,
            started=started,
            guard=guard,
            disk=disk,
            oom=oom,
            warnings=warnings,
        )


def _attach_header(header: bytes) -> tuple[int, int]:
    return header[0], int.from_bytes(header[4:8], "big")


def _close(raw: socket.socket) -> None:
    try:
        raw.close()
    except OSError:
        pass
