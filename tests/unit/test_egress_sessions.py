"""A session's network (skill_executor/runs/sessionnet.py; policy.narrow): narrowing is pure and
never widens; the session's grant is opened once, shared by its runs, narrowed in place and
revoked when the session ends.  No gateway: its bookkeeping is stood in for (the real one is
tested in tests/engine/test_egress_sessions.py)."""

from __future__ import annotations

import time
from pathlib import Path
from collections.abc import Sequence
from typing import Any

import pytest

from skill_executor.egress import EgressEvent
from skill_executor.errorcodes import CATALOGUE
from skill_executor.errors import ExecutorError
from skill_executor.policy import Egress, HostPattern, NetworkPlan, Secrets, narrow
from skill_executor.runs.sessionnet import SessionNetworks, grant_id
from skill_executor.runtimes.egress import EgressUnsupported

SECRET = "ghs_session-secret-value-0123456789"


def plan(allow: list[str], **block: Any) -> NetworkPlan:
    parsed = Egress.model_validate({"allow": allow, **block})
    return NetworkPlan("gh", parsed, parsed.hosts())


def texts(network: NetworkPlan) -> list[str]:
    return [p.text for p in network.allow]


def test_narrowing_keeps_what_is_covered_and_never_widens() -> None:
    wide = plan(["pypi.org", "*.pythonhosted.org", "api.github.com", "10.0.0.0/8"])
    narrowed = narrow(wide, ["api.github.com", "files.pythonhosted.org", "10.1.2.3", "API.github.com"], session="s")
    assert texts(narrowed) == ["api.github.com", "files.pythonhosted.org", "10.1.2.3"] and narrowed.narrowed
    assert narrowed.rule == "gh" and narrowed.egress is wide.egress  # the rule's block, for its injections
    assert texts(narrow(wide, [], session="s")) == []
    # widening: past the rule, and past what the session has now (the rule would allow it)
    for current, asked in ((wide, "evil.example"), (narrowed, "pypi.org"), (narrowed, "*.pythonhosted.org")):
        with pytest.raises(ExecutorError) as refused:
            narrow(current, [asked], session="s")
        assert refused.value.code == "network_not_allowed" and refused.value.status == 422
        assert refused.value.details == {"rule": "gh", "host": asked.lower(), "session": "s"}
        assert "never widened" in refused.value.message
    with pytest.raises(ExecutorError) as malformed:
        narrow(wide, ["https://pypi.org/"], session="s")
    assert malformed.value.code == "network_not_allowed" and malformed.value.details["host"] == "https://pypi.org/"


def test_narrowing_drops_the_injections_and_placeholders_of_the_hosts_left_out() -> None:
    wide = plan(
        ["api.github.com", "pypi.org"],
        inject=[{"host": "api.github.com", "header": "Authorization", "value": "Bearer {secret:GH}"}],
    )
    assert wide.secret_names == ("GH",)
    assert narrow(wide, ["pypi.org"], session="s").secret_names == ()


class FakeGateway:
    def __init__(self) -> None:
        self.available = True
        self.socket_path = Path("/nonexistent/socket/egress.sock")
        self.ca_cert = Path("/nonexistent/ca-cert.pem")
        self.calls: list[tuple[str, Any]] = []
        self.watchers: dict[str, Any] = {}

    def watch(self, run_id: str, callback: Any) -> None:
        self.watchers[run_id] = callback
        self.calls.append(("watch", run_id))

    def unwatch(self, run_id: str) -> None:
        self.watchers.pop(run_id, None)
        self.calls.append(("unwatch", run_id))

    def grant(self, grant: Any) -> str:
        self.calls.append(("grant", grant.run_id))
        return str(grant.token)

    def narrow(self, token: str, allow: Sequence[HostPattern]) -> None:
        self.calls.append(("narrow", [pattern.text for pattern in allow]))

    def revoke(self, token: str) -> None:
        self.calls.append(("revoke", token))


def event(run_id: str, host: str, decision: str = "allowed") -> EgressEvent:
    return EgressEvent(run_id, "gh", host, "GET", "/", 200, 5, 0, decision, None, None, time.time())


def networks(gateway: FakeGateway | None) -> SessionNetworks:
    return SessionNetworks(lambda: (gateway, "it did not start"), Secrets({"GH": SECRET}))  # type: ignore[return-value,arg-type]


