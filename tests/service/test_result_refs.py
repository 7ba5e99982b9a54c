"""Tool results sized for a context window, and refs that round-trip, on the real service:
a run that prints 1 MB and writes a 1.5 MB file and a PNG, over ``POST /v1/tools/call``
and over MCP with the SDK's own client (streamable HTTP, two API keys).

* the model view fits the budget (the default, a request's ``result_budget`` / ``_meta``);
* the marker names the full stdout's ref; the big file is a ref, the PNG an image block;
* every ref the result prints reads back over REST and MCP (``resources/read`` in parts,
  ``artifact_get``) and stages as the input of a later run -- for its own key only.
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import anyio
import httpx
import httpx2
import mcp_types as types
import pytest
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from skill_executor_client import Client

from ..api_server import Server
from ..service.test_mcp import _skills, _task_done, _TasksExtension, http_client, raw

KEYS = ("k-one", "k-two")
STDOUT = "".join(  # 1,010,000 bytes (under the run's 1 MiB stdout cap)
    f"line {i:07d} " + "x" * 87 + "\n" for i in range(10_000)
)
BIG = ("y" * 99 + "\n") * 15_000  # 1,500,000 bytes
BUDGET = 100_000  # the default SKILL_EXECUTOR_TOOL_RESULT_MAX_CHARS


def _png() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"".join(b"\x00" + b"\xff\x00\x00" * 8 for _ in range(8))
    header = struct.pack(">IIBBBBB", 8, 8, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


PNG = _png()
COMMAND = (
    "python3 - <<'EOF'\n"
    "import base64, sys\n"
    "sys.stdout.write(''.join(f'line {i:07d} ' + 'x' * 87 + '\\n' for i in range(10_000)))\n"
    "open('out/big.txt', 'w').write(('y' * 99 + '\\n') * 15_000)\n"
    f"open('out/red.png', 'wb').write(base64.b64decode('{base64.b64encode(PNG).decode()}'))\n"
    "EOF"
)
RUN = {"skill": "math-tools", "command": COMMAND, "outputs": {"globs": ["out/**"]}}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    base = tmp_path_factory.mktemp("refs")
    _skills(base)
    started = Server(base, env={"SKILL_EXECUTOR_API_KEYS": ",".join(KEYS)}).start()
    try:
        yield started
    finally:
        started.stop()


def _rest(server: Server, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=120)


def _artifact(http: httpx.Client, ref: str) -> httpx.Response:
    name, version = ref.removeprefix("artifact://").rsplit("@", 1)
    return http.get(f"/v1/artifacts/{name}", params={"version": version})


def test_rest_tool_call_fits_and_its_refs_round_trip(server: Server) -> None:
    with _rest(server, "k-one") as one, _rest(server, "k-two") as two:
        answer = one.post(
            "/v1/tools/call", json={"name": "skill_run", "arguments": RUN, "format": "anthropic", "id": "t1"}
        )
        assert answer.status_code == 200, answer.text
        body = answer.json()
        print(f"\nREST /v1/tools/call body: {len(answer.text)} characters; content {len(body['content'])}")
        content, data = body["content"], body["data"]
        assert not body["is_error"] and len(content) <= BUDGET
        assert len(answer.text) < 4 * BUDGET  # content, data (metadata, the same excerpt) and message; was 7.5 M
        assert content.startswith("exit code 0") and "line 0000000" in content and "line 0009999" in content
        stdout_ref = next(a["ref"] for a in data["artifact_files"] if a["name"].endswith("/stdout"))
        assert f"the full stdout: {stdout_ref}]" in content and data["stdout_truncated"] is True
        refs = {f["name"]: f["ref"] for f in data["output_files"]}
        assert all(r.startswith("artifact://runs/") for r in refs.values())
        assert (
            f"file out/big.txt (text/plain, 1500000 bytes): over the inline size (16384 bytes); "
            f"full content at {refs['out/big.txt']}" in content
        )
        assert "y" * 99 not in answer.text and all(f["content"] is None for f in data["output_files"])
        message = body["message"]
        assert message["content"][0] == {"type": "text", "text": content}
        image = message["content"][1]
        assert image["type"] == "image" and base64.b64decode(image["source"]["data"]) == PNG

        # Every ref reads back whole over REST, for its own key only.
        assert _artifact(one, refs["out/big.txt"]).text == BIG
        assert _artifact(one, stdout_ref).text == STDOUT
        assert _artifact(one, refs["out/red.png"]).content == PNG
        for ref in (refs["out/big.txt"], stdout_ref):
            refused = _artifact(two, ref)
            assert refused.status_code == 404 and refused.json()["error"]["code"] == "artifact_not_found"

        # ... and is the input of the next run.
        chained = {
            "skill": "math-tools",
            "command": "wc -c < inputs/big.txt; wc -c < inputs/stdout.txt; head -c 12 inputs/stdout.txt",
            "inputs": [
                {"from": refs["out/big.txt"], "to": "inputs/big.txt"},
                {"from": stdout_ref, "to": "inputs/stdout.txt"},
            ],
        }
        again = one.post("/v1/tools/call", json={"name": "skill_run", "arguments": chained}).json()
        assert not again["is_error"], again["content"]
        assert again["data"]["stdout"] == "1500000\n1010000\nline 0000000"
        other = two.post("/v1/tools/call", json={"name": "skill_run", "arguments": chained}).json()
        assert other["is_error"] and other["data"]["error"]["code"] == "artifact_not_found"
        # A finished run's workspace is gone: its out/ is staged by the artifact ref, and the refusal says so.
        stale = {"skill": "math-tools", "command": "true", "inputs": [{"from": "workspace://out/big.txt"}]}
        gone = one.post("/v1/tools/call", json={"name": "skill_run", "arguments": stale}).json()
        assert gone["is_error"] and gone["data"]["error"]["code"] == "input_not_found"
        assert "stage an earlier run's output by its artifact:// ref" in gone["content"]

        # A request's own budget.
        with Client(server.url, api_key="k-one") as client:  # the Python client passes it on
            small = client.call_tool("skill_run", RUN, result_budget={"max_chars": 5_000, "image_bytes": 0})
        assert len(small.content) <= 5_000 and "line 0000000" in small.content
        bad = one.post(
            "/v1/tools/call", json={"name": "skill_run", "arguments": RUN, "result_budget": {"max_chars": 5}}
        )
        assert bad.status_code == 422


def test_mcp_result_fits_and_its_refs_round_trip(server: Server) -> None:
    async def main() -> None:
        async with http_client(server, "k-one") as client:
            templates = await client.list_resource_templates()
            assert [t.uri_template for t in templates.resource_templates] == [
                "skill://{skill}/{+path}",
                "artifact://{+name}@{version}{?offset,length}",
            ]
            # The official client refuses a message over 1 MiB: before, this call failed outright.
            result = await client.call_tool("skill_run", RUN)
            size = len(result.model_dump_json(by_alias=True, exclude_none=True))
            print(f"\nMCP tools/call result: {size} characters")
            assert not result.is_error and size < 3 * BUDGET
            text, *blocks = result.content
            assert isinstance(text, types.TextContent) and len(text.text) <= BUDGET
            data = result.structured_content
            assert data is not None and all(f["content"] is None for f in data["output_files"])
            # Each byte at most once: the excerpts are in the text block only; structuredContent has the
            # metadata, exit code and refs (as the tool's outputSchema says).
            assert "stdout" not in data and "stderr" not in data and data["exit_code"] == 0
            assert data["stdout_truncated"] is True
            assert result.model_dump_json(by_alias=True).count("line 0000000") == 1
            tools = {t.name: t for t in (await client.list_tools()).tools}
            schema = tools["skill_run"].output_schema
            assert schema is not None and "stdout" not in schema["properties"] and "exit_code" in schema["properties"]
            refs = {f["name"]: f["ref"] for f in data["output_files"]}
            stdout_ref = next(a["ref"] for a in data["artifact_files"] if a["name"].endswith("/stdout"))
            assert f"the full stdout: {stdout_ref}]" in text.text
            link, image = blocks
            assert isinstance(link, types.ResourceLink) and link.uri == refs["out/big.txt"] and link.size == 1_500_000
            assert isinstance(image, types.ImageContent) and base64.b64decode(image.data) == PNG
            assert image.mime_type == "image/png"

            # A large artifact is read in parts; a whole read says how.
            with pytest.raises(MCPError) as caught:
                await client.read_resource(refs["out/big.txt"])
            assert "read it in parts" in caught.value.error.message
            for ref, expected in ((refs["out/big.txt"], BIG), (stdout_ref, STDOUT)):
                parts, offset = [], 0
                while offset < len(expected):
                    part = (await client.read_resource(f"{ref}?offset={offset}&length=524288")).contents[0]
                    assert isinstance(part, types.TextResourceContents) and part.uri.startswith(
                        f"{ref}?offset={offset}&length="
                    )
                    parts.append(part.text)
                    offset += len(part.text.encode())
                assert "".join(parts) == expected
            png = (await client.read_resource(refs["out/red.png"])).contents[0]
            assert isinstance(png, types.BlobResourceContents) and base64.b64decode(png.blob) == PNG
            got = await client.call_tool("artifact_get", {"ref": refs["out/big.txt"]})
            assert not got.is_error and isinstance(got.content[1], types.ResourceLink)
            assert len(got.model_dump_json()) < 2_000  # by reference, not 1.5 MB inline

            # The refs are inputs of the next run.
            chained = await client.call_tool(
                "skill_run",
                {
                    "skill": "math-tools",
                    "command": "wc -c < inputs/big.txt",
                    "inputs": [{"from": refs["out/big.txt"], "to": "inputs/big.txt"}],
                },
            )
            assert not chained.is_error and chained.content[0].text.splitlines()[1:] == ["stdout:", "1500000"]  # type: ignore[union-attr]

            # The request's own budget, in _meta.
            small = await client.call_tool(
                "skill_run", RUN, meta={"skill-executor/result_budget": {"max_chars": 5_000}}
            )
            small_text = small.content[0]
            assert isinstance(small_text, types.TextContent) and len(small_text.text) <= 5_000
            wrong = {"skill-executor/result_budget": {"max_chars": "lots"}}
            refused = await client.call_tool("skill_run", RUN, meta=wrong)
            assert refused.is_error and "invalid_arguments" in refused.content[0].text  # type: ignore[union-attr]

        async with http_client(server, "k-two") as other:  # another key: none of it exists
            for ref in (refs["out/big.txt"], refs["out/red.png"], stdout_ref):
                with pytest.raises(MCPError) as caught:
                    await other.read_resource(ref)
                assert "artifact_not_found" in caught.value.error.message
                got = await other.call_tool("artifact_get", {"ref": ref})
                assert got.is_error and "artifact_not_found" in got.content[0].text
            staged = await other.call_tool(
                "skill_run", {"skill": "math-tools", "command": "true", "inputs": [{"from": refs["out/big.txt"]}]}
            )
            assert staged.is_error and "artifact_not_found" in staged.content[0].text

    anyio.run(main)


def test_explicitly_unsaved_outputs_print_no_ref(server: Server) -> None:
    with _rest(server, "k-one") as one:
        run = {
            **RUN,
            "command": "head -c 100000 /dev/zero > out/zeros.bin",
            "outputs": {"globs": ["out/**"], "save": False},
        }
        body = one.post("/v1/tools/call", json={"name": "skill_run", "arguments": run}).json()
        assert (
            "workspace://" not in body["content"]
            and "not kept: not saved as an artifact (outputs.save is false" in body["content"]
        )


def test_every_call_shape_gets_the_budget(server: Server) -> None:
    """OpenAI Chat Completions and Responses shapes (a Responses function_call item posted as the
    model produced it) get the same budgeted result, and the model's mistakes stay error results."""
    with _rest(server, "k-one") as one:
        item = {
            "type": "function_call",
            "call_id": "call_1",
            "name": "skill_run",
            "arguments": json.dumps(RUN),
            "result_budget": {"max_chars": 20_000},
        }
        body = one.post("/v1/tools/call", json=item).json()
        content, data = body["content"], body["data"]
        assert not body["is_error"] and len(content) <= 20_000 and "line 0000000" in content
        assert body["message"] == {"type": "function_call_output", "call_id": "call_1", "output": content}
        stdout_ref = next(a["ref"] for a in data["artifact_files"] if a["name"].endswith("/stdout"))
        assert f"the full stdout: {stdout_ref}]" in content and _artifact(one, stdout_ref).text == STDOUT
        assert "y" * 99 not in json.dumps(body)  # the big file by ref only

        chat = one.post(
            "/v1/tools/call", json={"name": "skill_run", "arguments": RUN, "format": "openai", "id": "c2"}
        ).json()
        assert len(chat["content"]) <= BUDGET and "the full stdout: artifact://" in chat["content"]
        assert chat["message"] == {"role": "tool", "tool_call_id": "c2", "content": chat["content"]}

        for mistake in (
            {**item, "name": "skill_rum"},
            {**item, "arguments": "{not json"},
            {**item, "arguments": json.dumps({"skill": "math-tools"})},
        ):
            answer = one.post("/v1/tools/call", json=mistake)
            assert answer.status_code == 200, answer.text
            wrong = answer.json()
            assert wrong["is_error"] and wrong["data"]["error"]["code"] in ("tool_not_found", "invalid_arguments")
            assert wrong["message"]["output"].startswith("error (") and len(wrong["content"]) <= 20_000


