"""A session's interactive processes on Docker: one long-lived container per session (its
*host*), each process a ``docker exec`` into it.

The host is made by :meth:`Engine.config` like every run's container (the same image,
user, dropped capabilities, read-only root, no network, memory/CPU/pids limits, init) with
the session's ``work/`` as ``/workspace/work``; it runs ``sleep infinity`` under the init
and is removed (everything in it killed) when its session's last process has ended.  A
run of the same session joins the host's network namespace (:attr:`DockerHost.network_of`),
so a server a process started on 127.0.0.1 answers the run, and nothing else.

A process is started as ``bash -c 'echo $$; exec "$@"'``: the exec'd process is a session and
group leader in the container (``docker exec`` makes it one, with or without a TTY), so a
signal to ``-<pid>`` reaches it and everything it started in its group.  Its pid is the first
line of its stream, read before anything of the process runs and kept here: nothing in the
sandbox (where the process may write anything) tells the service whom to signal.
What leaves its process's group and session (``setsid``, a daemon's double fork) is reaped
when a process ends: every process of the host in a session that is neither the host's
first process's nor a live process's is killed (:meth:`DockerHost.reap`).
"""

from __future__ import annotations

import select
import signal as signals
import socket
import threading
import time
from pathlib import Path

from docker.types import Mount

from ...config import Settings
from ...errors import Conflict, Unavailable
from ..egress import EgressPath
from .egress import egress_mounts
from .engine import CONTAINER_WORKSPACE, ENGINE_ERRORS, LABEL_DEADLINE, LABEL_RUN, Engine, launcher_argv

#: How long a start waits for the process's wrapper to say its pid (its stream's first line).
PID_WAIT_SECONDS = 10.0
#: Kills every process whose session (the 4th field after the command's name in its stat) is
#: not the host's first process's, the script's own, nor one of the arguments.
REAP_SCRIPT = (
    'keep=" 1 $$ $* "; for d in /proc/[0-9]*; do IFS= read -r l < "$d/stat" 2>/dev/null || continue; '
    'set -- ${l##*) }; case "$keep" in *" $4 "*) ;; *) kill -9 "${d#/proc/}" 2>/dev/null;; esac; done; true'
)
#: How long a write waits for a process that does not read its stdin (then 409 process_stdin_full).
WRITE_WAIT_SECONDS = 10.0
#: The size of one read of a process's output stream.
READ_BYTES = 64 * 1024
#: How long after its stream ended a process's exit status is waited for.
EXIT_WAIT_SECONDS = 5.0


