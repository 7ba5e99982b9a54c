"""MCP sessions over HTTP, attacked with a second key and an admin key, on real server processes.

Key A works honestly through the SDK's client; B (another key) and the admin send raw
requests naming A's session: alone, as a duplicate ``mcp-session-id`` header in either
order and either case, comma-joined -- for every request type. Then the cap per key, idle
expiry, and malformed session ids (over a raw socket: bytes an HTTP client will not send).
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from ..api_server import Server, api_runtime

KEY_A, KEY_B, ADMIN = "k-alice", "k-bob", "k-root"
KEYS = {"SKILL_EXECUTOR_API_KEYS": f"{KEY_A},{KEY_B}", "SKILL_EXECUTOR_ADMIN_KEYS": ADMIN}
VERSION = "2025-11-25"
ACCEPT = "application/json, text/event-stream"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
Headers = list[tuple[str, str]]


def _server(tmp: Path, **env: str) -> Iterator[Server]:
    server = Server(tmp, env={**KEYS, **env}).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    yield from _server(tmp_path)


def request(
    server: Server,
    method: str,
    key: str,
    body: dict[str, Any] | None = None,
    session: Headers | None = None,
    timeout: float = 30,
) -> httpx.Response:
    """``method`` on /mcp with ``key``; ``session``: the session header lines, exactly as sent."""
    accept = ACCEPT if method != "GET" else "text/event-stream"
    headers: Headers = [
        ("Authorization", f"Bearer {key}"),
        ("Accept", accept),
        ("MCP-Protocol-Version", VERSION),
        *(session or []),
    ]
    content = json.dumps(body).encode() if body is not None else None
    if content is not None:
        headers.append(("Content-Type", "application/json"))
    with httpx.Client(timeout=timeout) as http:
        # A GET stream that were accepted would not end: read only its head.
        with http.stream(method, f"{server.url}/mcp", headers=headers, content=content) as response:
            if response.status_code < 300 and method == "GET":
                return response
            response.read()
            return response


def messages(response: httpx.Response) -> list[dict[str, Any]]:
    """The JSON-RPC messages of a response (JSON, or an event stream's ``data:`` lines)."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        return [json.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data:")]
    return [response.json()]


def open_session(server: Server, key: str) -> httpx.Response:
    """A raw initialize (and, when it opened one, the session's notifications/initialized)."""
    opened = request(server, "POST", key, INITIALIZE)
    if opened.status_code == 200:
        done = request(server, "POST", key, INITIALIZED, [("mcp-session-id", opened.headers["mcp-session-id"])])
        assert done.status_code == 202, done.text
    return opened


def session_of(server: Server, key: str) -> str:
    opened = open_session(server, key)
    assert opened.status_code == 200, opened.text
    return opened.headers["mcp-session-id"]


def error_code(response: httpx.Response) -> str:
    try:
        code: str = response.json()["error"]["code"]
    except (httpx.ResponseNotRead, ValueError, KeyError, TypeError):
        return "(not an error of this service)"
    return code


def text(response: httpx.Response) -> str:
    try:
        return response.text
    except httpx.ResponseNotRead:
        return "(an event stream was opened)"


def works(server: Server, key: str, session: str) -> bool:
    listed = request(server, "POST", key, LIST, [("mcp-session-id", session)])
    return listed.status_code == 200 and "skill_run" in {t["name"] for t in messages(listed)[0]["result"]["tools"]}


@asynccontextmanager
async def honest(server: Server, key: str, seen: list[str]) -> AsyncIterator[Client]:
    """The SDK's client with ``key``; the session ids the server handed it go to ``seen``."""

    async def remember(response: httpx2.Response) -> None:
        if "mcp-session-id" in response.headers and response.headers["mcp-session-id"] not in seen:
            seen.append(response.headers["mcp-session-id"])

    async with httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {key}"}, timeout=120, event_hooks={"response": [remember]}
    ) as http:
        transport = streamable_http_client(f"{server.url}/mcp", http_client=http)
        async with Client(transport, mode="legacy", read_timeout_seconds=120) as client:
            yield client


