"""A session's interactive processes: start, write to stdin, poll output, signal, kill.

A process runs in its session's sandbox: on Docker a long-lived container of the session
(its *host*, :mod:`skill_executor.runtimes.docker.processes`) made with every cap of a
run's container and the session's ``work/``; runs of the session join its loopback, so a
server a process started answers them.  The host is made with the session's first
process and removed with its last; while it lives, the session's ``work/`` is held
(:meth:`~skill_executor.workspace.sessions.SessionStore.hold`: mounted under the hard
cap, never expired).

Each process's output (stdout and stderr as they arrive, one stream; a TTY's as it is) is
kept in a ring of ``process_output_bytes``: bytes are numbered from 0 as they were
written, ``total`` counts them all, and a poll ``after=<offset>`` answers what the ring
still holds past it, saying how many bytes it lost before (``dropped``).  A process is
killed at its wall-clock limit, and when idle (no input, no output) past its idle limit;
all of a session's processes are killed when the session ends.  An ended process keeps
its output and exit code for :data:`KEEP_ENDED_SECONDS`.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal as signals
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal, Protocol

from ..access import check_tenant
from ..config import Settings
from ..errors import BadRequest, Busy, Conflict, ExecutorError, NotFound, TooLarge
from ..policy import CommandDenied, Policy
from ..workers import Supervisor
from ..workspace.fs import Tree
from ..workspace.sessions import SessionStore
from .plan import check_env

log = logging.getLogger(__name__)

#: How long an ended process stays pollable.
KEEP_ENDED_SECONDS = 600.0
#: How often the limits are checked.
SWEEP_SECONDS = 0.5
#: The longest one poll may wait for output.
MAX_WAIT_SECONDS = 30.0
#: The most polls (an SSE stream is one) of one key that may wait at once, and of the service:
#: a waiting poll holds one of the service's worker threads (40), which every call needs.
MAX_WAITS_PER_KEY = 8
MAX_WAITS = 24
#: The most bytes one write takes.
MAX_WRITE_BYTES = 1024 * 1024
#: The most bytes one poll answers.
MAX_POLL_BYTES = 1024 * 1024
#: How long a killed process may take to end before its stream is given up.
KILL_GRACE_SECONDS = 5.0
#: The signals a caller may send.
SIGNALS = ("INT", "TERM", "KILL", "HUP", "QUIT", "USR1", "USR2", "STOP", "CONT", "WINCH")
#: A session's sandbox lives at most this many ``process_max_seconds`` (its container's
#: deadline label, for the runtime's reaper); a process started late in it gets less.
HOST_LIFETIMES = 4
#: Kept between a process's wall-clock limit and its sandbox's deadline.
HOST_GRACE_SECONDS = 60.0
#: Where a process sees the session's work/.
WORK_DIR = "/workspace/work"

Reason = Literal["exited", "killed", "timeout", "idle", "session_ended", "lost"]


class ProcessNotFound(NotFound):
    code = "process_not_found"


class ProcessEnded(Conflict):
    code = "process_ended"


class ProcessLost(ExecutorError):
    """In a cluster: the worker that ran the process is gone (with the process and its output)."""

    code = "process_lost"
    status = 410


class RuntimeProcess(Protocol):
    """One process as a runtime runs it (:class:`~skill_executor.runtimes.docker.processes.DockerProcess`)."""

    def read(self) -> bytes: ...
    def write(self, data: bytes) -> None: ...
    def close_stdin(self) -> None: ...
    def signal(self, signum: int) -> bool: ...
    def kill(self) -> None: ...
    def exit_code(self) -> int | None: ...
    def close(self) -> None: ...


class RuntimeHost(Protocol):
    """A session's sandbox for processes (:class:`~skill_executor.runtimes.docker.processes.DockerHost`)."""

    id: str

    @property
    def network_of(self) -> str: ...

    def exec(self, argv: list[str], *, cwd: str, env: dict[str, str], pty: bool) -> RuntimeProcess: ...


class ProcessView(Protocol):
    """A process as the calls answer it (:class:`SessionProcess`, or a cluster worker's answer)."""

    @property
    def id(self) -> str: ...
    @property
    def ended(self) -> bool: ...
    @property
    def exit_code(self) -> int | None: ...
    def state(self) -> dict[str, Any]: ...


