"""The policy's decision about a run's network: which rule's ``egress`` applies to a key and a
skill (the first rule that matches, as for the command policy), what the run may reach once
its request narrowed it (:func:`network_plan`), and the grant the egress gateway gets for one
run, with its placeholders (:meth:`NetworkPlan.grant`).

A run sees placeholders (``GITHUB_TOKEN=se-placeholder-...``), random per secret and per run;
the gateway swaps one for the secret's value in headers toward the secret's own host only.
The real values are in the :class:`Grant` alone, which shows none of them in ``repr``/``str``.
"""

from __future__ import annotations

import secrets as random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from ..errors import ExecutorError, Unavailable
from .egress import DEFAULT_PORTS, Egress, HostError, HostPattern, Injection, normal_host, parse_host, render
from .egress import secret_names as template_names
from .rules import Policy
from .secretsfile import Secrets

#: What a placeholder starts with (then 32 random hex digits).
PLACEHOLDER_PREFIX = "se-placeholder-"
#: Concurrent connections of one run when its rule sets no ``max_connections``.
DEFAULT_MAX_CONNECTIONS = 32


class NetworkNotAllowed(ExecutorError):
    code = "network_not_allowed"
    status = 422


class EgressUnavailable(Unavailable):
    code = "egress_unavailable"


def egress_unavailable(rule: str, problem: str | None = None) -> EgressUnavailable:
    """The refusal of a run under a rule with ``egress`` where no egress gateway runs (``problem``:
    why it did not start): such a run neither runs without the network its rule grants nor with
    network unaudited."""
    why = f" (it did not start: {problem})" if problem else ""
    return EgressUnavailable(
        f"policy rule {rule!r} gives this run network access through the egress gateway, which this "
        f"service does not run{why}: the run is refused rather than run without it",
        details={"rule": rule},
    )


@dataclass(frozen=True, slots=True)
class Header:
    """A header the gateway sets toward ``host``; ``value`` is real (secrets resolved), shown nowhere."""

    host: str
    header: str
    #: as the rule writes it ({secret:NAME} unresolved): what may be shown
    template: str
    value: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class Grant:
    """What the egress gateway gets for one run: who it is (``token``, its proxy credential),
    where it may go, what is injected on the way, and its limits."""

    run_id: str
    rule: str
    #: the proxy credential of this run (``http://run:<token>@127.0.0.1:<port>``): random per run
    token: str = field(repr=False)
    allow: tuple[HostPattern, ...]
    headers: tuple[Header, ...]
    #: secret name -> the placeholder the run sees in the variable of that name
    placeholders: Mapping[str, str]
    #: secret name -> the hosts its value may go to (its injections' hosts)
    secret_hosts: Mapping[str, frozenset[str]]
    secrets: Secrets
    methods: tuple[str, ...] | None
    ports: tuple[int, ...]
    websocket: bool
    ask: bool
    max_response_bytes: int | None
    max_requests: int | None
    max_bytes: int | None
    max_connections: int

    @property
    def env(self) -> dict[str, str]:
        """The run's variables for its secrets: each one's placeholder."""
        return dict(self.placeholders)

    def allowed(self, host: str) -> HostPattern | None:
        """The allow-list entry that lets a request toward ``host`` out (None: refused)."""
        return next((p for p in self.allow if p.matches(host)), None)

    def injected(self, host: str) -> list[tuple[str, str]]:
        """The headers (name, real value) set on every request toward ``host``."""
        name = normal_host(host)
        return [(h.header, h.value) for h in self.headers if h.host == name]

    def replacements(self, host: str) -> dict[str, str]:
        """Placeholder -> real value, for the secrets whose own host ``host`` is: a header of a
        request toward it that carries a placeholder gets the value; toward any other host,
        nothing is replaced."""
        name = normal_host(host)
        return {p: self.secrets.value(s) for s, p in self.placeholders.items() if name in self.secret_hosts[s]}

    def foreign_values(self, host: str) -> list[str]:
        """The secret values a request toward ``host`` must not carry (headers, URL, body):
        every secret of the run whose own host it is not."""
        name = normal_host(host)
        return [self.secrets.value(s) for s in self.placeholders if name not in self.secret_hosts[s]]

    def describe(self) -> dict[str, object]:
        """The grant without any value: for run records, events and logs."""
        return {
            "rule": self.rule,
            "allow": [p.text for p in self.allow],
            "inject": [{"host": h.host, "header": h.header} for h in self.headers],
            "secrets": sorted(self.placeholders),
            "methods": list(self.methods) if self.methods is not None else None,
            "ports": list(self.ports),
            "websocket": self.websocket,
            "ask": self.ask,
            "max_response_bytes": self.max_response_bytes,
            "max_requests": self.max_requests,
            "max_bytes": self.max_bytes,
            "max_connections": self.max_connections,
        }

    def __repr__(self) -> str:
        return f"Grant({self.describe()!r}, run_id={self.run_id!r})"

    __str__ = __repr__


