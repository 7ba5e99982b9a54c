"""The path in (skill_executor/runtimes/egress.py): a run with an egress grant reaches the
gateway's Unix socket through the launcher's loopback bridge, and nothing else; a run
without one reaches nothing at all.

The gateway here is a stand-in: a plain HTTP proxy on a Unix socket that answers every
request itself (what it was asked, with which credential).  Runs on runc, on gVisor
(when the engine's runsc may open host sockets; the launcher's bridge under gVisor is
also checked with ``runsc do``) and on bwrap.
"""

from __future__ import annotations

import http.server
import os
import shutil
import socketserver
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skill_executor.core import Executor
from skill_executor.runs.sandbox import RunSandbox
from skill_executor.runtimes.base import Command, ExecResult, SandboxPlan
from skill_executor.runtimes.bwrap import build_launcher
from skill_executor.runtimes.docker import DockerRuntime
from skill_executor.runtimes.docker.sandboxes import ColdBox
from skill_executor.runtimes.egress import SANDBOX_CA, SANDBOX_DIR, EgressPath, EgressUnsupported
from skill_executor.workspace.layout import environment

from ..conftest import make_settings, require_runtime

#: Public, and not a real CA's: the runs only read it.
CERT = b"-----BEGIN CERTIFICATE-----\nTUlJQnRlc3QtY2VydGlmaWNhdGUtb2YtdGhlLXN0YW5kLWlu\n-----END CERTIFICATE-----\n"


class Gateway(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """An HTTP proxy stand-in on a Unix socket: answers ``proxied <method> <target> <credential>``."""

    daemon_threads = True
    seen: list[tuple[str, str, str | None]]

    def get_request(self) -> tuple[Any, Any]:
        conn, _ = self.socket.accept()
        return conn, ("sandbox", 0)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Gateway

    def do_GET(self) -> None:
        credential = self.headers.get("Proxy-Authorization")
        self.server.seen.append((self.command, self.path, credential))
        body = f"proxied {self.command} {self.path} {credential}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[tuple[Gateway, EgressPath]]:
    """The stand-in on ``<tmp>/egress/gw.sock`` (a folder of its own) and the run's path to it."""
    folder = tmp_path / "egress"
    folder.mkdir()
    socket_path = folder / "gw.sock"
    server = Gateway(str(socket_path), Handler)
    server.seen = []
    # The run's user (1000) connects: it must reach the socket (bwrap starts as it).
    os.chmod(socket_path, 0o666)
    for path in (folder, tmp_path, *tmp_path.parents):
        os.chmod(path, os.stat(path).st_mode | 0o001)
    cert = tmp_path / "ca.pem"
    cert.write_bytes(CERT)
    os.chmod(cert, 0o644)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, EgressPath(socket=socket_path, ca_cert=cert, credential="tok-123", variables={"GH_TOKEN": "se-ph"})
    server.shutdown()
    server.server_close()


@pytest.fixture(params=["docker", "docker-pool", "docker-runsc", "bwrap"])
def executor(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Executor]:
    require_runtime(request.param)
    made = Executor.from_settings(make_settings(tmp_path, request.param))
    yield made
    made.close()


def execute(executor: Executor, command: str, egress: EgressPath | None, run_id: str = "egress-run") -> ExecResult:
    runtime = executor.runtime
    if egress is not None and isinstance(runtime, DockerRuntime):
        oci = runtime.engine.oci_runtime
        if oci is not None and not oci.opens_host_sockets:
            pytest.skip(
                f"the engine's runsc may not open host sockets ({' '.join(oci.args)}): egress needs --host-uds=all"
            )
    plan = SandboxPlan(run_id, executor.repository.get("math-tools"), egress=egress)
    with RunSandbox(executor.runtime.claim(plan)) as sandbox:
        if egress is not None and isinstance(executor.runtime, DockerRuntime):
            assert isinstance(sandbox.box, ColdBox)  # never a warm container: its mounts predate the run
        cwd = f"{sandbox.root.rstrip('/')}/work"
        return sandbox.execute(
            Command(
                command=command,
                cwd=cwd,
                env={**environment(sandbox.root, "math-tools"), "PWD": cwd},
                stdin=None,
                timeout=60,
                stdout_max=1 << 20,
                stderr_max=1 << 20,
            )
        )


#: Raw TCP from inside: to an address outside, and to loopback ports the bridge is not on.
RAW_TCP = """
import socket, sys
for host, port in (("10.0.0.1", 80), ("1.1.1.1", 443), ("127.0.0.1", 80), ("127.0.0.1", 3129)):
    s = socket.socket(); s.settimeout(3)
    try:
        s.connect((host, port)); print("CONNECTED", host, port)
    except OSError as exc:
        print("refused", host, port, type(exc).__name__)
"""


def test_a_run_with_a_grant_reaches_the_gateway_and_nothing_else(
    executor: Executor, gateway: tuple[Gateway, EgressPath]
) -> None:
    server, egress = gateway
    command = (
        "curl -sS http://api.example.test/one?q=1 && "
        "python3 -c \"import urllib.request; print(urllib.request.urlopen('http://pypi.example.test/two').read().decode())\" && "
        f"python3 -c '{RAW_TCP}' && "
        # find, not ls: gVisor 20221219 answers coreutils' statx on a bind mount with EINVAL
        f"find {SANDBOX_DIR} /run/skill-executor -mindepth 1 -maxdepth 1 -printf '%f\\n'; cat {SANDBOX_CA} && "
        "env | grep -E '^(HTTPS?_PROXY|https?_proxy|NO_PROXY|NODE_USE_ENV_PROXY|SSL_CERT_FILE|REQUESTS_CA_BUNDLE|"
        "NODE_EXTRA_CA_CERTS|PIP_CERT|UV_OFFLINE|GH_TOKEN)=' | sort; "
        f"echo x > {SANDBOX_CA} 2>/dev/null && echo WROTE-CA; true"
    )
    result = execute(executor, command, egress)
    out = result.stdout.decode()
    assert result.exit_code == 0, (out, result.stderr.decode())
    assert "proxied GET http://api.example.test/one?q=1 Basic " in out
    assert "proxied GET http://pypi.example.test/two Basic " in out
    assert [(m, p) for m, p, _ in server.seen] == [
        ("GET", "http://api.example.test/one?q=1"),
        ("GET", "http://pypi.example.test/two"),
    ]
    import base64

    assert {c for _, _, c in server.seen} == {"Basic " + base64.b64encode(b"run:tok-123").decode()}
    assert "CONNECTED" not in out and out.count("refused") == 4
    lines = out.splitlines()
    assert "gw.sock" in lines  # the socket folder holds the socket only
    assert "egress-ca.pem" in lines and "egress" in lines
    proxy = "http://run:tok-123@127.0.0.1:3128"
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        assert f"{name}={proxy}" in lines
    assert "NO_PROXY=localhost,127.0.0.1" in lines and "NODE_USE_ENV_PROXY=1" in lines
    assert "UV_OFFLINE=0" in lines  # the image's uv is offline for runs without network
    for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "PIP_CERT"):
        assert f"{name}={SANDBOX_CA}" in lines
    assert "GH_TOKEN=se-ph" in lines
    assert CERT.decode() in out and "WROTE-CA" not in out


