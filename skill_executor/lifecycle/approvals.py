"""Runs held for approval by the command policy: how many a key may hold, their expiry,
the decision on one (who may decide, the policy as it is now) and its audit record.

A held run is a record only (``pending_approval``): no place, no workspace, no container
until it is approved; the :class:`~skill_executor.lifecycle.manager.RunManager` then
dispatches it as any run.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from ..access import Principal, audit_log
from ..errors import Busy, ExecutorError, Forbidden
from ..runs.plan import RunPlan
from .outcomes import error_body, not_started
from .records import RunRecord, RunStore
from .status import PENDING

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Judgement:
    """What a decision on a held run settled (:meth:`Approvals.judge`)."""

    plan: RunPlan
    #: the programs the decision remembers for the key (on-first-use rules)
    programs: list[str]
    #: the skill the decision is recorded under (a bundle's apart from the installed skill's)
    skill: str | None
    audit: dict[str, Any]


def decision_audit(record: RunRecord, who: Principal, decision: str, via: str, **more: Any) -> dict[str, Any]:
    """The audit record of a decision on a held run (``more``: its reason, rule, programs)."""
    return {
        "audit": True,
        "action": "run.approval",
        "run_id": record.run_id,
        "tenant": record.owner,
        "who": who.id,
        "admin": who.admin,
        "decision": decision,
        "via": via,
        **more,
    }


class Approvals:
    def __init__(self, store: RunStore, *, timeout: float, max_pending: int) -> None:
        """``timeout``: how long a held run waits (SKILL_EXECUTOR_APPROVAL_TIMEOUT_SECONDS);
        ``max_pending``: how many runs one key may have held at once
        (SKILL_EXECUTOR_MAX_PENDING_APPROVALS)."""
        self.store = store
        self.timeout = timeout
        self.max_pending = max_pending
        #: (deadline, run id) of the runs this process held: one thread expires them
        self._deadlines: list[tuple[float, str]] = []
        self._thread: threading.Thread | None = None
        self._wake = threading.Condition()
        self._closing = False

    # -- holding ----------------------------------------------------------------------------

    def make_room(self, owner: str, idempotency_key: str | None) -> None:
        """Refuse a new held run of a key that holds :attr:`max_pending` already
        (``too_many_pending_approvals``; held runs take no run slot, so near-simultaneous
        holds may pass it by a few). A replay of a held run is never refused."""
        if idempotency_key is not None and self.store.idempotent(owner, idempotency_key) is not None:
            return
        full = self.store.pending_count(owner) >= self.max_pending
        if full and (self.expire_overdue(owner) == 0 or self.store.pending_count(owner) >= self.max_pending):
            raise Busy(
                f"this key has {self.max_pending} runs waiting for approval, the most it may have; "
                "decide or cancel one",
                code="too_many_pending_approvals",
                details={"max_pending_approvals": self.max_pending},
            )

    def held(self, record: RunRecord, plan: RunPlan) -> None:
        """``record`` was just recorded held: audit it, and end it at its deadline."""
        decision = plan.decision
        audit_log.warning(
            "run %s held for approval by policy rule %s",
            record.run_id,
            decision.rule,
            extra={
                "audit": True,
                "action": "run.approval_requested",
                "run_id": record.run_id,
                "tenant": record.owner,
                "rule": decision.rule,
                "programs": list(decision.programs),
            },
        )
        with self._wake:
            heapq.heappush(self._deadlines, (record.created_at + self.timeout, record.run_id))
            if self._thread is None:
                self._thread = threading.Thread(target=self._expire_held, name="run-approval-expiry", daemon=True)
                self._thread.start()
            self._wake.notify()

    # -- expiry -----------------------------------------------------------------------------

    def _expire_held(self) -> None:
        """The one thread that ends this process's held runs at their deadlines (a run decided
        meanwhile is left as it is; another replica's reads expire what this one misses)."""
        while True:
            with self._wake:
                while not self._closing and (not self._deadlines or self._deadlines[0][0] > time.time()):
                    wait = self._deadlines[0][0] - time.time() if self._deadlines else None
                    self._wake.wait(wait)
                if self._closing:
                    return
                _, run_id = heapq.heappop(self._deadlines)
            try:
                self.expire(self.store.get(run_id))
            except Exception:  # the next read expires it
                log.exception("expiring run %s held for approval failed", run_id)

    def expire(self, record: RunRecord) -> RunRecord:
        """A run held past the timeout ends failed (``approval_expired``); any other as it is."""
        if record.status != PENDING or time.time() < record.created_at + self.timeout:
            return record
        error = error_body(
            ExecutorError(
                f"run {record.run_id!r} waited for approval longer than {self.timeout:g} s; nothing ran",
                code="approval_expired",
                details={"run_id": record.run_id},
            )
        )
        if self.store.decide(
            record, "failed", decision="expire", decided_by="timeout", via="timeout", programs=[], error=error
        ):
            audit_log.warning(
                "run %s expired waiting for approval",
                record.run_id,
                extra={"audit": True, "action": "run.approval", "run_id": record.run_id, "decision": "expire"},
            )
        return self.store.get(record.run_id)

    def expire_overdue(self, owner: str | None = None) -> int:
        """End every run held past the timeout (of ``owner``'s); how many."""
        ended = 0
        for run_id in self.store.overdue(time.time() - self.timeout, owner):
            ended += self.expire(self.store.get(run_id)).status != PENDING
        return ended

    # -- deciding ---------------------------------------------------------------------------

    def cancel(self, record: RunRecord, who: Principal) -> bool:
        """End a held run at its key's request (nothing started); False: decided meanwhile."""
        why = "the run was cancelled while it waited for approval; nothing ran"
        if not self.store.decide(
            record,
            "cancelled",
            decision="cancel",
            decided_by=who.id,
            via="cancel",
            programs=[],
            result=not_started(record.run_id, record.skill, record.session, why),
        ):
            return False
        audit_log.warning(
            "run %s: cancel by %s",
            record.run_id,
            who.id,
            extra=decision_audit(record, who, "cancel", "cancel"),
        )
        return True

    def refused(self, record: RunRecord, who: Principal, exc: ExecutorError, decision: str, via: str) -> None:
        """A held run the policy (or the catalog) refuses now: it ends with that error."""
        if self.store.decide(
            record,
            "failed",
            decision="reject",
            decided_by=who.id,
            via=via,
            programs=[],
            reason=exc.message,
            error=error_body(exc),
        ):
            audit_log.warning(
                "run %s: reject (%s) on %s by %s",
                record.run_id,
                exc.code,
                decision,
                who.id,
                extra=decision_audit(
                    record, who, "reject", via, reason=exc.message, rule=(exc.details or {}).get("rule"), programs=[]
                ),
            )

    @staticmethod
    def judge(
        record: RunRecord, plan: RunPlan, who: Principal, decision: str, reason: str | None, via: str
    ) -> Judgement:
        """Whether ``who`` may decide on ``record`` under the policy as it is now (``plan``):
        the run's own key unless its rule says ``approver: admin``; an admin key always."""
        policy = plan.decision
        if policy.approver == "admin" and not who.admin:
            raise Forbidden(
                f"policy rule {policy.rule!r} lets only an admin key decide on run {record.run_id!r}",
                code="approval_forbidden",
                details={"run_id": record.run_id, "rule": policy.rule},
            )
        programs = list(policy.programs)
        # a bundle's decisions are recorded apart: on-first-use never reads them as the installed skill's
        skill = f"bundle:{record.skill}" if plan.bundled else None
        audit = decision_audit(record, who, decision, via, reason=reason, rule=policy.rule, programs=programs)
        return Judgement(plan, programs, skill, audit)

    def reject(self, record: RunRecord, verdict: Judgement, who: Principal, reason: str | None, via: str) -> bool:
        """End a held run rejected (``approval_rejected``); False: decided meanwhile."""
        rule = verdict.plan.decision.rule
        error = error_body(
            Forbidden(
                f"run {record.run_id!r} was rejected" + (f": {reason}" if reason else "") + "; nothing ran",
                code="approval_rejected",
                details={"run_id": record.run_id, "rule": rule, "reason": reason},
            )
        )
        return self.store.decide(
            record,
            "failed",
            decision="reject",
            decided_by=who.id,
            via=via,
            programs=verdict.programs,
            reason=reason,
            error=error,
            skill=verdict.skill,
        )

    def close(self) -> None:
        with self._wake:  # the expiry thread ends
            self._closing = True
            self._wake.notify()
