"""From the policy's grant to the gateway's wire, and a run's egress events into its result
(skill_executor/egress/gateway.py: wire; skill_executor/runs/egress.py): pure, no gateway."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from skill_executor.egress import EgressEvent, HostQuestion, wire
from skill_executor.errorcodes import CATALOGUE
from skill_executor.errors import ExecutorError
from skill_executor.policy import Egress, NetworkPlan, Secrets
from skill_executor.runs.egress import HostAsk, RunEgress, granted
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


def test_hosts_approved_before_join_the_allow_list_of_a_grant_that_asks_only() -> None:
    asks = wire(plan(allow=["api.example.test"], ask=True).grant("r", None), ["new.example.test"], 30.0)
    assert asks["allow"] == ["api.example.test", "new.example.test"]
    assert asks["ask"] is True and asks["ask_timeout"] == 30.0
    plain = wire(plan(allow=["api.example.test"]).grant("r", None), ["new.example.test"], 30.0)
    assert plain["allow"] == ["api.example.test"] and plain["ask"] is False


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
        "approval": None,
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
        self.asker: Any = None
        self.approved: list[str] = []
        self.answers: list[tuple[int, bool, str | None]] = []

    def watch(self, run_id: str, callback: Any, asker: Any = None) -> None:
        self.calls.append(("watch", run_id))
        self.asker = asker

    def answer(self, question: HostQuestion, allow: bool, reason: str | None = None) -> None:
        self.answers.append((question.ask, allow, reason))

    def unwatch(self, run_id: str) -> None:
        self.calls.append(("unwatch", run_id))

    def grant(self, grant: Any, approved: Any = ()) -> str:
        self.calls.append(("grant", grant.run_id))
        self.approved = list(approved)
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


class FakeDesk:
    """Stands in for the lifecycle's HostApprovals (tested in tests/unit/test_egress_hosts.py)."""

    def __init__(self) -> None:
        self.held: list[tuple[HostAsk, Any]] = []
        self.forgotten: list[str] = []

    def remembered(self, owner: str, skill: str) -> list[str]:
        return ["old.example.test"] if (owner, skill) == ("k1", "gh-tools") else []

    def hold(self, ask: HostAsk, answer: Any) -> str | None:
        self.held.append((ask, answer))
        return f"eh-{len(self.held)}"

    def forget(self, run_id: str) -> None:
        self.forgotten.append(run_id)


def asking(**fields: Any) -> HostAsk:
    base: dict[str, Any] = {
        "run_id": "run-5",
        "owner": "k1",
        "skill": "gh-tools",
        "rule": "gh",
        "host": "",
        "method": "",
        "approver": "caller",
        "remember": True,
    }
    return HostAsk(**{**base, **fields})


def test_a_rule_that_asks_sends_its_questions_to_the_desk_and_its_remembered_hosts_to_the_gateway() -> None:
    gateway, desk = FakeGateway(), FakeDesk()
    seen: list[dict[str, Any]] = []
    network = plan(allow=["api.example.test"], ask=True)
    with granted(gateway, network, "run-5", None, seen.append, desk=desk, asking=asking()) as run:  # type: ignore[arg-type]
        assert gateway.approved == ["old.example.test"]
        gateway.asker(HostQuestion(7, "run-5", "gh", "new.example.test", "CONNECT"))
        ((ask, answer),) = desk.held
        assert (ask.host, ask.method, ask.owner, ask.skill, ask.run_id) == (
            "new.example.test",
            "CONNECT",
            "k1",
            "gh-tools",
            "run-5",
        )
        answer(False, "rejected by key k2")
        assert gateway.answers == [(7, False, "rejected by key k2")]
        assert seen[-1]["decision"] == "pending" and seen[-1]["approval"] == "eh-1"
        assert seen[-1]["host"] == "new.example.test" and seen[-1]["status"] == 0
    assert desk.forgotten == ["run-5"]
    assert [e.decision for e in run.kept] == ["pending"]


def test_no_desk_a_bundle_or_a_narrowed_run_is_never_asked_for_nor_remembered() -> None:
    network = plan(allow=["api.example.test"], ask=True)
    gateway = FakeGateway()
    with granted(gateway, network, "r", None, None):  # type: ignore[arg-type]
        assert gateway.asker is None and gateway.approved == []
    desk = FakeDesk()
    bundle = asking(skill="bundle:gh-tools", remember=False)
    with granted(gateway, network, "r", None, None, desk=desk, asking=bundle):  # type: ignore[arg-type]
        assert gateway.asker is not None and gateway.approved == []
    narrowed = NetworkPlan("gh", network.egress, network.allow, narrowed=True)
    with granted(gateway, narrowed, "r", None, None, desk=desk, asking=asking()):  # type: ignore[arg-type]
        assert gateway.asker is None and gateway.approved == []
