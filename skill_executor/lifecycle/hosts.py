"""Hosts held for approval by the egress gateway (a rule's ``egress.ask``): a run's request to a
host outside its allow-list waits -- in the gateway, the run's other requests go on -- until a
key decides (``POST /v1/egress/approvals/{id}``, an MCP elicitation) or the wait ends
(``SKILL_EXECUTOR_EGRESS_ASK_TIMEOUT_SECONDS``).  Approved, the request goes on and the host
is remembered for the key and skill (their later runs reach it unasked, as ``on-first-use``
remembers programs); rejected or expired, the run's requests to it get the gateway's 403.

The pending ones live in this process (the gateway that holds the requests is its own):
at most ``SKILL_EXECUTOR_EGRESS_MAX_PENDING_ASKS`` per key, more are refused at once.  Every
decision is a row of ``egress_approvals`` and a line of the audit log.
"""

from __future__ import annotations

import heapq
import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import insert, select

from ..access import Principal, audit_log
from ..db import Database
from ..db.schema import egress_approvals
from ..errors import Conflict, Forbidden
from ..runs.egress import HostAsk
from .figures import EgressFigures

log = logging.getLogger(__name__)


@dataclass
class HeldHost:
    """A host one run waits to reach."""

    approval_id: str
    ask: HostAsk
    created_at: float
    expires_at: float
    answer: Callable[[bool, str | None], None] = field(repr=False)

    def describe(self) -> dict[str, Any]:
        """What ``GET /v1/egress/approvals`` lists (``ApprovalRequestModel``)."""
        return {
            "approval_id": self.approval_id,
            "kind": "egress_host",
            "run_id": self.ask.run_id,
            "key": self.ask.owner,
            "skill": self.ask.skill,
            "rule": self.ask.rule,
            "host": self.ask.host,
            "method": self.ask.method,
            "approver": self.ask.approver,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
        }


