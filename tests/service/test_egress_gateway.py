"""The egress gateway on its own (skill_executor/egress), without sandboxes: a real mitmproxy
process in its environment (.venv-egress, SKILL_EXECUTOR_EGRESS_PYTHON), a loopback HTTPS
upstream with a test CA under made-up names, and curl, httpx and requests as the runs' clients."""

from __future__ import annotations

import base64
import datetime
import json
import os
import shutil
import socket
import ssl
import stat
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from skill_executor import egress
from skill_executor.config import Settings
from skill_executor.policy import Egress, Grant, NetworkPlan, Secrets

ROOT = Path(__file__).resolve().parent.parent.parent
NAMES = ["api.example.test", "other.example.test", "files.example.test"]
SECRET = "ghs_real-secret-value-0123456789"


def egress_python() -> str | None:
    found = os.environ.get("SKILL_EXECUTOR_EGRESS_PYTHON") or str(ROOT / ".venv-egress" / "bin" / "python")
    return found if Path(found).is_file() else None


pytestmark = pytest.mark.skipif(
    egress_python() is None, reason="no egress environment (scripts/test.sh makes .venv-egress)"
)


def make_grant(run_id: str, rule: str, secrets: dict[str, str] | None = None, **block: Any) -> Grant:
    """The policy's grant for one run under a rule whose ``egress`` block is ``block``."""
    parsed = Egress.model_validate(block)
    return NetworkPlan(rule, parsed, parsed.hosts()).grant(run_id, Secrets(secrets or {}))