def hostile_headers(victim: str, own: str) -> list[tuple[Headers, int, str]]:
    """Ways to name ``victim`` (another key's session), with the answer each must get."""
    name = "mcp-session-id"
    return [
        ([(name, victim)], 404, "session_not_found"),
        ([("MCP-SESSION-ID", victim)], 404, "session_not_found"),
        ([(name, own), (name, victim)], 400, "ambiguous_session_id"),
        ([(name, victim), (name, own)], 400, "ambiguous_session_id"),
        ([("Mcp-Session-Id", own), ("MCP-SESSION-ID", victim)], 400, "ambiguous_session_id"),
        ([("MCP-SESSION-ID", victim), ("mcp-session-id", own)], 400, "ambiguous_session_id"),
        ([(name, f"{own},{victim}")], 400, "ambiguous_session_id"),
        ([(name, f"{victim}, {own}")], 400, "ambiguous_session_id"),
        ([(name, victim), (name, victim)], 400, "ambiguous_session_id"),
    ]


def hostile_requests(in_flight: list[int]) -> list[tuple[str, dict[str, Any] | None]]:
    run = {"skill": "csv-report", "command": "echo hijacked > out/x.txt"}
    cancels = [
        (
            "POST",
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": i, "reason": "hijack"}},
        )
        for i in in_flight
    ]
    return [
        ("POST", INITIALIZE),
        ("POST", LIST),
        (
            "POST",
            {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "skill_run", "arguments": run}},
        ),
        (
            "POST",
            {
                "jsonrpc": "2.0",
                "id": 10,
                "method": "tools/call",
                "params": {"name": "artifact_get", "arguments": {"ref": "secret.txt"}},
            },
        ),
        *cancels,
        ("GET", None),
        ("DELETE", None),
    ]