def test_a_sessions_grant_is_opened_once_shared_by_its_runs_narrowed_in_place_and_revoked_at_its_end() -> None:
    gateway = FakeGateway()
    nets = networks(gateway)
    wide = plan(
        ["pypi.org", "api.github.com"],
        inject=[{"host": "api.github.com", "header": "Authorization", "value": "Bearer {secret:GH}"}],
    )
    seen: list[dict[str, Any]] = []
    with nets.run("t1", "s1", wide, "run-1", seen.append, joins_processes=False) as first:
        session = nets.get("t1", "s1")
        assert session is not None and first.path is session.path and session.grant.run_id == grant_id("t1", "s1")
        assert first.path.variables["GH"].startswith("se-placeholder-") and SECRET not in repr(session.grant)
        gateway.watchers[grant_id("t1", "s1")](event(grant_id("t1", "s1"), "pypi.org"))
    assert [e["host"] for e in seen] == ["pypi.org"] and [e.host for e in first.kept] == ["pypi.org"]
    # the session's processes' traffic after the run is the session's alone
    gateway.watchers[grant_id("t1", "s1")](event(grant_id("t1", "s1"), "evil.example", "denied"))
    assert len(seen) == 1 and session.state()["requests"] == {"allowed": 1, "denied": 1}
    assert nets.path("t1", "s1") is session.path and nets.path("t2", "s1") is None  # another key's is another
    with nets.run("t1", "s1", wide, "run-2", None, joins_processes=True) as second:  # the same grant
        assert second.path is session.path
    assert [c[0] for c in gateway.calls] == ["watch", "grant"]

    nets.narrow("t1", "s1", ["api.github.com"])
    assert gateway.calls[-1] == ("narrow", ["api.github.com"]) and texts(session.plan) == ["api.github.com"]
    assert session.state()["allow"] == ["api.github.com"] and session.state()["narrowed_at"] is not None
    for widen in (["pypi.org"], ["api.github.com", "pypi.org"]):
        with pytest.raises(ExecutorError) as refused:
            nets.narrow("t1", "s1", widen)
        assert refused.value.code == "network_not_allowed"
    # a run may ask only for what the session has now
    with (
        pytest.raises(ExecutorError) as asked,
        nets.run("t1", "s1", narrow(wide, ["pypi.org"], session="x"), "r", None, joins_processes=False),
    ):
        pass
    assert asked.value.code == "network_not_allowed"
    other_rule = NetworkPlan("other", wide.egress, wide.allow)
    with pytest.raises(ExecutorError) as other, nets.run("t1", "s1", other_rule, "r", None, joins_processes=False):
        pass
    assert other.value.code == "network_not_allowed" and other.value.details["session_rule"] == "gh"
    with pytest.raises(ExecutorError) as again:
        nets.open("t1", "s1", wide)
    assert again.value.code == "session_network_conflict" and again.value.status == 409

    nets.end("s1", "t1")
    assert gateway.calls[-2:] == [("revoke", session.grant.token), ("unwatch", grant_id("t1", "s1"))]
    assert nets.get("t1", "s1") is None and nets.stats() == {
        "sessions": 0,
        "requests_total": {"allowed": 1, "denied": 1},
    }
    nets.end("s1", "t1")  # once
    assert [c[0] for c in gateway.calls].count("revoke") == 1


def test_a_run_joining_processes_without_network_no_gateway_and_close() -> None:
    gateway = FakeGateway()
    nets = networks(gateway)
    with pytest.raises(EgressUnsupported), nets.run("t1", "s1", plan(["a.example"]), "r", None, joins_processes=True):
        pass
    with pytest.raises(ExecutorError) as conflict:
        nets.open("t1", "s1", plan(["a.example"]), processes_without=True)
    assert conflict.value.code == "session_network_conflict" and CATALOGUE["session_network_conflict"].status == 409
    assert gateway.calls == []
    with pytest.raises(ExecutorError) as none:
        networks(None).open("t1", "s1", plan(["a.example"]))
    assert none.value.code == "egress_unavailable" and "it did not start" in none.value.message
    with pytest.raises(ExecutorError) as nothing:
        nets.narrow("t1", "s1", [])
    assert nothing.value.code == "network_not_allowed"
    nets.open("t1", "s1", plan(["a.example"]))
    nets.open("t1", "s2", plan(["a.example"]))
    nets.close()
    assert [c[0] for c in gateway.calls].count("revoke") == 2 and nets.stats()["sessions"] == 0


def test_a_run_without_network_may_not_join_the_processes_of_a_session_with_network() -> None:
    """Their loopback has the gateway's bridge and their variables the session's credential."""
    gateway = FakeGateway()
    nets = networks(gateway)
    nets.check_without("t1", "s1", joins_processes=True)  # no network in the session: nothing to keep
    with nets.run("t1", "s1", plan(["pypi.org"]), "run-1", None, joins_processes=False):
        pass
    nets.check_without("t1", "s1", joins_processes=False)  # its own sandbox: no bridge in it
    nets.check_without("t2", "s1", joins_processes=True)  # another key's session of that name
    with pytest.raises(ExecutorError) as refused:
        nets.check_without("t1", "s1", joins_processes=True)
    assert refused.value.code == "network_not_allowed" and refused.value.status == 422
    assert refused.value.details["session_rule"] == "gh" and "cannot join them" in refused.value.message