class Placeholder:
    """The run's view of its secret: the placeholder it holds."""

    def __init__(self, grant: Grant, name: str) -> None:
        self.placeholder = grant.placeholders[name]


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def serve_https(handler: type[BaseHTTPRequestHandler], pem: Path) -> ThreadingHTTPServer:
    """A loopback HTTPS server of ``handler`` with the certificate and key in ``pem``, serving in
    a thread of its own (``shutdown()`` ends it)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pem)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def make_upstream_certs(folder: Path, names: Sequence[str] = NAMES) -> tuple[Path, Path]:
    """A test CA and a server certificate for ``names`` signed by it (PEM files)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("egress test CA"))
        .issuer_name(_name("egress test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(names[0]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    (folder / "upstream-ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (folder / "upstream.pem").write_bytes(
        cert.public_bytes(serialization.Encoding.PEM)
        + key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return folder / "upstream-ca.pem", folder / "upstream.pem"


class Upstream(BaseHTTPRequestHandler):
    """Echoes what it got as JSON; /size/N answers N bytes (sized), /chunked/N chunked;
    /redirect?to=URL redirects."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are separate writes: no 40 ms delayed-ACK stall
    seen: list[dict[str, Any]] = []

    def handle_any(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        Upstream.seen.append(
            {
                "method": self.command,
                "path": self.path,
                "headers": {k.title(): v for k, v in self.headers.items()},
                "body": body.decode("latin-1"),
            }
        )
        if self.path.startswith("/size/"):
            payload = b"x" * int(self.path.split("/")[2])
            self.send_response(200)
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        if self.path.startswith("/chunked/"):
            total = int(self.path.split("/")[2])
            self.send_response(200)
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            try:
                while total > 0:
                    n = min(4096, total)
                    self.wfile.write(b"%x\r\n" % n + b"y" * n + b"\r\n")
                    self.wfile.flush()
                    total -= n
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                pass
            return
        if self.path.startswith("/redirect?to="):
            self.send_response(302)
            self.send_header("location", self.path.split("=", 1)[1])
            self.send_header("content-length", "0")
            self.end_headers()
            return
        payload = json.dumps(Upstream.seen[-1]).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_PUT = do_DELETE = handle_any

    def log_message(self, *args: Any) -> None:
        pass


class Env:
    def __init__(self, gateway: egress.Gateway, folder: Path, secret: Placeholder, token: str) -> None:
        self.gateway = gateway
        self.folder = folder
        self.secret = secret
        self.token = token
        self.proxy = gateway.proxy_url(token)
        self.ca = str(gateway.ca_cert)

    def events(self, wait: float = 0.5) -> list[egress.EgressEvent]:
        time.sleep(wait)
        found = []
        while not self.gateway.events.empty():
            found.append(self.gateway.events.get())
        return found

    def curl(self, *args: str, proxy: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["curl", "-sS", "--max-time", "20", "--proxy", proxy or self.proxy, "--cacert", self.ca, *args],
            capture_output=True,
            text=True,
            timeout=30,
        )


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    folder = tmp_path_factory.mktemp("egress")
    upstream_ca, upstream_pem = make_upstream_certs(folder)
    server = serve_https(Upstream, upstream_pem)
    port = server.server_address[1]
    settings = Settings(
        data_dir=folder / "data",
        egress_python=egress_python(),
        egress_ca_bundle=upstream_ca,
        egress_hosts={name: f"127.0.0.1:{port}" for name in NAMES},
    )
    gateway = egress.start(settings)
    grant = make_grant(
        "run-1",
        "gh-tools",
        {"GITHUB_TOKEN": SECRET},
        allow=["api.example.test", "*.example.test"],
        inject=[{"host": "api.example.test", "header": "Authorization", "value": "Bearer {secret:GITHUB_TOKEN}"}],
        methods=["GET", "POST"],
        max_response_bytes=10_000,
    )
    token = gateway.grant(grant)
    yield Env(gateway, folder, Placeholder(grant, "GITHUB_TOKEN"), token)
    gateway.close()
    server.shutdown()


def raw_connect(env: Env, target: str, token: str | None = None) -> bytes:
    """A CONNECT with the run's credentials on a raw socket: the gateway's answer (status line and body)."""
    token = env.token if token is None else token
    with socket.create_connection(("127.0.0.1", env.gateway.port), timeout=10) as sock:
        auth = base64.b64encode(f"run:{token}".encode()).decode()
        sock.sendall(
            f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: Basic {auth}\r\n\r\n".encode()
        )
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
            if b"\r\n\r\n" in data and data.split(b"\r\n\r\n", 1)[1].endswith(b"\n"):
                break
        return data


def test_the_gateway_has_its_own_ca_with_a_private_key_nobody_else_reads(env: Env) -> None:
    ca_folder = env.gateway.folder / "ca"
    assert stat.S_IMODE(ca_folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((ca_folder / "mitmproxy-ca.pem").stat().st_mode) == 0o600
    exported = env.gateway.ca_cert.read_bytes()
    assert b"PRIVATE KEY" not in exported
    cert = x509.load_pem_x509_certificate(exported)
    assert "skill-executor egress CA" in cert.subject.rfc4514_string()
    assert SECRET.encode() not in exported


def test_an_allowed_host_is_reached_and_the_upstream_sees_the_injected_secret(env: Env) -> None:
    done = env.curl("-H", f"X-Token: {env.secret.placeholder}", "https://api.example.test/hello?x=1")
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["headers"]["Authorization"] == f"Bearer {SECRET}"
    assert seen["headers"]["X-Token"] == SECRET  # a placeholder the run set itself, toward the secret's host
    assert "Proxy-Authorization" not in seen["headers"]
    # httpx and requests, keep-alive, with the gateway's CA
    with httpx.Client(proxy=env.proxy, verify=env.ca) as client:
        for _ in range(2):
            answer = client.get(
                "https://api.example.test/x", headers={"Authorization": f"Bearer {env.secret.placeholder}"}
            )
            assert answer.status_code == 200
            assert answer.json()["headers"]["Authorization"] == f"Bearer {SECRET}"
    answer = requests.get("https://api.example.test/y", proxies={"https": env.proxy}, verify=env.ca, timeout=20)
    assert answer.json()["headers"]["Authorization"] == f"Bearer {SECRET}"
    events = env.events()
    first = next(e for e in events if e.path == "/hello")
    assert (first.run_id, first.rule, first.host, first.method, first.status, first.decision) == (
        "run-1",
        "gh-tools",
        "api.example.test",
        "GET",
        200,
        "allowed",
    )
    assert first.bytes == len(done.stdout)
    assert all(SECRET not in repr(e) for e in events)


def test_a_host_off_the_list_is_refused_with_403_naming_the_rule(env: Env) -> None:
    answer = raw_connect(env, "denied.elsewhere.test:443")
    assert answer.startswith(b"HTTP/1.1 403")
    assert b"denied.elsewhere.test is not in the allow-list" in answer and b"gh-tools" in answer
    done = env.curl("https://denied.elsewhere.test/")
    assert done.returncode != 0 and "403" in done.stderr
    # one label only: *.example.test is not a.b.example.test
    assert raw_connect(env, "a.b.example.test:443").startswith(b"HTTP/1.1 403")
    events = [e for e in env.events() if e.host == "denied.elsewhere.test"]
    assert events and all(e.decision == "denied" and e.method == "CONNECT" and e.rule == "gh-tools" for e in events)


def test_ip_literals_and_other_ports_are_refused(env: Env) -> None:
    answer = raw_connect(env, f"127.0.0.1:{env.gateway.port}")
    assert answer.startswith(b"HTTP/1.1 403") and b"IP address" in answer
    assert raw_connect(env, "169.254.169.254:80").startswith(b"HTTP/1.1 403")
    answer = raw_connect(env, "api.example.test:22")
    assert answer.startswith(b"HTTP/1.1 403") and b"port 22" in answer


def test_unknown_or_missing_credentials_get_407(env: Env) -> None:
    answer = raw_connect(env, "api.example.test:443", token="not-a-token")
    assert answer.startswith(b"HTTP/1.1 407") and b"proxy credentials" in answer
    done = env.curl("https://api.example.test/", proxy=f"http://127.0.0.1:{env.gateway.port}")
    assert done.returncode != 0 and "407" in done.stderr


def test_the_secret_never_goes_toward_another_host(env: Env) -> None:
    before = len(Upstream.seen)
    with httpx.Client(proxy=env.proxy, verify=env.ca) as client:
        # the placeholder toward another host stays a placeholder
        answer = client.get(
            "https://other.example.test/p", headers={"Authorization": f"Bearer {env.secret.placeholder}"}
        )
        assert answer.json()["headers"]["Authorization"] == f"Bearer {env.secret.placeholder}"
        # the real value (reflected to the run somehow) is refused in a header, the URL and the body
        for request in (
            client.build_request("GET", "https://other.example.test/h", headers={"X-Leak": SECRET}),
            client.build_request("GET", f"https://other.example.test/q?t={SECRET}"),
            client.build_request("POST", "https://other.example.test/b", content=f"token={SECRET}".encode()),
            client.build_request("POST", "https://other.example.test/b64", content=base64.b64encode(SECRET.encode())),
        ):
            refused = client.send(request)
            assert refused.status_code == 403, request.url
            assert "secret GITHUB_TOKEN" in refused.text and "gh-tools" in refused.text
            assert SECRET not in refused.text
    assert all(SECRET not in json.dumps(s) for s in Upstream.seen[before + 1 :])
    events = env.events()
    assert [e.decision for e in events if e.host == "other.example.test"] == ["allowed"] + ["denied"] * 4
    assert all(SECRET not in repr(e) for e in events)


def test_a_redirect_to_another_host_does_not_carry_the_secret(env: Env) -> None:
    with httpx.Client(proxy=env.proxy, verify=env.ca, follow_redirects=True) as client:
        answer = client.get("https://api.example.test/redirect?to=https://files.example.test/landing")
    assert answer.status_code == 200
    seen = answer.json()
    assert seen["path"] == "/landing"
    assert SECRET not in json.dumps(seen)


def test_a_host_header_that_is_not_the_connected_host_is_refused(env: Env) -> None:
    done = env.curl("-H", "Host: other.example.test", "https://api.example.test/")
    assert "403" in done.stdout or "not the host connected to" in done.stdout


def test_methods_and_websocket_upgrades_follow_the_grant(env: Env) -> None:
    with httpx.Client(proxy=env.proxy, verify=env.ca) as client:
        refused = client.delete("https://api.example.test/")
        assert refused.status_code == 403 and "method DELETE" in refused.text
        upgrade = client.get(
            "https://api.example.test/ws",
            headers={
                "Connection": "Upgrade",
                "Upgrade": "websocket",
                "Sec-WebSocket-Version": "13",
                "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode(),
            },
        )
        assert upgrade.status_code == 403 and "upgrade" in upgrade.text


def test_a_response_past_its_cap_is_cut_and_reported_limited(env: Env) -> None:
    env.events(0)
    with httpx.Client(proxy=env.proxy, verify=env.ca) as client:
        assert len(client.get("https://api.example.test/size/9000").content) == 9000
        sized = client.get("https://api.example.test/size/50000")
        assert sized.status_code == 502 and "max_response_bytes" in sized.text
    with httpx.Client(proxy=env.proxy, verify=env.ca) as client:
        try:
            cut = client.get("https://api.example.test/chunked/50000")
        except httpx.HTTPError:
            pass
        else:
            raise AssertionError((cut.status_code, len(cut.content), cut.headers))
    done = env.curl("https://api.example.test/chunked/50000")
    assert done.returncode != 0 and len(done.stdout) <= 10_000
    events = env.events()
    limited = [e for e in events if e.decision == "limited"]
    assert {e.path for e in limited} == {"/size/50000", "/chunked/50000"}
    assert all(e.limit == "egress_response_bytes" and e.bytes <= 10_000 for e in limited)


def test_the_unix_socket_reaches_the_same_gateway(env: Env) -> None:
    with socket.socket(socket.AF_UNIX) as raw:
        raw.settimeout(10)
        raw.connect(str(env.gateway.socket_path))
        auth = base64.b64encode(f"run:{env.token}".encode()).decode()
        raw.sendall(f"CONNECT api.example.test:443 HTTP/1.1\r\nProxy-Authorization: Basic {auth}\r\n\r\n".encode())
        assert raw.recv(4096).startswith(b"HTTP/1.1 200")
        context = ssl.create_default_context(cafile=env.ca)
        with context.wrap_socket(raw, server_hostname="api.example.test") as tls:
            tls.sendall(b"GET /via-unix HTTP/1.1\r\nHost: api.example.test\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := tls.recv(65536):
                data += chunk
    assert data.startswith(b"HTTP/1.1 200") and f"Bearer {SECRET}".encode() in data


def test_caps_and_revocation(env: Env) -> None:
    token = env.gateway.grant(make_grant("run-2", "capped", allow=["files.example.test"], max_requests=2))
    proxy = env.gateway.proxy_url(token)
    with httpx.Client(proxy=proxy, verify=env.ca) as client:
        assert client.get("https://files.example.test/1").status_code == 200
        assert client.get("https://files.example.test/2").status_code == 200
        third = client.get("https://files.example.test/3")
        assert third.status_code == 403 and "cap of 2 requests" in third.text
    events = [e for e in env.events() if e.run_id == "run-2"]
    assert events[-1].decision == "limited" and events[-1].limit == "egress_requests"
    env.gateway.revoke(token)
    assert raw_connect(env, "files.example.test:443", token=token).startswith(b"HTTP/1.1 407")


def test_a_restart_keeps_the_ca_and_close_ends_the_process(env: Env) -> None:
    settings = Settings(data_dir=env.gateway.folder.parent, egress_python=egress_python())
    before = env.gateway.ca_cert.read_bytes()
    second = egress.start(settings)
    try:
        assert second.ca_cert.read_bytes() == before and second.port != env.gateway.port
    finally:
        second.close()
    assert not second.alive and second.process.returncode is not None


@pytest.mark.skipif(shutil.which("curl") is None, reason="no curl")
def test_curl_through_http_to_an_allowed_host_never_gets_the_secret_in_clear(env: Env) -> None:
    """Plain HTTP toward the secret's host: no injection (it would cross the network in clear)."""
    done = env.curl("-H", f"Authorization: Bearer {env.secret.placeholder}", "http://api.example.test:443/")
    # the upstream speaks TLS only; what matters is that the gateway did not put the secret on the wire
    assert SECRET not in done.stdout
