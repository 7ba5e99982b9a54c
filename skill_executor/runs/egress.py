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
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

from ..egress import EgressEvent, Gateway
from ..errors import ExecutorError
from ..policy import EgressUnavailable, NetworkPlan, Secrets, egress_unavailable
from ..runtimes.egress import EgressPath
from .models import EgressRequest, RunResult

log = logging.getLogger(__name__)

#: The most egress events a run's result keeps (the live stream gets every one).
MAX_KEPT = 1000

#: Called with each egress event of a run, as the result keeps it (JSON-ready), as it happens.
EgressListener = Callable[[dict[str, Any]], None]


class RunEgress:
    """One run's grant at the gateway, and the events of it."""

    def __init__(self, path: EgressPath, listener: EgressListener | None) -> None:
        self.path = path
        self.listener = listener
        self.kept: list[EgressRequest] = []
        self.dropped = 0
        self.limits: list[str] = []
        self._lock = threading.Lock()

    def event(self, event: EgressEvent) -> None:
        """The gateway's reader thread: one request of this run."""
        decision = event.decision if event.decision in ("allowed", "denied", "limited") else "denied"
        entry = EgressRequest(
            host=event.host,
            method=event.method,
            path=event.path,
            status=event.status,
            bytes=event.bytes or 0,
            decision=decision,  # type: ignore[arg-type]
            rule=event.rule,
            reason=event.reason,
            limit=event.limit,
        )
        with self._lock:
            if event.limit and event.limit not in self.limits:
                self.limits.append(event.limit)
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
) -> Iterator[RunEgress]:
    """The run's grant at ``gateway`` for as long as the block runs (``egress_unavailable`` when
    there is no gateway, or it is down: ``problem`` says why it did not start).  A run of a
    session uses its session's grant instead (:mod:`.sessionnet`)."""
    if gateway is None:
        raise egress_unavailable(network.rule, problem)
    if not gateway.available:  # a gateway being started again is waited for (Gateway.grant)
        raise unavailable(network.rule, "has stopped and could not be started again")
    grant = network.grant(run_id, secrets)
    path = EgressPath(socket=gateway.socket_path, ca_cert=gateway.ca_cert, credential=grant.token, variables=grant.env)
    run = RunEgress(path, listener)
    gateway.watch(run_id, run.event)
    try:
        try:
            gateway.grant(grant)
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
