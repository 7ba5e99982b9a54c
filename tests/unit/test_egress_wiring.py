"""From the policy's grant to the gateway's wire, and a run's egress events into its result
(skill_executor/egress/gateway.py: wire; skill_executor/runs/egress.py): pure, no gateway."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from skill_executor.egress import EgressEvent, wire
from skill_executor.errorcodes import CATALOGUE
from skill_executor.errors import ExecutorError
from skill_executor.policy import Egress, NetworkPlan, Secrets
from skill_executor.runs.egress import RunEgress, granted
from skill_executor.runs.models import RunResult
from skill_executor.runtimes.egress import EgressPath

SECRET = "ghs_wire-secret-value-0123456789"


def plan(**block: Any) -> NetworkPlan:
    parsed = Egress.model_validate(block)
    return NetworkPlan("gh", parsed, parsed.hosts())


def test_the_wire_carries_the_policys_grant_as_the_gateway_reads_it() -> None:
    grant = plan(
        allow=["api.example.test", "*.example.test", "10.0.0.0/8"],
        inject=[{"host": "api.example.test", "header": "Authorization", "value": "Bearer {secret:GH}"}],
        methods=["GET"],
        max_response_bytes=100,
    ).grant("run-1", Secrets({"GH": SECRET}))
    data = wire(grant)
    assert data["run_id"] == "run-1" and data["rule"] == "gh"
    assert data["allow"] == ["api.example.test", "*.example.test", "10.0.0.0/8"]
    assert data["inject"] == [{"host": "api.example.test", "header": "Authorization", "value": "Bearer {secret:GH}"}]
    assert data["secrets"] == {"GH": {"value": SECRET, "placeholder": grant.placeholders["GH"]}}
    assert data["methods"] == ["GET"] and data["ports"] == [443, 80] and data["max_response_bytes"] == 100
    assert data["max_connections"] == 32
    assert SECRET not in repr(grant)


def event(**fields: Any) -> EgressEvent:
    base: dict[str, Any] = {
        "run_id": "run-1",
        "rule": "gh",
        "host": "api.example.test",
        "method": "GET",
        "path": "/x",
        "status": 200,
        "bytes": 10,
        "request_bytes": 0,
        "decision": "allowed",
        "reason": None,
        "limit": None,
        "time": 0.0,
    }
    return EgressEvent.parse({**base, **fields})


def test_a_runs_events_are_kept_in_its_result_with_the_limits_they_name(tmp_path: Path) -> None:
    seen: list[dict[str, Any]] = []
    run = RunEgress(EgressPath(tmp_path / "s", tmp_path / "c", "tok"), seen.append)
    run.event(event())
    run.event(event(path="/big", status=502, decision="limited", limit="egress_response_bytes", bytes=100))
    run.event(event(host="evil.test", method="CONNECT", path="", status=403, decision="denied", reason="no"))
    result = run.into(RunResult(run_id="run-1", skill="s", limits_hit=["timeout"]))
    assert [e.decision for e in result.egress] == ["allowed", "limited", "denied"]
    assert result.limits_hit == ["timeout", "egress_response_bytes"]
    assert seen[1] == {
        "host": "api.example.test",
        "method": "GET",
        "path": "/big",
        "status": 502,
        "bytes": 100,
        "decision": "limited",
        "rule": "gh",
        "reason": None,
        "limit": "egress_response_bytes",
    }


class FakeGateway:
    """Stands in for the gateway's bookkeeping (the real one is tested in tests/service)."""

    def __init__(self, alive: bool = True) -> None:
        self.alive = alive
        #: alive, or being started again after its process died (the real one's)
        self.available = alive
        self.socket_path = Path("/nonexistent/socket/egress.sock")
        self.ca_cert = Path("/nonexistent/ca-cert.pem")
        self.calls: list[tuple[str, str]] = []

    def watch(self, run_id: str, callback: Any) -> None:
        self.calls.append(("watch", run_id))

    def unwatch(self, run_id: str) -> None:
        self.calls.append(("unwatch", run_id))

    def grant(self, grant: Any) -> str:
        self.calls.append(("grant", grant.run_id))
        return str(grant.token)

    def revoke(self, token: str) -> None:
        self.calls.append(("revoke", token))


def test_a_grant_is_registered_before_the_run_and_revoked_after_it_even_when_it_fails() -> None:
    gateway = FakeGateway()
    network = plan(
        allow=["api.example.test"],
        inject=[{"host": "api.example.test", "header": "X-Key", "value": "{secret:GH}"}],
    )
    with pytest.raises(RuntimeError), granted(gateway, network, "run-9", Secrets({"GH": SECRET}), None) as run:  # type: ignore[arg-type]
        assert run.path.variables == {"GH": run.path.variables["GH"]} and SECRET not in str(run.path)
        assert run.path.variables["GH"].startswith("se-placeholder-")
        assert run.path.environment()["HTTPS_PROXY"] == f"http://run:{run.path.credential}@127.0.0.1:3128"
        raise RuntimeError("the run failed")
    assert [c[0] for c in gateway.calls] == ["watch", "grant", "revoke", "unwatch"]


def test_no_gateway_or_a_stopped_one_refuses_the_run() -> None:
    network = plan(allow=["api.example.test"])
    with pytest.raises(ExecutorError) as none, granted(None, network, "r", None, None, problem="mitmproxy is missing"):
        pass
    assert none.value.code == "egress_unavailable" and none.value.status == CATALOGUE["egress_unavailable"].status
    assert "mitmproxy is missing" in none.value.message and none.value.details == {"rule": "gh"}
    stopped = FakeGateway(alive=False)
    with pytest.raises(ExecutorError, match="has stopped"), granted(stopped, network, "r", None, None):  # type: ignore[arg-type]
        pass
