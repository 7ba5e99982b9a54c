"""Agent context through the real service: REST (/v1/sessions/{session}/context), the
client, ``/v1/tools/call`` and MCP over HTTP; two API keys never see each other's
contexts; a context survives a restart.  The local runtime: no run is needed here."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from skill_executor_client import AsyncClient, Client

from ..api_server import Server
from ..service.test_api import expect_error
from ..service.test_api_tenancy import ADMIN, KEY_A, KEY_B, A, audit_lines
from ..unit.test_context import FIXTURES, GOLDEN
from ..service.test_mcp import http_client, stdio_client

SESSION = "chat-7"


def _server(base: Path) -> Server:
    skills = base / "skills"
    if not skills.exists():
        shutil.copytree(FIXTURES / "skills", skills)
    return Server(
        base,
        env={
            "SKILL_EXECUTOR_API_KEYS": f"{KEY_A},{KEY_B}",
            "SKILL_EXECUTOR_ADMIN_KEYS": ADMIN,
            "SKILL_EXECUTOR_RUNTIME": "local",
            "SKILL_EXECUTOR_POOL_SIZE": "0",
        },
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = _server(tmp_path_factory.mktemp("context-api")).start()
    yield srv
    srv.stop()


@pytest.fixture
def clients(server: Server) -> Iterator[tuple[Client, Client]]:
    with Client(server.url, api_key=KEY_A) as a, Client(server.url, api_key=KEY_B) as b:
        yield a, b


def as_docker(server: Server, text: str) -> str:
    """The local runtime shows host paths (a loaded skill's: its immutable version folder);
    the goldens show the Docker runtime's."""
    versions = re.escape(str((server.data_dir / "registry" / "versions").resolve()))
    text = re.sub(versions + r"/([^/]+)/\d+/\1", r"/workspace/skills/\1", text)
    return text.replace(str(server.skills_dir.resolve()), "/workspace/skills")


def test_rest_round_trip_matches_the_library_goldens(server: Server, clients: tuple[Client, Client]) -> None:
    a, _ = clients
    session = "rest-1"
    a.context_clear(session)
    assert as_docker(server, a.context_render(session)["content"]) == (GOLDEN / "0-empty.txt").read_text()
    loaded = a.context_load(session, "report-writer")
    assert loaded["loaded"] == "report-writer" and loaded["evicted"] == []
    xml = a.context_render(session, "xml")
    assert as_docker(server, xml["content"]) == (GOLDEN / "1-loaded.xml").read_text()
    assert xml["counter"] == "estimate-chars/4" and xml["tokens"] > 0
    selected = a.context_select_docs(session, "report-writer", ["references/style.md"])
    assert selected["added"] == ["references/style.md"]
    assert as_docker(server, a.context_render(session, "markdown")["content"]) == (GOLDEN / "2-docs.md").read_text()
    state = a.context(session)
    assert [(s["name"], s["version"], [d["name"] for d in s["docs"]]) for s in state["skills"]] == [
        ("report-writer", 1, ["references/style.md"])
    ]
    assert set(state) >= {"skills", "total_tokens", "budget", "counter"}
    docs = a.context_docs(session, "report-writer")
    assert [(d["name"], d["selected"]) for d in docs["docs"]] == [
        ("references/style.md", True),
        ("references/tables.md", False),
    ]
    assert a.context_touch(session, "report-writer")["skills"][0]["name"] == "report-writer"
    raw = httpx.get(
        f"{server.url}/v1/sessions/{session}/context/render",
        params={"format": "text", "raw": "true"},
        headers={"Authorization": f"Bearer {KEY_A}"},
    )
    assert raw.headers["content-type"].startswith("text/plain") and raw.headers["x-token-counter"]
    assert as_docker(server, raw.text) == (GOLDEN / "2-docs.txt").read_text()
    assert a.context_unload(session, "report-writer")["unloaded"]["docs"] == ["references/style.md"]
    assert a.context_clear(session)["cleared"] is True
    assert a.context(session)["skills"] == []


def test_rest_errors_have_stable_codes(clients: tuple[Client, Client]) -> None:
    a, _ = clients
    session = "rest-errors"
    with expect_error(404, "not_loaded"):
        a.context_select_docs(session, "report-writer", ["references/style.md"])
    a.context_load(session, "report-writer")
    with expect_error(404, "unknown_doc") as unknown:
        a.context_select_docs(session, "report-writer", ["nope.md"])
    assert unknown.error.details["available"] == ["references/style.md", "references/tables.md"]
    with expect_error(409, "budget_exceeded") as over:
        a.context_load(session, "note-taker", budget={"skill_tokens": 3})
    assert over.error.details["budget"] == 3 and over.error.details["kind"] == "skill"
    with expect_error(409, "budget_exceeded") as full:
        a.context_load(session, "note-taker", budget={"max_tokens": 10})
    assert full.error.details["limit"] == 9 and full.error.details["policy"] == "none"
    evicted = a.context_load(
        session,
        "note-taker",
        evict="mention",
        messages=["notes please"],
        budget={"max_tokens": a.context(session)["total_tokens"] + 10, "high_water": 1},
    )
    assert evicted["evicted"][0]["skill"] == "report-writer" and evicted["evicted"][0]["reason"] == "mention"
    with expect_error(404, "skill_not_found"):
        a.context_load(session, "no-such-skill")
    with expect_error(400, "invalid_session"):
        a.context("bad session!")
    with expect_error(422, "invalid_request"):
        a.context_select_docs(session, "note-taker", mode="everything")
    with expect_error(422, "invalid_request"):
        a.context_load(session, "note-taker", evict="random")


def test_a_key_cannot_see_or_change_another_keys_context(clients: tuple[Client, Client]) -> None:
    a, b = clients
    session = "shared-name"
    a.context_load(session, "data-cleaner")
    assert b.context(session)["skills"] == []
    assert "[○] data-cleaner" in b.context_render(session)["content"]
    assert "[✓] data-cleaner" in a.context_render(session)["content"]
    with expect_error(404, "not_loaded"):
        b.context_unload(session, "data-cleaner")
    assert b.context_clear(session)["cleared"] is False
    via_tool = b.call_tool("context_render", {"format": "text"}, session=session)
    assert "[✓] data-cleaner" not in via_tool.content
    assert [s["name"] for s in a.context(session)["skills"]] == ["data-cleaner"]


def test_only_an_admin_reaches_another_keys_context_and_is_audited(
    server: Server, clients: tuple[Client, Client]
) -> None:
    a, _ = clients
    a.context_load("audited", "note-taker")
    url = f"{server.url}/v1/sessions/audited/context"
    refused = httpx.get(url, params={"owner": A}, headers={"Authorization": f"Bearer {KEY_B}"})
    assert refused.status_code == 404 and refused.json()["error"]["code"] == "owner_not_found"
    seen = httpx.get(
        f"{url}/render", params={"owner": A, "format": "text"}, headers={"Authorization": f"Bearer {ADMIN}"}
    )
    assert seen.status_code == 200 and "[✓] note-taker" in seen.json()["content"]
    assert any(
        line.get("action") == "context.read" and line.get("owner") == A and line.get("target") == "audited"
        for line in audit_lines(server)
    )
    own = httpx.get(url, headers={"Authorization": f"Bearer {ADMIN}"})
    assert own.json()["skills"] == []  # without ?owner= an admin's own context


def test_tools_call_and_definitions(server: Server, clients: tuple[Client, Client]) -> None:
    a, _ = clients
    names = [t["function"]["name"] for t in a.tools("openai", context=True).tools]
    assert names[:4] == ["skill_load", "skill_list_docs", "skill_select_docs", "skill_run"]
    assert names[4:] == [
        "context_load",
        "context_unload",
        "context_select_docs",
        "context_list_docs",
        "context_touch",
        "context_render",
        "context_clear",
    ]
    assert len(a.tools("openai").tools) == 4
    session = "tools-1"
    loaded = a.call_tool(
        "context_load", {"skill": "report-writer"}, session=session, format="anthropic", call_id="toolu_1"
    )
    assert not loaded.is_error and loaded.message["tool_use_id"] == "toolu_1"
    assert loaded.data["loaded"] == "report-writer"
    docs = a.call_tool(
        "context_select_docs", {"session": session, "skill": "report-writer", "all": True, "mode": "add"}
    )
    assert docs.data["selected"] == ["references/style.md", "references/tables.md"]
    refused = a.call_tool("context_load", {"skill": "note-taker", "budget": {"max_tokens": 5}}, session=session)
    assert refused.is_error and refused.content.startswith("error (budget_exceeded): ")
    assert refused.data["error"]["code"] == "budget_exceeded"
    assert refused.data["error"]["details"]["limit"] == 4
    rendered = a.call_tool("context_render", {}, session=session).content
    assert rendered == a.context_render(session)["content"]


def test_mcp_tools_share_the_context_per_key(server: Server) -> None:
    session = "mcp-1"

    async def main() -> None:
        async with http_client(server, KEY_A) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert {"context_load", "context_render", "context_select_docs"} <= names
            loaded = await client.call_tool("context_load", {"session": session, "skill": "note-taker"})
            assert not loaded.is_error and loaded.structured_content["loaded"] == "note-taker"
            unknown = await client.call_tool(
                "context_select_docs", {"session": session, "skill": "note-taker", "docs": ["x.md"], "mode": "add"}
            )
            assert unknown.is_error and "unknown_doc" in unknown.content[0].text
            render = await client.call_tool("context_render", {"session": session, "format": "xml"})
            assert '<skill loaded="true">\n<name>\nnote-taker' in render.content[0].text
        async with http_client(server, KEY_B) as other:
            render = await other.call_tool("context_render", {"session": session})
            assert "[○] note-taker" in render.content[0].text
        async with AsyncClient(server.url, api_key=KEY_A) as rest:
            state: dict[str, Any] = await rest.context(session)
            assert [s["name"] for s in state["skills"]] == ["note-taker"]

    anyio.run(main)


def test_context_survives_a_restart(tmp_path: Path) -> None:
    srv = _server(tmp_path).start()
    try:
        with Client(srv.url, api_key=KEY_A) as a:
            a.context_load("keep", "report-writer")
            a.context_select_docs("keep", "report-writer", ["references/tables.md"])
            before = a.context_render("keep", "json")["content"]
        srv.stop()
        srv.start()
        with Client(srv.url, api_key=KEY_A) as a:
            assert a.context_render("keep", "json")["content"] == before
            assert a.context("keep")["skills"][0]["docs"][0]["name"] == "references/tables.md"
    finally:
        srv.stop()


def test_a_run_in_the_session_marks_its_loaded_skill_used(clients: tuple[Client, Client]) -> None:
    a, b = clients
    session = "runs-1"
    a.context_load(session, "report-writer")
    a.context_load(session, "data-cleaner")
    before = {s["name"]: s["last_used"] for s in a.context(session)["skills"]}
    assert a.run({"skill": "report-writer", "command": "true", "session": session}).exit_code == 0
    after = {s["name"]: s["last_used"] for s in a.context(session)["skills"]}
    assert after["report-writer"] > before["report-writer"] and after["data-cleaner"] == before["data-cleaner"]
    ran = a.call_tool("skill_run", {"skill": "data-cleaner", "command": "true", "session": session})
    assert not ran.is_error
    assert {s["name"]: s["last_used"] for s in a.context(session)["skills"]}["data-cleaner"] > after["data-cleaner"]
    # another key's run of the same session id, and a run in a session without a context, change nothing
    b.run({"skill": "report-writer", "command": "true", "session": session})
    assert b.context(session)["skills"] == [] and b.context(session)["expires_at"] is None


def test_both_clients_send_the_same_context_requests() -> None:
    seen: dict[str, list[tuple[str, str, bytes]]] = {"sync": [], "async": []}

    def handler(kind: str) -> Any:
        def handle(request: httpx.Request) -> httpx.Response:
            seen[kind].append((request.method, request.url.raw_path.decode(), request.content))
            if request.url.path == "/v1/tools/call":  # a tool call's answer is a model: it needs its fields
                return httpx.Response(200, json={"name": "context_render", "content": "", "is_error": False})
            return httpx.Response(200, json={})

        return handle

    def sync_calls(c: Client) -> None:
        c.context("s/1")
        c.context_load("s/1", "x", evict="lru", messages=["m"], budget={"max_tokens": 5})
        c.context_unload("s/1", "x")
        c.context_select_docs("s/1", "x", ["a.md"], mode="replace")
        c.context_docs("s/1", "x")
        c.context_touch("s/1", "x")
        c.context_render("s/1", "xml")
        c.context_clear("s/1")
        c.call_tool("context_render", {}, session="s/1")

    async def async_calls(c: AsyncClient) -> None:
        await c.context("s/1")
        await c.context_load("s/1", "x", evict="lru", messages=["m"], budget={"max_tokens": 5})
        await c.context_unload("s/1", "x")
        await c.context_select_docs("s/1", "x", ["a.md"], mode="replace")
        await c.context_docs("s/1", "x")
        await c.context_touch("s/1", "x")
        await c.context_render("s/1", "xml")
        await c.context_clear("s/1")
        await c.call_tool("context_render", {}, session="s/1")

    with Client("http://test", transport=httpx.MockTransport(handler("sync"))) as client:
        sync_calls(client)

    async def main() -> None:
        async with AsyncClient("http://test", transport=httpx.MockTransport(handler("async"))) as client:
            await async_calls(client)

    anyio.run(main)
    assert seen["sync"] == seen["async"]
    assert [(m, p) for m, p, _ in seen["sync"]] == [
        ("GET", "/v1/sessions/s%2F1/context"),
        ("POST", "/v1/sessions/s%2F1/context/load"),
        ("POST", "/v1/sessions/s%2F1/context/unload"),
        ("POST", "/v1/sessions/s%2F1/context/select-docs"),
        ("GET", "/v1/sessions/s%2F1/context/docs?skill=x"),
        ("POST", "/v1/sessions/s%2F1/context/touch"),
        ("GET", "/v1/sessions/s%2F1/context/render?format=xml"),
        ("DELETE", "/v1/sessions/s%2F1/context"),
        ("POST", "/v1/tools/call"),
    ]
    assert json.loads(seen["sync"][1][2]) == {
        "skill": "x",
        "evict": "lru",
        "messages": ["m"],
        "budget": {"max_tokens": 5},
    }
    assert json.loads(seen["sync"][3][2]) == {"skill": "x", "docs": ["a.md"], "mode": "replace"}
    assert json.loads(seen["sync"][8][2])["session"] == "s/1"


def test_mcp_over_stdio_is_the_local_tenant(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "skills", tmp_path / "skills")

    async def main() -> None:
        async with stdio_client(tmp_path, "local") as client:
            loaded = await client.call_tool("context_load", {"session": "cli", "skill": "data-cleaner"})
            assert not loaded.is_error, loaded.content
            docs = await client.call_tool(
                "context_select_docs", {"session": "cli", "skill": "data-cleaner", "all": True, "mode": "add"}
            )
            assert docs.structured_content["selected"] == ["docs/rules.md"]
            listed = await client.call_tool("context_list_docs", {"session": "cli", "skill": "data-cleaner"})
            assert "docs/rules.md" in listed.content[0].text and "selected" in listed.content[0].text
            render = await client.call_tool("context_render", {"session": "cli", "format": "markdown"})
            assert "- [x] **data-cleaner**" in render.content[0].text
            assert "### Doc: docs/rules.md" in render.content[0].text
            missing = await client.call_tool("context_load", {"skill": "data-cleaner"})
            assert missing.is_error and "'session' argument is required" in missing.content[0].text
            cleared = await client.call_tool("context_clear", {"session": "cli"})
            assert cleared.content[0].text == "context cleared"

    anyio.run(main)
