"""The MCP server with the SDK's own client, over stdio and streamable HTTP, on the real engine:
the Skills extension (SEP-2640), skill_run end to end, errors, progress, cancellation, auth."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.extension import ClientExtension
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import TypeAdapter

from ..api_server import Server, api_runtime
from ..conftest import REPO, SKILLS

BINARY = bytes(range(256)) * 4
Connect = Callable[[], Any]


class Raw(types.Request[dict[str, Any] | None, str]):
    """A request of a method the SDK has no model for (the Skills extension's)."""


async def raw(client: Client, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    result: dict[str, Any] = await client.session.send_request(
        Raw(method=method, params=params or {}), TypeAdapter(dict)
    )
    return result


def _skills(base: Path) -> Path:
    target = base / "skills"
    if not target.exists():
        shutil.copytree(SKILLS, target)
        (target / "csv-report" / "assets" / "blob.bin").write_bytes(BINARY)
    return target


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILL_EXECUTOR_")}
    if "SKILL_EXECUTOR_DOCKER_IMAGE" in os.environ:
        env["SKILL_EXECUTOR_DOCKER_IMAGE"] = os.environ["SKILL_EXECUTOR_DOCKER_IMAGE"]
    env.update({"SKILL_EXECUTOR_SKILLS_REFRESH_SECONDS": "0", **extra})
    return env


@asynccontextmanager
async def stdio_client(base: Path, runtime: str | None = None, **options: Any) -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "skill_executor.cli.main",
            "mcp",
            "--runtime",
            runtime or api_runtime(),
            "--skills-dir",
            str(_skills(base)),
            "--data-dir",
            str(base / "data"),
        ],
        env=_env(),
        cwd=REPO,
    )
    options.setdefault("mode", "legacy")
    async with Client(params, read_timeout_seconds=120, **options) as client:
        yield client


