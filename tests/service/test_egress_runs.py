"""Egress end to end, on the real service: a policy rule with ``egress`` makes the service start
its gateway (mitmproxy, in .venv-egress); a run under it, in a real sandbox (runc, bwrap),
reaches a loopback HTTPS upstream under a made-up name (SKILL_EXECUTOR_EGRESS_HOSTS, its test
CA in SKILL_EXECUTOR_EGRESS_CA_BUNDLE) with curl and Python through the launcher's bridge; the
upstream sees the injected header, the run only a placeholder; a host off the list is a 403
naming the rule; every request is an ``egress`` event (live on SSE and kept in the record);
and a run without an egress rule still reaches nothing."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import pytest

from ..api_server import Server
from ..conftest import require_runtime
from .test_egress_gateway import egress_python, make_upstream_certs, serve_https

KEY = "egress-runs-key"
KEY_ID = hashlib.sha256(KEY.encode()).hexdigest()[:12]
SECRET = "ghs_end-to-end-secret-0123456789abcdef"
POLICY = """
rules:
  - name: math-net
    key: "*"
    skill: math-tools
    egress:
      allow: [api.example.test, files.example.test]
      inject:
        - host: api.example.test
          header: Authorization
          value: "Bearer {secret:GITHUB_TOKEN}"
      max_response_bytes: 10000
"""
NAMES = ["api.example.test", "other.example.test", "files.example.test"]

pytestmark = pytest.mark.skipif(
    egress_python() is None, reason="no egress environment (scripts/test.sh makes .venv-egress)"
)


class Upstream(BaseHTTPRequestHandler):
    """Says which path it was asked for (never the request's headers: a reflecting upstream
    hands the secret to the run, see the threat model) and keeps what it saw."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    seen: list[dict[str, Any]] = []

    def do_GET(self) -> None:
        Upstream.seen.append({"path": self.path, "headers": {k.title(): v for k, v in self.headers.items()}})
        if self.path.startswith("/size/"):
            payload = b"x" * int(self.path.split("/")[2])
        else:
            payload = f"hello {self.path}\n".encode()
        self.send_response(200)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    folder = tmp_path_factory.mktemp("egress-upstream")
    ca, pem = make_upstream_certs(folder)
    server = serve_https(Upstream, pem)
    yield server.server_address[1], ca
    server.shutdown()


@pytest.fixture(scope="module", params=["docker", "bwrap"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, upstream: tuple[int, Path]
) -> Iterator[Server]:
    runtime = str(request.param)
    require_runtime(runtime)
    port, ca = upstream
    base = tmp_path_factory.mktemp(f"egress-runs-{runtime}")
    (base / "policy.yaml").write_text(POLICY)
    (base / "secrets.yaml").write_text("GITHUB_TOKEN: env:EGRESS_E2E_TOKEN\n")
    env = {
        "SKILL_EXECUTOR_API_KEYS": KEY,
        "SKILL_EXECUTOR_POLICY_FILE": str(base / "policy.yaml"),
        "SKILL_EXECUTOR_SECRETS_FILE": str(base / "secrets.yaml"),
        "SKILL_EXECUTOR_EGRESS_PYTHON": str(egress_python()),
        "SKILL_EXECUTOR_EGRESS_CA_BUNDLE": str(ca),
        "SKILL_EXECUTOR_EGRESS_HOSTS": json.dumps({name: f"127.0.0.1:{port}" for name in NAMES}),
        "EGRESS_E2E_TOKEN": SECRET,
        "SKILL_EXECUTOR_POOL_SIZE": "1",  # a run with a grant never takes a warm container
        "SKILL_EXECUTOR_RUNTIME": runtime,
    }
    if runtime == "bwrap":  # bwrap starts as the run's user: the workspaces outside the sealed data dir
        env["SKILL_EXECUTOR_WORKSPACE_ROOT"] = str(base / "workspaces")
        if os.geteuid() == 0:
            for folder in (base, *base.parents):
                os.chmod(folder, os.stat(folder).st_mode | 0o001)
    srv = Server(base, env=env).start(timeout=60)
    yield srv
    srv.stop()
    assert SECRET not in "\n".join(srv.log_lines())


def http(server: Server) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=120)


def run_with_events(server: Server, body: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[str, Any]], str]:
    """Start a run, read its live events to the end; (its record, the events, the raw stream)."""
    with http(server) as client:
        accepted = client.post("/v1/runs", params={"wait": "false"}, json=body)
        assert accepted.status_code == 202, accepted.text
        run_id = accepted.json()["run_id"]
        events: list[tuple[str, Any]] = []
        raw = ""
        with client.stream("GET", f"/v1/runs/{run_id}/events") as stream:
            kind = None
            for line in stream.iter_lines():
                raw += line + "\n"
                if line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: ") and kind is not None:
                    events.append((kind, json.loads(line[6:])))
        record = client.get(f"/v1/runs/{run_id}")
        assert record.status_code == 200, record.text
        return record.json(), events, raw + record.text


