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
import zlib
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


#: IPv6 prefixes whose last 32 bits are an IPv4 address a translator reaches (RFC 6052, 8215).
NAT64_PREFIXES = (ipaddress.IPv6Network("64:ff9b::/96"), ipaddress.IPv6Network("64:ff9b:1::/48"))
#: IPv4-compatible addresses (deprecated, RFC 4291): ``::a.b.c.d`` (``::`` and ``::1`` excepted).
COMPATIBLE = ipaddress.IPv6Network("::/96")


def embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries (NAT64, IPv4-compatible, 6to4, Teredo)."""
    found: list[ipaddress.IPv4Address] = []
    last32 = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if any(ip in prefix for prefix in NAT64_PREFIXES) or (ip in COMPATIBLE and int(ip) > 1):
        found.append(last32)
    if ip.sixtofour is not None:
        found.append(ip.sixtofour)
    if ip.teredo is not None:
        found.extend(ip.teredo)
    return found


def address_refusal(address: str, allow: Iterable[str]) -> str | None:
    """Why a connection to ``address`` is refused (None: it may go there).

    Anything not globally routable -- loopback, link-local (metadata endpoints), private,
    shared (CGNAT), multicast, reserved, unspecified -- is refused unless the allow-list names that
    very address. An IPv6 address that carries an IPv4 one (mapped ``::ffff:0:0/96``, compatible
    ``::/96``, NAT64 ``64:ff9b::/96`` and ``64:ff9b:1::/48``, 6to4 ``2002::/16``, Teredo
    ``2001::/32``) is judged as each IPv4 address it carries too: a NAT64 or 6to4 path would take
    it there.
    """
    ip = ip_literal(address)
    if ip is None:
        return f"{address!r} is not an address"
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if any(listed_address(ip, entry) for entry in allow):
        return None
    if isinstance(ip, ipaddress.IPv6Address):
        for carried in embedded_ipv4(ip):
            why = address_refusal(str(carried), allow)
            if why is not None:
                return f"{ip} carries {carried}: {why}"
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


def _base64_forms(raw: bytes) -> set[bytes]:
    """base64 of ``raw`` (both alphabets) as it appears inside a longer encoded text, at each of
    the three byte alignments it can start at: only the characters that depend on ``raw`` alone
    (what ``base64("user:" + value)`` holds of the value, whatever the prefix's length)."""
    forms: set[bytes] = set()
    for shift in range(3):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            encoded = encode(b"\0" * shift + raw)
            start, end = -(-8 * shift // 6), 8 * (shift + len(raw)) // 6
            forms.add(encoded[start:end])
    return forms


def secret_forms(value: str) -> list[bytes]:
    """The byte strings a secret is looked for as: itself, percent-encoded (a text is also looked
    through percent-decoded, see :func:`find_secret`), base64 at any alignment and hex (either
    case) -- what a script that copies it into a URL, a form, a Basic header or a digest writes.
    Longest first."""
    raw = value.encode("utf-8")
    forms = {
        raw,
        urllib.parse.quote(value, safe="").encode(),
        urllib.parse.quote_plus(value).encode(),
        raw.hex().encode(),
        *_base64_forms(raw),
    }
    return sorted((f for f in forms if f), key=len, reverse=True)


def overlap(secrets: Mapping[str, list[bytes]]) -> int:
    """How many bytes a scan of a streamed body holds back between chunks: enough for the longest
    form percent-encoded twice (``%25XX`` a byte)."""
    return 5 * max((len(f) for forms in secrets.values() for f in forms), default=0)


_HEX = re.compile(rb"^[0-9a-f]+$")


def _decodings(data: bytes) -> Iterable[bytes]:
    """``data``, then percent-decoded (up to three times: ``%2541`` is ``%41`` is ``A``)."""
    yield data
    for _ in range(3):
        if b"%" not in data:
            return
        decoded = urllib.parse.unquote_to_bytes(data)
        if decoded == data:
            return
        data = decoded
        yield data


def find_secret(data: bytes, secrets: Mapping[str, list[bytes]]) -> str | None:
    """The name of the first secret ``data`` carries in any of its forms (see :func:`secret_forms`),
    also once percent-decoded (any mix of encoded and plain characters, any case, twice)."""
    if not data:
        return None
    for text in _decodings(data):
        lowered = text.lower()
        for name, forms in secrets.items():
            for form in forms:
                # Percent-encoding and hex are case-insensitive; the value itself and base64 are not.
                if b"%" in form or _HEX.match(form):
                    if form.lower() in lowered:
                        return name
                elif form in text:
                    return name
    return None


def find_secret_in_name(host: str, secrets: Mapping[str, list[bytes]]) -> str | None:
    """The name of a secret a host name carries (names are case-insensitive: so is the search)."""
    lowered = {name: [form.lower() for form in forms] for name, forms in secrets.items()}
    return find_secret(host.lower().encode("utf-8", "replace"), lowered)


#: The content codings a request body toward a host that is not a secret's may use: the gateway
#: reads them to look for secrets (others, e.g. br or zstd, are refused there).
READABLE_CODINGS = frozenset({"", "identity", "gzip", "x-gzip", "deflate"})


class BodyDecoder:
    """A request body's ``Content-Encoding`` undone, chunk by chunk, at most ``bound`` bytes out:
    :meth:`feed` raises ValueError for a coding it cannot read, a broken stream or a body that
    decodes to more than ``bound`` bytes (a small gzip can stand for gigabytes)."""

    def __init__(self, coding: str, bound: int) -> None:
        coding = coding.strip().lower()
        if coding not in READABLE_CODINGS:
            raise ValueError(f"content-encoding {coding!r} cannot be read")
        # wbits 47: gzip or zlib, told apart by their header (what servers accept as deflate)
        self.inflate = zlib.decompressobj(47) if coding not in ("", "identity") else None
        self.left = bound

    def feed(self, data: bytes) -> bytes:
        if self.inflate is None:
            return data
        try:
            out = self.inflate.decompress(data, self.left + 1) if data else self.inflate.flush()
        except zlib.error as exc:
            raise ValueError(f"the compressed body is broken: {exc}") from None
        self.left -= len(out)
        if self.left < 0 or self.inflate.unconsumed_tail:
            raise ValueError("the body decompresses to more than can be checked")
        return out


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