def test_a_run_without_a_grant_has_no_route_and_no_socket(
    executor: Executor, gateway: tuple[Gateway, EgressPath]
) -> None:
    server, _ = gateway
    command = (
        "curl -sS --max-time 5 -x http://127.0.0.1:3128 http://api.example.test/ ; echo curl=$?; "
        f"python3 -c '{RAW_TCP}'; test -e /run/skill-executor || echo NO-MOUNT; env | grep -ci proxy"
    )
    result = execute(executor, command, None, run_id="no-egress-run")
    out = result.stdout.decode()
    assert "curl=7" in out, out  # nothing listens on the bridge's port
    assert "CONNECTED" not in out and out.count("refused") == 4
    assert "NO-MOUNT" in out  # nothing of the gateway mounted
    assert out.strip().endswith("0")  # no proxy variables
    assert server.seen == []


def test_the_bridge_says_so_when_the_gateway_is_gone(executor: Executor, gateway: tuple[Gateway, EgressPath]) -> None:
    server, egress = gateway
    server.shutdown()
    server.server_close()  # the socket file stays: nothing accepts on it
    result = execute(executor, "curl -sS -o /dev/null -w '%{http_code}' http://api.example.test/", egress)
    assert result.stdout.decode() == "502", result.stderr.decode()


def test_runtimes_without_a_path_in_refuse_a_grant(tmp_path: Path, gateway: tuple[Gateway, EgressPath]) -> None:
    _, egress = gateway
    local = Executor.from_settings(make_settings(tmp_path, "local"))
    try:
        with pytest.raises(EgressUnsupported) as refused:
            local.runtime.claim(SandboxPlan("r", local.repository.get("math-tools"), egress=egress))
    finally:
        local.close()
    assert refused.value.code == "egress_unsupported" and refused.value.status == 501


