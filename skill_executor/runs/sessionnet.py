"""A session's network: one grant at the egress gateway for the session's life, shared by its
interactive processes and its runs ("install, then lock").

A session gets its grant when it is opened with network (``PUT /v1/sessions/{session}/network``
with a skill: the policy rule of the key and that skill, narrowed by the request's ``allow``), or
when a run whose rule has ``egress`` first uses it (the run's plan, narrowed by its request's
``network``).  From then on:

* the session's processes start with its path (:class:`~skill_executor.runtimes.egress.EgressPath`:
  the host container gets the bridge and the mounts, each process the variables);
* a run of the session under the same rule uses the session's grant (its credential, and the
  host's bridge when it joins the processes' loopback); its ``network`` may only name hosts the
  session may reach now; a run under another rule is refused (``network_not_allowed``);
* :meth:`SessionNetworks.narrow` narrows the live grant (the gateway has applied it when it
  returns); it is never widened, neither past the rule nor past what the session has now;
* the grant is revoked when the session ends (deleted, expired) and when the service closes.

The gateway knows the session's grant by the id ``session:<tenant>/<session>``: its events are
lines of the audit log under that id (the service's ``on_event``), counted here by decision, the
last :data:`KEEP_EVENTS` kept for ``GET /v1/sessions/{session}/network``, and given to the run of
the session in progress (runs of a session never overlap), whose result keeps them: a run's
``egress`` list holds what its session's processes sent while it ran, too.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..access import check_tenant
from ..egress import EgressEvent, Gateway
from ..errors import Conflict, ExecutorError
from ..policy import Grant, NetworkNotAllowed, NetworkPlan, Secrets, egress_unavailable, narrow
from ..runtimes.egress import EgressPath, EgressUnsupported
from .egress import EgressListener, RunEgress, unavailable

log = logging.getLogger(__name__)

#: The newest events of a session's grant kept for its state.
KEEP_EVENTS = 100


def grant_id(tenant: str, session: str) -> str:
    """The id a session's grant (and its events, its audit lines) carries at the gateway."""
    return f"session:{tenant}/{session}"


class SessionNetworkConflict(Conflict):
    code = "session_network_conflict"


