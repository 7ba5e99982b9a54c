"""The gateway's pure decisions: host patterns, addresses, proxy credentials, secret scanning.

Standard library only and no import of the service: the gateway process
(:mod:`skill_executor.egress.proxy`) runs in mitmproxy's own environment and loads this file
next to it, and the service's tests check the same functions without mitmproxy.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
import urllib.parse
from collections.abc import Iterable, Mapping

#: Addresses of cloud metadata services, refused even where a private range were allowed by a
#: wider pattern (they are refused as non-global anyway; named here for the 403's reason).
METADATA_ADDRESSES = frozenset({"169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200"})

_LABEL = re.compile(r"^[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?$")


def normalise_host(host: str) -> str:
    """``host`` lower-cased, without brackets (IPv6) and without a trailing dot."""
    host = host.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host.rstrip(".")


def ip_literal(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address ``host`` is written as, or None for a name."""
    try:
        return ipaddress.ip_address(normalise_host(host).split("%", 1)[0])
    except ValueError:
        return None


def ip_network(entry: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    """The addresses an allow-list entry written as a network (``10.0.0.0/8``) names, or None."""
    if "/" not in entry:
        return None
    try:
        return ipaddress.ip_network(normalise_host(entry), strict=True)
    except ValueError:
        return None


def listed_address(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, entry: str) -> bool:
    """Whether the allow-list ``entry`` names ``ip``: the same address, or a network holding it."""
    network = ip_network(entry)
    if network is not None:
        return ip.version == network.version and ip in network
    return ip_literal(entry) == ip


def valid_pattern(pattern: str) -> bool:
    """An allow-list entry: an exact name, ``*.`` and a name of at least two labels, an IP
    address or a network (``10.0.0.0/8``)."""
    pattern = normalise_host(pattern)
    if ip_literal(pattern) is not None or ip_network(pattern) is not None:
        return True
    name = pattern[2:] if pattern.startswith("*.") else pattern
    labels = name.split(".")
    if pattern.startswith("*.") and len(labels) < 2:
        return False
    return bool(name) and all(_LABEL.match(label) for label in labels)


def match_host(host: str, allow: Iterable[str]) -> str | None:
    """The allow-list entry that lets ``host`` through, or None.

    Exact names match themselves; ``*.example.test`` matches exactly one more label
    (``api.example.test``, not ``example.test`` nor ``a.b.example.test``). An IP literal matches
    only the same address written in the list (or a network listed as such), never a name pattern.
    """
    host = normalise_host(host)
    literal = ip_literal(host)
    for entry in allow:
        pattern = normalise_host(entry)
        if literal is not None:
            if listed_address(literal, pattern):
                return entry
            continue
        if pattern == host:
            return entry
        if pattern.startswith("*.") and host.endswith(pattern[1:]):
            head = host[: -len(pattern) + 1]
            if head and "." not in head:
                return entry
    return None


def address_refusal(address: str, allow: Iterable[str]) -> str | None:
    """Why a connection to ``address`` is refused (None: it may go there).

    Anything not globally routable -- loopback, link-local (metadata endpoints), private,
    shared (CGNAT), multicast, reserved, unspecified -- is refused unless the allow-list names that
    very address. An IPv4-mapped IPv6 address is judged as the IPv4 address it carries.
    """
    ip = ip_literal(address)
    if ip is None:
        return f"{address!r} is not an address"
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if any(listed_address(ip, entry) for entry in allow):
        return None
    if str(ip) in METADATA_ADDRESSES:
        return f"{ip} is a cloud metadata address"
    if ip.is_loopback:
        return f"{ip} is a loopback address"
    if ip.is_link_local:
        return f"{ip} is a link-local address"
    if ip.is_private or not ip.is_global or ip.is_multicast:
        return f"{ip} is not a public address"
    return None


def proxy_token(header: str | None) -> str | None:
    """The token of a ``Proxy-Authorization: Basic base64(user:token)`` header (any user name)."""
    if not header:
        return None
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    _, sep, token = decoded.partition(":")
    return token if sep and token else None


def secret_forms(value: str) -> list[bytes]:
    """The byte strings a secret is looked for as: itself, percent-encoded, base64 (both alphabets,
    without padding) -- what a script that copies it into a URL, a form or a Basic header writes."""
    raw = value.encode("utf-8")
    forms = {
        raw,
        urllib.parse.quote(value, safe="").encode(),
        urllib.parse.quote_plus(value).encode(),
        base64.b64encode(raw).rstrip(b"="),
        base64.urlsafe_b64encode(raw).rstrip(b"="),
    }
    return sorted((f for f in forms if f), key=len, reverse=True)


def find_secret(data: bytes, secrets: Mapping[str, list[bytes]]) -> str | None:
    """The name of the first secret ``data`` carries in any of its forms (see :func:`secret_forms`)."""
    if not data:
        return None
    lowered = data.lower()
    for name, forms in secrets.items():
        for form in forms:
            # Percent-encoding is case-insensitive in its hex digits; base64 is not.
            haystack = lowered if b"%" in form else data
            needle = form.lower() if b"%" in form else form
            if needle in haystack:
                return name
    return None


def scrub(text: str, secrets: Mapping[str, str]) -> str:
    """``text`` with every secret value (and its encoded forms) replaced by ``[secret:NAME]``."""
    for name, value in secrets.items():
        for form in secret_forms(value):
            text = text.replace(form.decode("utf-8", "replace"), f"[secret:{name}]")
    return text


_SECRET_REFERENCE = re.compile(r"\{secret:([A-Za-z_][A-Za-z0-9_]*)\}")


def template_secrets(template: str) -> list[str]:
    """The secret names ``{secret:NAME}`` references in ``template``."""
    return _SECRET_REFERENCE.findall(template)


def render(template: str, values: Mapping[str, str]) -> str:
    """``template`` with each ``{secret:NAME}`` replaced by ``values[NAME]``."""
    return _SECRET_REFERENCE.sub(lambda m: values[m.group(1)], template)