class DockerHost:
    """One session's long-lived container; processes are ``docker exec``\\ s into it."""

    def __init__(
        self,
        engine: Engine,
        settings: Settings,
        work: Path,
        *,
        key: str,
        lifetime: float,
        egress: EgressPath | None = None,
    ) -> None:
        self.engine = engine
        self.settings = settings
        self.key = key
        self.egress = egress
        mounts = [Mount(f"{CONTAINER_WORKSPACE}/work", str(work), type="bind", read_only=False)]
        # With an egress grant: the bridge, a child of the first process, for the session's loopback.
        options = egress.launcher_option() if egress is not None else []
        if egress is not None:
            mounts += egress_mounts(egress, bridge=True)
        config = engine.config(
            command=[*launcher_argv(settings, "--exec"), *options, "--", "sleep", "infinity"],
            cwd=f"{CONTAINER_WORKSPACE}/work",
            env={},
            mounts=mounts,
            labels={LABEL_RUN: key, LABEL_DEADLINE: f"{time.time() + lifetime:.0f}"},
        )
        self.id = engine.create(config)
        try:
            engine.start(self.id)
        except BaseException:
            engine.remove(self.id)
            raise
        self._closed = False
        #: The pids of the host's live processes (each its own session); execs and the
        #: reaping are one at a time, so a starting process is never taken for a stray.
        self._pids: set[int] = set()
        self._lock = threading.RLock()

    @property
    def network_of(self) -> str:
        """What a run of the session joins to reach the host's loopback (``container:<id>``)."""
        return self.id

    def exec(self, argv: list[str], *, cwd: str, env: dict[str, str], pty: bool) -> DockerProcess:
        """Start ``argv`` in the host, stdin open (a TTY when ``pty``)."""
        # Under the launcher's seccomp filter as every run's command (an exec is no child of the
        # container's first process: it inherits no filter); the launcher execs in place.
        wrapped = [
            *launcher_argv(self.settings, "--exec"),
            "--",
            *["bash", "-c", 'echo $$ && exec "$@"', "bash", *argv],
        ]
        if self.egress is not None:
            env = {**env, **self.egress.environment()}
        with self._lock:
            process = self._exec(wrapped, cwd=cwd, env=env, pty=pty)
            if process.pid is not None:
                self._pids.add(process.pid)
        return process

    def _exec(self, wrapped: list[str], *, cwd: str, env: dict[str, str], pty: bool) -> DockerProcess:
        api = self.engine.api
        try:
            exec_id = api.exec_create(
                self.id,
                wrapped,
                stdout=True,
                stderr=True,
                stdin=True,
                tty=pty,
                user=self.settings.docker_user,
                workdir=cwd,
                environment=env,
            )["Id"]
            sock = api.exec_start(exec_id, socket=True, tty=pty)
        except ENGINE_ERRORS as exc:
            raise Unavailable(
                f"could not start the process in the session's container: {exc}", code="engine_error"
            ) from None
        raw: socket.socket = getattr(sock, "_sock", sock)
        process = DockerProcess(self, str(exec_id), raw, pty)
        process.read_pid()
        return process

    def run(self, argv: list[str], timeout: float = 10.0) -> tuple[int | None, bytes]:
        """A short command in the host as the runs' user (for signals): its exit status and output."""
        api = self.engine.api
        try:
            argv = [*launcher_argv(self.settings, "--exec"), "--", *argv]
            with self._lock:
                exec_id = api.exec_create(self.id, argv, stdout=True, stderr=True, user=self.settings.docker_user)["Id"]
                output = api.exec_start(exec_id, demux=False)
                code = api.exec_inspect(exec_id).get("ExitCode")
        except ENGINE_ERRORS as exc:
            raise Unavailable(f"the session's container did not answer: {exc}", code="engine_error") from None
        return (int(code) if code is not None else None), bytes(output or b"")

    def reap(self, ended: int | None) -> None:
        """Forget the process ``ended`` (a pid) and SIGKILL every process of the host in a session
        that is neither the first process's (1) nor a live process's: what a process started
        and let leave its group (``setsid``, a double fork) ends with it, at the latest."""
        with self._lock:
            if ended is not None:
                self._pids.discard(ended)
            keep = [str(pid) for pid in sorted(self._pids)]
            self.run(["bash", "-c", REAP_SCRIPT, "reap", *keep])

    def close(self) -> None:
        """Remove the host: everything still running in it is killed (idempotent)."""
        if not self._closed:
            self._closed = True
            self.engine.remove(self.id)


