"""The two Docker boxes: a container of its own per run (cold), or a started,
single-use container of the warm pool driven through its launcher (warm).

Both share the workspace with the command (a bind mount), hold a run to the same disk
cap (:mod:`skill_executor.runtimes.limits`) and leave nothing of it alive once
:meth:`~skill_executor.runtimes.base.Process.wait` returns: a cold container has exited (its
init ends every process with it) or is removed; a warm container is killed as soon as
the command's exit status arrives.  Deadline, cancellation and bounded output are the
caller's (:mod:`skill_executor.runs.sandbox`), the same for every runtime.
"""

from __future__ import annotations

import selectors
import signal as signals
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath

from docker.types import Mount

from ...config import Settings
from ...errors import Unavailable
from ...workspace.layout import EXEC_POLICY_FILE, STDIN_FILE, Workspace
from ..base import BoxVerdict, Chunk, ProcessSpec, SandboxPlan
from ..host import SharedBox, shell
from ..janitor import Janitor
from ..limits import Cap, DiskCap, VolumeCap
from ..streams import Demux, ProtocolError, Relay
from .egress import egress_mounts
from .engine import CONTAINER_WORKSPACE, LABEL_DEADLINE, LABEL_RUN, Engine, launcher_argv
from .hostview import emptied, oom_kills
from .launcher import LauncherFrames, connect_unix, read_verdict, request_bytes, unpublish
from .pool import WarmContainer

#: Called with (run id, container id) while a run's container executes, (run id, None) after.
Track = Callable[[str, str | None], None]
#: The size of the buffer a stream is read into.
READ_BUFFER = 256 * 1024
#: How long a kill through the engine is waited for.
KILL_SECONDS = 30.0
#: How long a killed gVisor sandbox's processes (its stubs, its gofer) may take to be gone
#: before the container is removed instead.
GVISOR_TEARDOWN_SECONDS = 5.0


class DockerBox(SharedBox):
    """What both Docker boxes share: stdin, the disk cap."""

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

    def _judge(
        self, disk: Cap, code: int | None, oom: bool, warnings: list[str], denied: dict[str, str] | None = None
    ) -> None:
        """The verdict once the process has ended (``denied``: the exec the launcher refused)."""
        disk_hit = disk.reached(code)
        self._verdict = BoxVerdict(
            oom, disk_hit, (*warnings, *([disk.warning()] if disk_hit else [])), policy_denied_exec=denied
        )

    def _write_exec_policy(self, spec: ProcessSpec, trusted: int) -> tuple[str, str] | None:
        """For a run under a rule with allow/deny: the policy file the exec-mode launcher reads
        (and removes) before the command starts, and the nonce naming its verdict file; None
        without such a rule."""
        rule = self.plan.exec_rule
        if rule is None:
            return None
        return f"{CONTAINER_WORKSPACE}/{EXEC_POLICY_FILE}", self.write_exec_policy(rule, trusted=trusted)


class ColdBox(DockerBox):
    """A fresh container per run: create -> attach -> start -> (its stream to the end) -> wait."""

    #: The run's container, once it has exited: removed by the janitor (:meth:`discard_first`),
    #: off the run's path -- nothing of it is alive, it only holds the engine's records.
    _exited: str | None = None
    #: The nonce naming the launcher's verdict file (a run under an exec policy).
    _nonce: str | None = None

    def _config(self, spec: ProcessSpec, stdin_path: str) -> dict[str, object]:
        ws = self.workspace
        timeout = spec.timeout if spec.timeout is not None else self.settings.max_timeout
        # The skill is in the workspace already (the run's private copy, as on a warm container).
        mounts = [Mount(CONTAINER_WORKSPACE, str(ws.root), type="bind", read_only=False)]
        if ws.work != ws.root / "work":
            mounts.append(Mount(f"{CONTAINER_WORKSPACE}/work", str(ws.work), type="bind", read_only=False))
        argv = spec.argv
        if stdin_path:
            # A constant wrapper: the argv and the file travel as arguments, never spliced.
            argv = ["bash", "-c", 'exec "$@" < "$0"', stdin_path, *argv]
        # The launcher's exec mode puts the command under the same seccomp filter as a warm run
        # (and, under a rule with allow/deny, under its exec supervisor; the shell of the stdin
        # wrapper, then the command's, are the runtime's own execs).
        policy = self._write_exec_policy(spec, trusted=2 if stdin_path else 1)
        options: list[str] = []
        if policy is not None:
            options, self._nonce = ["--policy", policy[0]], policy[1]
        env = spec.env
        egress = self.plan.egress
        if egress is not None:
            env = {**env, **egress.environment()}  # the path's variables win over the run's own
            mounts += egress_mounts(egress, bridge=self.plan.network_of is None)
            if self.plan.network_of is None:  # else the session's host has the bridge on the shared loopback
                options += egress.launcher_option()
        argv = [*launcher_argv(self.settings, "--exec"), *options, "--", *argv]
        return self.engine.config(
            command=argv,
            cwd=spec.cwd,
            env=env,
            mounts=mounts,
            labels={LABEL_RUN: self.plan.run_id, LABEL_DEADLINE: f"{time.time() + timeout:.0f}"},
            image=self.engine.image_for(self.plan.python),
            network_of=self.plan.network_of,
        )

    def discard_first(self) -> Callable[[], None] | None:
        container_id, engine = self._exited, self.engine
        if container_id is None:
            return None

        def remove() -> None:
            engine.remove(container_id, strict=True)

        return remove

    def _start(self, spec: ProcessSpec) -> ColdProcess:
        stdin_path = self._write_stdin(spec.stdin)
        disk = self._disk_cap()
        started = time.monotonic()
        container_id = self.engine.create(self._config(spec, stdin_path))
        self._track(self.plan.run_id, container_id)
        raw: socket.socket | None = None
        try:
            raw = self.engine.attach(container_id)
            self.engine.start(container_id)
        except BaseException:
            if raw is not None:
                _close(raw)
            self._track(self.plan.run_id, None)
            self.engine.remove(container_id)
            raise
        return ColdProcess(self, container_id, raw, started, disk)


