"""The service's side of the egress gateway: start the process, register grants, read events.

See the package's docstring for why the gateway is a process of its own.
"""

from __future__ import annotations

import json
import os
import queue
import secrets as random
import shutil
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import Settings
from ..errors import ExecutorError
from . import rules

#: The gateway's files under the data dir: ``ca/`` (the CA with its key; the gateway's only,
#: 0700), ``ca-cert.pem`` (the CA's public certificate, what runs trust), ``egress.sock`` (the
#: Unix socket the runs' bridges reach), ``trusted.pem`` (the upstream bundle it verifies with).
FOLDER = "egress"
PROXY_SCRIPT = Path(__file__).resolve().parent / "proxy.py"
START_TIMEOUT = 30.0
CALL_TIMEOUT = 10.0
#: Where the system's CA bundle is looked for when Python's ssl module names none.
SYSTEM_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem")


def placeholder() -> str:
    """A fresh placeholder for a secret: what the run holds where it expects the secret."""
    return f"se-placeholder-{random.token_hex(16)}"


@dataclass(frozen=True)
class Secret:
    """A secret's real value (the gateway's only) and the placeholder the run holds instead."""

    value: str
    placeholder: str = field(default_factory=placeholder)

    def __repr__(self) -> str:  # never in a log line or a traceback
        return f"Secret(placeholder={self.placeholder!r})"


@dataclass(frozen=True)
class Injection:
    """A header the gateway sets toward ``host`` (exact or ``*.`` pattern), from a template with
    ``{secret:NAME}`` references."""

    host: str
    header: str
    value: str


@dataclass(frozen=True)
class EgressGrant:
    """What one run may reach, as its rule (narrowed by its request) says."""

    rule: str
    allow: Sequence[str]
    inject: Sequence[Injection] = ()
    secrets: Mapping[str, Secret] = field(default_factory=dict)
    methods: Sequence[str] | None = None
    ports: Sequence[int] = (443, 80)
    websocket: bool = False
    max_response_bytes: int | None = None
    max_requests: int | None = None
    max_bytes: int | None = None
    max_connections: int | None = None

    def check(self) -> None:
        """Raise ``invalid_egress_grant`` when the grant cannot be applied as written."""
        bad = [p for p in self.allow if not rules.valid_pattern(p)]
        if bad:
            raise ExecutorError(f"egress allow-list entries are not host names: {bad}", code="invalid_egress_grant")
        for injection in self.inject:
            missing = [n for n in rules.template_secrets(injection.value) if n not in self.secrets]
            if missing:
                raise ExecutorError(
                    f"injection for {injection.host} names unknown secrets {missing}", code="invalid_egress_grant"
                )
            listed = any(rules.normalise_host(a) == rules.normalise_host(injection.host) for a in self.allow)
            if not listed and (injection.host.startswith("*.") or rules.match_host(injection.host, self.allow) is None):
                raise ExecutorError(f"injection host {injection.host} is not allowed", code="invalid_egress_grant")

    def wire(self, run_id: str) -> dict[str, Any]:
        return {
            "run_id": run_id,
            "rule": self.rule,
            "allow": list(self.allow),
            "inject": [{"host": i.host, "header": i.header, "value": i.value} for i in self.inject],
            "secrets": {name: {"value": s.value, "placeholder": s.placeholder} for name, s in self.secrets.items()},
            "methods": list(self.methods) if self.methods is not None else None,
            "ports": list(self.ports),
            "websocket": self.websocket,
            "max_response_bytes": self.max_response_bytes,
            "max_requests": self.max_requests,
            "max_bytes": self.max_bytes,
            "max_connections": self.max_connections,
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

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> EgressEvent:
        fields: dict[str, Any] = {name: data.get(name) for name in cls.__dataclass_fields__}
        return cls(**fields)


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
        self.socket_path = folder / "egress.sock"
        self.port = 0
        #: Events, when no callback was given.
        self.events: queue.SimpleQueue[EgressEvent] = queue.SimpleQueue()
        self._on_event = on_event or self.events.put
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
        buffer = self._control.makefile("rb")
        for line in buffer:
            message = json.loads(line)
            op = message.get("op")
            if op == "event":
                try:
                    self._on_event(EgressEvent.parse(message))
                except Exception:  # a callback's failure must not stop the events after it
                    pass
            elif op == "ok":
                waiter = self._pending.pop(message.get("id"), None)
                if waiter is not None:
                    waiter.set()
            elif op == "ready":
                self.port = int(message["port"])
                self._ready.set()
        self._closed = True
        self._ready.set()
        for waiter in list(self._pending.values()):
            waiter.set()

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

    def grant(self, run_id: str, grant: EgressGrant) -> str:
        """Register ``grant`` for ``run_id``; the token its proxy URL carries (:meth:`proxy_url`)."""
        grant.check()
        token = random.token_urlsafe(24)
        self._call({"op": "grant", "token": token, "grant": grant.wire(run_id)})
        return token

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
    python = egress_python(settings)
    if shutil.which(python) is None and not Path(python).is_file():
        raise ExecutorError(f"SKILL_EXECUTOR_EGRESS_PYTHON {python} is not an executable", code="extra_missing")
    trusted = trusted_bundle(settings.egress_ca_bundle, folder / "trusted.pem")
    config = {
        "confdir": str(folder / "ca"),
        "ca_cert": str(folder / "ca-cert.pem"),
        "unix_socket": str(folder / "egress.sock"),
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
    ours.sendall(json.dumps(config).encode() + b"\n")
    gateway = Gateway(process, ours, folder, on_event)
    if not gateway._ready.wait(START_TIMEOUT) or not gateway.port:
        gateway.close()
        code = process.poll()
        raise ExecutorError(
            "the egress gateway did not start"
            + (f" (it exited with {code}: is mitmproxy installed for {python}? the egress extra)" if code else ""),
            code="egress_unavailable",
        )
    return gateway
