"""The egress gateway's pure decisions (skill_executor/egress/rules.py) and its pins."""

from __future__ import annotations

import base64
import re
import tomllib
from pathlib import Path

from skill_executor.egress import rules

ROOT = Path(__file__).resolve().parent.parent.parent


def test_patterns_match_exact_names_and_one_label_wildcards() -> None:
    allow = ["api.github.com", "*.githubusercontent.com", "10.0.0.5"]
    assert rules.match_host("API.GitHub.com.", allow) == "api.github.com"
    assert rules.match_host("raw.githubusercontent.com", allow) == "*.githubusercontent.com"
    assert rules.match_host("githubusercontent.com", allow) is None
    assert rules.match_host("a.b.githubusercontent.com", allow) is None
    assert rules.match_host("evilgithubusercontent.com", allow) is None
    assert rules.match_host("10.0.0.5", allow) == "10.0.0.5"
    assert rules.match_host("10.0.0.6", allow) is None
    assert rules.match_host("127.0.0.1", ["*.0.0.1"]) is None  # a literal never matches a pattern
    assert not rules.valid_pattern("*.com") and not rules.valid_pattern("a b") and rules.valid_pattern("*.a.test")


def test_addresses_that_are_not_public_are_refused_unless_listed() -> None:
    for address in (
        "127.0.0.1",
        "::1",
        "169.254.169.254",
        "10.1.2.3",
        "192.168.0.1",
        "100.64.0.1",
        "::ffff:127.0.0.1",
        "0.0.0.0",
    ):
        assert rules.address_refusal(address, []) is not None, address
    assert rules.address_refusal("10.1.2.3", ["10.1.2.3"]) is None
    assert rules.address_refusal("93.184.216.34", []) is None
    assert "metadata" in (rules.address_refusal("169.254.169.254", []) or "")


def test_ipv6_addresses_carrying_an_ipv4_one_are_judged_by_it() -> None:
    """NAT64, IPv4-compatible, 6to4 and Teredo addresses reach the IPv4 address they carry where a
    translator runs: a metadata or loopback address inside one is refused like the address itself."""
    for address, carried in (
        ("64:ff9b::a9fe:a9fe", "169.254.169.254 is a cloud metadata address"),
        ("64:ff9b:1::7f00:1", "127.0.0.1 is a loopback address"),
        ("::7f00:1", "127.0.0.1 is a loopback address"),
        ("2002:a9fe:a9fe::1", "169.254.169.254 is a cloud metadata address"),
        ("2001:0:4136:e378:8000:63bf:f5ff:fffe", "10.0.0.1 is not a public address"),
    ):
        assert carried in (rules.address_refusal(address, []) or ""), address
    assert rules.address_refusal("64:ff9b::5db8:d822", []) is None  # 93.184.216.34, public
    assert rules.address_refusal("2606:4700::1111", []) is None


def test_proxy_credentials() -> None:
    header = "Basic " + base64.b64encode(b"run:tok-123").decode()
    assert rules.proxy_token(header) == "tok-123"
    assert (
        rules.proxy_token("Bearer x") is None
        and rules.proxy_token("Basic !!") is None
        and rules.proxy_token(None) is None
    )


def test_secrets_are_found_in_their_encoded_forms_and_scrubbed() -> None:
    value = "s3cr3t/+=value"
    forms = {"T": rules.secret_forms(value)}
    assert rules.find_secret(b"x=" + value.encode(), forms) == "T"
    assert rules.find_secret(b"q=s3cr3t%2f%2B%3Dvalue", forms) == "T"  # percent-encoding, any case
    assert (
        rules.find_secret(base64.b64encode(b"user:" + value.encode())[:0] + base64.b64encode(value.encode()), forms)
        == "T"
    )
    assert rules.find_secret(b"nothing here", forms) is None
    assert rules.scrub(f"/p/{value}", {"T": value}) == "/p/[secret:T]"
    assert rules.render("Bearer {secret:T}", {"T": "v"}) == "Bearer v" and rules.template_secrets(
        "{secret:A}{secret:B}"
    ) == ["A", "B"]


def test_the_egress_extra_and_its_lock_agree() -> None:
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["egress"]
    wanted = [
        line for line in (ROOT / "requirements/egress.in").read_text().splitlines() if line and not line.startswith("#")
    ]
    assert extra == wanted
    pinned = re.search(r"^mitmproxy==(\S+)", (ROOT / "requirements/egress-lock.txt").read_text(), re.M)
    assert pinned is not None


def test_networks_listed_as_such_let_their_addresses_through() -> None:
    allow = ["10.0.0.0/8", "fd00::/8", "api.example.test"]
    assert rules.valid_pattern("10.0.0.0/8") and rules.valid_pattern("fd00::/8")
    assert not rules.valid_pattern("10.0.0.1/8")  # host bits set: the policy refuses it too
    assert rules.match_host("10.1.2.3", allow) == "10.0.0.0/8"
    assert rules.match_host("[fd00::5]", allow) == "fd00::/8"
    assert rules.match_host("11.0.0.1", allow) is None
    assert rules.address_refusal("10.1.2.3", allow) is None
    assert rules.address_refusal("192.168.1.1", allow) is not None
    assert rules.address_refusal("::ffff:10.0.0.1", allow) is None  # judged as the IPv4 address it carries


def test_the_scan_finds_a_secret_however_a_script_would_copy_it() -> None:
    value = "ghs_Sc4n-me_0123456789abcdef"
    raw = value.encode()
    forms = {"T": rules.secret_forms(value)}
    found = [
        b"x=" + raw,
        b"".join(b"%%%02X" % c for c in raw),  # every byte encoded
        b"".join(b"%%%02x" % c if i % 2 else bytes([c]) for i, c in enumerate(raw)),  # a mix, lower case
        b"".join(b"%%25%02X" % c for c in raw),  # twice
        raw.hex().encode(),
        raw.hex().upper().encode(),
    ]
    for prefix in (b"", b"u", b"us", b"user:", b"Bearer "):  # base64 at every alignment, both alphabets
        found += [base64.b64encode(prefix + raw + b"!"), base64.urlsafe_b64encode(prefix + raw)]
    for data in found:
        assert rules.find_secret(data, forms) == "T", data
    for data in (raw[::-1], raw[:10], base64.b32encode(raw), b"nothing"):
        assert rules.find_secret(data, forms) is None, data
    assert rules.find_secret_in_name(value.lower() + ".wild.example.test", forms) == "T"
    assert rules.find_secret_in_name(raw.hex() + ".example.test", forms) == "T"
    assert rules.find_secret_in_name("api.example.test", forms) is None
    assert rules.overlap(forms) >= 5 * len(raw)  # a streamed body's window holds it encoded twice


def test_bodies_are_decoded_within_a_bound_or_refused() -> None:
    import gzip
    import zlib

    import pytest

    body = b"t=secret-value" * 10
    for coding, data in (("gzip", gzip.compress(body)), ("deflate", zlib.compress(body)), ("identity", body)):
        decoder = rules.BodyDecoder(coding, 10_000)
        assert decoder.feed(data[:7]) + decoder.feed(data[7:]) + decoder.feed(b"") == body
    with pytest.raises(ValueError, match="cannot be read"):
        rules.BodyDecoder("br", 10)
    with pytest.raises(ValueError, match="more than"):
        rules.BodyDecoder("gzip", 1000).feed(gzip.compress(b"\0" * 100_000))  # a bomb
    with pytest.raises(ValueError, match="broken"):
        rules.BodyDecoder("gzip", 1000).feed(b"not gzip at all")
