"""Skill references (``name``, ``name@3``, ``name@latest``, ``name@sha256:<hex>``): one strict parser,
fuzzed on its own and over every route, the CLI, runs, tool calls, contexts and MCP that take one.
A reference is parsed or refused with 400 and a stable code; never a 5xx."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from skill_executor.errors import BadRequest, NotFound
from skill_executor.registry import SkillRepository
from skill_executor.registry.refs import (
    InvalidSkillName,
    InvalidVersion,
    SkillRef,
    VersionRef,
    parse_ref,
    parse_version,
)
from skill_executor.registry.store import Registry

from ..api_server import Server
from ..conftest import REPO
from ..databases import open_database
from ..helpers import make_skill

#: What the brief's attacker sent, and what such an attacker tries next.
HOSTILE = [
    "pdf@²",
    "pdf@" + "9" * 400,
    "pdf@1.2.3.4.5",
    "pdf@",
    "@latest",
    "@",
    "x" * 10_000,
    "pdf@latest@1",
    "pdf@-1",
    "pdf@+1",
    "pdf@0",
    "pdf@007",
    "pdf@ 1",
    " pdf",
    "pdf ",
    "pdf\n",
    "pdf@1\n",
    "pdf@١",
    "pdf@𝟙",
    "pdf@sha256:",
    "pdf@sha256:" + "g" * 64,
    "pdf@sha256:" + "a" * 63,
    "pdf@sha256:" + "a" * 65,
    "pdf@SHA256:" + "a" * 64 + "\x00",
    "pdf@lat\u0435st",
    "pdf@\u212alatest",
    "ｐｄｆ",
    "pdf\x00",
    "..",
    ".",
    "-pdf",
    "p/df",
    "p%2Fdf",
    "pdf@%31",
    "%70df",
    "pdf@1e3",
    "pdf@0x1",
    "pdf@1_000",
    "pdf@" + "1" * 10,
    "a" * 129,
    "pdf@latest" + "\u200b",
    "\ud800",
    "pdf@\ud800",
    "",
]
ALPHABET = st.sampled_from(list("abcAZ09-_.@%/: \t\n\x00²١𝟙ｐ\u0435\u212a\u200b") + ["sha256:", "latest", "default"])
FUZZ = st.one_of(st.text(max_size=300), st.lists(ALPHABET, max_size=40).map("".join))
VALID_NAME = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", fullmatch=True)
VALID_VERSION = st.one_of(
    st.integers(1, 999_999_999).map(str),
    st.sampled_from(["latest", "default", "LATEST", "Default"]),
    st.from_regex(r"sha256:[0-9a-fA-F]{64}", fullmatch=True),
)
FUZZ_SETTINGS = settings(
    max_examples=300, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)


# -- the parser on its own ---------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("pdf", SkillRef("pdf")),
        ("PDF-Tools", SkillRef("PDF-Tools")),
        ("my_tool.v2", SkillRef("my_tool.v2")),
        ("pdf@3", SkillRef("pdf", VersionRef("number", number=3))),
        ("pdf@999999999", SkillRef("pdf", VersionRef("number", number=999_999_999))),
        ("pdf@LATEST", SkillRef("pdf", VersionRef("latest"))),
        ("pdf@default", SkillRef("pdf", VersionRef("default"))),
        ("pdf@sha256:" + "AB" * 32, SkillRef("pdf", VersionRef("digest", digest="sha256:" + "ab" * 32))),
    ],
)
def test_the_grammar(text: str, expected: SkillRef) -> None:
    parsed = parse_ref(text)
    assert parsed == expected
    assert parse_ref(str(parsed)) == parsed and parsed.key == expected.name.lower()


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_references_are_400_with_a_stable_code(text: str) -> None:
    with pytest.raises(BadRequest) as refused:
        parse_ref(text)
    assert refused.value.status == 400
    assert refused.value.code in ("invalid_skill_name", "invalid_version")
    assert len(refused.value.message) < 400  # a 10 000-character name is not echoed whole


def test_a_version_where_only_a_skill_is_meant_and_versions_given_as_numbers() -> None:
    with pytest.raises(InvalidVersion):
        parse_ref("pdf@3", versioned=False)
    assert parse_ref("pdf", versioned=False) == SkillRef("pdf")
    assert parse_version(7) == VersionRef("number", number=7)
    for bad in (0, -1, 10**9, 10**30, True, 1.0, None, [1], {"v": 1}):
        with pytest.raises(InvalidVersion):
            parse_version(bad)
    for bad_name in (None, 3, ["pdf"], b"pdf"):
        with pytest.raises(InvalidSkillName):
            parse_ref(bad_name)


@FUZZ_SETTINGS
@given(FUZZ)
@example("pdf@²")
@example("x" * 10_000)
def test_fuzz_the_parser_either_parses_and_round_trips_or_refuses(text: str) -> None:
    try:
        parsed = parse_ref(text)
    except (InvalidSkillName, InvalidVersion) as exc:
        assert exc.status == 400
        return
    assert text.isascii() and len(text) <= 200
    assert parse_ref(str(parsed)).key == parsed.key


@FUZZ_SETTINGS
@given(VALID_NAME, st.none() | VALID_VERSION)
def test_fuzz_every_reference_of_the_grammar_is_accepted(name: str, version: str | None) -> None:
    parsed = parse_ref(name if version is None else f"{name}@{version}")
    assert parsed.name == name and (parsed.version is None) == (version is None)


# -- the registry and the repository: the parser is their only way in -----------------------


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> SkillRepository:
    base = tmp_path_factory.mktemp("refs")
    make_skill(base / "skills", "pdf", "name: pdf\ndescription: A skill to look up.")
    database = open_database("sqlite", base)
    return SkillRepository(
        [base / "skills"], refresh_interval=0, registry=Registry(base / "registry", database=database)
    )


@FUZZ_SETTINGS
@given(FUZZ)
def test_fuzz_lookups_answer_a_skill_400_or_404(repository: SkillRepository, text: str) -> None:
    for lookup in (
        lambda: repository.get(text),
        lambda: repository.get("pdf@" + text),
        lambda: repository.found(text),
        lambda: repository.registry.version("pdf", text),
    ):  # type: ignore[union-attr]
        try:
            lookup()
        except (BadRequest, NotFound) as exc:
            assert exc.status in (400, 404) and exc.code in (
                "invalid_skill_name",
                "invalid_version",
                "skill_not_found",
                "version_not_found",
            )


# -- every way in, on a real server ----------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(tmp_path_factory.mktemp("refs-api"), env={"SKILL_EXECUTOR_RUNTIME": "local"})
    srv.start()
    yield srv
    srv.stop()


def _json(body: object) -> dict[str, Any]:
    """A JSON body as ``json.dumps`` writes it (ASCII, escapes kept: a lone surrogate arrives as written)."""
    return {"content": json.dumps(body).encode(), "headers": {"Content-Type": "application/json"}}


def _routes(url: str, ref: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(method, url, httpx keywords) of every request that takes ``ref`` as a skill or a version."""
    name, version = quote(ref, safe="", errors="surrogatepass"), quote(ref, safe="", errors="surrogatepass")
    pinned = quote(f"math-tools@{ref}", safe="", errors="surrogatepass")
    tool = {"name": "skill_load", "arguments": {"skill": ref}}
    return [
        ("GET", f"{url}/v1/skills/{name}", {}),
        ("GET", f"{url}/v1/skills/{pinned}", {}),
        ("GET", f"{url}/v1/skills/{name}/docs", {}),
        ("GET", f"{url}/v1/skills/{pinned}/docs?names=x.md", {}),
        ("GET", f"{url}/v1/skills/{name}/files/SKILL.md", {}),
        ("GET", f"{url}/v1/skills/{pinned}/files/SKILL.md", {}),
        ("GET", f"{url}/v1/skills/{name}/doctor", {}),
        ("GET", f"{url}/v1/skills/{name}/versions", {}),
        ("GET", f"{url}/v1/skills/math-tools/versions/{version}", {}),
        ("GET", f"{url}/v1/skills/math-tools/versions/{version}/content", {}),
        ("GET", f"{url}/v1/skills/{name}/versions/latest", {}),
        ("GET", f"{url}/v1/skills/{name}/audit", {}),
        ("PATCH", f"{url}/v1/skills/{name}", _json({"default_version": 1})),
        ("PATCH", f"{url}/v1/skills/math-tools", _json({"default_version": ref})),
        ("DELETE", f"{url}/v1/skills/math-tools/versions/{version}", {}),
        ("DELETE", f"{url}/v1/skills/{name}/versions/1", {}),
        ("DELETE", f"{url}/v1/skills/{name}", {}),
        ("POST", f"{url}/v1/skills/{name}/versions", {"content": b"PK\x05\x06" + bytes(18)}),
        ("POST", f"{url}/v1/runs", _json({"skill": ref[:256], "command": "true"})),
        ("POST", f"{url}/v1/runs", _json({"skill": f"nope@{ref}"[:256], "command": "true"})),
        (
            "POST",
            f"{url}/v1/runs",
            _json({"skill": "math-tools", "command": "true", "inputs": [{"from": f"skill://{ref}/SKILL.md"}]}),
        ),
        ("POST", f"{url}/v1/tools/call", _json(tool)),
        (
            "POST",
            f"{url}/v1/tools/call",
            _json({"name": "skill_run", "arguments": {"skill": f"nope@{ref}", "command": "true"}}),
        ),
        ("POST", f"{url}/v1/sessions/fuzz/context/load", _json({"skill": ref})),
        ("POST", f"{url}/v1/sessions/fuzz/context/load", _json({"skill": f"math-tools@{ref}"})),
    ]