class ColdProcess:
    """A cold container's command: its attach stream (Docker's 8-byte frame headers), read
    without threads; killed through the engine."""

    def __init__(self, box: ColdBox, container_id: str, raw: socket.socket, started: float, disk: Cap) -> None:
        self.box = box
        self.container_id = container_id
        self.raw = raw
        self.started = started
        self.disk: Cap | None = disk
        self.ended = False
        self.warnings: list[str] = []
        self._pending: list[Chunk] = []
        self._demux = Demux(
            8,
            _attach_header,
            {1: ("stdout", Relay("stdout", self._pending)), 2: ("stderr", Relay("stderr", self._pending))},
            None,
        )
        self._buffer = bytearray(READ_BUFFER)
        self._selector = selectors.DefaultSelector()
        self._selector.register(raw, selectors.EVENT_READ)
        self._waited = False
        self._killer: threading.Thread | None = None

    def events(self, timeout: float) -> Iterator[Chunk]:
        if self.ended or not self._selector.select(timeout=timeout):
            return
        try:
            count = self.raw.recv_into(self._buffer)
        except OSError:
            count = 0
        if not count:
            self.ended = True  # the container's output is over: it has exited (or is killed)
            return
        self._demux.feed(memoryview(self._buffer)[:count])
        yield from self._pending
        self._pending.clear()

    def kill(self) -> None:
        """Through the engine, on a thread of its own: the engine does not answer before the
        container's output is drained, which the caller goes on doing meanwhile."""
        if self._killer is None:
            self._killer = threading.Thread(
                target=self.box.engine.kill, args=(self.container_id,), name="cold-kill", daemon=True
            )
            self._killer.start()

    def wait(self) -> int | None:
        if self._waited:
            raise RuntimeError("waited twice")
        self._waited = True
        box, engine, container_id = self.box, self.box.engine, self.container_id
        # The output is over or given up: nothing reads the stream any more (an unread
        # stream would hold the engine's answers back).
        self._selector.close()
        _close(self.raw)
        try:
            if self._killer is not None:
                self._killer.join(timeout=KILL_SECONDS)
            code = engine.wait(container_id)
            if code is not None and not engine.gvisor:
                # runc: the init's exit is reported after the kernel has reaped its whole PID
                # namespace, so nothing of the run is alive.  (gVisor is not relied on for that:
                # there the container is removed before the outputs are read.)
                box._exited = container_id
            oom = False
            if code is None or code == 128 + signals.SIGKILL:
                # Only a SIGKILL can be the OOM killer's; ask the engine then (one call saved otherwise).
                state = engine.state(container_id)
                oom = bool(state.get("OOMKilled"))
                code = code if code is not None else state.get("ExitCode")
        finally:
            box._track(box.plan.run_id, None)
            if box._exited != container_id:
                # Not seen to exit (an engine error, or the wait failed): kill and remove
                # it now, before anything reads the run's folders.
                engine.remove(container_id)
        denied = read_verdict(box.workspace, box._nonce) if box._nonce is not None else None
        assert self.disk is not None
        box._judge(self.disk, code, oom, [], denied)
        return code


