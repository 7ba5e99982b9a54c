"""The path in: how a run with an egress grant reaches the service's egress gateway.

The sandbox keeps no network interface but loopback.  The gateway listens on a Unix
socket on the service's side; a runtime that honours :attr:`SandboxPlan.egress
<skill_executor.runtimes.base.SandboxPlan.egress>` makes it visible inside the run at
:data:`SANDBOX_DIR` (read-only, nothing of its host folder but the socket), puts the
gateway CA's public certificate at :data:`SANDBOX_CA` (read-only, one file), and has the
in-sandbox launcher (``images/runner/launcher.c``, ``--egress PORT=SOCKET``) relay
``127.0.0.1:<port>`` to the socket, byte for byte.  The run's environment names the
bridge as its HTTP(S) proxy, with the run's own credential in the proxy URL (the gateway
knows a run only by it), and the certificate as every common client's trust store
(:meth:`EgressPath.environment`).

The bridge adds no authority: the socket is visible to the run as well, and a run that
connects to it directly, kills the bridge or listens on its port in its place reaches
nothing but the gateway, as itself.  Without a grant nothing is mounted, nothing listens,
nothing is forked: such a run is as network-less as before.

Runtimes: docker (runc: cold containers -- a run with a grant never takes a warm one, whose
mounts were fixed before the run was known; gVisor the same, when the engine's ``runsc`` may
open host sockets: ``--host-uds=all`` as ``RUNSC_ARGS`` registers it, or ``open``), bwrap
(when its launcher could be built), a session's process host
(:class:`~.docker.processes.DockerHost`: one bridge for the session's shared loopback).
agent-sandbox pods have no socket of the worker's: they reach the worker's gateway over the
network (``SKILL_EXECUTOR_EGRESS_LISTEN``, at ``SKILL_EXECUTOR_EGRESS_ADVERTISE``; a
NetworkPolicy lets them reach that port and nothing else) with the same credential and
variables (:meth:`EgressPath.environment`'s ``address``).  The local runtime refuses such a
plan (``egress_unsupported``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ExecutorError

#: Where a run sees the gateway's socket folder (its socket only) and the CA certificate.
SANDBOX_DIR = "/run/skill-executor/egress"
SANDBOX_CA = "/run/skill-executor/egress-ca.pem"
#: The bridge's loopback port inside the sandbox, unless the plan names another.
DEFAULT_PORT = 3128
#: The variables that name the CA certificate for each kind of client: OpenSSL (and uv,
#: Python's ssl), requests, Node (added to its built-in roots), pip, curl, git.
CA_VARIABLES = (
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "PIP_CERT",
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
)
#: The proxy URL's user name (the password is the run's credential).
PROXY_USER = "run"


class EgressUnsupported(ExecutorError):
    """The runtime cannot give a run a path to the egress gateway."""

    code = "egress_unsupported"
    status = 501


@dataclass(frozen=True, slots=True)
class EgressPath:
    """What a run with an egress grant gets: the gateway's socket and CA certificate (paths
    on the service's side), its credential, the bridge's port, and variables of its own
    (a secret's placeholder where a skill expects the secret)."""

    #: The gateway's Unix socket.  Its folder must hold nothing else (gVisor cannot mount a
    #: socket file, so the Docker runtime mounts the folder).
    socket: Path
    #: The gateway CA's certificate (PEM; never its key).
    ca_cert: Path
    #: The run's proxy credential (random per run; the gateway knows the run by it).
    credential: str
    port: int = DEFAULT_PORT
    #: More variables for the run (``GITHUB_TOKEN`` -> its placeholder).
    variables: Mapping[str, str] = field(default_factory=dict)

    @property
    def sandbox_socket(self) -> str:
        """The socket as the run sees it."""
        return f"{SANDBOX_DIR}/{self.socket.name}"

    def launcher_option(self) -> list[str]:
        """The launcher's option that starts the bridge (exec mode)."""
        return ["--egress", f"{self.port}={self.sandbox_socket}"]

    def proxy_url(self, address: str | None = None) -> str:
        """The run's proxy URL: the bridge on its loopback, or ``address`` (``host:port``: a
        gateway the sandbox reaches over the network, an agent-sandbox pod's)."""
        return f"http://{PROXY_USER}:{self.credential}@{address or f'127.0.0.1:{self.port}'}"

    def environment(self, *, address: str | None = None, ca: str = SANDBOX_CA) -> dict[str, str]:
        """The run's variables for the path: proxies, the CA certificate, its own ones
        (which cannot override the path's).  ``address`` and ``ca``: where a sandbox without the
        bridge reaches the gateway, and where it finds the certificate."""
        url = self.proxy_url(address)
        env = dict(self.variables)
        env.update({name: url for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")})
        env.update({name: "localhost,127.0.0.1" for name in ("NO_PROXY", "no_proxy")})
        env["NODE_USE_ENV_PROXY"] = "1"  # Node 22.21+/24.5+: fetch and https through HTTP(S)_PROXY
        env["UV_OFFLINE"] = "0"  # the runner image's uv is offline (UV_OFFLINE=1) for runs without network
        env.update({name: ca for name in CA_VARIABLES})
        return env

    def check(self) -> None:
        """Refuse a path a sandbox cannot be given safely: a socket that is not one, a folder
        that holds more than it (the folder is what a container sees), a certificate that
        is not a regular file or holds a private key."""
        folder = self.socket.parent
        try:
            if not self.socket.is_socket():
                raise EgressUnsupported(f"the egress gateway's socket {self.socket} is not a Unix socket")
            others = sorted(p.name for p in folder.iterdir() if p.name != self.socket.name)
            if others:
                raise EgressUnsupported(
                    f"the egress gateway's socket folder {folder} holds more than the socket "
                    f"({', '.join(others[:3])}): a sandbox would see it"
                )
            if not self.ca_cert.is_file() or self.ca_cert.is_symlink():
                raise EgressUnsupported(f"the egress CA certificate {self.ca_cert} is not a regular file")
            if b"PRIVATE KEY" in self.ca_cert.read_bytes():
                raise EgressUnsupported(f"the egress CA certificate {self.ca_cert} holds a private key")
        except OSError as exc:
            raise EgressUnsupported(f"the egress gateway's path cannot be checked: {exc}") from None
        if not 1024 <= self.port <= 65535:
            raise EgressUnsupported(f"the egress bridge's port {self.port} is not in 1024..65535")


def refuse(runtime: str, egress: EgressPath | None) -> None:
    """For runtimes without a path in: refuse a plan with an egress grant."""
    if egress is not None:
        raise EgressUnsupported(
            f"the {runtime} runtime cannot give a run network access through the egress gateway: "
            "use the docker or bwrap runtime"
        )


def runsc_opens_host_sockets(args: list[str] | tuple[str, ...]) -> bool:
    """Whether gVisor with these runtime arguments lets a sandbox connect to a host socket."""
    return any(arg in ("--host-uds=open", "--host-uds=all", "--fsgofer-host-uds") for arg in args)