def _check(http: httpx.Client, url: str, ref: str) -> None:
    for method, target, kwargs in _routes(url, ref):
        answer = http.request(method, target, **kwargs)
        where = f"{method} {target[:160]} -> {answer.status_code} {answer.text[:300]}"
        assert answer.status_code < 500, where
        if answer.status_code >= 400:
            assert answer.json()["error"]["code"], where  # the error shape, with a stable code
        elif target.endswith("/v1/tools/call"):  # a refused tool call is a tool error the model reads
            body = answer.json()
            assert body["is_error"] and body["data"]["error"]["code"] in (
                "invalid_skill_name",
                "invalid_version",
                "skill_not_found",
                "version_not_found",
                "invalid_arguments",
            ), where


@pytest.mark.parametrize("ref", HOSTILE)
def test_hostile_references_on_every_route(server: Server, ref: str) -> None:
    with httpx.Client(timeout=60) as http:
        _check(http, server.url, ref)
        if ref in ("pdf@²", "x" * 10_000, "pdf@" + "9" * 400, "pdf@1.2.3.4.5"):  # the codes, exactly
            answer = http.get(f"{server.url}/v1/skills/{quote(ref, safe='', errors='surrogatepass')}")
            code = "invalid_skill_name" if ref.startswith("x") else "invalid_version"
            assert (answer.status_code, answer.json()["error"]["code"]) == (400, code)


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(FUZZ)
def test_fuzz_every_route(server: Server, ref: str) -> None:
    with httpx.Client(timeout=60) as http:
        _check(http, server.url, ref)


