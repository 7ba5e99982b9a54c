"""Hosts held for approval (skill_executor/lifecycle/hosts.py) on a real database: who sees
and decides them, what an approval remembers (per key and skill), the key's cap, the audit
record of each decision. The gateway's side and the expiry: tests/service/test_egress_ask*.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from skill_executor.access import Principal
from skill_executor.db import Database
from skill_executor.db.schema import egress_approvals
from skill_executor.errors import ExecutorError
from skill_executor.lifecycle.figures import EgressFigures
from skill_executor.lifecycle.hosts import HostApprovals
from skill_executor.runs.egress import HostAsk

from ..databases import open_database

K1, K2, ADMIN = Principal("k1", False), Principal("k2", False), Principal("root", True)


@pytest.fixture
def database(tmp_path: Path) -> Iterator[Database]:
    db = open_database("sqlite", tmp_path)
    yield db
    db.close()


def ask(**fields: Any) -> HostAsk:
    base: dict[str, Any] = {
        "run_id": "run-1",
        "owner": "k1",
        "skill": "gh-tools",
        "rule": "gh",
        "host": "new.example.test",
        "method": "CONNECT",
        "approver": "caller",
        "remember": True,
    }
    return HostAsk(**{**base, **fields})


class Answers:
    def __init__(self) -> None:
        self.got: list[tuple[bool, str | None]] = []

    def __call__(self, allowed: bool, reason: str | None) -> None:
        self.got.append((allowed, reason))


def test_an_approval_lets_the_request_go_and_is_remembered_for_the_key_and_skill(database: Database) -> None:
    figures = EgressFigures()
    desk = HostApprovals(database, timeout=60, max_pending=5, figures=figures)
    answers = Answers()
    approval = desk.hold(ask(), answers)
    assert approval is not None and approval.startswith("eh-")
    (held,) = desk.pending(K1)
    assert held.describe()["host"] == "new.example.test" and held.describe()["kind"] == "egress_host"
    assert desk.pending(K2) == [] and len(desk.pending(ADMIN)) == 1
    with pytest.raises(ExecutorError) as other:  # another key's: not even seen
        desk.decide(approval, K2, "approve")
    assert other.value.code == "approval_not_pending"
    desk.decide(approval, K1, "approve", "fine")
    assert answers.got == [(True, None)]
    assert desk.pending(K1) == []
    assert desk.remembered("k1", "gh-tools") == ["new.example.test"]
    assert desk.remembered("k1", "other-skill") == [] and desk.remembered("k2", "gh-tools") == []
    with pytest.raises(ExecutorError) as again:
        desk.decide(approval, K1, "approve")
    assert again.value.code == "approval_not_pending" and again.value.status == 409
    with database.read() as conn:
        (row,) = conn.execute(select(egress_approvals)).all()
    assert (row.decision, row.decided_by, row.via, row.reason, row.run_id) == ("approve", "k1", "rest", "fine", "run-1")
    assert figures.snapshot()["approvals"] == {"approve": 1}
    desk.close()


def test_a_rejection_is_a_refusal_and_remembers_nothing(database: Database) -> None:
    desk = HostApprovals(database, timeout=60, max_pending=5)
    answers = Answers()
    approval = desk.hold(ask(), answers)
    assert approval is not None
    desk.decide(approval, ADMIN, "reject", "not that host")
    assert answers.got == [(False, "rejected by key root: not that host")]
    assert desk.remembered("k1", "gh-tools") == []
    desk.close()


def test_a_rule_with_approver_admin_is_decided_by_an_admin_key_only(database: Database) -> None:
    desk = HostApprovals(database, timeout=60, max_pending=5)
    answers = Answers()
    approval = desk.hold(ask(approver="admin"), answers)
    assert approval is not None
    with pytest.raises(ExecutorError) as caught:
        desk.decide(approval, K1, "approve")
    assert caught.value.code == "approval_forbidden" and answers.got == []
    desk.decide(approval, ADMIN, "approve")
    assert answers.got == [(True, None)]
    desk.close()


def test_a_bundles_approval_is_never_remembered_for_the_installed_skill(database: Database) -> None:
    desk = HostApprovals(database, timeout=60, max_pending=5)
    approval = desk.hold(ask(skill="bundle:gh-tools", remember=False), Answers())
    assert approval is not None
    desk.decide(approval, K1, "approve")
    assert desk.remembered("k1", "gh-tools") == []
    desk.close()


def test_the_keys_cap_refuses_at_once_and_an_ended_run_or_a_close_answers_the_rest(database: Database) -> None:
    figures = EgressFigures()
    desk = HostApprovals(database, timeout=60, max_pending=2, figures=figures)
    first, second, third, other = Answers(), Answers(), Answers(), Answers()
    assert desk.hold(ask(host="a.example.test"), first) is not None
    assert desk.hold(ask(run_id="run-2", host="b.example.test"), second) is not None
    assert desk.hold(ask(host="c.example.test"), third) is None
    assert third.got == [(False, "this key has 2 hosts waiting for approval, the most it may have")]
    assert desk.hold(ask(owner="k2", run_id="run-3"), other) is not None  # another key has its own
    desk.forget("run-1")  # the gateway refused its requests when the grant was revoked
    assert [h.ask.host for h in desk.pending(K1)] == ["b.example.test"]
    desk.close()
    assert second.got == [(False, "the service is shutting down")] and other.got == second.got
    assert first.got == []
    assert figures.snapshot()["approvals"] == {"refuse": 1, "run_ended": 1}
