"""A session's network end to end ("install, then lock"), on the real service with its real
gateway (mitmproxy, in .venv-egress) and the Docker engine: a session opened with its rule's
hosts; an interactive process of it (a Python REPL) reaches a loopback HTTPS upstream through
the bridge of the session's sandbox, and a run of the session (joining that sandbox) too, with
the secret injected; narrowed, the host left out is a 403 naming the rule -- also on the
REPL's kept-alive connection opened before -- while the other still answers; widening is a
422; once the session is deleted, its credential is a 407 at the gateway."""

from __future__ import annotations

import base64
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ..api_server import Server
from ..conftest import require_runtime
from .test_egress_gateway import egress_python
from .test_egress_runs import KEY, NAMES, POLICY, SECRET, Upstream, upstream  # noqa: F401 - the fixture

pytestmark = pytest.mark.skipif(
    egress_python() is None, reason="no egress environment (scripts/test.sh makes .venv-egress)"
)

RULE_SAYS = "(rule 'math-net')"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, upstream: tuple[int, Path]) -> Iterator[Server]:  # noqa: F811
    require_runtime("docker")
    port, ca = upstream
    base = tmp_path_factory.mktemp("egress-sessions")
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
        "SKILL_EXECUTOR_POOL_SIZE": "1",
        "SKILL_EXECUTOR_RUNTIME": "docker",
    }
    srv = Server(base, env=env).start(timeout=60)
    yield srv
    srv.stop()
    assert SECRET not in "\n".join(srv.log_lines())


def http(server: Server) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=120)


class Repl:
    """A Python REPL, an interactive process of the session."""

    def __init__(self, client: httpx.Client, session: str) -> None:
        self.client = client
        self.session = session
        started = client.post(f"/v1/sessions/{session}/processes", json={"command": ["python3", "-i", "-u"]})
        assert started.status_code == 201, started.text
        self.id = started.json()["id"]
        self.after = 0
        self.marks = 0

    def say(self, code: str, timeout: float = 60) -> str:
        """Run ``code`` (one line) and answer what it printed."""
        self.marks += 1
        mark = f"--mark-{self.marks}--"
        wrote = self.client.post(
            f"/v1/sessions/{self.session}/processes/{self.id}/stdin", json={"data": f"{code}\nprint({mark!r})\n"}
        )
        assert wrote.status_code == 200, wrote.text
        seen, deadline = "", time.monotonic() + timeout
        while mark not in seen and time.monotonic() < deadline:
            polled = self.client.get(
                f"/v1/sessions/{self.session}/processes/{self.id}/output", params={"after": self.after, "wait": 5}
            ).json()
            seen += polled["output"]
            self.after = polled["next"]
            assert polled["running"] or mark in seen, seen
        assert mark in seen, seen
        return seen.split(mark)[0]


