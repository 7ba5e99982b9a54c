"""A policy rule's ``egress`` block: which hosts a run may reach through the egress gateway,
which headers the gateway injects (``{secret:NAME}`` templates, values from the secrets file),
and the run's limits.  Pure: parsing and judging names, no I/O.

Hosts are written as exact names (``api.github.com``), one-label wildcards
(``*.githubusercontent.com``: ``a.githubusercontent.com``, never ``githubusercontent.com`` nor
``a.b.githubusercontent.com``), or addresses and networks written as such (``10.0.0.5``,
``fd00::1``, ``10.0.0.0/8``): a name never matches an address, and an address is reached only
when the rule lists it (:func:`parse_host`).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .vocabulary import DANGEROUS_VARIABLE

#: One DNS label (lower case): letters, digits, hyphens inside.
LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
#: A last label that a URL parser reads as a number (``127.1``, ``0x7f``): an address, never a name.
NUMERIC_LABEL = re.compile(r"^(?:0x[0-9a-f]*|[0-9]+)$")
#: A ``{secret:NAME}`` template in an injected header's value.
TEMPLATE = re.compile(r"\{secret:([^{}]*)\}")
#: A secret's name: the run's variable holding its placeholder.
SECRET_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: An HTTP header name (RFC 9110's token).
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
#: An HTTP method as a rule names it (upper case, as the methods registered with IANA).
METHOD = re.compile(r"^[A-Z][A-Z-]{0,31}$")
#: Headers that frame, route or authenticate the request to the gateway itself: never injected.
UNINJECTABLE = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "upgrade", "te", "trailer", "keep-alive",
     "proxy-authorization", "proxy-authenticate", "proxy-connection", "expect"}
)  # fmt: skip
#: Variables the service sets in a run that has network: a secret may not be named like one.
EGRESS_ENV = frozenset(
    {"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy",
     "NODE_USE_ENV_PROXY", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS",
     "PIP_CERT", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "UV_NATIVE_TLS", "HOME", "USER", "PWD", "SHELL", "TMPDIR"}
)  # fmt: skip
#: Variables the service sets in every run (:data:`skill_executor.runs.plan.RESERVED_ENV`).
RUN_ENV = frozenset({"WORKSPACE_DIR", "SKILLS_DIR", "SKILL_DIR", "SKILL_NAME", "WORK_DIR", "OUTPUT_DIR", "RUN_DIR"})
#: CONNECT goes to these ports unless the rule lists ``ports``.
DEFAULT_PORTS = (443, 80)

HostKind = Literal["name", "wildcard", "address", "network"]
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class HostError(ValueError):
    """A host as written is not one a rule or a request may name (the message says why)."""


@dataclass(frozen=True, slots=True)
class HostPattern:
    """One entry of an allow-list, normalised (``text`` is how it is written back)."""

    text: str
    kind: HostKind

    @property
    def network(self) -> Network:
        """The addresses of an ``address`` or ``network`` entry."""
        return ipaddress.ip_network(self.text, strict=True)

    def matches(self, host: str) -> bool:
        """Whether a request toward ``host`` (a name or an address literal, as the request
        names it) is allowed by this entry."""
        name = normal_host(host)
        address = as_address(name)
        if self.kind in ("address", "network"):
            return address is not None and address in self.network
        if address is not None or NUMERIC_LABEL.match(name.rsplit(".", 1)[-1]):
            return False  # an address literal (or what a URL parser reads as one) is no name
        if self.kind == "name":
            return name == self.text
        head, _, rest = name.partition(".")
        return bool(head) and rest == self.text[2:] and LABEL.match(head) is not None

    def covers(self, other: HostPattern) -> bool:
        """Whether everything ``other`` allows, this entry allows too (a request's narrowing)."""
        if other.kind in ("name", "address"):
            return self.matches(other.text)
        if other.kind == "wildcard":
            return self.kind == "wildcard" and self.text == other.text
        if self.kind in ("address", "network"):
            mine, theirs = self.network, other.network
            return mine.version == theirs.version and theirs.subnet_of(mine)  # type: ignore[arg-type]
        return False

    def __str__(self) -> str:
        return self.text


def normal_host(host: str) -> str:
    """A request's host as it is compared: lower case, without a trailing dot or IPv6 brackets."""
    host = host.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host[:-1] if host.endswith(".") and not host.endswith("..") else host


def as_address(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def parse_host(text: str) -> HostPattern:
    """An allow-list entry as written in a rule or a request; :class:`HostError` with the exact
    problem otherwise."""
    if not isinstance(text, str) or not text:
        raise HostError("a host is a non-empty name")
    if text != text.strip() or any(c.isspace() for c in text):
        raise HostError(f"{text!r} holds white space")
    written = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    if "/" in written:
        try:
            network = ipaddress.ip_network(written, strict=True)
        except ValueError as exc:
            if "host bits set" in str(exc):
                fixed = ipaddress.ip_network(written, strict=False)
                raise HostError(f"{text!r} has host bits set (write {str(fixed)!r})") from None
            raise HostError(f"{text!r} is not a network (write one as 10.0.0.0/8 or fd00::/8)") from None
        if network.num_addresses == 1:
            return HostPattern(str(network.network_address), "address")
        return HostPattern(str(network), "network")
    address = as_address(written)
    if address is not None:
        return HostPattern(str(address), "address")
    if ":" in text:
        if re.match(r"^[^:]+:[0-9]+$", text):
            raise HostError(f"{text!r} names a port: list ports in the rule's 'ports'")
        raise HostError(f"{text!r} is neither a host name nor an address")
    if text.endswith("."):
        raise HostError(f"{text!r} ends with a dot (write {text.rstrip('.')!r})")
    if not text.isascii():
        try:
            ascii_form = text.encode("idna").decode()
        except UnicodeError:
            raise HostError(f"{text!r} is not a host name") from None
        raise HostError(f"{text!r} is not ASCII (write its ASCII form {ascii_form!r})")
    name = text.lower()
    if len(name) > 253:
        raise HostError(f"{text[:64]!r}... is longer than a host name may be (253 characters)")
    wildcard = name.startswith("*.")
    labels = name.split(".")[1:] if wildcard else name.split(".")
    if name == "*":
        raise HostError("'*' would allow every host: name the hosts (a wildcard covers one label: '*.example.com')")
    if "*" in "".join(labels):
        raise HostError(f"{text!r}: a wildcard is '*.' before a name, and stands for one label ('*.example.com')")
    for label in labels:
        if not label:
            raise HostError(f"{text!r} has an empty label")
        if not LABEL.match(label):
            raise HostError(
                f"{text!r}: the label {label!r} is not a host name's "
                "(letters, digits and inner hyphens, at most 63 characters)"
            )
    if NUMERIC_LABEL.match(labels[-1]):
        raise HostError(f"{text!r} ends with a number, which is read as an address (write one as 1.2.3.4)")
    if wildcard and len(labels) < 2:
        raise HostError(f"{text!r} would allow a whole top-level domain: name one below it ('*.example.{labels[0]}')")
    return HostPattern(name, "wildcard" if wildcard else "name")


def reserved_variable(name: str) -> bool:
    """Whether a run has a variable of this name of its own (the service's, or one that changes
    what its programs do): no secret's placeholder may take it."""
    return name in EGRESS_ENV or name in RUN_ENV or DANGEROUS_VARIABLE.match(name) is not None


def secret_names(value: str) -> list[str]:
    """The secrets an injected header's value names (``{secret:NAME}``), in order."""
    return [m.group(1) for m in TEMPLATE.finditer(value)]


def render(value: str, resolve: dict[str, str]) -> str:
    """An injected header's value with each ``{secret:NAME}`` replaced by ``resolve[NAME]``."""
    return TEMPLATE.sub(lambda m: resolve[m.group(1)], value)


class Injection(BaseModel):
    """A header the gateway sets on requests toward ``host`` (replacing the run's own)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = Field(min_length=1, max_length=253, description="an exact host of the rule's allow")
    header: str = Field(min_length=1, max_length=128)
    value: str = Field(max_length=8192, description="may hold {secret:NAME} (SKILL_EXECUTOR_SECRETS_FILE)")


class Egress(BaseModel):
    """A rule's ``egress`` block (unknown fields are refused)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    allow: list[str] = Field(default_factory=list, description="exact names, '*.' wildcards, addresses, networks")
    inject: list[Injection] = Field(default_factory=list)
    methods: list[str] | None = Field(default=None, description="only these methods (intercepted requests)")
    max_response_bytes: int | None = Field(default=None, gt=0, description="per response")
    ports: list[int] | None = Field(default=None, description="CONNECT ports (default 443 and 80)")
    websocket: bool = Field(default=False, description="whether WebSocket upgrades are allowed")
    ask: bool = Field(default=False, description="hold a request to another host for approval")
    max_requests: int | None = Field(default=None, gt=0, description="per run")
    max_bytes: int | None = Field(default=None, gt=0, description="per run, up and down")
    max_connections: int | None = Field(default=None, gt=0, description="at once, per run")

    def hosts(self) -> tuple[HostPattern, ...]:
        """The allow-list, parsed (the loader checked every entry)."""
        return tuple(parse_host(h) for h in self.allow)


def egress_problems(egress: Egress, secrets: frozenset[str] | None) -> list[tuple[str, str]]:
    """What is wrong with a rule's ``egress`` block: (where, problem) pairs, where relative to
    the block (``allow.1``).  ``secrets``: the secrets file's names (None: no file)."""
    problems: list[tuple[str, str]] = []
    hosts: list[HostPattern] = []
    for index, entry in enumerate(egress.allow):
        try:
            hosts.append(parse_host(entry))
        except HostError as exc:
            problems.append((f"allow.{index}", str(exc)))
    if not egress.allow and not egress.ask:
        problems.append(("allow", "empty: the rule allows no host (leave 'egress' out for no network, or ask: true)"))
    for index, method in enumerate(egress.methods or ()):
        if not METHOD.match(method):
            hint = f" (write {method.upper()!r})" if METHOD.match(method.upper()) else ""
            problems.append((f"methods.{index}", f"{method!r} is not an HTTP method{hint}"))
    for index, port in enumerate(egress.ports or ()):
        if not 1 <= port <= 65535:
            problems.append((f"ports.{index}", f"{port} is not a port (1 to 65535)"))
    for index, inject in enumerate(egress.inject):
        where = f"inject.{index}"
        try:
            host = parse_host(inject.host)
        except HostError as exc:
            problems.append((f"{where}.host", str(exc)))
        else:
            if host.kind in ("wildcard", "network"):
                problems.append((f"{where}.host", f"{inject.host!r} is not one host: a header goes to a host named"))
            elif not any(h.matches(host.text) for h in hosts):
                problems.append((f"{where}.host", f"{inject.host!r} is not in the rule's egress.allow"))
        if not HEADER_NAME.match(inject.header):
            problems.append((f"{where}.header", f"{inject.header!r} is not a header name"))
        elif inject.header.lower() in UNINJECTABLE:
            problems.append((f"{where}.header", f"{inject.header!r} cannot be injected (it frames or routes requests)"))
        if any(c in inject.value for c in "\r\n\0"):
            problems.append((f"{where}.value", "holds a line break or a NUL, which no header value may"))
        for name in secret_names(inject.value):
            if not SECRET_NAME.match(name):
                problems.append(
                    (f"{where}.value", f"{{secret:{name}}}: a secret's name is a variable name (A-Z, a-z, 0-9, _)")
                )
            elif reserved_variable(name):
                problems.append(
                    (f"{where}.value", f"{{secret:{name}}}: {name} is a variable the run has of its own: rename it")
                )
            elif secrets is None:
                problems.append(
                    (f"{where}.value", f"{{secret:{name}}}: no secrets file (SKILL_EXECUTOR_SECRETS_FILE is not set)")
                )
            elif name not in secrets:
                problems.append((f"{where}.value", f"{{secret:{name}}}: no secret {name!r} in the secrets file"))
    return problems
