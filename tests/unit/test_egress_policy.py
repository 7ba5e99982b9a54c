"""The policy's egress side (skill_executor/policy/egress.py, network.py, secretsfile.py),
pure: a rule's ``egress`` block and the secrets file checked at start with the exact problem;
which rule's egress a run gets and how a request narrows it; the gateway's grant with its
placeholders; no secret value in any repr, message or log line."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from skill_executor.config import Settings
from skill_executor.errorcodes import CATALOGUE
from skill_executor.errors import ExecutorError
from skill_executor.policy import (
    HostError,
    NetworkNotAllowed,
    PolicyError,
    Secrets,
    SecretsError,
    network_plan,
    parse_host,
    parse_policy,
    parse_secrets,
    policy_of,
)
from skill_executor.policy.egress import RUN_ENV, reserved_variable
from skill_executor.policy.network import PLACEHOLDER_PREFIX, egress_unavailable
from skill_executor.runs.models import RunRequest
from skill_executor.runs.plan import FORBIDDEN_ENV, RESERVED_ENV

TOKEN = "ghp_s3cr3t-VALUE-never-shown-0123456789"
PYPI = "pypi-token-value-abcdefgh"
SECRETS = Secrets({"GITHUB_TOKEN": TOKEN, "PYPI_TOKEN": PYPI}, "/etc/secrets.yaml")

POLICY_TEXT = """
rules:
  - name: gh
    key: "*"
    skill: gh-tools
    egress:
      allow: [api.github.com, "*.githubusercontent.com", 10.1.2.3, 10.8.0.0/16, uploads.github.com]
      inject:
        - host: api.github.com
          header: Authorization
          value: "Bearer {secret:GITHUB_TOKEN}"
        - host: uploads.github.com
          header: X-Both
          value: "{secret:GITHUB_TOKEN}:{secret:PYPI_TOKEN}"
      methods: [GET, POST]
      max_response_bytes: 1000
      max_requests: 10
  - name: plain
    key: "*"
    skill: "*"
    deny: [curl]
