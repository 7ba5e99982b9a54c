"""Approvals for new hosts, end to end on the real service (its mitmproxy gateway, real runs in
runc containers, a loopback HTTPS upstream under made-up names): a run under a rule with
``ask: true`` that reaches a host outside the allow-list waits; the held host is listed at
``GET /v1/egress/approvals`` and on the run's events (decision ``pending``); approved over
HTTP, the request goes on and later runs of the key and skill reach the host unasked; rejected
or left to expire, the run gets the gateway's 403 naming the rule. Every decision is audited.
Also here: the Prometheus counters per decision and bytes on ``/metrics``, and an ``egress``
span per request under the run's trace (a real OTLP receiver on loopback)."""

from __future__ import annotations

import hashlib
import json
import re
import ssl
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from concurrent.futures import Future, ThreadPoolExecutor
from http.server import ThreadingHTTPServer
from typing import Any

import anyio
import httpx
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.session import ElicitationFnT
from mcp.client.streamable_http import streamable_http_client

from ..api_server import Server
from ..conftest import require_runtime
from ..otlp import Receiver
from .test_egress_gateway import egress_python, make_upstream_certs
from .test_egress_runs import Upstream

KEY = "egress-ask-key"
KEY_ID = hashlib.sha256(KEY.encode()).hexdigest()[:12]
OTHER_KEY = "egress-ask-other-key"
OTHER_ID = hashlib.sha256(OTHER_KEY.encode()).hexdigest()[:12]
ASK_TIMEOUT = 8
POLICY = """
rules:
  - name: ask-net
    key: "*"
    skill: math-tools
    egress:
      allow: [api.example.test]
      ask: true
"""
NAMES = ["api.example.test", "other.example.test", "files.example.test", "late.example.test"]

pytestmark = pytest.mark.skipif(
    egress_python() is None, reason="no egress environment (scripts/test.sh makes .venv-egress)"
)
POOL = ThreadPoolExecutor(4)


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    started = Receiver().start()
    yield started
    started.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, receiver: Receiver) -> Iterator[Server]:
    require_runtime("docker")
    base = tmp_path_factory.mktemp("egress-ask")
    ca, pem = make_upstream_certs(base)
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pem)
    upstream.socket = context.wrap_socket(upstream.socket, server_side=True)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    (base / "policy.yaml").write_text(POLICY)
    env = {
        "SKILL_EXECUTOR_API_KEYS": f"{KEY},{OTHER_KEY}",
        "SKILL_EXECUTOR_POLICY_FILE": str(base / "policy.yaml"),
        "SKILL_EXECUTOR_EGRESS_PYTHON": str(egress_python()),
        "SKILL_EXECUTOR_EGRESS_CA_BUNDLE": str(ca),
        "SKILL_EXECUTOR_EGRESS_HOSTS": json.dumps({n: f"127.0.0.1:{upstream.server_address[1]}" for n in NAMES}),
        "SKILL_EXECUTOR_EGRESS_ASK_TIMEOUT_SECONDS": str(ASK_TIMEOUT),
        "SKILL_EXECUTOR_POOL_SIZE": "1",
        "SKILL_EXECUTOR_RUNTIME": "docker",
        **receiver.env(),
    }
    srv = Server(base, env=env).start(timeout=60)
    yield srv
    srv.stop()
    upstream.shutdown()


def http(server: Server, key: str = KEY) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=120)


def start(server: Server, command: str) -> tuple[str, Future[dict[str, Any]]]:
    """Start a run; (its id, its final record once its event stream has ended)."""
    with http(server) as client:
        accepted = client.post(
            "/v1/runs", params={"wait": "false"}, json={"skill": "math-tools", "command": command, "timeout": 60}
        )
    assert accepted.status_code == 202, accepted.text
    run_id = accepted.json()["run_id"]

    def finish() -> dict[str, Any]:
        with http(server) as client:
            with client.stream("GET", f"/v1/runs/{run_id}/events") as stream:
                for _ in stream.iter_lines():
                    pass
            record: dict[str, Any] = client.get(f"/v1/runs/{run_id}").json()
            return record

    return run_id, POOL.submit(finish)


def held(server: Server, run_id: str, timeout: float = 60) -> dict[str, Any]:
    """The approval ``run_id`` waits for, once it is listed."""
    deadline = time.monotonic() + timeout
    with http(server) as client:
        while time.monotonic() < deadline:
            listed = client.get("/v1/egress/approvals")
            assert listed.status_code == 200, listed.text
            mine = [a for a in listed.json()["approvals"] if a["run_id"] == run_id]
            if mine:
                return mine[0]
            time.sleep(0.1)
    raise AssertionError(f"run {run_id} has no approval pending")