class Processes(Protocol):
    """A session's processes as the API and the tools call them: :class:`ProcessManager`
    (executed here), or a cluster's replica's proxy to the worker running them
    (:class:`~skill_executor.dispatch.processes.ClusterProcesses`)."""

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


class OutputRing:
    """The newest ``cap`` bytes of a stream, numbered from 0 as written; ``total`` counts all."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._data = bytearray()
        self.total = 0

    @property
    def start(self) -> int:
        """The offset of the oldest byte still held."""
        return self.total - len(self._data)

    def write(self, chunk: bytes) -> None:
        self._data += chunk
        self.total += len(chunk)
        over = len(self._data) - self.cap
        if over > 0:
            del self._data[:over]

    def read(self, after: int, limit: int) -> tuple[int, bytes, int]:
        """From offset ``after`` (clamped to what was written), at most ``limit`` bytes:
        (the offset of the first byte answered, the bytes, how many bytes past ``after``
        the ring no longer holds)."""
        after = min(max(0, after), self.total)
        start = self.start
        dropped = max(0, start - after)
        begin = max(after, start)
        return begin, bytes(self._data[begin - start : begin - start + limit]), dropped


@dataclass(eq=False)
class SessionProcess:
    id: str
    tenant: str
    session: str
    command: str | list[str]
    pty: bool
    handle: RuntimeProcess
    ring: OutputRing
    timeout: float
    idle_timeout: float
    started_at: float = field(default_factory=time.time)
    started: float = field(default_factory=time.monotonic)
    active: float = field(default_factory=time.monotonic)
    cond: threading.Condition = field(default_factory=threading.Condition)
    ended: bool = False
    ended_at: float | None = None
    exit_code: int | None = None
    reason: Reason | None = None
    killing: float | None = None  # when a kill was sent (monotonic)
    gone: bool = False  # its output is over (set under its host's lock)
    stdin_open: bool = True

    def state(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "session": self.session,
            "command": self.command,
            "pty": self.pty,
            "running": not self.ended,
            "exit_code": self.exit_code,
            "reason": self.reason,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "total": self.ring.total,
            "timeout": self.timeout,
            "idle_timeout": self.idle_timeout,
        }


@dataclass(frozen=True, slots=True)
class Poll:
    """One poll's answer (see the module docstring)."""

    output: str
    offset: int
    next: int
    total: int
    dropped: int
    running: bool
    exit_code: int | None
    reason: str | None


@dataclass(eq=False)
class _Host:
    host: RuntimeHost
    #: When the host's container is past its deadline label (``time.time()``): the
    #: runtime's reaper removes it then, so no process of it may outlive that.
    deadline: float
    processes: dict[str, SessionProcess] = field(default_factory=dict)


def _text(data: bytes, cut: bool) -> tuple[str, int]:
    """The bytes as text (invalid UTF-8 replaced); when ``cut`` (more follows), an incomplete
    character at the end is left for the next poll.  (text, bytes used)"""
    used = len(data)
    if cut:
        for back in range(1, min(4, len(data)) + 1):
            lead = data[-back]
            if lead & 0xC0 != 0x80:  # the last character's first byte
                need = 1 if lead < 0x80 else 2 if lead >> 5 == 0b110 else 3 if lead >> 4 == 0b1110 else 4
                if need > back and back < len(data):
                    used -= back
                break
    return data[:used].decode("utf-8", errors="replace"), used


def _ended(process: SessionProcess) -> bool:
    return process.ended