def test_a_task_result_is_the_same_budgeted_result(server: Server) -> None:
    """skill_run through the Tasks extension (2026-07-28): tasks/get settles to the CallToolResult a
    plain call returns -- within the budget, the cut stdout kept once (every poll names the same
    ref), every ref readable; a tasks/get's own _meta budget applies, an invalid one is -32602."""

    @asynccontextmanager
    async def modern(key: str) -> AsyncIterator[McpClient]:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=120) as http:
            transport = streamable_http_client(f"{server.url}/mcp", http_client=http)
            async with McpClient(
                transport, mode="auto", read_timeout_seconds=120, extensions=[_TasksExtension()]
            ) as client:
                assert client.session.protocol_version == "2026-07-28"
                yield client

    async def main() -> None:
        async with modern("k-one") as client:
            created = await raw(client, "tools/call", {"name": "skill_run", "arguments": RUN})
            assert created["resultType"] == "task"
            done = await _task_done(client, created["taskId"], timeout=120)
            assert done["status"] == "completed"
            result = types.CallToolResult.model_validate(done["result"])
            assert not result.is_error and len(json.dumps(done["result"])) < 3 * BUDGET
            text, link, image = result.content
            assert isinstance(text, types.TextContent) and len(text.text) <= BUDGET
            data = result.structured_content
            assert data is not None and data["run_id"] == created["taskId"] and "stdout" not in data
            assert json.dumps(done["result"]).count("line 0000000") == 1
            assert all(f["content"] is None for f in data["output_files"])
            refs = {f["name"]: f["ref"] for f in data["output_files"]}
            stdout_ref = next(a["ref"] for a in data["artifact_files"] if a["name"].endswith("/stdout"))
            assert f"the full stdout: {stdout_ref}]" in text.text
            assert isinstance(link, types.ResourceLink) and link.uri == refs["out/big.txt"]
            assert isinstance(image, types.ImageContent) and base64.b64decode(image.data) == PNG
            again = await raw(client, "tasks/get", {"taskId": created["taskId"]})
            assert again["result"] == done["result"]  # the stream kept once: the same ref on every poll
            part = (await client.read_resource(f"{stdout_ref}?offset=0&length=1000")).contents[0]
            assert isinstance(part, types.TextResourceContents) and part.text == STDOUT[:1000]
            small = await raw(
                client,
                "tasks/get",
                {"taskId": created["taskId"], "_meta": {"skill-executor/result_budget": {"max_chars": 5_000}}},
            )
            assert len(small["result"]["content"][0]["text"]) <= 5_000
            with pytest.raises(MCPError) as caught:
                await raw(
                    client,
                    "tasks/get",
                    {"taskId": created["taskId"], "_meta": {"skill-executor/result_budget": {"max_chars": 5}}},
                )
            assert caught.value.error.code == -32602 and "invalid_arguments" in caught.value.error.message

    anyio.run(main)


