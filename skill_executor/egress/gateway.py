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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import Settings
from ..errors import ExecutorError
from ..policy import Grant
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


class Gateway:
    """A running gateway process. Thread-safe; :meth:`close` ends it."""

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        control: socket.socket,
        folder: Path,
        on_event: Callable[[EgressEvent], None] | None,
    ) -> None:
        self.process = process
        self.folder = folder
        self.ca_cert = folder / "ca-cert.pem"
        self.socket_path = folder / SOCKET
        self.port = 0
        #: Events, when no callback was given.
        self.events: queue.SimpleQueue[EgressEvent] = queue.SimpleQueue()
        self._on_event = on_event or self.events.put
        #: run id -> who gets that run's events (:meth:`watch`), besides ``on_event``
        self._watchers: dict[str, Callable[[EgressEvent], None]] = {}
        #: run id -> who gets that run's questions (:meth:`watch`; none: they are refused)
        self._askers: dict[str, Callable[[HostQuestion], None]] = {}
        #: how long the service lets a question wait (the gateway's bound is a little longer)
        self.ask_timeout = 0.0
        self._control = control
        self._lock = threading.Lock()
        self._pending: dict[int, threading.Event] = {}
        self._next = 0
        self._ready = threading.Event()
        self._closed = False
        self._reader = threading.Thread(target=self._read, name="egress-gateway-events", daemon=True)
        self._reader.start()

    # -- the control channel ------------------------------------------------------------------------

    def _read(self) -> None:
        try:
            for line in self._control.makefile("rb"):
                self._handle(json.loads(line))
        except (OSError, ValueError) as exc:  # the process died (a reset), or wrote what is not ours
            if not self._closed:
                log.error("the egress gateway's control channel broke: %s", exc)
        finally:
            self._closed = True
            self._ready.set()
            for waiter in list(self._pending.values()):
                waiter.set()

    def _handle(self, message: dict[str, Any]) -> None:
        op = message.get("op")
        if op == "event":
            event = EgressEvent.parse(message)
            watcher = self._watchers.get(event.run_id) if event.run_id is not None else None
            for callback in (watcher, self._on_event):
                try:
                    if callback is not None:
                        callback(event)
                except Exception:  # a callback's failure must not stop the events after it
                    log.exception("an egress event's callback failed")
        elif op == "ask":
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
                self.answer(question.ask, False, "approvals for new hosts are not available here")
        elif op == "ok":
            waiter = self._pending.pop(int(message.get("id") or 0), None)
            if waiter is not None:
                waiter.set()
        elif op == "ready":
            self.port = int(message["port"])
            self._ready.set()

    def _call(self, message: dict[str, Any]) -> None:
        if self._closed or self.process.poll() is not None:
            raise ExecutorError("the egress gateway is not running", code="egress_unavailable")
        waiter = threading.Event()
        with self._lock:
            self._next += 1
            message["id"] = self._next
            self._pending[self._next] = waiter
            self._control.sendall(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        if not waiter.wait(CALL_TIMEOUT) or self._closed:
            raise ExecutorError("the egress gateway did not answer", code="egress_unavailable")

    # -- the API -------------------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        return not self._closed and self.process.poll() is None

    def grant(self, grant: Grant, approved: Sequence[str] = ()) -> str:
        """Register ``grant`` (the policy's, for one run: :meth:`~skill_executor.policy.NetworkPlan.grant`)
        before its run starts (``approved``: hosts approved before, allowed when its rule asks);
        the token its proxy URL carries (the grant's own, :meth:`proxy_url`)."""
        self._call({"op": "grant", "token": grant.token, "grant": wire(grant, approved, self.ask_timeout)})
        return grant.token

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

    def answer(self, ask: int, allow: bool, reason: str | None = None) -> None:
        """Answer a question (:class:`HostQuestion`): approved, its requests go on and the host is
        allowed for the rest of the run; else they are refused (403, ``reason`` in the body).
        Does not wait (safe on the reader thread); a gateway that is gone needs no answer."""
        if self._closed:
            return
        line = json.dumps({"op": "answer", "ask": ask, "allow": allow, "reason": reason}, separators=(",", ":"))
        try:
            with self._lock:
                self._control.sendall(line.encode() + b"\n")
        except OSError:
            pass

    def revoke(self, token: str) -> None:
        """Forget a grant: its run's further requests (and open tunnels' next requests) get 407."""
        self._call({"op": "revoke", "token": token})

    def proxy_url(self, token: str, port: int | None = None) -> str:
        """The proxy URL a run is given (``port``: the bridge's inside the sandbox; default: the
        gateway's own loopback port, for a client on the host)."""
        return f"http://run:{token}@127.0.0.1:{port or self.port}"

    def close(self) -> None:
        if not self._closed and self.process.poll() is None:
            try:
                self._call({"op": "close"})
            except ExecutorError:
                pass
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        self._control.close()
        self._reader.join(5)


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
    up in :attr:`Gateway.events`)."""
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
    config = {
        "confdir": str(folder / "ca"),
        "ca_cert": str(folder / "ca-cert.pem"),
        "unix_socket": str(socket_path),
        "trusted_ca": str(trusted),
        "hosts": dict(settings.egress_hosts),
        "scan_bytes": settings.egress_scan_bytes,
        "port": port,
    }
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
    finally:
        theirs.close()
    try:
        ours.sendall(json.dumps(config).encode() + b"\n")
    except OSError:  # it is gone already: said below, with its exit status
        pass
    gateway = Gateway(process, ours, folder, on_event)
    gateway.ask_timeout = settings.egress_ask_timeout_seconds
    if not gateway._ready.wait(START_TIMEOUT) or not gateway.port:
        gateway.close()
        code = process.poll()
        raise ExecutorError(
            "the egress gateway did not start"
            + (f" (it exited with {code}: is mitmproxy installed for {python}? the egress extra)" if code else ""),
            code="egress_unavailable",
        )
    return gateway