class HostApprovals:
    """The desk runs' held hosts wait at (:class:`~skill_executor.runs.egress.HostDesk`). Thread-safe."""

    def __init__(
        self, database: Database, *, timeout: float, max_pending: int, figures: EgressFigures | None = None
    ) -> None:
        self.database = database
        self.timeout = timeout
        self.max_pending = max_pending
        self.figures = figures
        self._held: dict[str, HeldHost] = {}
        self._deadlines: list[tuple[float, str]] = []
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closing = False

    # -- the runs' side -----------------------------------------------------------------------

    def remembered(self, owner: str, skill: str) -> list[str]:
        with self.database.read() as conn:
            rows = conn.execute(
                select(egress_approvals.c.host).where(
                    egress_approvals.c.owner == owner,
                    egress_approvals.c.skill == skill.lower(),
                    egress_approvals.c.decision == "approve",
                )
            ).all()
        return sorted({row[0] for row in rows})

    def hold(self, ask: HostAsk, answer: Callable[[bool, str | None], None]) -> str | None:
        with self._wake:
            if self._closing:
                full = "the service is shutting down"
            elif sum(1 for held in self._held.values() if held.ask.owner == ask.owner) >= self.max_pending:
                full = f"this key has {self.max_pending} hosts waiting for approval, the most it may have"
            else:
                full = None
            if full is None:
                now = time.time()
                held = HeldHost("eh-" + secrets.token_hex(12), ask, now, now + self.timeout, answer)
                self._held[held.approval_id] = held
                heapq.heappush(self._deadlines, (held.expires_at, held.approval_id))
                if self._thread is None:
                    self._thread = threading.Thread(target=self._expire, name="egress-approval-expiry", daemon=True)
                    self._thread.start()
                self._wake.notify()
        if full is not None:
            answer(False, full)
            self._audit("refuse", ask, None, "limit", full, None)
            return None
        audit_log.warning(
            "run %s: egress to %s held for approval %s by policy rule %s",
            ask.run_id,
            ask.host,
            held.approval_id,
            ask.rule,
            extra={
                "audit": True,
                "action": "egress.approval_requested",
                "approval_id": held.approval_id,
                "run_id": ask.run_id,
                "tenant": ask.owner,
                "skill": ask.skill,
                "rule": ask.rule,
                "host": ask.host,
            },
        )
        return held.approval_id

    def forget(self, run_id: str) -> None:
        with self._wake:
            gone = [held for held in self._held.values() if held.ask.run_id == run_id]
            for held in gone:
                del self._held[held.approval_id]
        for held in gone:
            self._audit("run_ended", held.ask, held.approval_id, "run_ended", "the run ended while it waited", None)

    # -- the deciders' side -----------------------------------------------------------------

    def pending(self, who: Principal) -> list[HeldHost]:
        """The hosts waiting for approval that ``who`` sees: its own key's runs', or every one
        for an admin key."""
        with self._wake:
            found = [h for h in self._held.values() if who.admin or h.ask.owner == who.id]
        return sorted(found, key=lambda held: held.created_at)

    def get(self, approval_id: str, who: Principal) -> HeldHost:
        with self._wake:
            held = self._held.get(approval_id)
        if held is None or not (who.admin or held.ask.owner == who.id):
            raise Conflict(
                f"no egress approval {approval_id!r} is pending (decided, expired, or its run ended)",
                code="approval_not_pending",
                details={"approval_id": approval_id},
            )
        return held

    def decide(
        self, approval_id: str, who: Principal, decision: str, reason: str | None = None, *, via: str = "rest"
    ) -> HeldHost:
        """Approve or reject a held host (``decision``: approve or reject), as ``who``: the run's
        own key unless its rule says ``approver: admin``, or an admin key. Approved, the run's
        requests to it go on and it is remembered for the key and skill; rejected, they are
        refused (403). Recorded and audited; ``approval_not_pending`` when decided already."""
        held = self.get(approval_id, who)
        if held.ask.approver == "admin" and not who.admin:
            raise Forbidden(
                f"policy rule {held.ask.rule!r} lets only an admin key decide on egress approval {approval_id!r}",
                code="approval_forbidden",
                details={"approval_id": approval_id, "rule": held.ask.rule},
            )
        with self._wake:
            if self._held.pop(approval_id, None) is None:
                raise Conflict(
                    f"egress approval {approval_id!r} was decided meanwhile",
                    code="approval_not_pending",
                    details={"approval_id": approval_id},
                )
        approved = decision == "approve"
        self._record(held, decision, who.id, via, reason)
        held.answer(approved, None if approved else f"rejected by key {who.id}" + (f": {reason}" if reason else ""))
        self._audit(decision, held.ask, approval_id, via, reason, who)
        return held

    # -- expiry -------------------------------------------------------------------------------

    def _expire(self) -> None:
        while True:
            with self._wake:
                while not self._closing and (not self._deadlines or self._deadlines[0][0] > time.time()):
                    wait = self._deadlines[0][0] - time.time() if self._deadlines else None
                    self._wake.wait(wait)
                if self._closing:
                    return
                _, approval_id = heapq.heappop(self._deadlines)
                held = self._held.pop(approval_id, None)
            if held is None:  # decided, or its run ended
                continue
            why = f"no decision within {self.timeout:g} s"
            try:
                self._record(held, "expire", "timeout", "timeout", why)
            except Exception:  # the answer still goes
                log.exception("recording the expiry of egress approval %s failed", approval_id)
            held.answer(False, why)
            self._audit("expire", held.ask, approval_id, "timeout", why, None)

    def close(self) -> None:
        """Refuse every held host (the service stops) and end the expiry thread."""
        with self._wake:
            self._closing = True
            held, self._held = list(self._held.values()), {}
            self._wake.notify()
        for one in held:
            one.answer(False, "the service is shutting down")

    # -- records ------------------------------------------------------------------------------

    def _record(self, held: HeldHost, decision: str, decided_by: str, via: str, reason: str | None) -> None:
        ask = held.ask
        with self.database.write() as conn:
            conn.execute(
                insert(egress_approvals).values(
                    approval_id=held.approval_id,
                    owner=ask.owner,
                    skill=ask.skill.lower(),
                    host=ask.host,
                    rule=ask.rule,
                    run_id=ask.run_id,
                    decision=decision,
                    decided_by=decided_by,
                    via=via,
                    reason=reason,
                    decided_at=time.time(),
                )
            )

    def _audit(
        self, decision: str, ask: HostAsk, approval_id: str | None, via: str, reason: str | None, who: Principal | None
    ) -> None:
        if self.figures is not None:
            self.figures.approval(decision)
        audit_log.warning(
            "run %s: egress to %s: %s%s",
            ask.run_id,
            ask.host,
            decision,
            f" by {who.id}" if who is not None else "",
            extra={
                "audit": True,
                "action": "egress.approval",
                "approval_id": approval_id,
                "run_id": ask.run_id,
                "tenant": ask.owner,
                "skill": ask.skill,
                "rule": ask.rule,
                "host": ask.host,
                "who": who.id if who is not None else None,
                "admin": who.admin if who is not None else None,
                "decision": decision,
                "via": via,
                "reason": reason,
            },
        )