class ProcessManager:
    """Every session's processes of one service process (thread-safe)."""

    def __init__(
        self, settings: Settings, runtime: object, sessions: SessionStore, *, policy: Policy | None = None
    ) -> None:
        """``policy``: the command policy (a key any of whose rules limits programs or asks
        for approval starts no process: what its stdin starts, the policy cannot judge)."""
        self.settings = settings
        self.policy = policy
        self.runtime = runtime
        self.sessions = sessions
        self._lock = threading.Lock()
        self._hosts: dict[tuple[str, str], _Host] = {}
        self._host_locks: dict[tuple[str, str], threading.Lock] = {}
        self._processes: dict[tuple[str, str, str], SessionProcess] = {}
        self._making: set[tuple[str, str]] = set()  # sessions whose host is being made (counted)
        self._waits: dict[str, int] = {}  # polls waiting now, by key
        self.started_total = 0
        self.ended_total: dict[str, int] = {}
        #: Called with (tenant, session) before a session's first process starts here (a
        #: cluster's worker takes the session's lease: its runs come here then).
        self.before_start: Callable[[str, str], None] | None = None
        sessions.on_end.append(self.end_session)
        self.supervisor = Supervisor("processes")
        self.supervisor.every("process-limits", SWEEP_SECONDS, self.sweep, initial_delay=SWEEP_SECONDS)

    @property
    def supported(self) -> bool:
        return callable(getattr(self.runtime, "host", None))

    # -- start -----------------------------------------------------------------------------

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
    ) -> SessionProcess:
        self._judge(check_tenant(tenant))
        if not self.supported:
            name = getattr(self.runtime, "name", "?")
            raise ExecutorError(
                f"the {name} runtime has no interactive processes: run the service with SKILL_EXECUTOR_RUNTIME=docker",
                code="processes_unsupported",
            )
        self.sessions.path(session, tenant)  # a valid id (400 invalid_session)
        s = self.settings
        argv = ["bash", "-c", command] if isinstance(command, str) else list(command)
        if not argv or not argv[0]:
            raise BadRequest("a process needs a command", code="bad_request")
        if sum(len(arg.encode()) + 1 for arg in argv) > s.max_command_bytes:
            raise TooLarge(f"command is longer than {s.max_command_bytes} bytes", code="command_too_large")
        check_env(env or {}, s)  # as a run's
        wall = min(timeout or s.process_max_seconds, s.process_max_seconds)
        idle = min(idle_timeout or s.process_idle_seconds, s.process_idle_seconds)
        key = (check_tenant(tenant), session)
        with self._lock:
            lock = self._host_locks.setdefault(key, threading.Lock())
        with lock:
            entry = self._hosts.get(key)
            live = [p for p in entry.processes.values() if not p.ended] if entry is not None else []
            if len(live) >= s.processes_per_session:
                raise Busy(
                    f"session {session!r} runs {len(live)} processes, the most allowed "
                    "(SKILL_EXECUTOR_PROCESSES_PER_SESSION): kill one first",
                    code="process_limit",
                    details={"processes": len(live), "limit": s.processes_per_session},
                )
            if entry is None:
                entry = self._make_host_within_limits(tenant, session)
            wall = min(wall, entry.deadline - time.time())  # a long-lived session's sandbox ends some day
            if wall < 1:
                raise Busy(
                    f"the sandbox of session {session!r} is at the end of its lifetime "
                    f"({HOST_LIFETIMES:g} × SKILL_EXECUTOR_PROCESS_MAX_SECONDS since its first process): "
                    "let its processes end, then start again",
                    code="process_limit",
                    details={"session": session},
                )
            where = WORK_DIR if cwd is None else cwd if cwd.startswith("/") else f"{WORK_DIR}/{cwd}"
            environment = {"HOME": "/tmp", "TMPDIR": "/tmp", "WORK_DIR": WORK_DIR, **(env or {})}
            if pty:
                environment.setdefault("TERM", "xterm")
            try:
                handle = entry.host.exec(argv, cwd=where, env=environment, pty=pty)
            except BaseException:
                if not entry.processes:
                    self._drop_host(key, entry)
                raise
            process = SessionProcess(
                f"p-{secrets.token_hex(6)}",
                key[0],
                session,
                command,
                pty,
                handle,
                OutputRing(s.process_output_bytes),
                wall,
                idle,
            )
            entry.processes[process.id] = process
            with self._lock:
                self._processes[(key[0], session, process.id)] = process
                self.started_total += 1
        threading.Thread(target=self._read, args=(process, entry), name=f"process-{process.id}", daemon=True).start()
        return process

    def _judge(self, tenant: str) -> None:
        """Refuse (403 ``command_denied``) a key a rule of the command policy limits: the
        programs a process's stdin starts (a shell's, a REPL's) cannot be judged beforehand."""
        if self.policy is None:
            return
        keys = ("*", tenant, self.policy.names.get(tenant, tenant))  # a rule names a key by its id or its name
        for index, rule in enumerate(self.policy.rules):
            if rule.key in keys and (rule.judges or rule.approval != "never"):
                name = rule.name or f"rules[{index}]"
                reason = (
                    "interactive processes are refused under it: the programs their stdin starts cannot be "
                    "judged before they run"
                )
                raise CommandDenied(
                    f"command refused by policy rule {name!r}: {reason}",
                    details={"rule": name, "program": None, "reason": reason},
                )

    def _make_host_within_limits(self, tenant: str, session: str) -> _Host:
        """A new host, if the key's and the service's counts of sandboxes allow it (each is as big
        as a run's container and takes no run slot: without a bound, one key could hold
        ``sessions_per_tenant`` of them for hours)."""
        key = (check_tenant(tenant), session)
        s = self.settings
        with self._lock:
            held = set(self._hosts) | self._making
            mine = sum(1 for t, _ in held if t == key[0])
            if mine >= s.process_sandboxes_per_key or len(held) >= s.process_sandboxes:
                per_key = mine >= s.process_sandboxes_per_key
                raise Busy(
                    f"{mine} sessions of this key have processes, the most allowed "
                    "(SKILL_EXECUTOR_PROCESS_SANDBOXES_PER_KEY): end the processes of one first"
                    if per_key
                    else f"{len(held)} sessions have processes, the most this service allows "
                    "(SKILL_EXECUTOR_PROCESS_SANDBOXES): try again later",
                    code="process_limit",
                    details={
                        "sandboxes": mine if per_key else len(held),
                        "limit": s.process_sandboxes_per_key if per_key else s.process_sandboxes,
                    },
                )
            self._making.add(key)
        try:
            if self.before_start is not None:
                self.before_start(key[0], session)
            return self._make_host(tenant, session)
        finally:
            with self._lock:
                self._making.discard(key)

    def _make_host(self, tenant: str, session: str) -> _Host:
        key = (check_tenant(tenant), session)
        work: Path = self.sessions.hold(session, tenant, wait=self.settings.max_timeout)
        owner: tuple[int, int] | None = getattr(self.runtime, "owner", None)
        if owner is not None:  # the runs' user owns work/, as a run's workspace makes it
            with Tree(work) as tree:
                os.fchown(tree.fd, *owner)
        lifetime = HOST_LIFETIMES * self.settings.process_max_seconds
        try:
            host = self.runtime.host(work, f"processes-{key[0]}-{session}", lifetime)  # type: ignore[attr-defined]
        except BaseException:
            self.sessions.release(session, tenant)
            raise
        entry = _Host(host, time.time() + lifetime - HOST_GRACE_SECONDS)
        self._hosts[key] = entry
        return entry

    def _drop_host(self, key: tuple[str, str], entry: _Host) -> None:
        """Remove a host with no live processes (called holding its lock); once."""
        if self._hosts.get(key) is not entry:
            return
        del self._hosts[key]
        try:
            self.runtime.unhost(entry.host)  # type: ignore[attr-defined]
        finally:
            self.sessions.release(key[1], key[0])

    # -- output ----------------------------------------------------------------------------

    def _read(self, process: SessionProcess, entry: _Host) -> None:
        touched = 0.0
        try:
            while True:
                data = process.handle.read()
                if not data:
                    break
                now = time.monotonic()
                with process.cond:
                    process.ring.write(data)
                    process.active = now
                    process.cond.notify_all()
                if now - touched > 5.0:
                    touched = now
                    self._touch(process)
            code = process.handle.exit_code()
        except Exception:  # the stream broke: the process is given up (killed below)
            log.exception("process %s: reading its output failed", process.id)
            code = None
        try:
            process.handle.kill()  # whatever of its group is left
        except Exception:
            pass
        process.handle.close()
        self._ended(process, entry, code)

    def _ended(self, process: SessionProcess, entry: _Host, code: int | None) -> None:
        """Its host goes with the session's last process (before the process is marked ended:
        once a kill has answered, the session's runs no longer join the host)."""
        key = (process.tenant, process.session)
        with self._lock:
            lock = self._host_locks.setdefault(key, threading.Lock())
        try:
            with lock:
                process.gone = True  # under the host's lock: exactly the last one removes it
                if self._hosts.get(key) is entry and all(p.gone for p in entry.processes.values()):
                    self._drop_host(key, entry)
        except Exception:
            log.exception("process %s: removing its session's sandbox failed", process.id)
        finally:
            with process.cond:
                process.ended = True
                process.ended_at = time.time()
                process.exit_code = code
                process.stdin_open = False
                if process.reason is None:
                    process.reason = "exited" if code is not None else "lost"
                process.cond.notify_all()
            with self._lock:
                reason = process.reason or "exited"
                self.ended_total[reason] = self.ended_total.get(reason, 0) + 1
            self._touch(process)

    def _touch(self, process: SessionProcess) -> None:
        try:
            self.sessions.touch(process.session, process.tenant)
        except Exception:
            pass

    # -- the calls -------------------------------------------------------------------------

    def get(self, tenant: str, session: str, process_id: str) -> SessionProcess:
        with self._lock:
            process = self._processes.get((check_tenant(tenant), session, process_id))
        if process is None:
            raise ProcessNotFound(
                f"no process {process_id!r} in session {session!r}", details={"session": session, "process": process_id}
            )
        return process

    def list(self, tenant: str, session: str) -> list[SessionProcess]:
        tenant = check_tenant(tenant)
        with self._lock:
            found = [p for (t, s, _), p in self._processes.items() if t == tenant and s == session]
        return sorted(found, key=lambda p: p.started)

    def write(self, tenant: str, session: str, process_id: str, data: bytes, *, eof: bool = False) -> SessionProcess:
        process = self.get(tenant, session, process_id)
        if process.ended:
            raise ProcessEnded(f"process {process_id!r} has ended: it takes no input", details={"process": process_id})
        if not process.stdin_open:
            raise Conflict(
                f"the stdin of process {process_id!r} is closed",
                code="process_stdin_closed",
                details={"process": process_id},
            )
        if len(data) > MAX_WRITE_BYTES:
            raise TooLarge(f"one write takes at most {MAX_WRITE_BYTES} bytes", code="too_large")
        if data:
            process.handle.write(data)
        process.active = time.monotonic()
        if eof:
            process.stdin_open = False
            process.handle.close_stdin()
        self._touch(process)
        return process

    def poll(
        self, tenant: str, session: str, process_id: str, *, after: int = 0, limit: int = 64 * 1024, wait: float = 0.0
    ) -> Poll:
        process = self.get(tenant, session, process_id)
        limit = max(1, min(limit, MAX_POLL_BYTES))
        waiting = wait > 0 and process.ring.total <= after and not process.ended
        if waiting:
            self._wait_slot(process.tenant)
        try:
            with process.cond:
                if waiting:
                    process.cond.wait_for(
                        lambda: process.ring.total > after or process.ended, timeout=min(wait, MAX_WAIT_SECONDS)
                    )
                offset, data, dropped = process.ring.read(after, limit)
                total, running, code, reason = process.ring.total, not process.ended, process.exit_code, process.reason
        finally:
            if waiting:
                with self._lock:
                    self._waits[process.tenant] -= 1
        text, used = _text(data, cut=offset + len(data) < total)
        return Poll(text, offset, offset + used, total, dropped, running, code, reason)

    def _wait_slot(self, tenant: str) -> None:
        """Count one more waiting poll of ``tenant``, or refuse it (429 ``process_wait_limit``)."""
        with self._lock:
            mine, everyone = self._waits.get(tenant, 0), sum(self._waits.values())
            if mine >= MAX_WAITS_PER_KEY or everyone >= MAX_WAITS:
                raise Busy(
                    f"{mine} polls (and output streams) of this key wait for output already, the most allowed "
                    f"({MAX_WAITS_PER_KEY} a key, {MAX_WAITS} in all): poll without wait, or close a stream",
                    code="process_wait_limit",
                    details={"waiting": mine, "limit": MAX_WAITS_PER_KEY, "service_limit": MAX_WAITS},
                )
            self._waits[tenant] = mine + 1

    def signal(self, tenant: str, session: str, process_id: str, name: str) -> SessionProcess:
        process = self.get(tenant, session, process_id)
        short = name.upper().removeprefix("SIG")
        if short not in SIGNALS:
            raise BadRequest(f"unknown signal {name!r}: one of {', '.join(SIGNALS)}", code="bad_request")
        if process.ended:
            raise ProcessEnded(
                f"process {process_id!r} has ended: it takes no signals", details={"process": process_id}
            )
        if short == "KILL":
            return self.kill(tenant, session, process_id)
        process.handle.signal(int(getattr(signals, f"SIG{short}")))
        return process

    def kill(
        self, tenant: str, session: str, process_id: str, *, reason: Reason = "killed", wait: float = 5.0
    ) -> SessionProcess:
        """SIGKILL the process and everything it started; waits (a little) for it to end."""
        process = self.get(tenant, session, process_id)
        self._kill(process, reason)
        with process.cond:
            process.cond.wait_for(lambda: process.ended, timeout=wait)
        return process

    def _kill(self, process: SessionProcess, reason: Reason) -> None:
        with process.cond:
            if process.ended or process.killing is not None:
                return
            process.killing = time.monotonic()
            process.reason = reason
        try:
            process.handle.kill()
        except ExecutorError as exc:
            log.warning("process %s: kill failed: %s", process.id, exc.message)

    def network_of(self, tenant: str, session: str) -> str | None:
        """The sandbox whose loopback a run of this session joins (None: no processes)."""
        entry = self._hosts.get((check_tenant(tenant), session))
        return entry.host.network_of if entry is not None else None

    # -- limits and ends -------------------------------------------------------------------

    def sweep(self) -> None:
        now = time.monotonic()
        with self._lock:
            processes = list(self._processes.items())
        for key, process in processes:
            if process.ended:
                if process.ended_at is not None and time.time() - process.ended_at > KEEP_ENDED_SECONDS:
                    with self._lock:
                        self._processes.pop(key, None)
                continue
            if process.killing is not None:
                if now - process.killing > KILL_GRACE_SECONDS:
                    process.handle.close()  # its stream is given up; the host goes with the last process
                continue
            if now - process.started > process.timeout:
                self._kill(process, "timeout")
            elif now - process.active > process.idle_timeout:
                self._kill(process, "idle")

    def end_session(self, session: str, tenant: str) -> None:
        """Kill every process of the session (its host goes with the last) and forget them."""
        processes = [p for p in self.list(tenant, session) if not p.ended]
        for process in processes:
            self._kill(process, "session_ended")
        for process in processes:
            with process.cond:
                process.cond.wait_for(partial(_ended, process), timeout=KILL_GRACE_SECONDS)
        key = (check_tenant(tenant), session)
        with self._lock:
            lock = self._host_locks.setdefault(key, threading.Lock())
        with lock:
            entry = self._hosts.get(key)
            if entry is not None:
                for process in entry.processes.values():
                    process.handle.close()
                self._drop_host(key, entry)
        with self._lock:
            for k in [k for k in self._processes if k[:2] == key]:
                del self._processes[k]

    def stats(self) -> dict[str, Any]:
        with self._lock:
            running = sum(1 for p in self._processes.values() if not p.ended)
            return {
                "running": running,
                "hosts": len(self._hosts),
                "started_total": self.started_total,
                "ended_total": dict(self.ended_total),
            }

    def close(self) -> None:
        """Kill every process and remove every host."""
        self.supervisor.close(timeout=1.0)
        with self._lock:
            sessions = {(p.session, p.tenant) for p in self._processes.values()}
        for session, tenant in sessions:
            try:
                self.end_session(session, tenant)
            except Exception:
                log.exception("ending the processes of session %s failed", session)
        # A host whose processes were all forgotten (or whose start never recorded one) goes too:
        # nothing of a closed service may outlive it (a session container, its mounted work/).
        with self._lock:
            hosts = list(self._hosts.items())
        for key, entry in hosts:
            with self._lock:
                lock = self._host_locks.setdefault(key, threading.Lock())
            try:
                with lock:
                    for process in entry.processes.values():
                        process.handle.close()
                    self._drop_host(key, entry)
            except Exception:
                log.exception("removing the processes' sandbox of session %s failed", key[1])