def test_patch_takes_a_version_number_or_text_and_nothing_else(server: Server) -> None:
    answers: list[tuple[object, int, str]] = [  # a list: True == 1 and False == 0 as dict keys
        (True, 422, "invalid_request"),
        (False, 422, "invalid_request"),
        (None, 422, "invalid_request"),
        (1.5, 422, "invalid_request"),
        ("[1]", 400, "invalid_version"),
        (0, 400, "invalid_version"),
        (-1, 400, "invalid_version"),
        (10**30, 400, "invalid_version"),
        ("9" * 400, 400, "invalid_version"),
        ("²", 400, "invalid_version"),
        (" 1", 400, "invalid_version"),
        ("1.0", 400, "invalid_version"),
    ]
    with httpx.Client(timeout=60) as http:
        for value, status, code in answers:
            answer = http.patch(f"{server.url}/v1/skills/math-tools", **_json({"default_version": value}))
            assert (answer.status_code, answer.json()["error"]["code"]) == (status, code), value
        for sent in (1, "1", "LATEST"):
            assert (
                http.patch(f"{server.url}/v1/skills/math-tools", **_json({"default_version": sent})).status_code == 200
            )


def test_percent_encoded_surprises(server: Server) -> None:
    """Raw request targets: what the router decodes is what the parser sees, and it is strict."""
    cases = {
        "math-tools%40latest": 200,  # %40 is '@': a pinned reference, decoded once
        "math-tools%401": 200,
        "math-tools%2540latest": 400,  # decoded once: 'math-tools%40latest' is no name
        "math-tools%40%C2%B2": 400,  # '@²'
        "math-tools%40%FF": 400,  # not UTF-8
        "%00": 400,
        "math-tools%00": 400,
        "math%2Dtools": 200,  # '-' percent-encoded is still '-'
        "%2E%2E": 400,
    }
    with httpx.Client(timeout=60) as http:
        for raw, status in cases.items():
            answer = http.get(httpx.URL(f"{server.url}/v1/skills/{raw}"))
            assert answer.status_code == status, (raw, answer.text)
            if status == 400:
                assert answer.json()["error"]["code"] in ("invalid_skill_name", "invalid_version"), raw
        pinned = http.get(f"{server.url}/v1/skills/math-tools%40latest").json()
        assert pinned["id"] == "math-tools" and pinned["version"] == 1