def test_a_run_result_prints_only_refs_that_round_trip(server: Server) -> None:
    """POST /v1/runs: a saved output's ref is its artifact:// ref (read back, staged by the next
    run); an unsaved one in out/ has none (out/ ends with the run); a session's work/ file is
    workspace://work/..., which the session's next run stages."""
    write = (
        "mkdir -p $WORK_DIR/notes; echo kept > out/a.txt; echo scratch > out/b.txt; echo mine > $WORK_DIR/notes/n.txt"
    )
    with _rest(server, "k-one") as one:
        saved = one.post(
            "/v1/runs",
            json={"skill": "math-tools", "command": write, "outputs": {"globs": ["out/a.txt"], "save": True}},
        )
        assert saved.status_code == 200, saved.text
        (a,) = saved.json()["output_files"]
        assert a["name"] == "out/a.txt" and a["ref"].startswith("artifact://")
        assert _artifact(one, a["ref"]).text == "kept\n"

        session = "refs-session"
        plain = one.post(
            "/v1/runs",
            json={
                "skill": "math-tools",
                "command": write,
                "session": session,
                "outputs": {"globs": ["out/b.txt", "work/notes/**"]},
            },
        ).json()
        refs = {f["name"]: f["ref"] for f in plain["output_files"]}
        assert refs == {"out/b.txt": None, "work/notes/n.txt": "workspace://work/notes/n.txt"}, plain
        assert "workspace://out" not in json.dumps(plain)

        # Every printed ref is an input of a later run (the workspace ref in the same session).
        chained = one.post(
            "/v1/runs",
            json={
                "skill": "math-tools",
                "command": "cat inputs/a.txt inputs/n.txt",
                "session": session,
                "inputs": [
                    {"from": a["ref"], "to": "inputs/a.txt"},
                    {"from": refs["work/notes/n.txt"], "to": "inputs/n.txt"},
                ],
            },
        ).json()
        assert chained["exit_code"] == 0 and chained["stdout"] == "kept\nmine\n", chained