#: What the run does: curl and Python's urllib to the allowed hosts, a host off the list (CONNECT
#: and plain HTTP), a response past its cap; then shows everything it can see of its environment.
COMMAND = r"""
sleep 1
curl -sS https://api.example.test/curl?q=1
python3 -c "import urllib.request; print(urllib.request.urlopen('https://api.example.test/py').read().decode().strip())"
curl -sS -H "X-Token: $GITHUB_TOKEN" https://files.example.test/other
curl -sS https://denied.example.test/ 2>&1 | head -c 300; echo " connect=$?"
curl -sS http://denied.example.test/plain; echo
curl -sS -o /dev/null -w 'big=%{http_code}\n' https://api.example.test/size/50000
echo "GH=$GITHUB_TOKEN"
env | sort
cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | sort -u
ls -A /run/skill-executor /run/skill-executor/egress
"""


def test_a_run_reaches_its_hosts_through_the_gateway_with_the_secret_injected(server: Server) -> None:
    before = len(Upstream.seen)
    record, events, raw = run_with_events(server, {"skill": "math-tools", "command": COMMAND, "timeout": 90})
    assert record["status"] == "completed", record
    result = record["result"]
    out = result["stdout"]
    assert "hello /curl?q=1" in out and "hello /py" in out and "hello /other" in out, (out, result["stderr"])
    # the upstream saw the secret toward its own host, and the placeholder only elsewhere
    seen = {entry["path"]: entry["headers"] for entry in Upstream.seen[before:]}
    assert seen["/curl?q=1"]["Authorization"] == f"Bearer {SECRET}"
    assert seen["/py"]["Authorization"] == f"Bearer {SECRET}"
    assert "Authorization" not in seen["/other"] and seen["/other"]["X-Token"].startswith("se-placeholder-")
    assert "Proxy-Authorization" not in seen["/curl?q=1"]
    # a host off the list: 403, naming the rule
    assert "403" in out
    assert "skill-executor egress: denied.example.test is not in the allow-list (rule 'math-net')" in out
    assert "big=502" in out
    # what the run sees: a placeholder, the proxy, the CA; never the secret
    assert "GH=se-placeholder-" in out
    assert "HTTPS_PROXY=http://run:" in out and "@127.0.0.1:3128" in out
    assert "SSL_CERT_FILE=/run/skill-executor/egress-ca.pem" in out
    assert SECRET not in raw  # stdout (env, /proc/*/environ), stderr, the record, the events
    # every request is an egress event, live and kept
    live = [data for kind, data in events if kind == "egress"]
    kept = result["egress"]
    assert kept == live, (kept, live)
    by_path = {(e["host"], e["path"]): e for e in kept}
    curl = by_path[("api.example.test", "/curl")]  # the path without its query
    assert (curl["method"], curl["status"], curl["decision"], curl["rule"]) == ("GET", 200, "allowed", "math-net")
    assert curl["bytes"] == len("hello /curl?q=1\n")
    denied = [e for e in kept if e["host"] == "denied.example.test"]
    assert {e["method"] for e in denied} == {"CONNECT", "GET"} and all(e["decision"] == "denied" for e in denied)
    big = by_path[("api.example.test", "/size/50000")]
    assert big["decision"] == "limited" and big["limit"] == "egress_response_bytes"
    assert "egress_response_bytes" in result["limits_hit"]


def test_a_run_without_an_egress_rule_still_reaches_nothing(server: Server, upstream: tuple[int, Path]) -> None:
    port, _ = upstream
    before = len(Upstream.seen)
    command = (
        "curl -sS --max-time 5 https://api.example.test/ ; echo curl=$?; "
        "curl -sS --max-time 5 -x http://127.0.0.1:3128 http://api.example.test/ ; echo bridge=$?; "
        f"curl -sS --max-time 5 -k https://127.0.0.1:{port}/ ; echo loopback=$?; "
        "env | grep -ci proxy; test -e /run/skill-executor/egress || echo NO-SOCKET"
    )
    with http(server) as client:
        answer = client.post("/v1/runs", json={"skill": "csv-report", "command": command})
    assert answer.status_code == 200, answer.text
    result = answer.json()
    out = result["stdout"]
    assert "curl=6" in out  # no resolver
    assert "bridge=7" in out and "loopback=7" in out  # nothing listens, no way to the host's loopback
    assert "NO-SOCKET" in out and "\n0\n" in f"\n{out}"
    assert result["egress"] == []
    assert len(Upstream.seen) == before


def test_a_run_that_asks_for_less_gets_less(server: Server) -> None:
    body = {
        "skill": "math-tools",
        "command": "curl -sS https://files.example.test/f; echo; curl -sS https://api.example.test/a 2>&1; echo GH=${GITHUB_TOKEN:-none}",
        "network": {"allow": ["files.example.test"]},
    }
    with http(server) as client:
        answer = client.post("/v1/runs", json=body)
    assert answer.status_code == 200, answer.text
    result = answer.json()
    assert "hello /f" in result["stdout"] and "GH=none" in result["stdout"]  # no injection toward its hosts
    assert [(e["host"], e["decision"]) for e in result["egress"]] == [
        ("files.example.test", "allowed"),
        ("api.example.test", "denied"),
    ]