"""


def policy(text: str = POLICY_TEXT, secrets: Secrets | None = SECRETS) -> object:
    return parse_policy(text, "/etc/policy.yaml", secrets=secrets)


def problem(egress: str, secrets: Secrets | None = SECRETS) -> str:
    text = f"rules:\n  - name: r\n    skill: s\n    egress:\n{egress}"
    with pytest.raises(PolicyError) as caught:
        parse_policy(text, "/etc/policy.yaml", secrets=secrets)
    assert caught.value.code == "invalid_policy_file"
    return caught.value.message


# -- host names ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "kind", "text"),
    [
        ("api.github.com", "name", "api.github.com"),
        ("API.GitHub.com", "name", "api.github.com"),
        ("*.githubusercontent.com", "wildcard", "*.githubusercontent.com"),
        ("localhost", "name", "localhost"),
        ("10.0.0.5", "address", "10.0.0.5"),
        ("fd00::1", "address", "fd00::1"),
        ("[fd00:0::1]", "address", "fd00::1"),
        ("10.0.0.0/8", "network", "10.0.0.0/8"),
        ("10.0.0.7/32", "address", "10.0.0.7"),
        ("fd00::/8", "network", "fd00::/8"),
    ],
)
def test_hosts_are_names_one_label_wildcards_or_addresses_written_as_such(written: str, kind: str, text: str) -> None:
    parsed = parse_host(written)
    assert (parsed.kind, parsed.text) == (kind, text)


@pytest.mark.parametrize(
    ("written", "message"),
    [
        ("*", "'*' would allow every host: name the hosts (a wildcard covers one label: '*.example.com')"),
        ("*.com", "'*.com' would allow a whole top-level domain: name one below it ('*.example.com')"),
        ("a.*.com", "'a.*.com': a wildcard is '*.' before a name, and stands for one label ('*.example.com')"),
        (
            "*x.example.com",
            "'*x.example.com': a wildcard is '*.' before a name, and stands for one label ('*.example.com')",
        ),
        (
            "**.example.com",
            "'**.example.com': a wildcard is '*.' before a name, and stands for one label ('*.example.com')",
        ),
        ("api.github.com:443", "'api.github.com:443' names a port: list ports in the rule's 'ports'"),
        ("api.github.com.", "'api.github.com.' ends with a dot (write 'api.github.com')"),
        ("a..b", "'a..b' has an empty label"),
        (
            "-a.example.com",
            "'-a.example.com': the label '-a' is not a host name's (letters, digits and inner hyphens, at most 63 characters)",
        ),
        (
            "a_b.example.com",
            "'a_b.example.com': the label 'a_b' is not a host name's (letters, digits and inner hyphens, at most 63 characters)",
        ),
        ("127.1", "'127.1' ends with a number, which is read as an address (write one as 1.2.3.4)"),
        ("2130706433", "'2130706433' ends with a number, which is read as an address (write one as 1.2.3.4)"),
        ("a.0x7f", "'a.0x7f' ends with a number, which is read as an address (write one as 1.2.3.4)"),
        ("10.0.0.1/8", "'10.0.0.1/8' has host bits set (write '10.0.0.0/8')"),
        ("10.0.0.0/33", "'10.0.0.0/33' is not a network (write one as 10.0.0.0/8 or fd00::/8)"),
        ("bücher.example", "'bücher.example' is not ASCII (write its ASCII form 'xn--bcher-kva.example')"),
        (" a.com", "' a.com' holds white space"),
        ("", "a host is a non-empty name"),
        ("a:b:c:zz", "'a:b:c:zz' is neither a host name nor an address"),
    ],
)
def test_a_malformed_host_is_refused_with_its_exact_problem(written: str, message: str) -> None:
    with pytest.raises(HostError) as caught:
        parse_host(written)
    assert str(caught.value) == message


def test_a_wildcard_matches_one_label_and_names_never_match_addresses() -> None:
    wild = parse_host("*.githubusercontent.com")
    assert wild.matches("raw.githubusercontent.com")
    assert wild.matches("RAW.githubusercontent.com.")
    assert not wild.matches("githubusercontent.com")
    assert not wild.matches("a.b.githubusercontent.com")
    assert not wild.matches("evilgithubusercontent.com")
    name = parse_host("localhost")
    assert name.matches("localhost") and not name.matches("127.0.0.1")
    net = parse_host("10.8.0.0/16")
    assert net.matches("10.8.1.2") and not net.matches("10.9.0.1") and not net.matches("a.10.8.0.0")
    assert parse_host("fd00::1").matches("[fd00::1]")
    # what a URL parser reads as an address is never matched by a name
    assert not parse_host("*.example.com").matches("1.2.3.4") and not parse_host("*.example.com").matches("127.1")


# -- the rule's egress block, checked at start ------------------------------------------------


def test_a_good_egress_block_is_loaded_and_normalised() -> None:
    loaded = parse_policy(
        "rules:\n  - skill: s\n    egress:\n      allow: [API.Example.com]\n"
        "      inject: [{host: api.example.COM, header: X-K, value: '{secret:GITHUB_TOKEN}'}]\n",
        secrets=SECRETS,
    )
    egress = loaded.rules[0].egress
    assert egress is not None
    assert egress.allow == ["api.example.com"] and egress.inject[0].host == "api.example.com"
    assert loaded.secrets is SECRETS


@pytest.mark.parametrize(
    ("egress", "message"),
    [
        ("      allow: ['*']\n", "rules.0.egress.allow.0: '*' would allow every host"),
        ("      allow: [a.com, 'b.com:8443']\n", "rules.0.egress.allow.1: 'b.com:8443' names a port"),
        (
            "      allow: []\n",
            "rules.0.egress.allow: empty: the rule allows no host (leave 'egress' out for no network, or ask: true)",
        ),
        ("      allow: [a.com]\n      alow: [b.com]\n", "rules.0.egress.alow: Extra inputs are not permitted"),
        (
            "      allow: [a.com]\n      methods: [get]\n",
            "rules.0.egress.methods.0: 'get' is not an HTTP method (write 'GET')",
        ),
        ("      allow: [a.com]\n      methods: ['GE T']\n", "rules.0.egress.methods.0: 'GE T' is not an HTTP method"),
        ("      allow: [a.com]\n      ports: [0]\n", "rules.0.egress.ports.0: 0 is not a port (1 to 65535)"),
        (
            "      allow: [a.com]\n      max_response_bytes: 0\n",
            "rules.0.egress.max_response_bytes: Input should be greater than 0",
        ),
        (
            "      allow: [a.com]\n      inject: [{host: b.com, header: X, value: v}]\n",
            "rules.0.egress.inject.0.host: 'b.com' is not in the rule's egress.allow",
        ),
        (
            "      allow: ['*.a.com']\n      inject: [{host: '*.a.com', header: X, value: v}]\n",
            "rules.0.egress.inject.0.host: '*.a.com' is not one host: a header goes to a host named",
        ),
        (
            "      allow: [a.com]\n      inject: [{host: a.com, header: Host, value: v}]\n",
            "rules.0.egress.inject.0.header: 'Host' cannot be injected (it frames or routes requests)",
        ),
        (
            "      allow: [a.com]\n      inject: [{host: a.com, header: 'X Y', value: v}]\n",
            "rules.0.egress.inject.0.header: 'X Y' is not a header name",
        ),
        (
            '      allow: [a.com]\n      inject: [{host: a.com, header: X, value: "a\\nb"}]\n',
            "rules.0.egress.inject.0.value: holds a line break or a NUL, which no header value may",
        ),
        (
            "      allow: [a.com]\n      inject: [{host: a.com, header: X, value: '{secret:MISSING}'}]\n",
            "rules.0.egress.inject.0.value: {secret:MISSING}: no secret 'MISSING' in the secrets file",
        ),
        (
            "      allow: [a.com]\n      inject: [{host: a.com, header: X, value: '{secret:my-token}'}]\n",
            "rules.0.egress.inject.0.value: {secret:my-token}: a secret's name is a variable name (A-Z, a-z, 0-9, _)",
        ),
        (
            "      allow: [a.com]\n      inject: [{host: a.com, header: X, value: '{secret:HTTPS_PROXY}'}]\n",
            "rules.0.egress.inject.0.value: {secret:HTTPS_PROXY}: HTTPS_PROXY is a variable the run has of its own: rename it",
        ),
    ],
)
def test_a_bad_egress_block_stops_the_start_with_its_exact_problem(egress: str, message: str) -> None:
    assert problem(egress).startswith(f"policy file /etc/policy.yaml: {message}")


def test_a_secret_named_without_a_secrets_file_stops_the_start() -> None:
    egress = "      allow: [a.com]\n      inject: [{host: a.com, header: X, value: 'Bearer {secret:GITHUB_TOKEN}'}]\n"
    assert problem(egress, secrets=None) == (
        "policy file /etc/policy.yaml: rules.0.egress.inject.0.value: {secret:GITHUB_TOKEN}: "
        "no secrets file (SKILL_EXECUTOR_SECRETS_FILE is not set)"
    )


def test_a_secret_is_never_named_like_a_variable_the_run_has() -> None:
    assert RESERVED_ENV <= RUN_ENV
    assert all(reserved_variable(n) for n in [*RESERVED_ENV, *FORBIDDEN_ENV, "PATH", "LD_PRELOAD", "SSL_CERT_FILE"])
    assert not reserved_variable("GITHUB_TOKEN")


# -- the secrets file -------------------------------------------------------------------------


def test_the_secrets_file_holds_values_env_and_file_references(tmp_path: Path) -> None:
    (tmp_path / "pypi").write_text(PYPI + "\n")
    secrets = parse_secrets(
        f"GITHUB_TOKEN: {TOKEN}\nFROM_ENV: env:MY_TOKEN\nFROM_FILE: file:{tmp_path / 'pypi'}\n"
        "LITERAL: {value: 'env:literally-this'}\nMAPPED: {env: MY_TOKEN}\n",
        "s.yaml",
        environ={"MY_TOKEN": "value-from-the-environment"},
    )
    assert secrets.names == {"GITHUB_TOKEN", "FROM_ENV", "FROM_FILE", "LITERAL", "MAPPED"}
    assert secrets.value("GITHUB_TOKEN") == TOKEN
    assert secrets.value("FROM_ENV") == secrets.value("MAPPED") == "value-from-the-environment"
    assert secrets.value("FROM_FILE") == PYPI  # one trailing new line dropped
    assert secrets.value("LITERAL") == "env:literally-this"
    assert parse_secrets("", "s.yaml").names == frozenset()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "A: env:NOT_SET_ANYWHERE\n",
            "secrets file s.yaml: A: env:NOT_SET_ANYWHERE is not set in the service's environment",
        ),
        ("A: file:relative/path\n", "secrets file s.yaml: A: file:relative/path is not an absolute path"),
        (
            "A: file:/nonexistent/secret\n",
            "secrets file s.yaml: A: file:/nonexistent/secret cannot be read: No such file or directory",
        ),
        ("A: ''\n", "secrets file s.yaml: A: empty"),
        ("A:\n", "secrets file s.yaml: A: empty"),
        ("A: 12345678901\n", "secrets file s.yaml: A: not a string (quote it)"),
        ("A: [x]\n", "secrets file s.yaml: A: a list"),
        (
            "A: short\n",
            "secrets file s.yaml: A: shorter than 8 characters (it could not be told apart in other requests)",
        ),
        ("A: {value: x, env: Y}\n", "secrets file s.yaml: A: a mapping holds one of value, env or file"),
        (
            "A: abcdefghijk\nmy-token: abcdefghijk\n",
            "secrets file s.yaml: entry 2: its name is not a secret's name (a variable name: A-Z, a-z, 0-9, _)",
        ),
        ("- a\n", "secrets file s.yaml: expected a mapping of names to values, got list"),
        ('A: "abcdefgh\\nijkl"\n', "secrets file s.yaml: A: holds a line break or a NUL, which no header value may"),
    ],
)
def test_a_bad_secrets_file_stops_the_start_with_its_exact_problem(text: str, message: str) -> None:
    with pytest.raises(SecretsError) as caught:
        parse_secrets(text, "s.yaml", environ={})
    assert caught.value.code == "invalid_secrets_file"
    assert CATALOGUE["invalid_secrets_file"].status == caught.value.status == 500
    assert caught.value.message == message


def test_a_secrets_file_error_never_shows_a_value() -> None:
    for text in (
        f"A: {TOKEN}\nB: [unclosed {TOKEN}\n",  # invalid YAML: no snippet of the line
        f"A: {TOKEN}\n  B: {TOKEN}\n",
        f"A: '{TOKEN}\n",
        f"A: {{value: {TOKEN}, env: X}}\n",
        f"{TOKEN}: 1\n",
        f"A: [{TOKEN}]\n",
    ):
        with pytest.raises(SecretsError) as caught:
            parse_secrets(text, "s.yaml", environ={})
        assert TOKEN not in caught.value.message and TOKEN not in str(caught.value.to_dict()), text
    with pytest.raises(SecretsError) as caught:
        parse_secrets(f"A: {TOKEN}\nB: [x\n", "s.yaml")
    assert re.fullmatch(r"secrets file s\.yaml: not valid YAML at line \d+, column \d+", caught.value.message)


def test_settings_name_the_secrets_file_and_a_policy_needs_its_secrets(tmp_path: Path) -> None:
    (tmp_path / "secrets.yaml").write_text(f"GITHUB_TOKEN: {TOKEN}\n")
    (tmp_path / "policy.yaml").write_text(
        "rules:\n  - skill: s\n    egress:\n      allow: [a.com]\n"
        "      inject: [{host: a.com, header: X, value: '{secret:GITHUB_TOKEN}'}]\n"
    )
    assert "secrets" in (Settings.model_fields["secrets_file"].description or "")
    assert Settings(policy_file=None).secrets_file is None
    loaded = policy_of(Settings(policy_file=tmp_path / "policy.yaml", secrets_file=tmp_path / "secrets.yaml"))
    assert loaded is not None and loaded.secrets is not None and loaded.secrets.value("GITHUB_TOKEN") == TOKEN
    with pytest.raises(PolicyError, match=r"no secrets file \(SKILL_EXECUTOR_SECRETS_FILE is not set\)"):
        policy_of(Settings(policy_file=tmp_path / "policy.yaml"))
    with pytest.raises(SecretsError, match="cannot be read: No such file or directory"):
        policy_of(Settings(policy_file=tmp_path / "policy.yaml", secrets_file=tmp_path / "none.yaml"))


# -- the run's network ------------------------------------------------------------------------


def test_the_first_matching_rule_decides_the_network() -> None:
    loaded = policy()
    plan = network_plan(loaded, "key1", "GH-Tools")  # type: ignore[arg-type]
    assert plan is not None and plan.rule == "gh" and not plan.narrowed
    assert [p.text for p in plan.allow] == [
        "api.github.com", "*.githubusercontent.com", "10.1.2.3", "10.8.0.0/16", "uploads.github.com"
    ]  # fmt: skip
    assert network_plan(loaded, "key1", "other") is None  # type: ignore[arg-type]  # rule 'plain': no egress
    assert network_plan(None, "key1", "gh-tools") is None
    # an inline bundle named gh-tools does not get the installed skill's rule
    assert network_plan(loaded, "key1", "gh-tools", bundled=True) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("asked", "allowed"),
    [
        (["api.github.com"], ["api.github.com"]),
        (["API.github.com"], ["api.github.com"]),
        (["raw.githubusercontent.com"], ["raw.githubusercontent.com"]),
        (["*.githubusercontent.com"], ["*.githubusercontent.com"]),
        (["10.1.2.3", "10.8.4.0/24", "10.8.0.9"], ["10.1.2.3", "10.8.4.0/24", "10.8.0.9"]),
        (["api.github.com", "api.github.com"], ["api.github.com"]),
    ],
)
def test_a_request_may_narrow_its_rule(asked: list[str], allowed: list[str]) -> None:
    plan = network_plan(policy(), "key1", "gh-tools", asked)  # type: ignore[arg-type]
    assert plan is not None and plan.narrowed and [p.text for p in plan.allow] == allowed


@pytest.mark.parametrize(
    ("asked", "host"),
    [
        (["evil.example"], "evil.example"),
        (["api.github.com", "github.com"], "github.com"),
        (["githubusercontent.com"], "githubusercontent.com"),
        (["a.b.githubusercontent.com"], "a.b.githubusercontent.com"),
        (["*.github.com"], "*.github.com"),
        (["10.1.2.4"], "10.1.2.4"),
        (["10.0.0.0/8"], "10.0.0.0/8"),
        (["169.254.169.254"], "169.254.169.254"),
    ],
)
def test_a_request_never_widens_its_rule(asked: list[str], host: str) -> None:
    with pytest.raises(NetworkNotAllowed) as caught:
        network_plan(policy(), "key1", "gh-tools", asked)  # type: ignore[arg-type]
    assert caught.value.status == CATALOGUE["network_not_allowed"].status == 422
    assert caught.value.message == (
        f"network.allow: {host!r} is not allowed by policy rule 'gh': a run may ask for less than its rule "
        "allows, never more"
    )
    assert caught.value.details == {"rule": "gh", "host": host}


def test_network_where_no_egress_rule_applies_is_refused() -> None:
    with pytest.raises(NetworkNotAllowed) as caught:
        network_plan(policy(), "key1", "other", ["api.github.com"])  # type: ignore[arg-type]
    assert caught.value.message == (
        "this run cannot have network: policy rule 'plain' has no egress; a run of skill 'other' has none "
        "(leave 'network' out)"
    )
    with pytest.raises(NetworkNotAllowed, match="no policy rule gives it network access"):
        network_plan(None, "key1", "other", [])


def test_asking_for_nothing_is_no_network_and_narrowing_keeps_only_its_hosts_injections() -> None:
    assert network_plan(policy(), "key1", "gh-tools", []) is None  # type: ignore[arg-type]
    plan = network_plan(policy(), "key1", "gh-tools", ["raw.githubusercontent.com"])  # type: ignore[arg-type]
    assert plan is not None and plan.injections == () and plan.secret_names == ()
    plan = network_plan(policy(), "key1", "gh-tools", ["api.github.com"])  # type: ignore[arg-type]
    assert plan is not None and plan.secret_names == ("GITHUB_TOKEN",)


def test_the_wire_model_checks_the_hosts_a_request_names() -> None:
    request = RunRequest.model_validate({"skill": "s", "command": "true", "network": {"allow": ["API.x.com"]}})
    assert request.network is not None and request.network.allow == ["API.x.com"]
    with pytest.raises(ValueError, match=r"'\*' would allow every host"):
        RunRequest.model_validate({"skill": "s", "command": "true", "network": {"allow": ["*"]}})
    with pytest.raises(ValueError, match="Extra inputs are not permitted"):
        RunRequest.model_validate({"skill": "s", "command": "true", "network": {"allow": [], "deny": []}})


# -- the grant and its placeholders -----------------------------------------------------------


def grant(run_id: str = "run-1") -> object:
    plan = network_plan(policy(), "key1", "gh-tools")  # type: ignore[arg-type]
    assert plan is not None
    return plan.grant(run_id, SECRETS)


def test_the_grant_resolves_injections_for_their_host_only() -> None:
    g = grant()
    assert g.rule == "gh" and g.methods == ("GET", "POST") and g.ports == (443, 80)  # type: ignore[attr-defined]
    assert g.max_response_bytes == 1000 and g.max_requests == 10 and g.max_connections == 32  # type: ignore[attr-defined]
    assert g.injected("api.github.com") == [("Authorization", f"Bearer {TOKEN}")]  # type: ignore[attr-defined]
    assert g.injected("uploads.github.com") == [("X-Both", f"{TOKEN}:{PYPI}")]  # type: ignore[attr-defined]
    assert g.injected("raw.githubusercontent.com") == []  # type: ignore[attr-defined]
    placeholders = g.placeholders  # type: ignore[attr-defined]
    assert g.replacements("API.github.com") == {placeholders["GITHUB_TOKEN"]: TOKEN}  # type: ignore[attr-defined]
    assert g.replacements("raw.githubusercontent.com") == {}  # type: ignore[attr-defined]
    assert sorted(g.foreign_values("raw.githubusercontent.com")) == sorted([TOKEN, PYPI])  # type: ignore[attr-defined]
    assert g.foreign_values("api.github.com") == [PYPI]  # type: ignore[attr-defined]
    assert g.allowed("x.githubusercontent.com").text == "*.githubusercontent.com"  # type: ignore[attr-defined]
    assert g.allowed("127.0.0.1") is None and g.allowed("github.com") is None  # type: ignore[attr-defined]


def test_placeholders_are_random_distinct_per_run_and_never_the_secret() -> None:
    first, second = grant("run-1"), grant("run-2")
    a, b = first.placeholders, second.placeholders  # type: ignore[attr-defined]
    assert set(a) == set(b) == {"GITHUB_TOKEN", "PYPI_TOKEN"}
    assert first.env == a  # type: ignore[attr-defined]  # the run's variables are named like the secrets
    for name in a:
        assert re.fullmatch(PLACEHOLDER_PREFIX + "[0-9a-f]{32}", a[name])
        assert a[name] != b[name]
        assert SECRETS.value(name) not in a[name] and a[name] not in SECRETS.value(name)
    assert a["GITHUB_TOKEN"] != a["PYPI_TOKEN"]
    assert first.token != second.token  # type: ignore[attr-defined]


def test_no_secret_value_in_any_repr_str_description_or_log(caplog: pytest.LogCaptureFixture) -> None:
    g = grant()
    plan = network_plan(policy(), "key1", "gh-tools")  # type: ignore[arg-type]
    shown = [
        repr(SECRETS),
        str(SECRETS),
        repr(g),
        str(g),
        str(g.describe()),
        repr(g.headers),
        repr(plan),
        repr(policy()),
    ]  # type: ignore[attr-defined]
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("test").info("grant %s %r plan %s secrets %s", g, g, plan, SECRETS)
    shown.append(caplog.text)
    for text in shown:
        assert TOKEN not in text and PYPI not in text
        assert g.token not in text  # type: ignore[attr-defined]
    assert "GITHUB_TOKEN" in repr(SECRETS) and "GITHUB_TOKEN" in repr(g)
    with pytest.raises(TypeError, match="not serialised"):
        import pickle

        pickle.dumps(SECRETS)


def test_an_egress_rule_without_a_gateway_is_refused_with_a_stable_code() -> None:
    error = egress_unavailable("gh")
    assert isinstance(error, ExecutorError)
    assert (error.code, error.status) == ("egress_unavailable", CATALOGUE["egress_unavailable"].status)
    assert error.status == 503 and error.details == {"rule": "gh"}