@pytest.mark.skipif(api_runtime() != "docker", reason="needs the Docker engine")
def test_another_key_cannot_use_a_session(server: Server) -> None:
    """While A's run is in flight, B and the admin try every request type on A's session,
    with every way to name it; A's run finishes untouched and its session keeps working."""
    seen: list[str] = []
    answers: list[tuple[str, str, int, str]] = []
    leaked: list[str] = []

    def attack(victim: str) -> None:
        own = {KEY_B: session_of(server, KEY_B), ADMIN: session_of(server, ADMIN)}
        for key in (KEY_B, ADMIN):
            for headers, status, code in hostile_headers(victim, own[key]):
                for method, body in hostile_requests(list(range(0, 8))):
                    got = request(server, method, key, body, headers)
                    answers.append(
                        (key, f"{method} {body and body.get('method')} {headers}", got.status_code, text(got))
                    )
                    if got.status_code != status or error_code(got) != code:
                        leaked.append(
                            f"{key} {method} {body and body.get('method')} {headers}: "
                            f"{got.status_code} {text(got)[:300]}"
                        )
            # In its own session, the attacker's cancellations of A's request ids reach only its own requests.
            for i in range(0, 8):
                cancelled = request(
                    server,
                    "POST",
                    key,
                    {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": i}},
                    [("mcp-session-id", own[key])],
                )
                assert cancelled.status_code == 202, cancelled.text
            assert works(server, key, own[key])
            # In its own session, A's artifact is not there for B; the admin reaches it only over REST.
            got = request(
                server,
                "POST",
                key,
                {
                    "jsonrpc": "2.0",
                    "id": 3,
                    "method": "tools/call",
                    "params": {"name": "artifact_get", "arguments": {"ref": "secret.txt"}},
                },
                [("mcp-session-id", own[key])],
            )
            assert "artifact_not_found" in messages(got)[0]["result"]["content"][0]["text"]

    async def main() -> None:
        running = anyio.Event()
        run_ids: list[str] = []

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            if message and message.startswith("run ") and message.endswith(": running"):
                run_ids.append(message.split()[1].rstrip(":"))
                running.set()

        async with honest(server, KEY_A, seen) as client:
            put = await client.call_tool("artifact_put", {"name": "secret.txt", "text": "A's secret"})
            assert not put.is_error
            result: list[Any] = []

            async def call() -> None:
                result.append(
                    await client.call_tool(
                        "skill_run",
                        {
                            "skill": "csv-report",
                            "command": "sleep 6; echo A-result",
                        },
                        progress_callback=on_progress,
                    )
                )

            async with anyio.create_task_group() as group:
                group.start_soon(call)
                with anyio.fail_after(90):
                    await running.wait()
                assert len(seen) == 1
                await anyio.to_thread.run_sync(attack, seen[0])
            assert not leaked, "\n".join(leaked)
            assert not result[0].is_error, result[0].content
            assert result[0].content[0].text.splitlines()[1:] == ["stdout:", "A-result"]  # type: ignore[union-attr]
            assert result[0].structured_content["exit_code"] == 0 and result[0].structured_content["signal"] is None
            # A's session is A's still: it answers, and nothing of A's showed up for the others.
            got = await client.call_tool("artifact_get", {"ref": "secret.txt"})
            assert not got.is_error and got.structured_content["size"] == len("A's secret"), got.content
            assert await anyio.to_thread.run_sync(works, server, KEY_A, seen[0])
        # The run is A's on the REST API too.
        run = httpx.get(f"{server.url}/v1/runs/{run_ids[0]}", headers={"Authorization": f"Bearer {KEY_B}"})
        assert run.status_code == 404

    anyio.run(main)
    assert not leaked, "\n".join(leaked)
    assert len(answers) == 2 * len(hostile_headers("a", "b")) * len(hostile_requests(list(range(8)))) == 252
    assert not any("A-result" in text or "A's secret" in text for *_, text in answers)


def test_sessions_per_key(tmp_path: Path) -> None:
    """A key holds at most MCP_SESSIONS_PER_KEY sessions (429 past it); failed opens do not
    count; a DELETE frees a slot; other keys are not affected, and cannot free A's."""
    for server in _server(tmp_path, SKILL_EXECUTOR_MCP_SESSIONS_PER_KEY="3", SKILL_EXECUTOR_RUNTIME="local"):
        # Requests that open nothing take no slot.
        for _ in range(5):
            assert request(server, "POST", KEY_A, LIST).status_code == 400  # not an initialize
            assert request(server, "POST", KEY_A, {"jsonrpc": "2.0"}).status_code == 400
        sessions = [session_of(server, KEY_A) for _ in range(3)]
        refused = open_session(server, KEY_A)
        assert refused.status_code == 429 and error_code(refused) == "mcp_session_limit"
        assert "mcp-session-id" not in refused.headers
        # Any request that would open a session is refused at the cap, and the open ones still work.
        assert request(server, "POST", KEY_A, LIST).status_code == 429
        assert all(works(server, KEY_A, s) for s in sessions)

        # Another key is not affected and cannot end A's sessions.
        other = session_of(server, KEY_B)
        for key in (KEY_B, ADMIN):
            assert request(server, "DELETE", key, None, [("mcp-session-id", sessions[0])]).status_code == 404
        assert open_session(server, KEY_A).status_code == 429

        # A DELETE frees its slot; the ended session is gone.
        assert request(server, "DELETE", KEY_A, None, [("mcp-session-id", sessions[0])]).status_code == 200
        assert request(server, "POST", KEY_A, LIST, [("mcp-session-id", sessions[0])]).status_code == 404
        sessions[0] = session_of(server, KEY_A)
        assert open_session(server, KEY_A).status_code == 429

        # Many opening at once: exactly the cap is admitted.
        async def race() -> list[int]:
            async with httpx.AsyncClient(timeout=60) as http:
                statuses: list[int] = []

                async def one() -> None:
                    got = await http.post(
                        f"{server.url}/mcp",
                        json=INITIALIZE,
                        headers={"Authorization": f"Bearer {ADMIN}", "Accept": ACCEPT},
                    )
                    statuses.append(got.status_code)

                async with anyio.create_task_group() as group:
                    for _ in range(10):
                        group.start_soon(one)
                return statuses

        assert sorted(anyio.run(race)) == [200] * 3 + [429] * 7
        assert works(server, KEY_B, other)

        # The SDK's client ends its session (DELETE) when it closes: one after another, none is refused.
        for session in sessions:
            assert request(server, "DELETE", KEY_A, None, [("mcp-session-id", session)]).status_code == 200

        async def honest_clients() -> None:
            for _ in range(5):
                seen: list[str] = []
                async with honest(server, KEY_A, seen) as client:
                    assert "skill_run" in {t.name for t in (await client.list_tools()).tools}

        anyio.run(honest_clients)
        assert [open_session(server, KEY_A).status_code for _ in range(4)] == [200, 200, 200, 429]


def test_idle_sessions_expire(tmp_path: Path) -> None:
    """With MCP_SESSION_IDLE_SECONDS=2, an idle session is closed: 404, and its slot is free;
    a session in use is never closed (nor handed to anyone else)."""
    for server in _server(
        tmp_path,
        SKILL_EXECUTOR_MCP_SESSIONS_PER_KEY="2",
        SKILL_EXECUTOR_MCP_SESSION_IDLE_SECONDS="2",
        SKILL_EXECUTOR_RUNTIME="local",
    ):
        idle, busy = session_of(server, KEY_A), session_of(server, KEY_A)
        assert open_session(server, KEY_A).status_code == 429
        started = time.monotonic()
        reopened = None
        while reopened is None and time.monotonic() - started < 60:
            assert works(server, KEY_A, busy)  # in use every half second: never idle for 2 s
            got = open_session(server, KEY_A)
            if got.status_code == 200:
                reopened = got.headers["mcp-session-id"]
            else:
                assert got.status_code == 429
                time.sleep(0.5)
        assert reopened is not None, "the idle session's slot was never freed"
        assert time.monotonic() - started > 1.5
        gone = request(server, "POST", KEY_A, LIST, [("mcp-session-id", idle)])
        assert gone.status_code == 404 and error_code(gone) == "session_not_found"
        assert works(server, KEY_A, busy)
        assert request(server, "POST", KEY_B, LIST, [("mcp-session-id", busy)]).status_code == 404


def raw_status(server: Server, head: bytes) -> tuple[int, bytes]:
    """Send ``head`` (a request without a body) over a socket; the status and the response."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(head)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        except TimeoutError:
            pass
    return int(data.split(b" ", 2)[1]), data


def raw_mcp(server: Server, method: bytes, extra: bytes) -> tuple[int, str]:
    """A request to /mcp with the header lines ``extra``, as bytes; its status and error code."""
    body = json.dumps(LIST).encode() if method == b"POST" else b""
    head = (
        method
        + b" /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nAccept: "
        + ACCEPT.encode()
        + b"\r\nContent-Type: application/json\r\nMCP-Protocol-Version: "
        + VERSION.encode()
        + b"\r\n"
        + extra
        + b"Content-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )
    status, response = raw_status(server, head)
    try:
        code = json.loads(response.split(b"\r\n\r\n", 1)[1])["error"]["code"]
    except (ValueError, KeyError, IndexError, TypeError):
        code = response[:300].decode("latin-1")
    return status, code


@pytest.mark.parametrize(
    "value",
    [
        b"",
        b" ",
        b"a" * 129,
        b"a" * 6000,
        b"a" * 70000,
        "s\u00e9ssion".encode(),
        "s\u00e9ssion".encode("latin-1"),
        b"\xff\xfe\xfd",
        b"\x00ab",
        b"ab\x01cd",
        b"ab\x7fcd",
        b"ab\tcd",
        b"ab cd",
        b"ab,",
        b",",
    ],
    ids=lambda v: repr(v[:12]) + f"*{len(v)}",
)
def test_malformed_session_ids(value: bytes, request_server: Server) -> None:
    """A session id that is no id is a 400 with a stable code for every method: never a 5xx, never a hang."""
    auth = b"Authorization: Bearer " + KEY_A.encode() + b"\r\n"
    for method in (b"POST", b"GET", b"DELETE"):
        status, code = raw_mcp(request_server, method, auth + b"mcp-session-id: " + value + b"\r\n")
        assert (status, code) in {(400, "invalid_session_id"), (400, "ambiguous_session_id"), (400, "invalid_http")}, (
            status,
            code,
        )


def test_one_authorization_header(request_server: Server) -> None:
    """Two bearer tokens are refused, whichever comes first: the caller is never a guess."""
    one, two = b"Authorization: Bearer " + KEY_A.encode() + b"\r\n", b"authorization: Bearer nope\r\n"
    for extra in (one + two, two + one, one + one):
        assert raw_mcp(request_server, b"POST", extra) == (400, "ambiguous_authorization")


@pytest.fixture(scope="module")
def request_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from _server(tmp_path_factory.mktemp("malformed"), SKILL_EXECUTOR_RUNTIME="local")


def test_owner_map_is_the_sdks() -> None:
    """In process, against the SDK's own bookkeeping (the hooks are its private methods: this
    fails first if an SDK upgrade moves them): after opens, a refused open, failed opens, a
    DELETE and an idle expiry, the owners are exactly the SDK's live sessions, each closed
    session is reported once, and no slot is left taken."""
    from mcp.server.lowlevel.server import Server as Lowlevel

    from skill_executor.access import Principal
    from skill_executor.mcp.sessions import McpSessionLimit, Sessions, bind_caller

    alice, bob = Principal("alice", False), Principal("bob", True)
    closed: list[str] = []
    sessions = Sessions(Lowlevel("t"), idle_seconds=1, per_key=2, on_close=closed.append)

    def same() -> bool:
        return set(sessions._owners) == set(sessions._server_instances)

    async def call(
        who: Principal, method: str, body: dict[str, Any] | None = None, session: str | None = None
    ) -> tuple[int, dict[bytes, bytes]]:
        headers = [
            (b"accept", ACCEPT.encode()),
            (b"content-type", b"application/json"),
            (b"mcp-protocol-version", VERSION.encode()),
        ]
        if session is not None:
            headers.append((b"mcp-session-id", session.encode()))
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.4"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": "/mcp",
            "raw_path": b"/mcp",
            "query_string": b"",
            "root_path": "",
            "headers": headers,
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 80),
        }
        bind_caller(scope, who)
        pending = [{"type": "http.request", "body": json.dumps(body).encode() if body else b"", "more_body": False}]
        start: dict[str, Any] = {}

        async def receive() -> dict[str, Any]:
            if pending:
                return pending.pop()
            await anyio.sleep_forever()
            raise AssertionError

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                start.update(message)

        await sessions.handle_request(scope, receive, send)
        return start["status"], dict(start.get("headers") or [])

    async def main() -> None:
        async with sessions.run():
            opened = []
            for _ in range(2):
                status, headers = await call(alice, "POST", INITIALIZE)
                assert status == 200
                opened.append(headers[b"mcp-session-id"].decode())
                assert same()
            with pytest.raises(McpSessionLimit):
                await call(alice, "POST", INITIALIZE)
            assert same() and sessions.open_count("alice") == 2
            for body in (LIST, {"jsonrpc": "2.0"}):  # opens nothing
                assert (await call(bob, "POST", body))[0] == 400
                assert same() and sessions.open_count("bob") == 0
            # The SDK's own check, behind ours: another caller's requests on the session are refused.
            assert (await call(bob, "DELETE", session=opened[0]))[0] == 404
            assert (await call(alice, "DELETE", session=opened[0]))[0] == 200
            assert same() and opened[0] in closed and sessions.open_count("alice") == 1
            with anyio.fail_after(30):
                while opened[1] in sessions._server_instances:
                    await anyio.sleep(0.1)
            assert same() and sessions.open_count("alice") == 0 and sessions.owner(opened[1]) is None
            await anyio.sleep(0.2)
        assert sorted(closed) == sorted(set(closed)) and set(opened) <= set(closed)
        assert len(closed) == 4  # the two sessions and the two failed opens

    anyio.run(main)


def test_list_changed_reaches_open_http_sessions(tmp_path: Path) -> None:
    """The catalog's change notifications reach an open HTTP session (registered by its id,
    forgotten when it ends): a session that ended before is no obstacle."""
    import shutil

    import mcp_types as types

    for server in _server(tmp_path, SKILL_EXECUTOR_RUNTIME="local"):
        changed = anyio.Event()

        async def on_message(message: Any) -> None:
            if isinstance(message, types.ResourceListChangedNotification):
                changed.set()

        async def main() -> None:
            seen: list[str] = []
            async with honest(server, KEY_B, seen) as ended:
                await ended.list_resources()
            async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {KEY_A}"}, timeout=120) as http:
                transport = streamable_http_client(f"{server.url}/mcp", http_client=http)
                async with Client(
                    transport, mode="legacy", read_timeout_seconds=120, message_handler=on_message
                ) as client:
                    await client.list_resources()
                    skills = server.skills_dir
                    shutil.copytree(skills / "math-tools", skills / "more-math")
                    text = (skills / "more-math" / "SKILL.md").read_text()
                    (skills / "more-math" / "SKILL.md").write_text(text.replace("name: math-tools", "name: more-math"))
                    with anyio.fail_after(30):
                        await changed.wait()
                    uris = {str(r.uri) for r in (await client.list_resources()).resources}
                    assert "skill://more-math/SKILL.md" in uris

        anyio.run(main)


def test_session_settings() -> None:
    from pydantic import ValidationError

    from skill_executor.config import Settings

    assert (Settings().mcp_sessions_per_key, Settings().mcp_session_idle_seconds) == (32, 1800.0)
    for bad in ({"mcp_sessions_per_key": 0}, {"mcp_session_idle_seconds": 0}, {"mcp_session_idle_seconds": "inf"}):
        with pytest.raises(ValidationError):
            Settings(**bad)


# -- abandoned requests ---------------------------------------------------------------------


def access_lines(server: Server) -> list[dict[str, Any]]:
    text = (server.base / f"server-{server.port}.log").read_text(errors="replace")
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_abandoned_calls_are_no_server_errors(server: Server) -> None:
    """A client that gives up on a tools/call mid-run -- cancelling it (2026-07-28: closing its
    stream; 2025-11-25: notifications/cancelled) or timing out -- is no 500 and no traceback in
    the log: the request is logged as the client's (499, client_gone) and its run is cancelled."""
    run = {"skill": "math-tools", "command": "echo started; sleep 60"}

    async def scenario() -> None:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {KEY_A}"}, timeout=120) as http:
            transport = streamable_http_client(f"{server.url}/mcp", http_client=http)
            async with Client(transport, mode="auto", read_timeout_seconds=120) as modern:
                assert modern.protocol_version == "2026-07-28"
                with anyio.move_on_after(3):  # the agent gives up: its task is cancelled
                    await modern.call_tool("skill_run", run)
            transport = streamable_http_client(f"{server.url}/mcp", http_client=http)
            async with Client(transport, mode="auto", read_timeout_seconds=3) as timed:
                with pytest.raises(Exception, match="timed out"):  # the client's own read timeout
                    await timed.call_tool("skill_run", run)
        async with honest(server, KEY_A, []) as legacy:
            with anyio.move_on_after(3):
                await legacy.call_tool("skill_run", run)

    anyio.run(scenario)
    with httpx.Client(headers={"Authorization": f"Bearer {KEY_A}"}) as http:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            listed = http.get(f"{server.url}/v1/runs", params={"skill": "math-tools"}).json()["runs"]
            if len(listed) == 3 and all(r["status"] == "cancelled" for r in listed):
                break
            time.sleep(0.2)
        assert [r["status"] for r in listed] == ["cancelled"] * 3, listed
    time.sleep(0.5)  # the last access lines
    lines = access_lines(server)
    mcp = [x for x in lines if x.get("logger") == "skill_executor.access" and x.get("path") == "/mcp"]
    assert [x for x in mcp if x["status"] >= 500] == []
    abandoned = [x for x in mcp if x.get("client_gone")]
    assert [x["status"] for x in abandoned if x["method"] == "POST"][:2] == [499, 499], abandoned
    assert not [x for x in lines if x.get("level") in ("error", "critical")], [x["message"] for x in lines]
    text = (server.base / f"server-{server.port}.log").read_text(errors="replace")
    assert "Traceback" not in text and "Exception in ASGI application" not in text