def decide(server: Server, approval: str, decision: str, key: str = KEY, reason: str | None = None) -> httpx.Response:
    with http(server, key) as client:
        return client.post(f"/v1/egress/approvals/{approval}", json={"decision": decision, "reason": reason})


def audit(server: Server, approval: str) -> list[dict[str, Any]]:
    lines = []
    for line in server.log_lines():
        if approval in line and line.startswith("{"):
            lines.append(json.loads(line))
    return lines


def test_an_approved_host_is_reached_and_remembered_for_the_key_and_skill(server: Server) -> None:
    command = "sleep 1; curl -sS https://other.example.test/first; curl -sS https://other.example.test/second"
    run_id, finished = start(server, command)
    approval = held(server, run_id)
    assert approval["host"] == "other.example.test" and approval["key"] == KEY_ID
    assert (approval["kind"], approval["skill"], approval["rule"]) == ("egress_host", "math-tools", "ask-net")
    assert approval["expires_at"] - approval["created_at"] == pytest.approx(ASK_TIMEOUT)
    # another key neither sees nor decides it
    with http(server, OTHER_KEY) as other:
        assert other.get("/v1/egress/approvals").json()["approvals"] == []
    before = scrape(server)
    refused = decide(server, approval["approval_id"], "approve", key=OTHER_KEY)
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "approval_not_pending"
    answer = decide(server, approval["approval_id"], "approve", reason="the docs host")
    assert answer.status_code == 200, answer.text
    approved = 'skill_executor_egress_approvals_total{decision="approve"}'
    assert scrape(server)[approved] - before.get(approved, 0.0) == 1
    assert answer.json() == {
        "approval_id": approval["approval_id"],
        "decision": "approve",
        "host": "other.example.test",
        "run_id": run_id,
    }
    record = finished.result(timeout=120)
    assert record["status"] == "completed", record
    out = record["result"]["stdout"]
    assert "hello /first" in out and "hello /second" in out, (out, record["result"]["stderr"])
    kept = record["result"]["egress"]
    assert kept[0]["decision"] == "pending" and kept[0]["approval"] == approval["approval_id"]
    assert kept[0]["host"] == "other.example.test" and kept[0]["method"] == "CONNECT"
    assert [(e["host"], e["path"], e["decision"]) for e in kept[1:]] == [
        ("other.example.test", "/first", "allowed"),
        ("other.example.test", "/second", "allowed"),
    ]
    again = decide(server, approval["approval_id"], "reject")
    assert again.status_code == 409 and again.json()["error"]["code"] == "approval_not_pending"
    (decided,) = [a for a in audit(server, approval["approval_id"]) if a.get("action") == "egress.approval"]
    assert (decided["decision"], decided["who"], decided["via"], decided["host"]) == (
        "approve",
        KEY_ID,
        "rest",
        "other.example.test",
    )
    assert decided["reason"] == "the docs host" and decided["run_id"] == run_id
    # the next run of the key and skill reaches it without asking
    run_id, finished = start(server, "curl -sS https://other.example.test/remembered")
    record = finished.result(timeout=120)
    assert "hello /remembered" in record["result"]["stdout"], record
    assert [e["decision"] for e in record["result"]["egress"]] == ["allowed"]


def test_a_rejected_host_is_the_gateways_403_naming_the_rule(server: Server) -> None:
    run_id, finished = start(
        server, "curl -sS https://files.example.test/x 2>&1; echo; curl -sS -i http://files.example.test/y"
    )
    approval = held(server, run_id)
    assert decide(server, approval["approval_id"], "reject", reason="not this one").status_code == 200
    record = finished.result(timeout=120)
    out = record["result"]["stdout"]
    assert "403" in out
    assert (
        f"skill-executor egress: files.example.test is not in the allow-list and was not approved: "
        f"rejected by key {KEY_ID}: not this one (rule 'ask-net')"
    ) in out, out
    kept = record["result"]["egress"]
    assert [e["decision"] for e in kept] == ["pending", "denied", "denied"]  # asked once per run
    # nothing remembered: the next run asks again
    run_id, finished = start(server, "curl -sS -o /dev/null -w '%{http_code}' https://files.example.test/z")
    approval = held(server, run_id)
    assert decide(server, approval["approval_id"], "reject").status_code == 200
    assert finished.result(timeout=120)["result"]["stdout"].endswith("000")  # curl: the CONNECT was refused


def test_an_undecided_host_expires_into_a_403(server: Server) -> None:
    started = time.monotonic()
    run_id, finished = start(server, "curl -sS -i http://late.example.test/t")
    approval = held(server, run_id)
    record = finished.result(timeout=120)
    assert time.monotonic() - started >= ASK_TIMEOUT
    out = record["result"]["stdout"]
    assert f"late.example.test is not in the allow-list and was not approved: no decision within {ASK_TIMEOUT} s" in out
    assert "(rule 'ask-net')" in out
    with http(server) as client:
        assert client.get("/v1/egress/approvals").json()["approvals"] == []
    (expired,) = [a for a in audit(server, approval["approval_id"]) if a.get("action") == "egress.approval"]
    assert (expired["decision"], expired["via"]) == ("expire", "timeout")
    assert decide(server, approval["approval_id"], "approve").status_code == 409


