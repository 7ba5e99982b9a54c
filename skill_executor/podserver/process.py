"""sandboxd's gRPC ``process.v1.ProcessService`` on grpcio's sync server.

``Start`` runs ``[launcher, --exec, --, *argv]`` (the launcher's seccomp filter, then the
command in place) in a session and process group of its own, cwd confined to the root, env merged
over the server's, stdin a pipe that ``WriteStdin`` feeds until ``eof``.  The stream is the init
event, then stdout/stderr chunks of at most 64 KiB as they come (the next chunk is read only once
the previous one is sent: HTTP/2 flow control holds a process whose client reads slowly), then
the exit event.  Guarantees beyond sandboxd's:

* when the main process exits, its process group is SIGKILLed, and with ``container`` (the pod is
  single use), once no other process runs, every process the server may signal (``kill(-1)``):
  nothing writes to the workspace after the last exit event; pipes still held by what was
  killed are drained for at most ``drain`` seconds;
* when the stream ends for any other reason (the client cancelled, its deadline passed, the
  connection dropped), the group is SIGKILLed too;
* a signal ends as ``128 + n`` (sandboxd reports -1), as our other runtimes report it.
"""

from __future__ import annotations

import os
import select
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc

from . import stubs, tree

pb, pb_grpc = stubs.load()

CHUNK = 64 * 1024
SIGNALS = {pb.SIGNAL_SIGINT: signal.SIGINT, pb.SIGNAL_SIGTERM: signal.SIGTERM, pb.SIGNAL_SIGKILL: signal.SIGKILL}


class Child:
    """One started process: its group, its stdin pipe, its exit status (set by a waiter thread)."""

    def __init__(self, pid: int, stdin_w: int) -> None:
        self.pid = pid
        self.stdin_w: int | None = stdin_w
        self.lock = threading.Lock()
        self.status: int | None = None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def close_stdin(self) -> None:
        with self.lock:
            if self.stdin_w is not None:
                os.close(self.stdin_w)
                self.stdin_w = None