def test_a_socket_folder_holding_more_than_the_socket_is_refused(gateway: tuple[Gateway, EgressPath]) -> None:
    _, egress = gateway
    (egress.socket.parent / "ca.key").write_text("secret")
    with pytest.raises(EgressUnsupported, match="holds more than the socket"):
        egress.check()


def test_gvisor_without_host_socket_access_is_refused(tmp_path: Path, gateway: tuple[Gateway, EgressPath]) -> None:
    require_runtime("docker-runsc")
    _, egress = gateway
    executor = Executor.from_settings(make_settings(tmp_path, "docker-runsc"))
    try:
        runtime = executor.runtime
        assert isinstance(runtime, DockerRuntime) and runtime.engine.oci_runtime is not None
        if runtime.engine.oci_runtime.opens_host_sockets:
            pytest.skip("the engine's runsc may open host sockets")
        with pytest.raises(EgressUnsupported, match="--host-uds=all"):
            runtime.claim(SandboxPlan("r", executor.repository.get("math-tools"), egress=egress))
    finally:
        executor.close()


@pytest.mark.parametrize("host_uds", ["create", "all"])
def test_the_bridge_under_gvisor_needs_host_socket_access(
    tmp_path: Path, gateway: tuple[Gateway, EgressPath], host_uds: str
) -> None:
    """The launcher's bridge in a gVisor sandbox (``runsc do``: the host's files, no network),
    to a host socket: refused under --host-uds=create (the older registration), relayed
    under --host-uds=all."""
    runsc = shutil.which("runsc")
    if runsc is None or os.geteuid() != 0:
        pytest.skip("needs gVisor's runsc and root")
    server, egress = gateway
    launcher, problem = build_launcher(tmp_path)
    assert launcher is not None, problem
    argv = [runsc, "--network=none", f"--host-uds={host_uds}", "--platform=ptrace", "--root", str(tmp_path / "runsc")]
    argv += ["do", str(launcher), "--egress", f"3128={egress.socket}", "--exec", "--"]
    argv += ["curl", "-sS", "-x", egress.proxy_url(), "http://api.example.test/gvisor"]
    done = subprocess.run(argv, capture_output=True, timeout=120, check=False)
    out = done.stdout.decode()
    if host_uds == "all":
        assert out.startswith("proxied GET http://api.example.test/gvisor Basic "), (out, done.stderr)
    else:
        assert "the egress gateway is not reachable" in out and server.seen == []


def test_a_sessions_processes_and_runs_share_its_hosts_bridge(
    tmp_path: Path, gateway: tuple[Gateway, EgressPath]
) -> None:
    """A session's host container runs the bridge for its loopback: its interactive processes
    and the runs that join its network reach the gateway through it."""
    require_runtime("docker")
    server, egress = gateway
    executor = Executor.from_settings(make_settings(tmp_path, "docker"))
    runtime = executor.runtime
    assert isinstance(runtime, DockerRuntime)
    work = tmp_path / "session-work"
    work.mkdir()
    if runtime.owner is not None:
        os.chown(work, *runtime.owner)
    host = runtime.host(work, "processes-egress-test", 120.0, egress=egress)
    try:
        process = host.exec(
            ["curl", "-sS", "http://api.example.test/process"], cwd="/workspace/work", env={}, pty=False
        )
        out = b""
        while chunk := process.read():
            out += chunk
        process.close()
        assert out.decode().startswith("proxied GET http://api.example.test/process Basic "), out
        plan = SandboxPlan(
            "session-run", executor.repository.get("math-tools"), network_of=host.network_of, egress=egress
        )
        with RunSandbox(runtime.claim(plan)) as sandbox:
            cwd = f"{sandbox.root.rstrip('/')}/work"
            result = sandbox.execute(
                Command(
                    "curl -sS http://api.example.test/run; test -e " + SANDBOX_DIR + " || echo NO-SOCKET",
                    cwd,
                    {**environment(sandbox.root, "math-tools"), "PWD": cwd},
                    None,
                    60,
                    1 << 16,
                    1 << 16,
                )
            )
        assert result.stdout.decode().startswith("proxied GET http://api.example.test/run Basic "), result
        assert "NO-SOCKET" in result.stdout.decode()  # the run's own container: no socket, the host's bridge
    finally:
        runtime.unhost(host)
        executor.close()