def scrape(server: Server) -> dict[str, float]:
    with http(server) as client:
        text = client.get("/metrics").text
    found = {}
    for line in text.splitlines():
        match = re.match(r"^(skill_executor_egress_\w+)(\{[^}]*\})? (\S+)$", line)
        if match:
            found[match.group(1) + (match.group(2) or "")] = float(match.group(3))
    return found


def test_the_metrics_count_each_decision_and_the_bytes(server: Server) -> None:
    before = scrape(server)
    command = (
        "curl -sS -o /dev/null https://api.example.test/size/1234; "
        "curl -sS -o /dev/null -X GET https://api.example.test/size/66; "
        "curl -sS -o /dev/null https://10.0.0.1/; true"
    )
    _, finished = start(server, command)
    record = finished.result(timeout=120)
    assert [e["decision"] for e in record["result"]["egress"]] == ["allowed", "allowed", "denied"], record
    # the run's record has every event: the counters (the same reader thread, before) have them too
    after = scrape(server)

    def delta(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    assert delta('skill_executor_egress_requests_total{decision="allowed",rule="ask-net"}') == 2
    assert delta('skill_executor_egress_requests_total{decision="denied",rule="ask-net"}') == 1
    assert delta('skill_executor_egress_bytes_total{direction="received",rule="ask-net"}') == 1234 + 66


def test_each_request_is_a_span_under_its_runs_trace(server: Server, receiver: Receiver) -> None:
    _, finished = start(
        server, "curl -sS 'https://api.example.test/traced?token=abc'; curl -sS https://10.0.0.1/ || true"
    )
    record = finished.result(timeout=120)
    assert record["status"] == "completed" and record["trace_id"], record
    spans = receiver.wait_for({"run", "egress"}, trace_id=record["trace_id"])
    (run,) = [s for s in spans if s.name == "run"]
    deadline = time.monotonic() + 10
    while len([s for s in spans if s.name == "egress"]) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
        spans = receiver.wait_for({"run", "egress"}, trace_id=record["trace_id"])
    egress = sorted((s for s in spans if s.name == "egress"), key=lambda s: s.start)
    assert len(egress) == 2
    traced, denied = egress
    assert all(s.parent_id == run.span_id for s in egress)
    assert traced.attributes["skill_executor.host"] == "api.example.test"
    assert traced.attributes["skill_executor.method"] == "GET"
    assert traced.attributes["skill_executor.path"] == "/traced"  # no query
    assert traced.attributes["skill_executor.status"] == 200
    assert traced.attributes["skill_executor.decision"] == "allowed"
    assert traced.attributes["skill_executor.rule"] == "ask-net"
    assert traced.attributes["skill_executor.run_id"] == record["run_id"]
    assert run.start <= traced.start <= traced.end <= run.end
    assert denied.attributes["skill_executor.decision"] == "denied"
    assert denied.attributes["skill_executor.method"] == "CONNECT"
    assert "token=abc" not in json.dumps([s.attributes for s in egress])


@asynccontextmanager
async def mcp_client(server: Server, key: str, elicit: ElicitationFnT | None) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=120) as http:
        transport = streamable_http_client(f"{server.url}/mcp", http_client=http)
        async with Client(transport, mode="legacy", read_timeout_seconds=120, elicitation_callback=elicit) as client:
            yield client


def test_a_run_over_mcp_asks_its_user_about_a_held_host(server: Server) -> None:
    """The other key (nothing remembered for it): its user is asked while the run waits."""
    asked: list[str] = []

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"decision": "approve", "reason": "user: fine"})

    async def main() -> types.CallToolResult:
        async with mcp_client(server, OTHER_KEY, elicit) as client:
            return await client.call_tool(
                "skill_run", {"skill": "math-tools", "command": "curl -sS https://files.example.test/via-mcp"}
            )

    result = anyio.run(main)
    assert not result.is_error, result.content
    assert result.structured_content is not None and result.structured_content["exit_code"] == 0
    assert "hello /via-mcp" in result.content[0].text  # type: ignore[union-attr]
    (message,) = asked
    assert "wants to reach files.example.test, which its policy rule 'ask-net' does not list" in message
    decided = [
        json.loads(line)
        for line in server.log_lines()
        if line.startswith("{") and '"egress.approval"' in line and OTHER_ID in line
    ]
    assert [(d["decision"], d["via"], d["host"], d["reason"]) for d in decided] == [
        ("approve", "mcp-elicitation", "files.example.test", "user: fine")
    ]