class DockerProcess:
    """One ``docker exec`` in a host: its hijacked stream (stdin in; output out, with Docker's
    8-byte frame headers unless it has a TTY)."""

    def __init__(self, host: DockerHost, exec_id: str, raw: socket.socket, pty: bool) -> None:
        self.host = host
        self.exec_id = exec_id
        self.raw = raw
        self.pty = pty
        #: The process's pid in its host (its group's and session's id); None if it never said.
        self.pid: int | None = None
        self._header = bytearray()
        self._left = 0  # bytes of the current frame still to come
        self._stream = 1  # the current frame's stream (1 stdout, 2 stderr)
        self._pid_line: bytearray | None = bytearray()  # the pid line so far (None: read)
        self._pending = b""  # output read with the pid line
        self._write_lock = threading.Lock()
        self._stdin_open = True

    def read_pid(self) -> None:
        """Read the wrapper's first line on stdout, its pid; the rest (stderr that came before
        it, or what followed it) is the first output."""
        seen = bytearray()
        deadline = time.monotonic() + PID_WAIT_SECONDS
        while self._pid_line is not None and time.monotonic() < deadline:
            if not select.select([self.raw], [], [], max(0.0, deadline - time.monotonic()))[0]:
                break
            chunk = self._receive()
            if chunk is None:
                break
            seen += chunk
        if self._pid_line is not None:  # the wrapper never ran (the launcher refused): its words are output
            seen += self._pid_line
            self._pid_line = None
        self._pending = bytes(seen)

    def read(self) -> bytes:
        """The next output (blocks); b"" once the output is over."""
        if self._pending:
            pending, self._pending = self._pending, b""
            return pending
        while True:
            out = self._receive()
            if out is None:
                return b""
            if out:
                return out

    def _receive(self) -> bytes | None:
        """One read of the stream: its output (maybe b""), None once the stream is over."""
        try:
            data = self.raw.recv(READ_BYTES)
        except OSError:
            data = b""
        if not data:
            return None
        if self.pty:
            return self._stdout(data)
        return self._unframe(data)

    def _stdout(self, data: bytes | memoryview) -> bytes:
        """Stdout's bytes as output, but the pid line first (kept from the output)."""
        if self._pid_line is None:
            return bytes(data)
        line, newline, rest = bytes(data).partition(b"\n")
        self._pid_line += line
        if not newline:
            return b""
        said, self._pid_line = self._pid_line.strip(), None
        if said.isdigit():
            self.pid = int(said)
            return rest
        return bytes(said) + b"\n" + rest  # not the wrapper's (the launcher's refusal)

    def _unframe(self, data: bytes) -> bytes:
        out = bytearray()
        view = memoryview(data)
        while view:
            if self._left:
                take = view[: self._left]
                out += self._stdout(take) if self._stream == 1 else take
                self._left -= len(take)
                view = view[len(take) :]
                continue
            need = 8 - len(self._header)
            self._header += view[:need]
            view = view[need:]
            if len(self._header) == 8:
                self._stream = self._header[0]
                self._left = int.from_bytes(self._header[4:8], "big")
                self._header.clear()
        return bytes(out)

    def write(self, data: bytes) -> None:
        """Send ``data`` to the stdin; a process that does not read it holds no caller (nor the
        service's thread) past :data:`WRITE_WAIT_SECONDS` (409 ``process_stdin_full``)."""
        deadline = time.monotonic() + WRITE_WAIT_SECONDS
        if not self._write_lock.acquire(timeout=WRITE_WAIT_SECONDS):
            raise self._full(0, len(data))
        try:
            if not self._stdin_open:
                raise Conflict("the process's stdin is closed", code="process_stdin_closed")
            view, sent = memoryview(data), 0
            while sent < len(data):
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([], [self.raw], [], left)[1]:
                    raise self._full(sent, len(data))
                try:  # never blocking (MSG_DONTWAIT): the reader thread keeps the socket blocking
                    sent += self.raw.send(view[sent:], socket.MSG_DONTWAIT)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError as exc:
                    raise Conflict(f"the process does not take input: {exc}", code="process_ended") from None
        finally:
            self._write_lock.release()

    @staticmethod
    def _full(sent: int, size: int) -> Conflict:
        return Conflict(
            f"the process does not read its stdin: {sent} of {size} bytes written in {WRITE_WAIT_SECONDS:g} s",
            code="process_stdin_full",
            details={"written": sent, "size": size},
        )

    def close_stdin(self) -> None:
        with self._write_lock:
            if self._stdin_open:
                self._stdin_open = False
                try:
                    self.raw.shutdown(socket.SHUT_WR)
                except OSError:
                    pass

    def signal(self, signum: int) -> bool:
        """Send ``signum`` to the process's group (it and what it started, by the pid its
        wrapper said as it started); False when no such group is left."""
        if self.pid is None:
            return False
        name = signals.Signals(signum).name.removeprefix("SIG")
        code, _ = self.host.run(["bash", "-c", 'kill -s "$0" -- "-$1" 2>/dev/null', name, str(self.pid)])
        return code == 0

    def kill(self) -> None:
        """SIGKILL the process's group, and what it started that left the group (and every other
        stray of the host: :meth:`DockerHost.reap`); its stream then ends."""
        self.signal(signals.SIGKILL)
        self.host.reap(self.pid)

    def exit_code(self) -> int | None:
        """Once the output is over: the exit status (128+N for signal N), None if unknown."""
        deadline = time.monotonic() + EXIT_WAIT_SECONDS
        while True:
            try:
                state = self.host.engine.api.exec_inspect(self.exec_id)
            except ENGINE_ERRORS:
                return None
            if not state.get("Running"):
                code = state.get("ExitCode")
                return int(code) if code is not None else None
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.02)

    def close(self) -> None:
        """Give the stream up: a reader blocked on it wakes (a close alone would not wake it)."""
        try:
            self.raw.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.raw.close()
        except OSError:
            pass