def through_gateway(server: Server, token: str, host: str) -> bytes:
    """A CONNECT with ``token`` straight to the gateway's socket (from the host): its status line."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(10)
        sock.connect(str(server.data_dir / "egress" / "socket" / "egress.sock"))
        credential = base64.b64encode(f"run:{token}".encode()).decode()
        request = f"CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\nProxy-Authorization: Basic {credential}\r\n\r\n"
        sock.sendall(request.encode())
        return sock.recv(200).split(b"\r\n")[0]


def test_install_then_lock_a_sessions_processes_and_runs_share_its_narrowed_grant(server: Server) -> None:
    with http(server) as client:
        refused = client.put("/v1/sessions/s1/network", json={"skill": "math-tools", "allow": ["evil.example.test"]})
        assert refused.status_code == 422 and refused.json()["error"]["code"] == "network_not_allowed", refused.text
        assert client.get("/v1/sessions/s1/network").status_code == 404
        opened = client.put("/v1/sessions/s1/network", json={"skill": "math-tools"})
        assert opened.status_code == 200, opened.text
        assert opened.json()["allow"] == ["api.example.test", "files.example.test"]
        assert opened.json()["rule"] == "math-net" and opened.json()["secrets"] == ["GITHUB_TOKEN"]
        again = client.put("/v1/sessions/s1/network", json={"skill": "math-tools"})
        assert again.status_code == 409 and again.json()["error"]["code"] == "session_network_conflict"

        # "install": the session's process reaches both hosts, on one kept-alive session of requests
        repl = Repl(client, "s1")
        repl.say("import os, requests; web = requests.Session()")
        # (a refusal as one line on stdout: a traceback is on stderr, another pipe, in no order with it)
        repl.say(
            'exec("def fetch(url):\\n try:\\n  return requests.get(url).status_code\\n'
            ' except Exception as exc:\\n  return type(exc).__name__")'
        )
        said = repl.say("print('TOKEN=' + os.environ['HTTPS_PROXY'].split('@')[0].split(':')[-1])")
        token = said.split("TOKEN=")[1].split()[0]
        before = len(Upstream.seen)
        out = repl.say(
            "print(web.get('https://files.example.test/p1').text, web.get('https://api.example.test/p2').text)"
        )
        assert "hello /p1" in out and "hello /p2" in out, out
        seen = {entry["path"]: entry["headers"] for entry in Upstream.seen[before:]}
        assert seen["/p2"]["Authorization"] == f"Bearer {SECRET}" and "Authorization" not in seen["/p1"]
        assert SECRET not in repl.say("print(os.environ.get('GITHUB_TOKEN'))")

        # a run of the session joins its sandbox's loopback and shares its grant
        ran = client.post(
            "/v1/runs",
            json={"skill": "math-tools", "session": "s1", "command": "curl -sS https://api.example.test/r1"},
        )
        assert ran.status_code == 200, ran.text
        assert "hello /r1" in ran.json()["stdout"], ran.json()
        assert ("api.example.test", "/r1", "allowed") in {
            (e["host"], e["path"], e["decision"]) for e in ran.json()["egress"]
        }

        # "lock": narrowed to one host; a request after the 200 is judged by the new list, on
        # the connection the REPL opened before too
        narrowed = client.patch("/v1/sessions/s1/network", json={"allow": ["api.example.test"]})
        assert narrowed.status_code == 200, narrowed.text
        assert narrowed.json()["allow"] == ["api.example.test"] and narrowed.json()["narrowed_at"] is not None
        out = repl.say("r = web.get('https://files.example.test/p3'); print(r.status_code, r.text)")
        assert "403" in out and f"files.example.test is not in the allow-list {RULE_SAYS}" in out, out
        out = repl.say("print(fetch('https://files.example.test/p4'))")  # a new connection: its CONNECT refused
        assert "ProxyError" in out, out
        assert "hello /p5" in repl.say("print(web.get('https://api.example.test/p5').text)")
        ran = client.post(
            "/v1/runs",
            json={
                "skill": "math-tools",
                "session": "s1",
                "command": "curl -sS http://files.example.test/r2; echo; curl -sS https://api.example.test/r3",
            },
        )
        assert ran.status_code == 200, ran.text
        assert f"is not in the allow-list {RULE_SAYS}" in ran.json()["stdout"] and "hello /r3" in ran.json()["stdout"]
        assert not any(entry["path"] in ("/p3", "/p4", "/r2") for entry in Upstream.seen[before:])

        # never widened again: past what it has now, nor by a run's request
        for allow in (["api.example.test", "files.example.test"], ["files.example.test"]):
            widened = client.patch("/v1/sessions/s1/network", json={"allow": allow})
            assert widened.status_code == 422 and widened.json()["error"]["code"] == "network_not_allowed"
            assert widened.json()["error"]["details"]["host"] == "files.example.test"
        asked = client.post(
            "/v1/runs",
            json={
                "skill": "math-tools",
                "session": "s1",
                "command": "true",
                "network": {"allow": ["files.example.test"]},
            },
        )
        assert asked.status_code == 422 and asked.json()["error"]["code"] == "network_not_allowed", asked.text

        state = client.get("/v1/sessions/s1/network").json()
        assert state["requests"]["allowed"] >= 4 and state["requests"]["denied"] >= 2, state
        assert {(e["host"], e["decision"]) for e in state["events"]} >= {
            ("files.example.test", "allowed"),
            ("files.example.test", "denied"),
            ("api.example.test", "allowed"),
        }

        # the session ends: its processes, then its grant
        assert through_gateway(server, token, "api.example.test").split(b" ")[1] == b"200"
        ended = client.delete("/v1/sessions/s1")
        assert ended.status_code == 200 and ended.json()["session"] == "s1", ended.text
        assert client.get(f"/v1/sessions/s1/processes/{repl.id}").status_code == 404
        assert through_gateway(server, token, "api.example.test").split(b" ")[1] == b"407"
        assert client.get("/v1/sessions/s1/network").status_code == 404
    assert any("session:" in line and "egress" in line for line in server.log_lines())  # the audit log


def test_a_sessions_first_run_opens_its_network_as_it_asked(server: Server) -> None:
    """A session without processes: its first run under a rule with egress opens the session's
    network (as the run narrowed it), and the next runs get no more."""
    with http(server) as client:
        first = client.post(
            "/v1/runs",
            json={
                "skill": "math-tools",
                "session": "s2",
                "command": "curl -sS https://files.example.test/f1",
                "network": {"allow": ["files.example.test"]},
            },
        )
        assert first.status_code == 200 and "hello /f1" in first.json()["stdout"], first.text
        assert client.get("/v1/sessions/s2/network").json()["allow"] == ["files.example.test"]
        second = client.post(
            "/v1/runs",
            json={"skill": "math-tools", "session": "s2", "command": "curl -sS http://api.example.test/f2 2>&1"},
        )
        assert second.status_code == 200, second.text
        assert f"api.example.test is not in the allow-list {RULE_SAYS}" in second.json()["stdout"]
        # processes started now get the session's network
        repl = Repl(client, "s2")
        assert "hello /f3" in repl.say("import requests; print(requests.get('https://files.example.test/f3').text)")
        assert client.delete("/v1/sessions/s2").status_code == 200