class ProcessServicer(pb_grpc.ProcessServiceServicer):  # type: ignore[misc,name-defined]
    def __init__(
        self, root: tree.PodRoot, launcher: list[str], *, container: bool, drain: float, max_execute: int
    ) -> None:
        self.root = root
        self.launcher = launcher
        self.container = container
        self.drain = drain
        self.max_execute = max_execute
        self.children: dict[int, Child] = {}
        self.pids: set[int] = set()
        self.lock = threading.Lock()  # children, pids, next_id; held across a spawn (see reap_orphans)
        self.next_id = 0

    # -- starting --------------------------------------------------------------------------
    def _cwd(self, config: Any, context: Any) -> str:
        if not config.HasField("cwd") or not config.cwd:
            return self.root.path
        try:
            parts = tree.split(config.cwd, self.root.path)
            os.close(self.root.open_dir(parts))
        except tree.PathRefused as exc:
            context.abort(grpc.StatusCode.PERMISSION_DENIED, f"cwd: {exc}")
        except OSError as exc:
            context.abort(grpc.StatusCode.NOT_FOUND, f"cwd: {os.strerror(exc.errno or 0)}")
        return os.path.join(self.root.path, *parts)

    def _spawn(self, config: Any, context: Any) -> tuple[int, Child, int, int]:
        argv = list(config.command)
        if not argv:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "command is required")
        if any("\x00" in arg for arg in argv) or any("\x00" in k + v or "=" in k for k, v in config.env_vars.items()):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "NUL in the command or env, or '=' in an env name")
        cwd = self._cwd(config, context)
        env = dict(os.environ)
        env.update(config.env_vars)
        in_r, in_w = os.pipe2(os.O_CLOEXEC)
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        os.set_blocking(in_w, False)
        with self.lock:
            try:
                popen = subprocess.Popen(
                    [*self.launcher, *argv],
                    cwd=cwd,
                    env=env,
                    stdin=in_r,
                    stdout=out_w,
                    stderr=err_w,
                    start_new_session=True,
                    close_fds=True,
                )
            except OSError as exc:
                for fd in (in_r, in_w, out_r, out_w, err_r, err_w):
                    os.close(fd)
                context.abort(grpc.StatusCode.NOT_FOUND, f"failed to start command: {exc.strerror}")
            popen.returncode = 0  # reaped by our waiter thread, never by Popen
            child = Child(popen.pid, in_w)
            self.next_id += 1
            process_id = self.next_id
            self.children[process_id] = child
            self.pids.add(child.pid)
        for fd in (in_r, out_w, err_w):
            os.close(fd)
        return process_id, child, out_r, err_r

    # -- the RPCs --------------------------------------------------------------------------
    def Start(self, request: Any, context: Any) -> Iterator[Any]:  # noqa: N802 - generated names
        process_id, child, out_r, err_r = self._spawn(request.config, context)
        context.add_callback(child.kill)  # the stream ended early: the group goes with it
        try:
            yield pb.StartResponse(init=pb.InitEvent(process_id=process_id))
            yield from self._stream(process_id, child, out_r, err_r)
        finally:
            child.kill()
            child.close_stdin()
            with self.lock:
                self.children.pop(process_id, None)

    def _stream(self, process_id: int, child: Child, out_r: int, err_r: int) -> Iterator[Any]:
        exit_r, exit_w = os.pipe2(os.O_CLOEXEC)
        threading.Thread(target=self._wait, args=(child, exit_w), daemon=True).start()
        sel = selectors.DefaultSelector()
        sel.register(out_r, selectors.EVENT_READ, "stdout")
        sel.register(err_r, selectors.EVENT_READ, "stderr")
        sel.register(exit_r, selectors.EVENT_READ, "exit")
        drain_until: float | None = None
        try:
            while sel.get_map():
                timeout = None if drain_until is None else drain_until - time.monotonic()
                if timeout is not None and timeout <= 0:
                    break  # something still holds a pipe: stop after the grace
                ready = sel.select(timeout)
                for key, _ in ready:
                    data = os.read(key.fd, CHUNK)
                    if data and key.data != "exit":
                        yield pb.StartResponse(**{key.data: data})
                        continue
                    sel.unregister(key.fd)
                    if key.data == "exit":  # the main process is gone: so is the rest
                        self._sweep(process_id, child)
                        drain_until = time.monotonic() + self.drain
        finally:
            for key in list(sel.get_map().values()):
                sel.unregister(key.fd)
            sel.close()
            for fd in (out_r, err_r, exit_r):
                os.close(fd)
        with self.lock:  # gone before the exit event: a Start right after it is not refused
            self.children.pop(process_id, None)
        assert child.status is not None  # the exit key fired: the waiter set it first
        code = os.waitstatus_to_exitcode(child.status)
        yield pb.StartResponse(exit=pb.ExitEvent(exit_code=code if code >= 0 else 128 - code))

    def _sweep(self, process_id: int, child: Child) -> None:
        """Kill what the exited process left: its group, and with ``container``, once no other
        process runs, every process but this server (under the lock: no Start interleaves)."""
        child.kill()
        with self.lock:
            if self.container and set(self.children) <= {process_id}:
                _kill_everything_else()

    def _wait(self, child: Child, exit_w: int) -> None:
        _, status = os.waitpid(child.pid, 0)
        with self.lock:
            child.status = status
            self.pids.discard(child.pid)
        os.close(exit_w)

    def Execute(self, request: Any, context: Any) -> Any:  # noqa: N802
        out, err, code = bytearray(), bytearray(), -1
        for event in self.Start(pb.StartRequest(config=request.config), context):
            kind = event.WhichOneof("event")
            if kind == "stdout":
                out += event.stdout
            elif kind == "stderr":
                err += event.stderr
            elif kind == "exit":
                code = event.exit.exit_code
            if len(out) + len(err) > self.max_execute:
                context.abort(
                    grpc.StatusCode.RESOURCE_EXHAUSTED, f"output over {self.max_execute} bytes: use Start to stream it"
                )
        return pb.ExecuteResponse(exit_code=code, stdout=bytes(out), stderr=bytes(err))

    def _child(self, process_id: int, context: Any) -> Child:
        with self.lock:
            child = self.children.get(process_id)
        if child is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"process {process_id} not found")
            raise AssertionError("abort raises")
        return child

    def WriteStdin(self, request: Any, context: Any) -> Any:  # noqa: N802
        child = self._child(request.process_id, context)
        if request.WhichOneof("payload") == "eof":
            child.close_stdin()
            return pb.WriteStdinResponse()
        data = memoryview(request.input)
        while data:
            with child.lock:  # held while waiting (briefly) so the descriptor stays ours
                fd = child.stdin_w
                if fd is None:
                    context.abort(grpc.StatusCode.FAILED_PRECONDITION, "stdin is closed")
                    raise AssertionError("abort raises")
                try:
                    data = data[os.write(fd, data) :]
                    continue
                except BlockingIOError:
                    select.select([], [fd], [], 0.1)
                except BrokenPipeError:
                    context.abort(grpc.StatusCode.FAILED_PRECONDITION, "the process closed its stdin")
            if not context.is_active():
                context.abort(grpc.StatusCode.CANCELLED, "the client went away")
        return pb.WriteStdinResponse()

    def SendSignal(self, request: Any, context: Any) -> Any:  # noqa: N802
        child = self._child(request.process_id, context)
        sig = SIGNALS.get(request.signal)
        if sig is None:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "signal must be SIGINT, SIGTERM or SIGKILL")
            raise AssertionError("abort raises")
        child.kill(sig)
        return pb.SendSignalResponse()

    def ResizeTTY(self, request: Any, context: Any) -> Any:  # noqa: N802
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "this server starts no PTY")

    # -- PID 1 -----------------------------------------------------------------------------
    def reap_orphans(self, stop: threading.Event) -> None:
        """As a pod's PID 1 the server inherits every orphan: reap the ones that are not its
        own children (those are reaped by their waiter thread, which needs their status)."""
        while not stop.wait(0.5):
            while True:
                with self.lock:
                    try:
                        found = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
                    except ChildProcessError:
                        found = None
                    if found is None or found.si_pid in self.pids:
                        break
                    try:
                        os.waitpid(found.si_pid, 0)
                    except ChildProcessError:
                        pass


def _kill_everything_else() -> None:
    try:
        os.kill(-1, signal.SIGKILL)  # every process this uid may signal, except this one (and PID 1)
    except ProcessLookupError:
        pass
