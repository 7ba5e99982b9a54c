"""The gateway process dies (``kill -9``): the service's handle starts it again with the same
CA and socket path, registers every live grant again, and the runs' next requests go through;
a grant revoked meanwhile is not brought back; when it cannot be started again, grants fail
with ``egress_unavailable`` (a real mitmproxy process, a loopback HTTPS upstream)."""

from __future__ import annotations

import base64
import os
import signal
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from skill_executor import egress
from skill_executor.config import Settings
from skill_executor.errors import ExecutorError

from ..helpers import eventually
from .test_egress_gateway import NAMES, Upstream, egress_python, make_grant, make_upstream_certs, serve_https

pytestmark = pytest.mark.skipif(
    egress_python() is None, reason="no egress environment (scripts/test.sh makes .venv-egress)"
)


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    folder = tmp_path_factory.mktemp("restart-upstream")
    ca, pem = make_upstream_certs(folder)
    server = serve_https(Upstream, pem)
    yield server.server_address[1], ca
    server.shutdown()


def settings_for(folder: Path, upstream: tuple[int, Path], python: str | None = None, **more: object) -> Settings:
    port, ca = upstream
    return Settings(
        data_dir=folder / "data",
        egress_python=python or egress_python(),
        egress_ca_bundle=ca,
        egress_hosts={name: f"127.0.0.1:{port}" for name in NAMES},
        **more,  # type: ignore[arg-type]
    )


def get(gateway: egress.Gateway, token: str, path: str) -> httpx.Response:
    with httpx.Client(
        proxy=gateway.proxy_url(token), verify=ssl.create_default_context(cafile=str(gateway.ca_cert)), timeout=20
    ) as client:
        return client.get(f"https://api.example.test{path}")


def via_socket(gateway: egress.Gateway, token: str, path: str) -> bytes:
    """The way a sandbox's bridge goes: a new connection to the Unix socket, CONNECT, TLS."""
    auth = base64.b64encode(f"run:{token}".encode()).decode()
    with socket.socket(socket.AF_UNIX) as raw:
        raw.settimeout(20)
        raw.connect(str(gateway.socket_path))
        raw.sendall(f"CONNECT api.example.test:443 HTTP/1.1\r\nProxy-Authorization: Basic {auth}\r\n\r\n".encode())
        answer = raw.recv(4096)
        if not answer.startswith(b"HTTP/1.1 200"):
            return answer
        context = ssl.create_default_context(cafile=str(gateway.ca_cert))
        with context.wrap_socket(raw, server_hostname="api.example.test") as tls:
            tls.sendall(f"GET {path} HTTP/1.1\r\nHost: api.example.test\r\nConnection: close\r\n\r\n".encode())
            data = b""
            while chunk := tls.recv(65536):
                data += chunk
            return data


def test_a_killed_gateway_is_started_again_with_its_ca_socket_and_live_grants(
    tmp_path: Path, upstream: tuple[int, Path]
) -> None:
    gateway = egress.start(settings_for(tmp_path, upstream))
    try:
        live = gateway.grant(make_grant("run-live", "r", allow=["api.example.test", "files.example.test"]))
        gone = gateway.grant(make_grant("run-gone", "r", allow=["api.example.test"]))
        assert get(gateway, live, "/before").status_code == 200
        seen = [gateway.events.get(timeout=10)]  # its event is out (a killed process sends no more)
        ca, first = gateway.ca_cert.read_bytes(), gateway.process.pid
        os.kill(first, signal.SIGKILL)
        # the run's grant is revoked while the gateway is down: a restart must not bring it back
        assert eventually(lambda: not gateway.alive, timeout=10)
        assert gateway.available  # being started again
        try:  # the run ends while the gateway is down: a restart must not bring its grant back
            gateway.revoke(gone)
        except ExecutorError as exc:
            assert exc.code == "egress_unavailable"
        assert eventually(lambda: gateway.alive and gateway.restarted == 1, timeout=30)
        assert gateway.process.pid != first and gateway.ca_cert.read_bytes() == ca
        assert gateway.socket_path.is_socket()
        assert get(gateway, live, "/after").status_code == 200
        assert via_socket(gateway, live, "/after-socket").startswith(b"HTTP/1.1 200")
        assert via_socket(gateway, gone, "/gone").startswith(b"HTTP/1.1 407")
        # new grants work as before
        fresh = gateway.grant(make_grant("run-new", "r", allow=["api.example.test"]))
        assert get(gateway, fresh, "/fresh").status_code == 200
        events = seen
        while not gateway.events.empty():
            events.append(gateway.events.get())
        assert {e.path for e in events if e.run_id == "run-live"} >= {"/before", "/after", "/after-socket"}
    finally:
        gateway.close()
    assert not gateway.alive and not gateway.available and gateway.process.poll() is not None


def test_a_grant_asked_for_while_it_restarts_waits_for_it(tmp_path: Path, upstream: tuple[int, Path]) -> None:
    gateway = egress.start(settings_for(tmp_path, upstream))
    try:
        os.kill(gateway.process.pid, signal.SIGKILL)
        assert eventually(lambda: not gateway.alive, timeout=10)
        token = gateway.grant(make_grant("run-during", "r", allow=["api.example.test"]))  # waits
        assert gateway.alive and gateway.restarted == 1
        assert get(gateway, token, "/during").status_code == 200
    finally:
        gateway.close()


def test_a_gateway_that_cannot_start_again_is_given_up_after_its_attempts(
    tmp_path: Path, upstream: tuple[int, Path]
) -> None:
    """Its interpreter fails from the second start on: two attempts, then runs are refused."""
    flag = tmp_path / "broken"
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\n[ -e "{flag}" ] && exit 3\nexec "{egress_python()}" "$@"\n')
    wrapper.chmod(0o755)
    gateway = egress.start(settings_for(tmp_path, upstream, str(wrapper), egress_restarts=2))
    try:
        token = gateway.grant(make_grant("run-1", "r", allow=["api.example.test"]))
        flag.touch()
        started = time.monotonic()
        os.kill(gateway.process.pid, signal.SIGKILL)
        assert eventually(lambda: not gateway.available, timeout=30)
        assert gateway.restarted == 0 and time.monotonic() - started < 30
        with pytest.raises(ExecutorError) as refused:
            gateway.grant(make_grant("run-2", "r", allow=["api.example.test"]))
        assert refused.value.code == "egress_unavailable"
        with pytest.raises(ExecutorError):
            gateway.revoke(token)
    finally:
        gateway.close()
