"""The service's side of the egress gateway: start the process, register grants, read events.

See the package's docstring for why the gateway is a process of its own.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..config import Settings
from ..errors import ExecutorError
from ..policy import Grant, HostPattern
from . import rules

#: The gateway's files under the data dir: ``ca/`` (the CA with its key; the gateway's only,
#: 0700), ``ca-cert.pem`` (the CA's public certificate, what runs trust), ``socket/egress.sock``
#: (the Unix socket the runs' bridges reach, in a folder of its own: a container mounts the
#: folder, so it holds nothing else), ``trusted.pem`` (the upstream bundle it verifies with).
log = logging.getLogger(__name__)

FOLDER = "egress"
SOCKET = "socket/egress.sock"
PROXY_SCRIPT = Path(__file__).resolve().parent / "proxy.py"
START_TIMEOUT = 30.0
CALL_TIMEOUT = 10.0
#: A gateway process that dies is started again: at most this many attempts in a row (unless the
#: settings' ``egress_restarts`` says otherwise), the first after RESTART_DELAY seconds, each next
#: pause twice the last, up to RESTART_MAX_DELAY.
RESTART_ATTEMPTS = 5
RESTART_DELAY = 0.2
RESTART_MAX_DELAY = 10.0
#: Where the system's CA bundle is looked for when Python's ssl module names none.
SYSTEM_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem")


def wire(grant: Grant, approved: Sequence[str] = (), ask_timeout: float = 0.0) -> dict[str, Any]:
    """The policy's grant for one run (:meth:`skill_executor.policy.NetworkPlan.grant`) as the
    gateway process reads it: its allow-list as written (plus ``approved``: the hosts approved
    before for the run's key and skill, when its rule asks), each injection's template, and each
    secret's value with the placeholder the run holds instead.  ``invalid_egress_grant`` when an
    entry is one the gateway's rules cannot read (the policy's checks are stricter: never)."""
    allow = [pattern.text for pattern in grant.allow]
    if grant.ask:
        allow += [host for host in approved if host not in allow]
    bad = [entry for entry in allow if not rules.valid_pattern(entry)]
    if bad:
        raise ExecutorError(
            f"policy rule {grant.rule!r}: the egress gateway cannot read allow-list entries {bad}",
            code="invalid_egress_grant",
        )
    secrets = {name: {"value": grant.secrets.value(name), "placeholder": p} for name, p in grant.placeholders.items()}
    return {
        "run_id": grant.run_id,
        "rule": grant.rule,
        "allow": allow,
        "inject": [{"host": h.host, "header": h.header, "value": h.template} for h in grant.headers],
        "secrets": secrets,
        "methods": list(grant.methods) if grant.methods is not None else None,
        "ports": list(grant.ports),
        "websocket": grant.websocket,
        "max_response_bytes": grant.max_response_bytes,
        "max_requests": grant.max_requests,
        "max_bytes": grant.max_bytes,
        "max_connections": grant.max_connections,
        "ask": grant.ask,
        "ask_timeout": ask_timeout,
    }


@dataclass(frozen=True)
class EgressEvent:
    """One request through the gateway (one per refused CONNECT), as the audit wants it.

    ``path`` has no query; no field carries a secret's value (the gateway scrubs them).
    ``limit`` names the cap that made ``decision`` ``limited`` (``egress_response_bytes``,
    ``egress_bytes``, ``egress_requests``, ``egress_connections``). ``run_id`` is None for a
    request with missing or unknown credentials."""

    run_id: str | None
    rule: str | None
    host: str
    method: str
    path: str
    status: int
    bytes: int
    request_bytes: int
    decision: str
    reason: str | None
    limit: str | None
    time: float
    #: when the request (the CONNECT) came (None: not known)
    started: float | None = None

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> EgressEvent:
        fields: dict[str, Any] = {name: data.get(name) for name in cls.__dataclass_fields__}
        return cls(**fields)


@dataclass(frozen=True)
class HostQuestion:
    """A request of a run whose rule says ``ask`` to a host outside its allow-list: held by the
    gateway until :meth:`Gateway.answer` (every request to that host of that run waits on it)."""

    ask: int
    run_id: str
    rule: str
    host: str
    #: the first held request's method (``CONNECT`` for a tunnel)
    method: str


class _Link:
    """One gateway process and its control channel (a restart makes a new one)."""

    def __init__(self, process: subprocess.Popen[bytes], control: socket.socket, owner: Gateway) -> None:
        self.process = process
        self.control = control
        self.owner = owner
        self.port = 0
        self.lock = threading.Lock()
        self.pending: dict[int, threading.Event] = {}
        self.next = 0
        self.ready = threading.Event()
        self.closed = False
        self.reader = threading.Thread(target=self._read, name="egress-gateway-events", daemon=True)
        self.reader.start()

    def _read(self) -> None:
        try:
            for line in self.control.makefile("rb"):
                self._handle(json.loads(line))
        except (OSError, ValueError) as exc:  # the process died (a reset), or wrote what is not ours
            if not self.owner._closing:
                log.error("the egress gateway's control channel broke: %s", exc)
        finally:
            self.closed = True
            self.ready.set()
            for waiter in list(self.pending.values()):
                waiter.set()
            self.owner._lost(self)

    def _handle(self, message: dict[str, Any]) -> None:
        op = message.get("op")
        if op == "event":
            self.owner._event(EgressEvent.parse(message))
        elif op == "ask":
            self.owner._ask(message)
        elif op == "ok":
            waiter = self.pending.pop(int(message.get("id") or 0), None)
            if waiter is not None:
                waiter.set()
        elif op == "ready":
            self.port = int(message["port"])
            self.ready.set()

    @property
    def alive(self) -> bool:
        return not self.closed and self.process.poll() is None

    def call(self, message: dict[str, Any]) -> None:
        if not self.alive:
            raise ExecutorError("the egress gateway is not running", code="egress_unavailable")
        waiter = threading.Event()
        with self.lock:
            self.next += 1
            message["id"] = self.next
            self.pending[self.next] = waiter
            try:
                self.control.sendall(json.dumps(message, separators=(",", ":")).encode() + b"\n")
            except OSError:
                raise ExecutorError("the egress gateway is not running", code="egress_unavailable") from None
        if not waiter.wait(CALL_TIMEOUT) or self.closed:
            raise ExecutorError("the egress gateway did not answer", code="egress_unavailable")

    def send(self, message: dict[str, Any]) -> None:
        """Send without waiting for an answer (safe on the reader thread); a link that is gone
        needs none."""
        if self.closed:
            return
        try:
            with self.lock:
                self.control.sendall(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        except OSError:
            pass

    def stop(self) -> None:
        """Ask it to exit, then make sure it has (SIGKILL after 5 s)."""
        if self.alive:
            try:
                self.call({"op": "close"})
            except ExecutorError:
                pass
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        self.control.close()
        if self.reader is not threading.current_thread():
            self.reader.join(5)


class Gateway:
    """The service's handle on its gateway process. Thread-safe; :meth:`close` ends it.

    The handle outlives its process: when the process dies (a crash, ``kill -9``) the handle
    starts another (``respawn``: the same CA, socket path and settings) after a pause, at most
    :data:`RESTART_ATTEMPTS` times in a row with doubling pauses, and registers again every grant
    not yet revoked; :attr:`available` is true meanwhile, and a :meth:`grant` waits for it.
    Requests in flight when the process died fail (the bridge answers 502, or the connection
    ends); the runs' later requests reach the new process with the same credentials.
    A successful restart ends the count; when every attempt fails the handle gives up:
    :attr:`available` is false, grants fail with ``egress_unavailable``."""

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        control: socket.socket,
        folder: Path,
        on_event: Callable[[EgressEvent], None] | None,
        respawn: Callable[[], tuple[subprocess.Popen[bytes], socket.socket]] | None = None,
        *,
        restarts: int | None = None,
        ask_timeout: float = 0.0,
    ) -> None:
        self.folder = folder
        self.ca_cert = folder / "ca-cert.pem"
        self.socket_path = folder / SOCKET
        #: Events, when no callback was given.
        self.events: queue.SimpleQueue[EgressEvent] = queue.SimpleQueue()
        self._on_event = on_event or self.events.put
        #: run id -> who gets that run's events (:meth:`watch`), besides ``on_event``
        self._watchers: dict[str, Callable[[EgressEvent], None]] = {}
        #: run id -> who gets that run's questions (:meth:`watch`; none: they are refused)
        self._askers: dict[str, Callable[[HostQuestion], None]] = {}
        #: how long the service lets a question wait (the gateway's bound is a little longer)
        self.ask_timeout = ask_timeout
        #: token -> the hosts approved before the grant was registered (registered again with it)
        self._approved: dict[str, tuple[str, ...]] = {}
        self._respawn = respawn
        self._restarts = RESTART_ATTEMPTS if restarts is None else restarts
        self._closing = False
        #: token -> grant, every grant registered and not revoked (what a restart registers again)
        self._grants: dict[str, Grant] = {}
        self._state = threading.Lock()
        self._up = threading.Event()  # set while a live process serves (clear during a restart)
        self._up.set()
        self._restarting = False
        self._gave_up = False
        #: How many times the process was started again (since the start of the service).
        self.restarted = 0
        self._link = _Link(process, control, self)

    # -- one process's link --------------------------------------------------------------------------

    @property
    def process(self) -> subprocess.Popen[bytes]:
        """The current gateway process."""
        return self._link.process

    @property
    def port(self) -> int:
        """The current process's TCP port (it may change with a restart, unless the listener's is fixed)."""
        return self._link.port

    @property
    def _ready(self) -> threading.Event:
        return self._link.ready

    def _event(self, event: EgressEvent) -> None:
        watcher = self._watchers.get(event.run_id) if event.run_id is not None else None
        for callback in (watcher, self._on_event):
            try:
                if callback is not None:
                    callback(event)
            except Exception:  # a callback's failure must not stop the events after it
                log.exception("an egress event's callback failed")

    def _ask(self, message: dict[str, Any]) -> None:
        question = HostQuestion(
            int(message["ask"]), str(message["run_id"]), str(message["rule"]), message["host"], message["method"]
        )
        asker = self._askers.get(question.run_id)
        try:
            if asker is None:
                raise ExecutorError("no one is asked for this run", code="egress_unavailable")
            asker(question)
        except Exception as exc:  # never left waiting: refused at once
            if not isinstance(exc, ExecutorError):
                log.exception("an egress question's callback failed")
            self.answer(question, False, "approvals for new hosts are not available here")

    def _lost(self, link: _Link) -> None:
        """A link's reader ended: start again, unless closing, starting, or already restarting."""
        with self._state:
            if link is not self._link or self._closing or self._respawn is None or self._restarting:
                return
            if link.port == 0:  # it never started: start() says why
                return
            self._restarting = True
            self._up.clear()
        try:
            status: int | None = link.process.wait(2)
        except subprocess.TimeoutExpired:  # its control channel broke, yet it runs: it is replaced
            link.process.kill()
            status = None
        log.error("the egress gateway process (pid %s) ended (status %s): starting it again", link.process.pid, status)
        threading.Thread(target=self._restart, name="egress-gateway-restart", daemon=True).start()

    def _restart(self) -> None:
        delay = RESTART_DELAY
        for attempt in range(1, self._restarts + 1):
            time.sleep(delay)
            delay = min(delay * 2, RESTART_MAX_DELAY)
            if self._closing:
                break
            link: _Link | None = None
            try:
                assert self._respawn is not None
                process, control = self._respawn()
                link = _Link(process, control, self)
                if not link.ready.wait(START_TIMEOUT) or not link.port:
                    raise ExecutorError(f"it did not start (exit status {process.poll()})", code="egress_unavailable")
                with self._state:
                    snapshot = dict(self._grants)
                for grant in snapshot.values():
                    approved = self._approved.get(grant.token, ())
                    link.call({"op": "grant", "token": grant.token, "grant": wire(grant, approved, self.ask_timeout)})
                with self._state:
                    if self._closing:
                        raise ExecutorError("the service is closing", code="egress_unavailable")
                    old, self._link = self._link, link
                    stale = [token for token in snapshot if token not in self._grants]
                    self._restarting = False
                    self.restarted += 1
                    self._up.set()
                for token in stale:  # revoked while it was re-registered
                    link.call({"op": "revoke", "token": token})
                old.control.close()
                old.process.poll()  # reaped
                log.warning(
                    "the egress gateway is running again (pid %s, attempt %d; %d grant(s) registered again)",
                    process.pid,
                    attempt,
                    len(snapshot),
                )
                return
            except (ExecutorError, OSError) as exc:
                message = exc.message if isinstance(exc, ExecutorError) else str(exc)
                log.error(
                    "the egress gateway's restart (attempt %d of %d) failed: %s", attempt, self._restarts, message
                )
                if link is not None:
                    link.stop()
        with self._state:
            self._restarting = False
            self._gave_up = not self._closing
            self._up.set()
        if not self._closing:
            log.error(
                "the egress gateway could not be started again after %d attempts: runs under a rule with egress "
                "are refused (egress_unavailable) until the service restarts",
                self._restarts,
            )

    def _call(self, message: dict[str, Any]) -> None:
        self._link.call(message)

    # -- the API -------------------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        """Whether a gateway process serves now."""
        return not self._closing and self._link.alive

    @property
    def available(self) -> bool:
        """Whether runs with network can be given a grant: the process serves, or is being started
        again after it died (not given up, not closed)."""
        return not self._closing and not self._gave_up and (self._restarting or self._link.alive)

    def grant(self, grant: Grant, approved: Sequence[str] = ()) -> str:
        """Register ``grant`` (the policy's, for one run: :meth:`~skill_executor.policy.NetworkPlan.grant`)
        before its run starts (``approved``: hosts approved before, allowed when its rule asks);
        the token its proxy URL carries (the grant's own, :meth:`proxy_url`).
        While the process is being started again this waits for it (``egress_unavailable`` when it
        cannot be)."""
        wired = wire(grant, approved, self.ask_timeout)
        with self._state:
            self._grants[grant.token] = grant
            self._approved[grant.token] = tuple(approved)
        try:
            for _ in range(3):  # again when the process died under the call and is started again
                self._up.wait(START_TIMEOUT * 2)
                link = self._link
                try:
                    link.call({"op": "grant", "token": grant.token, "grant": wired})
                    return grant.token
                except ExecutorError:
                    time.sleep(0.05)  # let the reader notice the death
                    if not self.available:
                        raise
            raise ExecutorError("the egress gateway did not take the grant", code="egress_unavailable")
        except BaseException:
            with self._state:
                self._grants.pop(grant.token, None)
                self._approved.pop(grant.token, None)
            raise

    def watch(
        self,
        run_id: str,
        callback: Callable[[EgressEvent], None],
        asker: Callable[[HostQuestion], None] | None = None,
    ) -> None:
        """Give ``run_id``'s events to ``callback`` too (on the gateway's reader thread, in order)
        until :meth:`unwatch`; the events a revoke's answer follows have all been given.
        ``asker`` gets the run's questions (``ask``; on the reader thread: it must not block,
        and :meth:`answer` each later); without one they are refused at once."""
        self._watchers[run_id] = callback
        if asker is not None:
            self._askers[run_id] = asker

    def unwatch(self, run_id: str) -> None:
        self._watchers.pop(run_id, None)
        self._askers.pop(run_id, None)

    def answer(self, question: HostQuestion, allow: bool, reason: str | None = None) -> None:
        """Answer a question (:class:`HostQuestion`): approved, its requests go on and the host is
        allowed for the rest of the run; else they are refused (403, ``reason`` in the body).
        Does not wait (safe on the reader thread); a gateway that is gone needs no answer (a
        restarted one holds no question any more: its requests were cut with the old process)."""
        self._link.send(
            {
                "op": "answer",
                "ask": question.ask,
                "run_id": question.run_id,
                "host": question.host,
                "allow": allow,
                "reason": reason,
            }
        )

    def narrow(self, token: str, allow: Sequence[HostPattern]) -> None:
        """Replace the allow-list of a live grant (a session's, narrowed), keeping its counters; a
        request after this returns is judged by the new list, one in an open tunnel too, and a
        restarted process is given the narrowed grant."""
        texts = [pattern.text for pattern in allow]
        bad = [entry for entry in texts if not rules.valid_pattern(entry)]
        if bad:
            raise ExecutorError(f"the egress gateway cannot read allow-list entries {bad}", code="invalid_egress_grant")
        with self._state:
            if token in self._grants:
                self._grants[token] = replace(self._grants[token], allow=tuple(allow))
        self._call({"op": "narrow", "token": token, "allow": texts})

    def revoke(self, token: str) -> None:
        """Forget a grant: its run's further requests (and open tunnels' next requests) get 407.
        A process that died holds it no more, and a restart does not register it again."""
        with self._state:
            self._grants.pop(token, None)
            self._approved.pop(token, None)
        self._call({"op": "revoke", "token": token})

    def proxy_url(self, token: str, port: int | None = None) -> str:
        """The proxy URL a run is given (``port``: the bridge's inside the sandbox; default: the
        gateway's own loopback port, for a client on the host)."""
        return f"http://run:{token}@127.0.0.1:{port or self.port}"

    def close(self) -> None:
        with self._state:
            self._closing = True
            self._up.set()
        self._link.stop()


