"""A run's network, from its plan to its sandbox and back: the grant registered with the
service's egress gateway before the run starts and revoked after it, the path in its sandbox
gets (:class:`~skill_executor.runtimes.egress.EgressPath`), and the gateway's events of the run
(live, and kept in its result with the limits they name).

The order matters: the grant is registered (the gateway has applied it when
:meth:`~skill_executor.egress.Gateway.grant` returns) before the sandbox is claimed, and revoked
after the sandbox is closed (nothing of the run is alive); the events the gateway sent before the
revoke's answer have all been given to the run by then (:meth:`~skill_executor.egress.Gateway.watch`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from .. import tracing
from ..egress import EgressEvent, Gateway, HostQuestion
from ..errors import ExecutorError
from ..policy import EgressUnavailable, NetworkPlan, Secrets, egress_unavailable
from ..runtimes.egress import EgressPath
from .models import EgressRequest, RunResult

log = logging.getLogger(__name__)

#: The most egress events a run's result keeps (the live stream gets every one).
MAX_KEPT = 1000

#: Called with each egress event of a run, as the result keeps it (JSON-ready), as it happens.
EgressListener = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class HostAsk:
    """A run's request to a host outside its rule's allow-list, held for approval (``ask``)."""

    run_id: str
    #: the run's key (its tenant)
    owner: str
    #: the skill the decision is recorded under (``bundle:<name>`` for an inline bundle's)
    skill: str
    rule: str
    host: str
    method: str
    #: who may decide besides an admin key: the run's own key (``caller``) or no one (``admin``)
    approver: str
    #: whether an approval is remembered for the key and skill (never for a bundle)
    remember: bool


class HostDesk(Protocol):
    """Where a run's held hosts wait for a decision (the lifecycle's
    :class:`~skill_executor.lifecycle.hosts.HostApprovals`)."""

    def remembered(self, owner: str, skill: str) -> list[str]:
        """The hosts approved before for ``owner``'s runs of ``skill``."""
        ...

    def hold(self, ask: HostAsk, answer: Callable[[bool, str | None], None]) -> str | None:
        """Hold ``ask`` until it is decided or expires, then ``answer(allowed, reason)``; the
        approval's id, or None when refused at once (``answer`` called). Must not block."""
        ...

    def forget(self, run_id: str) -> None:
        """The run has ended: its pending hosts are dropped (the gateway refused their requests)."""
        ...


class RunEgress:
    """One run's grant at the gateway, and the events of it."""

    def __init__(self, path: EgressPath, listener: EgressListener | None) -> None:
        self.path = path
        self.listener = listener
        self.kept: list[EgressRequest] = []
        self.dropped = 0
        self.limits: list[str] = []
        self._lock = threading.Lock()
        #: the run's span (its egress spans' parent), when tracing
        self.trace = tracing.captured()

    def event(self, event: EgressEvent) -> None:
        """The gateway's reader thread: one request of this run."""
        decision = event.decision if event.decision in ("allowed", "denied", "limited") else "denied"
        tracing.past(
            "egress",
            event.started or event.time,
            event.time,
            parent=self.trace,
            run_id=event.run_id,
            rule=event.rule,
            host=event.host,
            method=event.method,
            path=event.path,
            status=event.status,
            bytes=event.bytes,
            request_bytes=event.request_bytes,
            decision=decision,
            limit=event.limit,
        )
        self.keep(
            EgressRequest(
                host=event.host,
                method=event.method,
                path=event.path,
                status=event.status,
                bytes=event.bytes or 0,
                decision=decision,  # type: ignore[arg-type]
                rule=event.rule,
                reason=event.reason,
                limit=event.limit,
            ),
            event.limit,
        )

    def pending(self, question: HostQuestion, approval: str) -> None:
        """A request held for approval: a ``pending`` event naming the approval."""
        self.keep(
            EgressRequest(
                host=question.host,
                method=question.method,
                path="",
                status=0,
                bytes=0,
                decision="pending",
                rule=question.rule,
                reason=f"{question.host} is not in the allow-list: waiting for approval {approval}",
                approval=approval,
            ),
            None,
        )

    def keep(self, entry: EgressRequest, limit: str | None) -> None:
        with self._lock:
            if limit and limit not in self.limits:
                self.limits.append(limit)
            if len(self.kept) < MAX_KEPT:
                self.kept.append(entry)
            else:
                self.dropped += 1
        if self.listener is not None:
            self.listener(entry.model_dump(mode="json"))

    def into(self, result: RunResult) -> RunResult:
        """The run's result with its egress events and the egress limits it hit."""
        with self._lock:
            result.egress = list(self.kept)
            result.limits_hit += [limit for limit in self.limits if limit not in result.limits_hit]
            if self.dropped:
                result.warnings.append(
                    f"{self.dropped} more egress requests are not kept in the result (at most {MAX_KEPT})"
                )
        return result


def unavailable(rule: str, why: str) -> EgressUnavailable:
    return EgressUnavailable(
        f"policy rule {rule!r} gives this run network access through the egress gateway, which {why}: "
        "the run is refused rather than run without it",
        details={"rule": rule},
    )


@contextlib.contextmanager
def granted(
    gateway: Gateway | None,
    network: NetworkPlan,
    run_id: str,
    secrets: Secrets | None,
    listener: EgressListener | None,
    *,
    problem: str | None = None,
    desk: HostDesk | None = None,
    asking: HostAsk | None = None,
) -> Iterator[RunEgress]:
    """The run's grant at ``gateway`` for as long as the block runs (``egress_unavailable`` when
    there is no gateway, or it is down: ``problem`` says why it did not start).  A run of a
    session uses its session's grant instead (:mod:`.sessionnet`).  ``desk``: where the run's
    requests to hosts outside its allow-list wait for approval when its rule asks (``asking``:
    the run's side of each question; the hosts approved before for its key and skill are
    allowed from the start); without one they are refused."""
    if gateway is None:
        raise egress_unavailable(network.rule, problem)
    if not gateway.available:  # a gateway being started again is waited for (Gateway.grant)
        raise unavailable(network.rule, "has stopped and could not be started again")
    grant = network.grant(run_id, secrets)
    path = EgressPath(socket=gateway.socket_path, ca_cert=gateway.ca_cert, credential=grant.token, variables=grant.env)
    run = RunEgress(path, listener)
    asks = desk if grant.ask and asking is not None else None
    approved: list[str] = []
    asker: Callable[[HostQuestion], None] | None = None
    if asks is not None and asking is not None:
        template = asking
        approved = asks.remembered(template.owner, template.skill) if template.remember else []

        def asker(question: HostQuestion) -> None:
            def answer(allowed: bool, reason: str | None) -> None:
                gateway.answer(question, allowed, reason)

            ask = dataclasses.replace(template, host=question.host, method=question.method)
            approval = asks.hold(ask, answer)
            if approval is not None:
                run.pending(question, approval)

    gateway.watch(run_id, run.event, asker)
    try:
        try:
            gateway.grant(grant, approved)
        except ExecutorError as exc:
            raise unavailable(network.rule, f"did not take the run's grant: {exc.message}") from None
        try:
            yield run
        finally:
            try:
                gateway.revoke(grant.token)
            except ExecutorError:  # a gateway that is gone holds no grant any more
                log.warning("the egress gateway did not answer the revoke of run %s's grant", run_id)
    finally:
        gateway.unwatch(run_id)
        if asks is not None:
            asks.forget(run_id)