def test_the_cli_refuses_a_malformed_reference_as_a_usage_error(server: Server, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILL_EXECUTOR_")}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "skill_executor.cli.main", "skills", *args],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    for args in (
        ("pull", "math-tools@²", str(tmp_path / "a")),
        ("pull", "x" * 10_000, str(tmp_path / "b")),
        ("pin", "math-tools", "²"),
        ("pin", "math-tools", "9" * 400),
        ("pin", "math-tools@1", "1"),
        ("versions", "math-tools@1"),
        ("versions", " math-tools"),
    ):
        answer = cli(*args, "--server", server.url)
        assert answer.returncode == 2, (args[:2], answer.stderr)
        assert "invalid_version" in answer.stderr or "invalid_skill_name" in answer.stderr
        assert "Traceback" not in answer.stderr
    shown = cli("show", "math-tools@1.2", "--root", str(server.skills_dir))
    assert shown.returncode == 2 and "invalid_version" in shown.stderr
    pulled = cli("pull", "math-tools@LATEST", str(tmp_path / "ok"), "--server", server.url)
    assert pulled.returncode == 0, pulled.stderr
    assert json.loads(pulled.stdout)["version"] == 1 and (tmp_path / "ok" / "SKILL.md").exists()


def test_mcp_refuses_malformed_references_as_invalid_params(server: Server) -> None:
    from mcp.shared.exceptions import MCPError

    from ..service.test_mcp import http_client, raw

    async def main() -> None:
        async with http_client(server) as client:
            for ref in ("math-tools@²", "math-tools@" + "9" * 400, "x" * 10_000, "math-tools@1.2.3"):
                with pytest.raises(MCPError) as caught:
                    await raw(client, "skills/get", {"uri": f"skill://{ref}/SKILL.md"})
                assert caught.value.error.code == -32602
                assert "invalid_" in caught.value.error.message
                with pytest.raises(MCPError) as caught:
                    await client.read_resource(f"skill://{ref}/SKILL.md")
                assert caught.value.error.code == -32602
                called = await client.call_tool("skill_load", {"skill": ref})
                assert called.is_error
                with pytest.raises(MCPError) as caught:  # refused with the parser's message (the prompt
                    await client.get_prompt(ref)  # handler does not map it to -32602 yet: MCP's own code)
                assert caught.value.error.message.startswith(("invalid version", "invalid skill name"))

    anyio.run(main)