def trusted_bundle(extra: Path | None, target: Path) -> Path:
    """The upstream trust store: the system's bundle, plus ``extra`` (a PEM file), in one file."""
    paths = ssl.get_default_verify_paths()
    system = next(
        (Path(p) for p in (paths.cafile, paths.openssl_cafile, *SYSTEM_BUNDLES) if p and Path(p).is_file()), None
    )
    parts = [system.read_bytes()] if system else []
    if extra is not None:
        if not extra.is_file():
            raise ExecutorError(f"SKILL_EXECUTOR_EGRESS_CA_BUNDLE {extra} is not a file", code="invalid_settings")
        parts.append(extra.read_bytes())
    if not parts:
        raise ExecutorError("no CA bundle for upstream verification (no system bundle found)", code="invalid_settings")
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_bytes(b"\n".join(parts))
    os.replace(tmp, target)
    return target


def egress_python(settings: Settings) -> str:
    """The interpreter that runs the gateway: SKILL_EXECUTOR_EGRESS_PYTHON, else the service's own."""
    return settings.egress_python or sys.executable


def start(settings: Settings, on_event: Callable[[EgressEvent], None] | None = None, *, port: int = 0) -> Gateway:
    """Start the gateway process (its CA made on the first start) and wait until it listens.

    ``on_event`` is called on the gateway's reader thread for each event (default: they queue
    up in :attr:`Gateway.events`).  It listens on loopback (``port``, default any free one), or
    where ``SKILL_EXECUTOR_EGRESS_LISTEN`` says (``host:port``: pods reach it over the network).
    A process that dies later is started again the same way (:class:`Gateway`)."""
    folder = (settings.data_dir / FOLDER).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    # Traversable, not listable (the sealed data dir made it 0700): a sandbox's bind of the socket
    # and of the CA certificate is made as the run's user under bwrap. ca/ (the key) stays 0700.
    os.chmod(folder, 0o711)
    socket_path = folder / SOCKET
    socket_path.parent.mkdir(exist_ok=True)
    os.chmod(socket_path.parent, 0o755)  # the runs' users reach the socket (0666) through it
    python = egress_python(settings)
    if shutil.which(python) is None and not Path(python).is_file():
        raise ExecutorError(f"SKILL_EXECUTOR_EGRESS_PYTHON {python} is not an executable", code="extra_missing")
    trusted = trusted_bundle(settings.egress_ca_bundle, folder / "trusted.pem")
    host = "127.0.0.1"
    if settings.egress_listen:
        host, port = listen_address(settings.egress_listen)
    config = {
        "confdir": str(folder / "ca"),
        "ca_cert": str(folder / "ca-cert.pem"),
        "unix_socket": str(socket_path),
        "trusted_ca": str(trusted),
        "hosts": dict(settings.egress_hosts),
        "scan_bytes": settings.egress_scan_bytes,
        "host": host,
        "port": port,
    }

    def spawn() -> tuple[subprocess.Popen[bytes], socket.socket]:
        ours, theirs = socket.socketpair()
        try:
            process = subprocess.Popen(
                [python, "-I", str(PROXY_SCRIPT), str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"},
                close_fds=True,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        try:
            ours.sendall(json.dumps(config).encode() + b"\n")
        except OSError:  # it is gone already: said by the caller, with its exit status
            pass
        return process, ours

    process, ours = spawn()
    gateway = Gateway(
        process,
        ours,
        folder,
        on_event,
        spawn,
        restarts=settings.egress_restarts,
        ask_timeout=settings.egress_ask_timeout_seconds,
    )
    if not gateway._ready.wait(START_TIMEOUT) or not gateway.port:
        gateway.close()
        code = process.poll()
        raise ExecutorError(
            "the egress gateway did not start"
            + (f" (it exited with {code}: is mitmproxy installed for {python}? the egress extra)" if code else ""),
            code="egress_unavailable",
        )
    return gateway


def listen_address(text: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port``) of SKILL_EXECUTOR_EGRESS_LISTEN."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ExecutorError(
            f"SKILL_EXECUTOR_EGRESS_LISTEN {text!r} is not host:port (for example 0.0.0.0:3128)",
            code="invalid_settings",
        )
    return host, int(port)