@asynccontextmanager
async def http_client(server: Server, key: str | None = None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with httpx2.AsyncClient(headers=headers, timeout=120) as http:
        transport = streamable_http_client(f"{server.url}/mcp", http_client=http)
        async with Client(transport, mode="legacy", read_timeout_seconds=120) as client:
            yield client


@pytest.fixture(params=["stdio", "http"])
def connect(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "stdio":
        yield lambda: stdio_client(tmp_path)
        return
    _skills(tmp_path)
    server = Server(tmp_path).start()
    try:
        yield lambda: http_client(server)
    finally:
        server.stop()


def test_skills_extension(connect: Connect, tmp_path: Path) -> None:
    skills = tmp_path / "skills"

    async def main() -> None:
        async with connect() as client:
            init = client.session.initialize_result if hasattr(client.session, "initialize_result") else None
            caps = client.session.server_capabilities if hasattr(client.session, "server_capabilities") else None
            caps = caps or (init.capabilities if init else None)
            assert caps is not None and caps.extensions is not None and caps.experimental is not None
            assert caps.extensions["io.modelcontextprotocol/skills"] == {"directoryRead": True}
            # Also under experimental, for 2025-11-25 clients that only read that map.
            assert caps.experimental["io.modelcontextprotocol/skills"] == {"directoryRead": True}
            assert caps.resources is not None and caps.resources.list_changed

            listed = await raw(client, "skills/list")
            entries = {e["uri"]: e for e in listed["skills"]}
            entry = entries["skill://csv-report/SKILL.md"]
            assert entry["frontmatter"]["name"] == "csv-report"
            assert entry["frontmatter"]["metadata"] == {"author": "skill-executor", "version": "1.0"}
            files = sorted(
                p.relative_to(skills / "csv-report").as_posix()
                for p in (skills / "csv-report").rglob("*")
                if p.is_file()
            )
            assert sorted(r["uri"] for r in entry["resources"]) == [f"skill://csv-report/{f}" for f in files]
            for item in entry["resources"]:
                path = skills / "csv-report" / item["uri"].removeprefix("skill://csv-report/")
                assert item["digest"] == "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()

            got = await raw(client, "skills/get", {"uri": "skill://csv-report/SKILL.md"})
            assert got["skill"] == entry
            pinned = await raw(client, "skills/get", {"uri": "skill://csv-report@1/SKILL.md"})
            assert pinned["skill"]["uri"] == "skill://csv-report@1/SKILL.md"
            for unknown in ("skill://no-such-skill/SKILL.md", "skill://csv-report/scripts/report.py"):
                with pytest.raises(MCPError) as caught:
                    await raw(client, "skills/get", {"uri": unknown})
                assert caught.value.error.code == -32602

            text = (await client.read_resource("skill://csv-report/SKILL.md")).contents[0]
            assert isinstance(text, types.TextResourceContents) and text.mime_type == "text/markdown"
            assert text.text == (skills / "csv-report" / "SKILL.md").read_text()
            blob = (await client.read_resource("skill://csv-report/assets/blob.bin")).contents[0]
            assert isinstance(blob, types.BlobResourceContents)
            import base64

            assert base64.b64decode(blob.blob) == BINARY
            with pytest.raises(MCPError) as caught:
                await client.read_resource("skill://csv-report/../../etc/passwd")
            assert caught.value.error.code == -32602
            assert caught.value.error.data == {"uri": "skill://csv-report/../../etc/passwd"}  # SEP-2164

            root = await raw(client, "resources/directory/read", {"uri": "skill://csv-report"})
            kinds = {r["name"]: r["mimeType"] for r in root["resources"]}
            assert kinds == {
                "SKILL.md": "text/markdown",
                "assets": "inode/directory",
                "references": "inode/directory",
                "scripts": "inode/directory",
                "tests": "inode/directory",
            }  # the skill's own tests (skill-executor test)
            scripts = await raw(client, "resources/directory/read", {"uri": "skill://csv-report/scripts"})
            assert [r["uri"] for r in scripts["resources"]] == ["skill://csv-report/scripts/report.py"]
            with pytest.raises(MCPError):
                await raw(client, "resources/directory/read", {"uri": "skill://csv-report/nothing"})

            resources = await client.list_resources()
            described = {str(r.uri): r for r in resources.resources}
            assert described["skill://csv-report/SKILL.md"].name == "csv-report"
            prompts = {p.name for p in (await client.list_prompts()).prompts}
            assert {"skills_overview", "csv-report"} <= prompts
            templates = (await client.list_resource_templates()).resource_templates
            assert [t.uri_template for t in templates] == [
                "skill://{skill}/{+path}",
                "artifact://{+name}@{version}{?offset,length}",  # what tool results refer to
            ]
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert tools["skill_run"].output_schema is not None
            assert tools["skill_load"].annotations.read_only_hint is True

    anyio.run(main)


def test_skill_run_end_to_end(connect: Connect) -> None:
    async def main() -> None:
        progress: list[tuple[float, str | None]] = []

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            progress.append((done, message))

        async with connect() as client:
            put = await client.call_tool("artifact_put", {"name": "data.csv", "text": "a,b\n1,2\n3,4\n"})
            assert not put.is_error
            ref = put.structured_content["ref"]
            result = await client.call_tool(
                "skill_run",
                {
                    "skill": "csv-report",
                    "command": "echo started; wc -l < inputs/data.csv > out/lines.txt; printf '\\x00\\x01' > out/b.bin",
                    "inputs": [{"from": ref, "to": "inputs/data.csv"}],
                    "outputs": {"globs": ["out/**"]},
                },
                progress_callback=on_progress,
            )
            assert not result.is_error, result.content
            assert result.structured_content["exit_code"] == 0
            assert result.content[0].text.splitlines()[1:3] == ["stdout:", "started"]  # type: ignore[union-attr]
            assert "stdout" not in result.structured_content  # the excerpt once: in the text block
            embedded = {c.resource.uri: c.resource for c in result.content if isinstance(c, types.EmbeddedResource)}
            texts = [r for r in embedded.values() if isinstance(r, types.TextResourceContents)]
            assert [r.text.strip() for r in texts] == ["3"]
            blobs = [r for r in embedded.values() if isinstance(r, types.BlobResourceContents)]
            import base64

            assert [base64.b64decode(b.blob) for b in blobs] == [b"\x00\x01"]
            assert progress and any("stdout: started" in (m or "") for _, m in progress)

            failed = await client.call_tool("skill_run", {"skill": "csv-report", "command": "echo oops >&2; exit 3"})
            assert failed.is_error
            assert failed.structured_content["exit_code"] == 3
            assert "oops" in failed.content[0].text

    anyio.run(main)


def test_cancel_kills_the_container(tmp_path: Path) -> None:
    if api_runtime() != "docker":
        pytest.skip("needs the Docker engine")
    import docker

    engine = docker.DockerClient(base_url="unix:///var/run/docker.sock", version="auto")
    run_ids: list[str] = []

    async def main() -> None:
        running = anyio.Event()

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            if message and message.startswith("run ") and message.endswith(": running"):
                run_ids.append(message.split()[1].rstrip(":"))
                running.set()

        async with stdio_client(tmp_path) as client:
            async with anyio.create_task_group() as group:

                async def call() -> None:
                    await client.call_tool(
                        "skill_run", {"skill": "csv-report", "command": "sleep 120"}, progress_callback=on_progress
                    )

                group.start_soon(call)
                with anyio.fail_after(60):
                    await running.wait()
                # "running" is said once the run has its slot; its container starts after that.
                with anyio.fail_after(60):
                    while not engine.api.containers(filters={"label": f"io.skill-executor.run={run_ids[0]}"}):
                        await anyio.sleep(0.1)
                group.cancel_scope.cancel()
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and engine.api.containers(
                all=True, filters={"label": f"io.skill-executor.run={run_ids[0]}"}
            ):
                await anyio.sleep(0.2)
            assert engine.api.containers(all=True, filters={"label": f"io.skill-executor.run={run_ids[0]}"}) == []

    anyio.run(main)


def test_http_needs_a_key(tmp_path: Path) -> None:
    _skills(tmp_path)
    server = Server(tmp_path, env={"SKILL_EXECUTOR_API_KEYS": "k-one,k-two"}).start()
    try:
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            },
        }
        headers = {"Accept": "application/json, text/event-stream"}
        refused = httpx.post(f"{server.url}/mcp", json=body, headers=headers)
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"
        wrong = httpx.post(f"{server.url}/mcp", json=body, headers={**headers, "Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        # A session belongs to the key that opened it: another key presenting its id is told it does not exist.
        opened = httpx.post(f"{server.url}/mcp", json=body, headers={**headers, "Authorization": "Bearer k-one"})
        assert opened.status_code == 200
        session = opened.headers["mcp-session-id"]
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        hijack = httpx.post(
            f"{server.url}/mcp",
            json=listing,
            headers={
                **headers,
                "Authorization": "Bearer k-two",
                "Mcp-Session-Id": session,
                "MCP-Protocol-Version": "2025-11-25",
            },
        )
        assert hijack.status_code == 404 and hijack.json()["error"]["code"] == "session_not_found"
        # An id this endpoint never handed out is not passed on either.
        unknown = httpx.post(
            f"{server.url}/mcp",
            json=listing,
            headers={
                **headers,
                "Authorization": "Bearer k-one",
                "Mcp-Session-Id": "0" * 32,
                "MCP-Protocol-Version": "2025-11-25",
            },
        )
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "session_not_found"

        async def main() -> None:
            async with http_client(server, "k-one") as client:
                listed = await raw(client, "skills/list")
                assert any(e["uri"] == "skill://csv-report/SKILL.md" for e in listed["skills"])
                put = await client.call_tool("artifact_put", {"name": "mine.txt", "text": "one"})
                assert not put.is_error
                mine = await client.call_tool("artifact_get", {"ref": "mine.txt"})
                assert not mine.is_error and mine.structured_content["size"] == 3, mine.content
                read = await client.read_resource(put.structured_content["ref"])
                assert isinstance(read.contents[0], types.TextResourceContents) and read.contents[0].text == "one"
            async with http_client(server, "k-two") as other:
                got = await other.call_tool("artifact_get", {"ref": "mine.txt"})
                assert got.is_error and "artifact_not_found" in got.content[0].text  # the other key's: not found

        anyio.run(main)
    finally:
        server.stop()


def test_list_changed_on_install_and_removal(tmp_path: Path) -> None:
    """Clients hear ``notifications/resources/list_changed`` when the catalog changes."""
    skills = _skills(tmp_path)
    changes: list[str] = []
    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ResourceListChangedNotification):
            changes.append(message.method)
            changed.set()

    async def main() -> None:
        nonlocal changed
        # The catalog watch is the same on every runtime: the local one keeps this test off the engine.
        async with stdio_client(tmp_path, "local", message_handler=on_message) as client:
            await client.list_resources()
            shutil.copytree(skills / "math-tools", skills / "more-math")
            text = (skills / "more-math" / "SKILL.md").read_text().replace("name: math-tools", "name: more-math")
            (skills / "more-math" / "SKILL.md").write_text(text)
            with anyio.fail_after(15):
                await changed.wait()
            uris = {str(r.uri) for r in (await client.list_resources()).resources}
            assert "skill://more-math/SKILL.md" in uris
            changed = anyio.Event()
            shutil.rmtree(skills / "more-math")
            with anyio.fail_after(15):
                await changed.wait()
            uris = {str(r.uri) for r in (await client.list_resources()).resources}
            assert "skill://more-math/SKILL.md" not in uris

    anyio.run(main)
    assert len(changes) >= 2


def test_mcp_inspector_cli(tmp_path: Path, npm_tools: Path) -> None:
    """A stock client: the MCP Inspector's non-interactive CLI (tests/npm, installed once) against
    the stdio server."""
    from ..npmtools import inspector

    skills = _skills(tmp_path)
    server = [
        sys.executable,
        "-m",
        "skill_executor.cli.main",
        "mcp",
        "--runtime",
        "local",
        "--skills-dir",
        str(skills),
        "--data-dir",
        str(tmp_path / "data"),
    ]

    def inspect(*args: str) -> dict[str, Any]:
        done = subprocess.run(
            [*inspector(npm_tools), "--cli", *args, *server],
            cwd=REPO,
            env=_env(MCP_CATALOG_PATH=str(tmp_path / "catalog.json")),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        found: dict[str, Any] = json.loads(done.stdout)
        return found

    # The Inspector calls these only when initialize declared the extension (and directoryRead).
    listed = inspect("--method", "skills/list")
    entry = next(e for e in listed["skills"] if e["uri"] == "skill://csv-report/SKILL.md")
    sizes = {r["uri"]: r["size"] for r in entry["resources"]}
    assert sizes["skill://csv-report/SKILL.md"] == (skills / "csv-report" / "SKILL.md").stat().st_size
    got = inspect("--method", "skills/get", "--uri", "skill://csv-report/SKILL.md")
    assert got["skill"] == entry
    children = inspect("--method", "resources/directory/read", "--uri", "skill://csv-report/scripts")
    assert [r["uri"] for r in children["resources"]] == ["skill://csv-report/scripts/report.py"]


def test_frontmatter_as_json(tmp_path: Path) -> None:
    """Plain YAML keeps its types; a frontmatter only the tolerant loader reads is served repaired."""
    from skill_executor.mcp.catalog import frontmatter
    from skill_executor.skills import load_skill

    from ..helpers import make_skill

    typed = make_skill(
        tmp_path,
        "typed",
        "name: typed\ndescription: Typed values.\nmetadata:\n  version: 2\n  beta: true\n  released: 2026-01-02\n",
    )
    assert frontmatter(load_skill(typed)) == {
        "name": "typed",
        "description": "Typed values.",
        "metadata": {"version": 2, "beta": True, "released": "2026-01-02"},
    }
    repaired = make_skill(tmp_path, "repaired", "name: repaired\ndescription: Use when: the user asks\n")
    assert frontmatter(load_skill(repaired)) == {"name": "repaired", "description": "Use when: the user asks"}


def test_modern_protocol(tmp_path: Path) -> None:
    """A 2026-07-28 client (server/discover, no handshake) gets the same surface."""

    async def main() -> None:
        async with stdio_client(tmp_path, "local", mode="auto") as client:
            assert client.session.protocol_version == "2026-07-28"
            got = await raw(client, "skills/get", {"uri": "skill://math-tools/SKILL.md"})
            assert got["skill"]["frontmatter"]["name"] == "math-tools"
            children = await raw(client, "resources/directory/read", {"uri": "skill://math-tools"})
            assert "skill://math-tools/scripts" in {r["uri"] for r in children["resources"]}
            result = await client.call_tool("skill_run", {"skill": "math-tools", "command": "echo modern"})
            assert not result.is_error and result.content[0].text.splitlines()[1:] == ["stdout:", "modern"]  # type: ignore[union-attr]

    anyio.run(main)


def test_pages() -> None:
    from skill_executor.mcp.catalog import PAGE_SIZE, page

    items = list(range(PAGE_SIZE * 2 + 3))
    first, cursor = page(items, None)
    second, cursor2 = page(items, cursor)
    third, end = page(items, cursor2)
    assert first + second + third == items and end is None and len(third) == 3


# -- real clients of the Skills extension: fastmcp, the conformance suite, the Inspector ----------


@pytest.fixture(scope="module")
def npm_tools() -> Path:
    """The conformance suite and the Inspector, installed once into build/npm-tools (tests/npmtools.py)."""
    from ..npmtools import NpmToolsProblem, install

    try:
        return install()
    except (NpmToolsProblem, OSError, subprocess.TimeoutExpired) as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI runs the MCP conformance suite and Inspector, but: {exc}")
        pytest.skip(str(exc))


def _odd_skills(skills: Path) -> None:
    """Skills the extension gives no entry: a frontmatter only the tolerant loader reads, one
    over the 512-file limit, one with a file over 16 MiB; and an empty folder in a served one."""
    from ..helpers import make_skill

    make_skill(skills, "repaired", "name: repaired\ndescription: Use when: the user asks\n")
    crowded = make_skill(skills, "crowded", "name: crowded\ndescription: Too many files.\n")
    (crowded / "data").mkdir()
    for index in range(512):
        (crowded / "data" / f"{index}.txt").write_text(f"{index}\n")
    huge = make_skill(skills, "huge", "name: huge\ndescription: One file over the 16 MiB limit.\n")
    with open(huge / "data.bin", "wb") as handle:
        handle.truncate(16 * 1024 * 1024 + 1)  # sparse: no disk
    (skills / "math-tools" / "empty").mkdir()


@pytest.mark.parametrize("transport_name", ["stdio", "http"])
def test_fastmcp_skills_client(tmp_path: Path, transport_name: str) -> None:
    """fastmcp's SEP-2640 client (2026-07-28, the extension negotiated) over stdio and over HTTP
    with a key: it lists, gets, and reads every skill whole, checking each file's size and digest
    against the entry and the frontmatter against SKILL.md; one invalid entry would make it
    refuse the list."""
    from fastmcp import Client as FastClient
    from fastmcp.client.transports import StdioTransport, StreamableHttpTransport
    from fastmcp.skills.client import SkillsClientExtension

    skills = _skills(tmp_path)
    _odd_skills(skills)
    server: Server | None = None
    transport: Any
    if transport_name == "stdio":
        transport = StdioTransport(
            command=sys.executable,
            args=["-m", "skill_executor.cli.main", "mcp", "--runtime", "local", "--skills-dir", str(skills)]
            + ["--data-dir", str(tmp_path / "data")],
            env={**_env(), "PYTHONPATH": str(REPO)},
            cwd=str(REPO),
        )
    else:
        server = Server(tmp_path, env={"SKILL_EXECUTOR_RUNTIME": "local", "SKILL_EXECUTOR_API_KEYS": "k-one"}).start()
        transport = StreamableHttpTransport(f"{server.url}/mcp", headers={"Authorization": "Bearer k-one"})

    async def main() -> None:
        async with FastClient(transport, extensions=[SkillsClientExtension()], timeout=60) as client:
            assert client.protocol_version == "2026-07-28"
            page = await client.list_skills_mcp()
            assert (page.ttl_ms, page.cache_scope, page.result_type) == (0, "private", "complete")
            listed = await client.list_skills()
            assert [s.uri for s in listed] == [
                "skill://csv-report/SKILL.md",
                "skill://file-bundle/SKILL.md",
                "skill://math-tools/SKILL.md",
            ]
            for entry in listed:
                assert await client.get_skill(entry.uri) == entry
                skill = await client.read_skill(entry.uri)  # every file verified against the entry
                assert skill.name == entry.frontmatter.name
                on_disk = skills / skill.name
                assert isinstance(entry.resources, list)
                for item in entry.resources:
                    path = on_disk / item.uri.removeprefix(f"skill://{skill.name}/")
                    assert item.size == path.stat().st_size
            blob = next(r for r in listed[0].resources if r.uri.endswith("blob.bin"))  # type: ignore[union-attr]
            assert blob.size == len(BINARY)
            for refused, why in (
                ("repaired", "not plain YAML"),
                ("crowded", "513 files"),
                ("huge", "'data.bin' is over 16777216 bytes"),
            ):
                with pytest.raises(MCPError) as caught:
                    await client.get_skill(f"skill://{refused}/SKILL.md")
                assert caught.value.error.code == -32602 and why in caught.value.error.message
            # Its files are still resources; an empty folder is a directory with no children.
            assert (await client.read_resource("skill://repaired/SKILL.md"))[0].text.startswith("---")
            empty = await client.session.send_request(
                Raw(method="resources/directory/read", params={"uri": "skill://math-tools/empty"}), TypeAdapter(dict)
            )
            assert empty["resources"] == []

    try:
        anyio.run(main)
    finally:
        if server is not None:
            server.stop()


CONFORMANCE_SCENARIOS = (
    "sep-2640-skills-enumeration",
    "sep-2640-skills-manifest",
    "sep-2640-skills-directory",
    "tasks-capability-negotiation",  # the Tasks extension (SEP-2663) for skill_run
    "caching",  # ttlMs/cacheScope on every cacheable result (SEP-2549)
    "server-stateless",  # the 2026-07-28 base protocol: server/discover, envelopes, subscriptions/listen
)
#: Checks that call the suite's own fixture tools (``slow_compute``, ``test_missing_capability``,
#: ``test_trigger_tool_change``, ...), which this server does not have.
NEEDS_FIXTURE_TOOLS = {
    "tasks-per-request-meta-opt-in",
    "sep-2575-server-rejects-undeclared-capability",
    "sep-2575-missing-capability-http-400",
    "sep-2575-server-sends-prompts-list-changed-on-subscription",
    "sep-2575-server-sends-tools-list-changed-on-subscription",
}


def test_conformance_suite(tmp_path: Path, npm_tools: Path) -> None:
    """The official conformance suite's SEP-2640 server scenarios against /mcp: every check passes
    (no failure, no warning, none skipped)."""
    from ..npmtools import conformance

    skills = _skills(tmp_path)
    _odd_skills(skills)
    server = Server(tmp_path, env={"SKILL_EXECUTOR_RUNTIME": "local"}).start()
    try:
        for scenario in CONFORMANCE_SCENARIOS:
            out = tmp_path / "conformance" / scenario
            done = subprocess.run(
                [*conformance(npm_tools), "server", "--url", f"{server.url}/mcp", "--scenario", scenario]
                + ["-o", str(out)],
                capture_output=True,
                text=True,
                timeout=180,
            )
            (found,) = out.glob("*/checks.json")
            checks = json.loads(found.read_text())
            statuses = {c["id"]: c["status"] for c in checks}
            bad = {
                c["id"]: c.get("errorMessage")
                for c in checks
                if c["status"] != "SUCCESS" and c["id"] not in NEEDS_FIXTURE_TOOLS
            }
            assert not bad, f"{scenario}: {bad}"
            if not NEEDS_FIXTURE_TOOLS & set(statuses):
                assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
            if scenario != "server-stateless":  # it sends malformed requests on purpose
                assert "wire-schema-valid" in statuses
            if scenario == "tasks-capability-negotiation":
                assert statuses["tasks-extension-advertised"] == "SUCCESS"
                assert statuses["sep-2663-tasks-methods-non-declaring"] == "SUCCESS"
            if scenario == "server-stateless":
                for check in ("sep-2575-server-sends-subscription-ack", "sep-2575-server-tags-subscription-id"):
                    assert statuses[check] == "SUCCESS"
            if scenario == "sep-2640-skills-enumeration":
                for check in ("sep-2640-resources-size-required", "sep-2640-skills-list-cache-attributes"):
                    assert statuses[check] == "SUCCESS"
    finally:
        server.stop()


class _TasksExtension(ClientExtension):
    """Declares the Tasks extension (SEP-2663) in the client's capabilities."""

    identifier = "io.modelcontextprotocol/tasks"


async def _task_done(client: Client, task_id: str, timeout: float = 60) -> dict[str, Any]:
    with anyio.fail_after(timeout):
        while True:
            state = await raw(client, "tasks/get", {"taskId": task_id})
            assert state["taskId"] == task_id and state["pollIntervalMs"] == 1000 and state["ttlMs"] is None
            if state["status"] != "working":
                return state
            await anyio.sleep(0.2)


def test_skill_run_as_task(tmp_path: Path) -> None:
    """A 2026-07-28 client that declares the Tasks extension gets a task handle for skill_run at
    once and polls it to the tool's result; tasks/cancel kills the run; without the extension,
    tasks/* are -32021 and skill_run answers as before; another key's task does not exist."""
    skills = _skills(tmp_path)
    server = Server(tmp_path, env={"SKILL_EXECUTOR_RUNTIME": "local", "SKILL_EXECUTOR_API_KEYS": "k-one,k-two"}).start()

    @asynccontextmanager
    async def modern(key: str, tasks: bool = True) -> AsyncIterator[Client]:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=120) as http:
            transport = streamable_http_client(f"{server.url}/mcp", http_client=http)
            extensions = [_TasksExtension()] if tasks else []
            async with Client(transport, mode="auto", read_timeout_seconds=120, extensions=extensions) as client:
                assert client.session.protocol_version == "2026-07-28"
                yield client

    def run(command: str) -> dict[str, Any]:
        return {"name": "skill_run", "arguments": {"skill": "math-tools", "command": command}}

    async def main() -> None:
        async with modern("k-one") as client:
            caps = client.session.server_capabilities
            assert caps is not None and caps.extensions is not None
            assert caps.extensions["io.modelcontextprotocol/tasks"] == {}
            started = time.monotonic()
            created = await raw(client, "tools/call", run("sleep 2; echo done"))
            assert time.monotonic() - started < 2  # a handle, not the result
            assert created["resultType"] == "task" and created["status"] == "working"
            assert created["createdAt"].endswith("Z") and created["ttlMs"] is None
            done = await _task_done(client, created["taskId"])
            assert done["status"] == "completed" and done["result"]["isError"] is False
            assert done["result"]["content"][0]["text"].splitlines()[1:] == ["stdout:", "done"]
            assert "stdout" not in done["result"]["structuredContent"]
            assert done["result"]["structuredContent"]["run_id"] == created["taskId"]  # the task is the run

            failed = await raw(client, "tools/call", run("exit 3"))
            ended = await _task_done(client, failed["taskId"])
            assert ended["status"] == "completed" and ended["result"]["isError"] is True  # a tool error, not "failed"
            assert ended["result"]["structuredContent"]["exit_code"] == 3

            long = await raw(client, "tools/call", run("sleep 120"))
            for method in ("tasks/update", "tasks/cancel"):  # empty acknowledgements
                ack = await raw(client, method, {"taskId": long["taskId"], "inputResponses": {}})
                assert ack["resultType"] == "complete" and set(ack) <= {"resultType", "_meta"}
            cancelled = await _task_done(client, long["taskId"], timeout=30)
            assert cancelled["status"] == "cancelled" and "result" not in cancelled
            for method in ("tasks/get", "tasks/cancel", "tasks/update"):
                with pytest.raises(MCPError) as caught:
                    await raw(client, method, {"taskId": "no-such-task", "inputResponses": {}})
                assert caught.value.error.code == -32602
        async with modern("k-two") as other:  # another key: the task does not exist
            with pytest.raises(MCPError) as caught:
                await raw(other, "tasks/get", {"taskId": created["taskId"]})
            assert caught.value.error.code == -32602
        async with modern("k-one", tasks=False) as plain:
            with pytest.raises(MCPError) as caught:
                await raw(plain, "tasks/get", {"taskId": created["taskId"]})
            assert caught.value.error.code == -32021
            assert caught.value.error.data == {
                "requiredCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}
            }
            result = await plain.call_tool("skill_run", {"skill": "math-tools", "command": "echo sync"})
            assert not result.is_error and result.content[0].text.splitlines()[1:] == ["stdout:", "sync"]  # type: ignore[union-attr]

    try:
        anyio.run(main)
    finally:
        server.stop()
    assert skills.exists()


def test_listen_on_modern_protocol(tmp_path: Path) -> None:
    """A 2026-07-28 client hears catalog changes on a subscriptions/listen stream: list changes
    when a skill is installed, resources/updated for a skill's changed SKILL.md."""
    from mcp.shared.subscriptions import PromptsListChanged, ResourcesListChanged, ResourceUpdated

    skills = _skills(tmp_path)

    async def main() -> None:
        async with stdio_client(tmp_path, "local", mode="auto") as client:
            caps = client.session.server_capabilities
            assert caps is not None and caps.resources is not None and caps.resources.list_changed
            uri = "skill://math-tools/SKILL.md"
            async with client.listen(
                resources_list_changed=True, prompts_list_changed=True, resource_subscriptions=[uri]
            ) as stream:
                assert stream.honored.resources_list_changed and stream.honored.resource_subscriptions == [uri]
                shutil.copytree(skills / "math-tools", skills / "more-math")
                text = (skills / "more-math" / "SKILL.md").read_text().replace("name: math-tools", "name: more-math")
                (skills / "more-math" / "SKILL.md").write_text(text)
                seen: list[Any] = []
                with anyio.fail_after(15):
                    async for event in stream:
                        seen.append(event)
                        if {type(e) for e in seen} >= {ResourcesListChanged, PromptsListChanged}:
                            break
                assert all(not isinstance(e, ResourceUpdated) for e in seen)
                listed = {e["uri"] for e in (await raw(client, "skills/list"))["skills"]}
                assert "skill://more-math/SKILL.md" in listed
                skill_md = skills / "math-tools" / "SKILL.md"
                skill_md.write_text(skill_md.read_text() + "\nOne more line.\n")
                with anyio.fail_after(15):
                    async for event in stream:
                        if isinstance(event, ResourceUpdated):
                            assert event.uri == uri
                            break
            got = await raw(client, "skills/get", {"uri": uri})
            digest = next(r["digest"] for r in got["skill"]["resources"] if r["uri"] == uri)
            assert digest == "sha256:" + hashlib.sha256(skill_md.read_bytes()).hexdigest()

    anyio.run(main)


def test_typescript_clients(tmp_path: Path, npm_tools: Path) -> None:
    """The official TypeScript SDK's SkillsClient (lists, gets, reads and verifies every file of
    every skill; one invalid entry would make it refuse the listing) and the Tasks extension's
    client (skill_run settled through its task) over HTTP with a key (tests/npm/clients.mjs)."""
    from ..npmtools import clients

    skills = _skills(tmp_path)
    _odd_skills(skills)
    server = Server(tmp_path, env={"SKILL_EXECUTOR_RUNTIME": "local", "SKILL_EXECUTOR_API_KEYS": "k-one"}).start()
    try:
        done = subprocess.run(
            [*clients(npm_tools), f"{server.url}/mcp", "k-one"], capture_output=True, text=True, timeout=180
        )
    finally:
        server.stop()
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert out["protocolVersion"] == "2026-07-28"
    assert out["supported"] and out["directoryRead"]
    assert out["listed"] == [
        "skill://csv-report/SKILL.md",
        "skill://file-bundle/SKILL.md",
        "skill://math-tools/SKILL.md",
    ]
    assert out["cache"] == [0, "private"]
    for uri, files in out["files"].items():
        name = uri.removeprefix("skill://").removesuffix("/SKILL.md")
        on_disk = sorted(p for p in (skills / name).rglob("*") if p.is_file())
        assert len(files) == len(on_disk) and all(verified for _, _, verified in files)
        for file_uri, size, _ in files:
            assert size == (skills / name / file_uri.removeprefix(f"skill://{name}/")).stat().st_size
    assert ["skill://math-tools/empty", "inode/directory"] in out["directory"]
    result = out["taskResult"]
    assert out["taskId"] == result["structuredContent"]["run_id"]  # settled through a task: the run
    assert result["isError"] is False and result["content"][0]["text"].splitlines()[1:] == ["stdout:", "from-a-task"]
    assert "stdout" not in result["structuredContent"]
