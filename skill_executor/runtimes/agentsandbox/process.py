"""One process in a pod over sandboxd's gRPC ``ProcessService``, driven by us.

``Start`` streams the process's id, then its stdout/stderr chunks, then its exit; we read that
stream ourselves (never the SDK's unary ``commands.run``, whose ``command_timeout`` drops all
output).  A reader thread moves the stream into a small bounded queue, so a slow consumer
back-pressures the pod (HTTP/2 flow control) instead of filling the worker's memory.

:class:`PodProcess` has the shape of the runtime seam's ``Process``: ``events(timeout)``,
``ended``, ``kill()`` (``SendSignal(SIGKILL)``: sandboxd signals the process group; the stream
is dropped after a grace, which makes our in-pod server kill the group too), ``wait()`` (the
exit status; a stream that broke before the exit, not after our kill, raises ``sandbox_lost``).
Stdin (or none) always ends with ``WriteStdin(eof)``: sandboxd keeps a process's stdin open
until then.  :func:`execute` is the deadline, cancel and caps over it, keeping partial output
(the one driving loop, :func:`~skill_executor.runtimes.drive.drive`).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import grpc
from google.protobuf import empty_pb2
from k8s_agent_sandbox.commands._process_stubs import process_pb2 as pb

from ...errors import ExecutorError
from ..drive import drive
from ..limits import Guard
from ..streams import BoundedBuffer

log = logging.getLogger(__name__)

#: Stream events buffered between the reader thread and the consumer (each at most the pod's chunk).
QUEUE_EVENTS = 64
#: Stdin goes in messages of this size (gRPC's default message limit is 4 MiB).
STDIN_CHUNK = 1 << 20
_END = ("end", b"")
_GONE = (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION)


class SandboxLost(ExecutorError):
    code = "sandbox_lost"
    status = 500


class PodProcess:
    """A started process (see the module docstring); single use, thread-safe ``kill``."""

    def __init__(
        self,
        stub: Any,
        argv: list[str],
        *,
        cwd: str,
        env: dict[str, str],
        stdin: bytes | IO[bytes] | None,
        timeout: float | None = None,
        kill_grace: float = 2.0,
    ) -> None:
        self.stub = stub
        self.kill_grace = kill_grace
        self.started = time.monotonic()
        self.disk: Any = None  # the pod's disk is the kubelet's (emptyDir sizeLimit): nothing to poll here
        self.ended = False
        self.exit_code: int | None = None
        self.process_id: int | None = None
        self.warnings: list[str] = []
        self._stdin = stdin or b""
        self._killed = threading.Event()
        self._lost: str | None = None
        self._events: queue.Queue[tuple[str, bytes]] = queue.Queue(QUEUE_EVENTS)
        config = pb.ProcessConfig(command=argv, env_vars=env, cwd=cwd)
        # The gRPC deadline is only a backstop (the caller kills at the run's deadline).
        backstop = None if timeout is None else timeout + kill_grace + 30
        self._stream = stub.Start(pb.StartRequest(config=config), timeout=backstop)
        self._reader = threading.Thread(target=self._read, daemon=True, name="pod-process")
        self._reader.start()

    # -- the stream -----------------------------------------------------------------------------
    def _read(self) -> None:
        try:
            for event in self._stream:
                kind = event.WhichOneof("event")
                if kind == "init":
                    self.process_id = event.init.process_id
                    threading.Thread(target=self._feed, daemon=True, name="pod-stdin").start()
                    if self._killed.is_set():
                        self._signal()
                elif kind == "stdout":
                    self._events.put(("stdout", event.stdout))
                elif kind == "stderr":
                    self._events.put(("stderr", event.stderr))
                elif kind == "exit":
                    self.exit_code = event.exit.exit_code
            if self.exit_code is None and not self._killed.is_set():
                self._lost = "the output stream ended before the exit status"
        except grpc.RpcError as exc:
            if not self._killed.is_set():
                self._lost = f"the output stream broke: {exc.code().name}: {exc.details()}"
        finally:
            self._events.put(_END)

    def _feed(self) -> None:
        """Stdin in messages (bytes, or a file read as it goes), then EOF; a process already
        gone (NOT_FOUND) or one that closed its stdin is fine."""
        pid = self.process_id
        try:
            for chunk in _chunks(self._stdin):
                self.stub.WriteStdin(pb.WriteStdinRequest(process_id=pid, input=chunk), timeout=60)
            self.stub.WriteStdin(pb.WriteStdinRequest(process_id=pid, eof=empty_pb2.Empty()), timeout=10)
        except grpc.RpcError as exc:
            if exc.code() not in _GONE and not self.ended and not self._killed.is_set():
                self.warnings.append(f"stdin could not be written: {exc.code().name}")
        except (OSError, ValueError) as exc:  # the file, closed by a caller that gave up on the process
            if not self.ended and not self._killed.is_set():
                self.warnings.append(f"stdin could not be read: {exc}")

    def events(self, timeout: float) -> Iterator[tuple[str, bytes]]:
        """The output that arrives within ``timeout`` seconds; returns as soon as some did."""
        try:
            item = self._events.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return
        while True:
            if item is _END or item[0] == "end":
                self.ended = True
                return
            yield item
            try:
                item = self._events.get_nowait()
            except queue.Empty:
                return

    # -- ending it ------------------------------------------------------------------------------
    def _signal(self) -> None:
        pid = self.process_id
        if pid is None:
            return  # sent when the init event arrives
        try:
            self.stub.SendSignal(pb.SendSignalRequest(process_id=pid, signal=pb.SIGNAL_SIGKILL), timeout=2)
        except grpc.RpcError as exc:
            if exc.code() not in _GONE:
                self._stream.cancel()  # the pod does not answer: drop the stream (the server kills the group)

    def kill(self) -> None:
        """SIGKILL to the process group; the stream is dropped if it has not ended after the grace."""
        if self._killed.is_set():
            return
        self._killed.set()
        self._signal()
        timer = threading.Timer(self.kill_grace, self._stream.cancel)
        timer.daemon = True
        timer.start()

    def wait(self) -> int | None:
        """The exit status once the output is over or given up (``sandbox_lost`` if the stream broke)."""
        if not self.ended:
            self._killed.set()
            self._stream.cancel()  # given up: the server kills the group when its stream ends
        limit = time.monotonic() + self.kill_grace + 5
        while self._reader.is_alive() and time.monotonic() < limit:
            try:  # drained: a reader blocked on the full queue must get to see the cancel
                self._events.get(timeout=0.05)
            except queue.Empty:
                pass
        self.ended = True
        if self._lost is not None:
            raise SandboxLost(
                f"the run's sandbox pod was lost while the command ran ({self._lost})",
                details={"process_id": self.process_id},
            )
        return self.exit_code


def _chunks(stdin: bytes | IO[bytes]) -> Iterator[bytes]:
    if isinstance(stdin, bytes):
        for i in range(0, len(stdin), STDIN_CHUNK):
            yield stdin[i : i + STDIN_CHUNK]
        return
    while chunk := stdin.read(STDIN_CHUNK):
        yield chunk


@dataclass(slots=True)
class Execution:
    """What :func:`execute` saw: the exit status and the bounded output."""

    exit_code: int | None
    stdout: BoundedBuffer
    stderr: BoundedBuffer
    timed_out: bool = False
    cancelled: bool = False
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)


def execute(
    process: PodProcess,
    *,
    timeout: float,
    stdout_max: int,
    stderr_max: int,
    cancel: threading.Event | None = None,
    listener: Callable[[str, bytes], None] | None = None,
    grace: float = 5.0,
) -> Execution:
    """Read ``process`` to its end with a deadline (and ``cancel``): on either, SIGKILL the group
    and read on for at most ``grace``; what arrived until then is kept (up to the caps).  The
    loop is :func:`~skill_executor.runtimes.drive.drive`, every run's."""
    buffers = {"stdout": BoundedBuffer(stdout_max), "stderr": BoundedBuffer(stderr_max)}
    guard = Guard(started=process.started, timeout=timeout, cancel=cancel, disk=None)
    driven = drive(process, guard, buffers, listener, grace=grace)
    return Execution(
        driven.code,
        buffers["stdout"],
        buffers["stderr"],
        guard.timed_out,
        guard.cancelled,
        time.monotonic() - process.started,
        [*process.warnings, *driven.warnings],
    )