class WarmBox(DockerBox):
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

    def discard_first(self) -> Callable[[], None] | None:
        self._track(self.plan.run_id, None)  # tracked since the runtime handed it out
        engine, warm = self.engine, self.warm

        def remove() -> None:
            if warm.init is not None:
                warm.init.close()
            engine.remove(warm.id, strict=True)

        return remove

    def end_container(self) -> bool | None:
        """Nothing of the run may outlive its exit status: end the whole container now
        (its init, and so its PID namespace; through the engine when the init is not held).
        On gVisor the sandbox is no namespace's init and its stubs die a moment after it:
        wait until nothing in the container's cgroup can run code (else remove it).  A
        container removed here takes its state with it: the engine's word on an OOM kill is
        read first and returned (None: not removed, ask the engine)."""
        init = self.warm.init
        if not (init is not None and init.kill()):
            self.engine.kill(self.warm.id)
            self.engine.wait(self.warm.id, timeout=5)
        if self.engine.gvisor and not emptied(self.warm.id, GVISOR_TEARDOWN_SECONDS):
            oom = self.engine.oom_killed(self.warm.id, timeout=GVISOR_TEARDOWN_SECONDS)
            self.engine.remove(self.warm.id, strict=True)
            return oom
        return None

    def _start(self, spec: ProcessSpec) -> WarmProcess:
        """Send the command to the launcher of the warm container; its frames are read by
        the caller, one thread doing it all."""
        command = shell(spec.argv)
        stdin_path = self._write_stdin(spec.stdin)
        disk = self._disk_cap()
        self._track(self.plan.run_id, self.warm.id)
        started = time.monotonic()
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connect_unix(conn, self.warm.socket)
            unpublish(self.workspace)
            rule = self.plan.exec_rule
            policy = rule.spec(root=self.skill_root(), trusted=1) if rule is not None else b""
            conn.sendall(request_bytes(command, spec.cwd, stdin_path, spec.env, policy))
        except OSError as exc:
            conn.close()
            self._track(self.plan.run_id, None)
            raise Unavailable(f"the warm container's launcher is unreachable: {exc}", code="engine_error") from None
        return WarmProcess(self, conn, started, disk)


class WarmProcess:
    """The launcher's frames (``O``, ``E``, one ``X``) on its socket; killed through the engine."""

    def __init__(self, box: WarmBox, conn: socket.socket, started: float, disk: Cap) -> None:
        self.box = box
        self.conn = conn
        self.started = started
        self.disk: Cap | None = disk
        self.ended = False
        self.warnings: list[str] = []
        self._pending: list[Chunk] = []
        self.frames = LauncherFrames(
            0, 0, None, outputs=(Relay("stdout", self._pending), Relay("stderr", self._pending))
        )
        self._buffer = bytearray(READ_BUFFER)
        self._view = memoryview(self._buffer)
        self._selector = selectors.DefaultSelector()
        self._selector.register(conn, selectors.EVENT_READ)
        self._broken: str | None = None
        self._killed = False
        self._waited = False

    def events(self, timeout: float) -> Iterator[Chunk]:
        if self.ended or not self._selector.select(timeout=timeout):
            return
        try:
            count = self.conn.recv_into(self._buffer)
        except OSError:
            count = 0
        if not count:
            self.ended = True
            return
        try:
            self.frames.feed(self._view[:count])
        except ProtocolError as exc:
            self._broken = str(exc)
            self.ended = True
        yield from self._pending
        self._pending.clear()
        if self.frames.exited:
            self.ended = True

    def kill(self) -> None:
        self._killed = True
        self.box.engine.kill(self.box.warm.id)

    def wait(self) -> int | None:
        if self._waited:
            raise RuntimeError("waited twice")
        self._waited = True
        box, frames = self.box, self.frames
        self._selector.close()
        self.conn.close()
        try:
            warm = box.warm
            oom = bool(oom_kills(warm.id))
            # Before anything reads the run's folders: whatever the command started (or a
            # launcher it subverted claims) is gone.
            removed_oom = box.end_container()
            if not oom and not frames.exited and self._broken is None:
                oom = removed_oom if removed_oom is not None else box.engine.oom_killed(warm.id)
        finally:
            box._track(box.plan.run_id, None)
        code: int | None
        warnings = []
        if self._broken is not None:
            code = None
            warnings.append(f"the run's launcher broke its protocol ({self._broken}); the run was stopped")
        elif frames.exited:
            code = frames.exit_code
        elif self._killed or oom:
            code = 128 + signals.SIGKILL
        else:
            code = None
            warnings.append("the run's launcher ended without reporting an exit status")
        assert self.disk is not None
        box._judge(self.disk, code, oom, warnings, frames.policy_denied_exec)
        return code


def _attach_header(header: bytes) -> tuple[int, int]:
    return header[0], int.from_bytes(header[4:8], "big")


def _close(raw: socket.socket) -> None:
    try:
        raw.close()
    except OSError:
        pass