@dataclass(eq=False)
class SessionNetwork:
    """One session's grant at the gateway, what it may reach now, and its events."""

    tenant: str
    session: str
    plan: NetworkPlan
    grant: Grant
    path: EgressPath
    opened_at: float = field(default_factory=time.time)
    narrowed_at: float | None = None
    events: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=KEEP_EVENTS))
    counts: dict[str, int] = field(default_factory=dict)
    #: run id -> the run of the session in progress (its events)
    runs: dict[str, Callable[[EgressEvent], None]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def event(self, event: EgressEvent) -> None:
        """The gateway's reader thread: one request of the session's processes or runs."""
        decision = event.decision if event.decision in ("allowed", "denied", "limited") else "denied"
        entry = {
            "host": event.host,
            "method": event.method,
            "path": event.path,
            "status": event.status,
            "bytes": event.bytes or 0,
            "decision": decision,
            "rule": event.rule,
            "reason": event.reason,
            "limit": event.limit,
            "time": event.time,
        }
        with self.lock:
            self.counts[decision] = self.counts.get(decision, 0) + 1
            self.events.append(entry)
            runs = list(self.runs.values())
        for run in runs:
            run(event)

    def state(self) -> dict[str, Any]:
        with self.lock:
            return {
                "session": self.session,
                "rule": self.plan.rule,
                "allow": [p.text for p in self.plan.allow],
                "rule_allow": [p.text for p in self.plan.egress.hosts()],
                "secrets": sorted(self.grant.placeholders),
                "opened_at": self.opened_at,
                "narrowed_at": self.narrowed_at,
                "requests": dict(self.counts),
                "events": list(self.events),
            }


class SessionNetworks:
    """Every session's grant of one service process (thread-safe).  ``source`` answers the
    process's gateway and why it is not there (it did not start)."""

    def __init__(self, source: Callable[[], tuple[Gateway | None, str | None]], secrets: Secrets | None) -> None:
        self.source = source
        self.secrets = secrets
        self._lock = threading.Lock()
        self._open: dict[tuple[str, str], SessionNetwork] = {}
        #: requests of ended sessions' grants, by decision (with the open ones': :meth:`stats`)
        self._ended_counts: dict[str, int] = {}

    def get(self, tenant: str, session: str) -> SessionNetwork | None:
        with self._lock:
            return self._open.get((check_tenant(tenant), session))

    def path(self, tenant: str, session: str) -> EgressPath | None:
        """The path a new process (its host) of the session gets (None: the session has no network)."""
        network = self.get(tenant, session)
        return network.path if network is not None else None

    def _gateway(self, rule: str) -> Gateway:
        gateway, problem = self.source()
        if gateway is None:
            raise egress_unavailable(rule, problem)
        if not gateway.available:
            raise unavailable(rule, "has stopped and could not be started again")
        return gateway

    def open(self, tenant: str, session: str, plan: NetworkPlan, *, processes_without: bool = False) -> SessionNetwork:
        """Give the session a grant of ``plan`` (409 ``session_network_conflict`` when it has one
        already, or when ``processes_without``: its processes' sandbox was made without a path)."""
        key = (check_tenant(tenant), session)
        with self._lock:
            if key in self._open:
                raise SessionNetworkConflict(
                    f"session {session!r} has network already (policy rule {self._open[key].plan.rule!r}): "
                    "narrow it (PATCH), or end the session",
                    details={"session": session, "rule": self._open[key].plan.rule},
                )
            if processes_without:
                raise SessionNetworkConflict(
                    f"session {session!r} has processes that started without network, whose sandbox has no path "
                    "to the egress gateway: end them first",
                    details={"session": session, "rule": plan.rule},
                )
            gateway = self._gateway(plan.rule)
            grant = plan.grant(grant_id(*key), self.secrets)
            path = EgressPath(
                socket=gateway.socket_path, ca_cert=gateway.ca_cert, credential=grant.token, variables=grant.env
            )
            network = SessionNetwork(key[0], session, plan, grant, path)
            gateway.watch(grant.run_id, network.event)
            try:
                gateway.grant(grant)
            except ExecutorError as exc:
                gateway.unwatch(grant.run_id)
                raise unavailable(plan.rule, f"did not take the session's grant: {exc.message}") from None
            self._open[key] = network
        log.info("session %s of %s: network opened: %s", session, key[0], grant.describe())
        return network

    def narrow(self, tenant: str, session: str, allow: Sequence[str]) -> SessionNetwork:
        """Narrow the session's live grant to ``allow`` (each host within what it has now: 422
        ``network_not_allowed``); returns once the gateway judges by the new list."""
        key = (check_tenant(tenant), session)
        with self._lock:
            network = self._open.get(key)
            if network is None:
                raise NetworkNotAllowed(
                    f"session {session!r} has no network to narrow: open it with a skill whose policy rule has egress",
                    details={"rule": None, "host": allow[0] if allow else None, "session": session},
                )
            narrowed = narrow(network.plan, allow, session=session)
            gateway = self._gateway(narrowed.rule)
            try:
                gateway.narrow(network.grant.token, narrowed.allow)
            except ExecutorError as exc:
                raise unavailable(narrowed.rule, f"did not take the session's narrowing: {exc.message}") from None
            with network.lock:
                network.plan = narrowed
                network.narrowed_at = time.time()
        log.info("session %s of %s: network narrowed to %s", session, key[0], [p.text for p in narrowed.allow])
        return network

    @contextlib.contextmanager
    def run(
        self,
        tenant: str,
        session: str,
        plan: NetworkPlan,
        run_id: str,
        listener: EgressListener | None,
        *,
        joins_processes: bool,
    ) -> Iterator[RunEgress]:
        """A run of the session with network (``plan``: its rule's, narrowed by its request): the
        session's grant, opened with ``plan`` if it has none.  ``joins_processes``: the run joins
        the processes' sandbox (then it must have been made with the session's path)."""
        network = self.get(tenant, session)
        if network is None:
            if joins_processes:
                raise EgressUnsupported(
                    f"this run joins the interactive processes of session {session!r}, which started without "
                    "network (their sandbox has no path to the egress gateway): end them, or open the session "
                    "with network before its first process"
                )
            network = self.open(tenant, session, plan)
        elif network.plan.rule != plan.rule:
            raise NetworkNotAllowed(
                f"session {session!r} has the network of policy rule {network.plan.rule!r}; this run's is "
                f"{plan.rule!r}: a session has one rule's network",
                details={"rule": plan.rule, "host": None, "session": session, "session_rule": network.plan.rule},
            )
        elif plan.narrowed:  # what it asked for must be within what the session has now
            narrow(network.plan, [p.text for p in plan.allow], session=session)
        run = RunEgress(network.path, listener)
        with network.lock:
            network.runs[run_id] = run.event
        try:
            yield run
        finally:
            with network.lock:
                network.runs.pop(run_id, None)

    def check_without(self, tenant: str, session: str, *, joins_processes: bool) -> None:
        """A run of the session that has no network: it may not join the processes' sandbox of a
        session with network (their loopback has the gateway's bridge, their variables the
        session's credential), 422 ``network_not_allowed``."""
        network = self.get(tenant, session) if joins_processes else None
        if network is not None:
            raise NetworkNotAllowed(
                f"session {session!r} has the network of policy rule {network.plan.rule!r}, and its processes' "
                "sandbox the path to it; this run has no network (no rule with egress gives it one), so it cannot "
                "join them: run it in another session",
                details={"rule": None, "host": None, "session": session, "session_rule": network.plan.rule},
            )

    def end(self, session: str, tenant: str) -> None:
        """Revoke the session's grant (its session ended: deleted, expired); a later request with
        its credential is a 407.  (``session, tenant``: the order of the session store's hooks.)"""
        with self._lock:
            network = self._open.pop((check_tenant(tenant), session), None)
            if network is None:
                return
            for decision, count in network.counts.items():
                self._ended_counts[decision] = self._ended_counts.get(decision, 0) + count
        gateway, _ = self.source()
        if gateway is not None:
            try:
                gateway.revoke(network.grant.token)
            except ExecutorError:  # a gateway that is gone holds no grant any more
                log.warning("the egress gateway did not answer the revoke of session %s's grant", session)
            finally:
                gateway.unwatch(network.grant.run_id)
        log.info("session %s of %s: network revoked", session, network.tenant)

    def close(self) -> None:
        """Revoke every session's grant (the service closes)."""
        with self._lock:
            keys = list(self._open)
        for tenant, session in keys:
            self.end(session, tenant)

    def stats(self) -> dict[str, Any]:
        """Sessions with network, and their requests by decision (ended sessions' included)."""
        with self._lock:
            counts = dict(self._ended_counts)
            for network in self._open.values():
                with network.lock:
                    for decision, count in network.counts.items():
                        counts[decision] = counts.get(decision, 0) + count
            return {"sessions": len(self._open), "requests_total": counts}
