"""The processes of one service process (:class:`ProcessManager`): every call on them, their
output pumped into each one's ring, their limits swept (see :mod:`skill_executor.processes`)."""

from __future__ import annotations

import logging
import secrets
import signal as signals
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from ..access import check_tenant
from ..config import Settings
from ..errors import BadRequest, Busy, Conflict, ExecutorError, TooLarge
from ..policy import CommandDenied, Policy
from ..runs.plan import check_env
from ..runs.sessionnet import SessionNetworks
from ..runtimes.base import Runtime
from ..workers import Supervisor
from ..workspace.sessions import SessionStore
from .base import (
    HOST_LIFETIMES,
    KEEP_ENDED_SECONDS,
    MAX_POLL_BYTES,
    MAX_WAIT_SECONDS,
    MAX_WRITE_BYTES,
    Poll,
    ProcessEnded,
    ProcessNotFound,
    Reason,
)
from .hosts import SessionHost, SessionHosts
from .output import OutputRing, SessionProcess, as_text

log = logging.getLogger(__name__)

#: How often the limits are checked.
SWEEP_SECONDS = 0.5
#: The most polls (an SSE stream is one) of one key that may wait at once, and of the service:
#: a waiting poll holds one of the service's worker threads (40), which every call needs.
MAX_WAITS_PER_KEY = 8
MAX_WAITS = 24
#: How long a killed process may take to end before its stream is given up.
KILL_GRACE_SECONDS = 5.0
#: The signals a caller may send.
SIGNALS = ("INT", "TERM", "KILL", "HUP", "QUIT", "USR1", "USR2", "STOP", "CONT", "WINCH")
#: Where a process sees the session's work/.
WORK_DIR = "/workspace/work"


def _ended(process: SessionProcess) -> bool:
    return process.ended


class ProcessManager:
    """Every session's processes of one service process (thread-safe)."""

    def __init__(
        self, settings: Settings, runtime: Runtime, sessions: SessionStore, *, policy: Policy | None = None
    ) -> None:
        """``policy``: the command policy (a key any of whose rules limits programs or asks
        for approval starts no process: what its stdin starts, the policy cannot judge)."""
        self.settings = settings
        self.policy = policy
        self.runtime = runtime
        self.sessions = sessions
        #: Each session's sandbox (a runtime with :class:`~skill_executor.runtimes.base.SupportsProcesses` has them).
        self.hosts = SessionHosts(settings, runtime, sessions)
        self._lock = threading.Lock()
        self._processes: dict[tuple[str, str, str], SessionProcess] = {}
        self._waits: dict[str, int] = {}  # polls waiting now, by key
        self.started_total = 0
        self.ended_total: dict[str, int] = {}
        #: Called with (tenant, session) before a session's first process starts here (a
        #: cluster's worker takes the session's lease: its runs come here then).
        self.before_start: Callable[[str, str], None] | None = None
        #: The sessions' network (:mod:`skill_executor.runs.sessionnet`; set by the executor): a
        #: session's processes start with its grant's path when it has one.
        self.networks: SessionNetworks | None = None
        sessions.on_end.append(self.end_session)
        self.supervisor = Supervisor("processes")
        self.supervisor.every("process-limits", SWEEP_SECONDS, self.sweep, initial_delay=SWEEP_SECONDS)

    @property
    def supported(self) -> bool:
        return self.hosts.supported

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
        self.hosts.require()
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
        with self.hosts.lock(key):
            entry = self.hosts.get(key)
            live = [p for p in entry.processes.values() if not p.ended] if entry is not None else []
            if len(live) >= s.processes_per_session:
                raise Busy(
                    f"session {session!r} runs {len(live)} processes, the most allowed "
                    "(SKILL_EXECUTOR_PROCESSES_PER_SESSION): kill one first",
                    code="process_limit",
                    details={"processes": len(live), "limit": s.processes_per_session},
                )
            if entry is None:
                egress = self.networks.path(key[0], session) if self.networks is not None else None
                entry = self.hosts.make(tenant, session, self.before_start, egress)
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
                    self.hosts.drop(key, entry)
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

    # -- output ----------------------------------------------------------------------------

    def _read(self, process: SessionProcess, entry: SessionHost) -> None:
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

    def _ended(self, process: SessionProcess, entry: SessionHost, code: int | None) -> None:
        """Its host goes with the session's last process (before the process is marked ended:
        once a kill has answered, the session's runs no longer join the host)."""
        key = (process.tenant, process.session)
        lock = self.hosts.lock(key)
        try:
            with lock:
                process.gone = True  # under the host's lock: exactly the last one removes it
                if self.hosts.get(key) is entry and all(p.gone for p in entry.processes.values()):
                    self.hosts.drop(key, entry)
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
        text, used = as_text(data, cut=offset + len(data) < total)
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

    def without_network(self, tenant: str, session: str) -> bool:
        """Whether the session has a processes' sandbox made without a path to the gateway."""
        entry = self.hosts.get((check_tenant(tenant), session))
        return entry is not None and entry.egress is None

    def network_of(self, tenant: str, session: str) -> str | None:
        """The sandbox whose loopback a run of this session joins (None: no processes)."""
        entry = self.hosts.get((check_tenant(tenant), session))
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
        with self.hosts.lock(key):
            entry = self.hosts.get(key)
            if entry is not None:
                for process in entry.processes.values():
                    process.handle.close()
                self.hosts.drop(key, entry)
        with self._lock:
            for k in [k for k in self._processes if k[:2] == key]:
                del self._processes[k]

    def stats(self) -> dict[str, Any]:
        with self._lock:
            running = sum(1 for p in self._processes.values() if not p.ended)
            return {
                "running": running,
                "hosts": len(self.hosts),
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
        for key, entry in self.hosts.all():
            lock = self.hosts.lock(key)
            try:
                with lock:
                    for process in entry.processes.values():
                        process.handle.close()
                    self.hosts.drop(key, entry)
            except Exception:
                log.exception("removing the processes' sandbox of session %s failed", key[1])
