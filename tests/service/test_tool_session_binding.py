"""A tool call's session binding holds for every tool with a session (issue 39, class 6c).

An agent framework serves several conversations with one key and binds each tool call to
its conversation's session (``session`` in ``POST /v1/tools/call``; over MCP the request's
``_meta["skill-executor/session"]``).  The model writes the arguments: were ``skill_run``
to ignore the binding, a model in conversation B (or a prompt injected into it) would run
in conversation A's session by naming it, and read A's ``work/``.  Here, as that model:
a run under A's binding writes ``work/secret``; a run under B's binding cannot read it, and
naming A's session under B's binding is refused (``session_mismatch``, status 403, a tool
error fed back to the model), over REST and over MCP.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest

from ..api_server import Server
from ..conftest import require_runtime
from ..service.test_mcp import http_client, raw

SECRET = "conversation-a-secret-7f3c"
SKILL = "math-tools"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    require_runtime("docker")
    srv = Server(tmp_path_factory.mktemp("binding"))
    srv.start()
    yield srv
    srv.stop()


def call(server: Server, name: str, arguments: dict[str, Any], session: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "arguments": arguments}
    if session is not None:
        body["session"] = session
    answer = httpx.post(f"{server.url}/v1/tools/call", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


def test_skill_run_under_a_binding_runs_in_the_bound_session_only(server: Server) -> None:
    wrote = call(server, "skill_run", {"skill": SKILL, "command": f"echo {SECRET} > $WORK_DIR/secret"}, "conv-a")
    assert not wrote["is_error"], wrote["content"]
    # the binding put the run in conv-a: a plain run of that session sees the file
    seen = httpx.post(
        f"{server.url}/v1/runs",
        json={"skill": SKILL, "command": "cat $WORK_DIR/secret", "session": "conv-a"},
        timeout=120,
    ).json()
    assert seen["stdout"].strip() == SECRET, seen

    # conversation B's model, trying every way at A's work/
    for arguments in (
        {"skill": SKILL, "command": "cat $WORK_DIR/secret; cat work/secret; ls -la $WORK_DIR"},
        {"skill": SKILL, "command": "cat ../conv-a/work/secret ../../*/work/secret 2>&1; true"},
    ):
        theirs = call(server, "skill_run", arguments, "conv-b")
        assert SECRET not in json.dumps(theirs), theirs
    for arguments in (
        {"skill": SKILL, "command": "cat $WORK_DIR/secret", "session": "conv-a"},
        {"skill": SKILL, "command": "cat $WORK_DIR/secret", "session": ""},
    ):
        refused = call(server, "skill_run", arguments, "conv-b")
        assert refused["is_error"] and SECRET not in json.dumps(refused), refused
        assert refused["data"]["error"]["code"] == "session_mismatch", refused
        assert "bound to session 'conv-b'" in refused["content"]
    # the process tools and the context tools keep to the binding as well
    started = call(server, "process_start", {"command": "cat $WORK_DIR/secret", "session": "conv-a"}, "conv-b")
    assert started["is_error"] and started["data"]["error"]["code"] == "session_mismatch"
    rendered = call(server, "context_render", {"session": "conv-a"}, "conv-b")
    assert rendered["is_error"] and rendered["data"]["error"]["code"] == "session_mismatch"
    # the same call naming its own bound session is fine
    own = call(server, "skill_run", {"skill": SKILL, "command": "echo ok", "session": "conv-b"}, "conv-b")
    assert not own["is_error"] and own["data"]["stdout"].strip() == "ok", own


def test_an_mcp_call_bound_to_a_session_keeps_to_it(server: Server) -> None:
    def meta(session: str) -> dict[str, Any]:
        return {"_meta": {"skill-executor/session": session}}

    async def main() -> None:
        async with http_client(server) as client:
            wrote = await raw(
                client,
                "tools/call",
                {"name": "skill_run", "arguments": {"skill": SKILL, "command": f"echo {SECRET} > $WORK_DIR/s"}}
                | meta("mcp-a"),
            )
            assert not wrote.get("isError"), wrote
            mine = await raw(
                client,
                "tools/call",
                {"name": "skill_run", "arguments": {"skill": SKILL, "command": "cat $WORK_DIR/s"}} | meta("mcp-a"),
            )
            assert SECRET in json.dumps(mine), mine
            theirs = await raw(
                client,
                "tools/call",
                {"name": "skill_run", "arguments": {"skill": SKILL, "command": "cat $WORK_DIR/s"}} | meta("mcp-b"),
            )
            assert SECRET not in json.dumps(theirs), theirs
            for name, arguments in (
                ("skill_run", {"skill": SKILL, "command": "cat $WORK_DIR/s", "session": "mcp-a"}),
                ("process_start", {"command": "cat $WORK_DIR/s", "session": "mcp-a"}),
                ("context_render", {"session": "mcp-a"}),
            ):
                refused = await raw(client, "tools/call", {"name": name, "arguments": arguments} | meta("mcp-b"))
                assert refused["isError"] and "session_mismatch" in json.dumps(refused), refused
                assert SECRET not in json.dumps(refused)
            bad = await raw(
                client,
                "tools/call",
                {"name": "context_render", "arguments": {}, "_meta": {"skill-executor/session": 7}},
            )
            assert bad["isError"] and "invalid_arguments" in json.dumps(bad), bad

    anyio.run(main)