@dataclass(frozen=True, slots=True)
class NetworkPlan:
    """What a run may reach, settled when it is validated (no secret value, nothing random)."""

    rule: str
    egress: Egress
    #: the effective allow-list: the rule's, or the request's narrowing of it
    allow: tuple[HostPattern, ...]
    #: the request named its hosts (then no host is asked for: ``ask`` is off)
    narrowed: bool = False

    @property
    def injections(self) -> tuple[Injection, ...]:
        """The rule's injections toward the hosts the run may reach."""
        return tuple(i for i in self.egress.inject if any(p.matches(i.host) for p in self.allow))

    @property
    def secret_names(self) -> tuple[str, ...]:
        """The secrets the run gets placeholders for (sorted)."""
        return tuple(sorted({n for i in self.injections for n in template_names(i.value)}))

    def grant(self, run_id: str, secrets: Secrets | None) -> Grant:
        """The gateway's grant for one run: fresh placeholders and a fresh token."""
        names = self.secret_names
        if names and secrets is None:  # the loader refuses such a policy
            raise ValueError(f"policy rule {self.rule!r} injects secrets, and there is no secrets file")
        values = {n: secrets.value(n) for n in names} if secrets is not None else {}
        placeholders = {n: placeholder(values[n]) for n in names}
        headers = tuple(Header(i.host, i.header, i.value, render(i.value, values)) for i in self.injections)
        hosts = {n: frozenset(i.host for i in self.injections if n in template_names(i.value)) for n in names}
        e = self.egress
        return Grant(
            run_id=run_id,
            rule=self.rule,
            token=random.token_urlsafe(32),
            allow=self.allow,
            headers=headers,
            placeholders=placeholders,
            secret_hosts=hosts,
            secrets=Secrets(values, "<grant>"),
            methods=tuple(e.methods) if e.methods is not None else None,
            ports=tuple(e.ports) if e.ports is not None else DEFAULT_PORTS,
            websocket=e.websocket,
            ask=e.ask and not self.narrowed,
            max_response_bytes=e.max_response_bytes,
            max_requests=e.max_requests,
            max_bytes=e.max_bytes,
            max_connections=e.max_connections or DEFAULT_MAX_CONNECTIONS,
        )


def placeholder(value: str) -> str:
    """A random placeholder for a secret of this value (never the value, nor part of it)."""
    while True:
        made = PLACEHOLDER_PREFIX + random.token_hex(16)
        if made not in value and value not in made:
            return made


def network_plan(
    policy: Policy | None,
    key: str,
    skill: str,
    requested: Sequence[str] | None = None,
    *,
    bundled: bool = False,
) -> NetworkPlan | None:
    """What a run of ``skill`` for API key id ``key`` may reach (``bundled``: an inline bundle,
    which ``*`` rules only match): None, no network (no rule with ``egress`` applies, or the
    request narrowed it to nothing).  ``requested``: the request's ``network.allow`` (None: not
    given), which may narrow the rule's allow-list, never widen it (422 ``network_not_allowed``,
    naming the host; so is a request's ``network`` where no egress rule applies).  Pure."""
    found = policy.rule(key, skill.lower(), bundled) if policy is not None else None
    if found is None or found[1].egress is None:
        if requested is None:
            return None
        reason = (
            "no policy rule gives it network access" if found is None else f"policy rule {found[0]!r} has no egress"
        )
        raise NetworkNotAllowed(
            f"this run cannot have network: {reason}; a run of skill {skill!r} has none (leave 'network' out)",
            details={"rule": found[0] if found else None, "host": requested[0] if requested else None},
        )
    name, egress = found[0], found[1].egress
    hosts = egress.hosts()
    if requested is None:
        return NetworkPlan(name, egress, hosts)
    why = f"is not allowed by policy rule {name!r}: a run may ask for less than its rule allows, never more"
    narrowed = within(name, hosts, requested, why)
    if not narrowed:
        return None
    return NetworkPlan(name, egress, narrowed, narrowed=True)


def within(
    rule: str, hosts: Sequence[HostPattern], requested: Sequence[str], why: str, **details: str
) -> tuple[HostPattern, ...]:
    """``requested`` (host entries as a request writes them) parsed, each covered by an entry of
    ``hosts`` (422 ``network_not_allowed`` naming the first that is not, ``why`` after its name),
    without repeats, in order.  Pure."""
    narrowed: list[HostPattern] = []
    for entry in requested:
        try:
            wanted = parse_host(entry)
        except HostError as exc:
            raise NetworkNotAllowed(f"network.allow: {exc}", details={"rule": rule, "host": entry, **details}) from None
        if not any(p.covers(wanted) for p in hosts):
            raise NetworkNotAllowed(
                f"network.allow: {wanted.text!r} {why}",
                details={"rule": rule, "host": wanted.text, **details},
            )
        if wanted not in narrowed:
            narrowed.append(wanted)
    return tuple(narrowed)


def narrow(plan: NetworkPlan, requested: Sequence[str], *, session: str) -> NetworkPlan:
    """A session's network (``plan``: what it may reach now) narrowed to ``requested``: each host
    must be covered by what the session has now, which is within its rule, so a session is never
    widened, neither past its rule nor past an earlier narrowing (422 ``network_not_allowed``,
    naming the host).  ``[]`` leaves it no host (its grant stays: every request is refused).
    Pure."""
    hosts = within(
        plan.rule,
        plan.allow,
        requested,
        f"is not in what session {session!r} may reach now ({', '.join(p.text for p in plan.allow) or 'nothing'}; "
        f"policy rule {plan.rule!r}): a session's network may be narrowed, never widened",
        session=session,
    )
    return replace(plan, allow=hosts, narrowed=True)
