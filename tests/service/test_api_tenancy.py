"""Tenancy and the HTTP front, against real server processes.

Two keys and an admin: a key cannot read, stream, cancel or reuse another key's runs,
read, list or stage its artifacts, or see its session work; the admin can, and the
audit log says so.  Idempotent replays come before validation and admission.  With no
keys (loopback development) the Host and Origin checks keep web pages out; malformed
client input anywhere on the API surface is a 4xx in the JSON error shape.
"""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from skill_executor_client import ApiError, Client, RunResult

from ..api_server import Server, free_port
from ..conftest import REPO
from ..service.test_api import expect_error, skill_zip

KEY_A, KEY_B, ADMIN = "tenant-a-key-111", "tenant-b-key-222", "admin-key-333"
APP_ORIGIN = "http://app.example"


def key_id(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:12]


A, B, ADMIN_ID = key_id(KEY_A), key_id(KEY_B), key_id(ADMIN)


@pytest.fixture(scope="module")
def tenants(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(
        tmp_path_factory.mktemp("tenants"),
        env={
            "SKILL_EXECUTOR_API_KEYS": f"{KEY_A},{KEY_B}",
            "SKILL_EXECUTOR_ADMIN_KEYS": ADMIN,
            "SKILL_EXECUTOR_ALLOWED_ORIGINS": APP_ORIGIN,
            "SKILL_EXECUTOR_POOL_SIZE": "0",
        },
    )
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def open_local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """No keys, local runtime: for checks of the HTTP front where the runtime does not matter."""
    srv = Server(tmp_path_factory.mktemp("open"), env={"SKILL_EXECUTOR_RUNTIME": "local"})
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def clients(tenants: Server) -> Iterator[tuple[Client, Client, Client]]:
    with (
        Client(tenants.url, api_key=KEY_A) as a,
        Client(tenants.url, api_key=KEY_B) as b,
        Client(tenants.url, api_key=ADMIN) as admin,
    ):
        yield a, b, admin


def audit_lines(server: Server) -> list[dict[str, Any]]:
    time.sleep(0.2)
    lines = [json.loads(line) for line in server.log().splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("logger") == "skill_executor.audit"]


def error_of(call: Any) -> ApiError:
    try:
        call()
    except ApiError as exc:
        return exc
    raise AssertionError("expected an ApiError")


# -- runs ---------------------------------------------------------------------------------------


def test_another_keys_run_is_not_found_and_the_admin_is_audited(
    clients: tuple[Client, Client, Client], tenants: Server
) -> None:
    a, b, admin = clients
    accepted = a.submit({"skill": "math-tools", "command": "echo started; sleep 30"})
    run_id = accepted.run_id
    for event in a.events(run_id):
        if event.event == "stdout":
            break
    assert a.get_run(run_id).owner == A
    absent = error_of(lambda: b.get_run("0" * 11 + "-" + "0" * 24))
    for call in (lambda: b.get_run(run_id), lambda: b.cancel_run(run_id), lambda: list(b.events(run_id))):
        refused = error_of(call)
        # Refusal looks exactly like absence: same status, same code, same message shape.
        assert (refused.status, refused.code) == (absent.status, absent.code) == (404, "run_not_found")
        assert refused.message == f"no run {run_id!r}"
    assert a.get_run(run_id).status == "running"  # B's cancel did nothing

    response = httpx.get(
        f"{tenants.url}/v1/runs/{run_id}", headers={"Authorization": f"Bearer {ADMIN}", "X-Request-ID": "audit-read-1"}
    )
    assert response.status_code == 200 and response.json()["owner"] == A
    admin.cancel_run(run_id)
    while a.get_run(run_id).status not in ("cancelled", "completed", "failed"):
        time.sleep(0.05)
    assert a.get_run(run_id).status == "cancelled"

    lines = audit_lines(tenants)
    read = [x for x in lines if x["action"] == "run.read" and x["target"] == run_id]
    assert read and read[0]["cross_tenant"] is True and read[0]["principal"] == ADMIN_ID and read[0]["owner"] == A
    assert read[0]["request_id"] == "audit-read-1"
    assert any(x["action"] == "run.cancel" and x["target"] == run_id and x["principal"] == ADMIN_ID for x in lines)
    # The owner's own reads are not cross-tenant: no audit line names A as principal.
    assert not [x for x in lines if x["principal"] in (A, B)]
    assert KEY_A not in tenants.log() and ADMIN not in tenants.log()


def test_admin_streams_another_keys_run(clients: tuple[Client, Client, Client], tenants: Server) -> None:
    a, _, admin = clients
    run_id = a.submit({"skill": "math-tools", "command": "echo streamed"}).run_id
    events = list(admin.events(run_id))
    assert events[-1].event == "result" and events[-1].data["stdout"] == "streamed\n"
    assert any(x["action"] == "run.events" and x["target"] == run_id for x in audit_lines(tenants))


def test_run_list_shows_only_the_callers_runs(clients: tuple[Client, Client, Client], tenants: Server) -> None:
    a, b, admin = clients
    session = f"list-{time.time_ns()}"
    since = time.time()  # the server's clock is this one: no earlier test's run counts
    mine = [a.run({"skill": "math-tools", "command": f"echo {i}", "session": session}).run_id for i in range(3)]
    failed = a.run({"skill": "math-tools", "command": "exit 3"}).run_id
    theirs = b.run({"skill": "math-tools", "command": "echo b", "session": session}).run_id

    listed = a.list_runs(created_after=since)
    assert [r.run_id for r in listed.runs] == [failed, *reversed(mine)] and listed.next_cursor is None
    assert all(r.owner == A and "result" not in r.model_dump() and "request" not in r.model_dump() for r in listed.runs)
    assert listed.runs[0].status == "completed"  # the command failed; the run did not
    ids: list[str] = []
    cursor = None
    while True:  # cursor pages of one
        page = a.list_runs(session=session, limit=1, cursor=cursor)
        ids += [r.run_id for r in page.runs]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert ids == list(reversed(mine))
    assert [r.run_id for r in b.list_runs(session=session).runs] == [theirs]
    assert b.list_runs(skill="math-tools", status=["queued", "running"], created_after=since).runs == []
    # B's cursor from its own listing reveals nothing of A's: positions only, always B's runs
    assert [r.run_id for r in b.list_runs(cursor=page_cursor(a, since)).runs] == [
        r.run_id for r in b.list_runs().runs if r.created_at < a.get_run(mine[-1]).created_at
    ]
    assert admin.list_runs(session=session).runs == []  # an admin's own key has none
    audited = admin.list_runs(session=session, owner=A).runs
    assert [r.run_id for r in audited] == list(reversed(mine))
    assert any(x["action"] == "run.list" and x["owner"] == A for x in audit_lines(tenants))
    with expect_error(404, "owner_not_found"):
        a.list_runs(owner=B)
    with expect_error(400, "invalid_cursor"):
        a.list_runs(cursor="garbage")
    with expect_error(422):
        a.list_runs(limit=101)
    with expect_error(422):
        a.list_runs(status="sleeping")
    assert httpx.get(f"{tenants.url}/v1/runs").status_code == 401
    # a started run is listed as running (its record says queued until it ends)
    started = a.submit({"skill": "math-tools", "command": "echo started; sleep 30"}).run_id
    for event in a.events(started):
        if event.event == "stdout":
            break
    try:
        assert [r.run_id for r in a.list_runs(status="running", created_after=since).runs] == [started]
        assert a.list_runs(status="queued", created_after=since).runs == []
    finally:
        a.cancel_run(started)
    deadline = time.monotonic() + 15
    while a.list_runs(limit=1).runs[0].status != "cancelled" and time.monotonic() < deadline:
        time.sleep(0.1)
    last = a.list_runs(limit=1).runs[0]
    assert (last.run_id, last.status) == (started, "cancelled")


def page_cursor(client: Client, since: float) -> str:
    cursor = client.list_runs(created_after=since, limit=1).next_cursor
    assert isinstance(cursor, str)
    return cursor


# -- artifacts ----------------------------------------------------------------------------------


def test_artifacts_are_per_key(clients: tuple[Client, Client, Client], tenants: Server) -> None:
    a, b, admin = clients
    first = a.put_artifact("private/plan.txt", b"a's plan", mime_type="text/plain")
    assert first.owner == A and first.version == 1
    a.put_artifact("only-a.txt", b"a only")
    for call, code in (
        (lambda: b.get_artifact("private/plan.txt"), "artifact_not_found"),
        (lambda: b.artifact_versions("private/plan.txt"), "artifact_not_found"),
        (lambda: b.get_artifact("private/plan.txt", owner=A), "owner_not_found"),
        (lambda: b.list_artifacts(owner=A), "owner_not_found"),
    ):
        refused = error_of(call)
        assert (refused.status, refused.code) == (404, code)
    assert "private/plan.txt" not in {x.name for x in b.list_artifacts().artifacts}
    # B's namespace is its own: the same name starts at version 1.
    mine = b.put_artifact("private/plan.txt", b"b's plan")
    assert mine.version == 1 and mine.owner == B
    assert a.get_artifact("private/plan.txt") == b"a's plan"
    assert b.get_artifact("private/plan.txt", owner=B) == b"b's plan"  # one's own id is fine
    with expect_error(400, "invalid_owner"):
        admin.list_artifacts(owner="../etc")

    # Staging artifact:// takes the caller's own artifact, never another key's.
    staged = b.run(
        {"skill": "math-tools", "command": "cat inputs/plan.txt", "inputs": [{"from": "artifact://private/plan.txt"}]}
    )
    assert staged.stdout == "b's plan"
    with expect_error(404, "artifact_not_found"):
        b.run({"skill": "math-tools", "command": "true", "inputs": [{"from": "artifact://only-a.txt"}]})

    # Outputs saved by a run are the runner's.
    saved = b.run(
        {
            "skill": "math-tools",
            "command": "echo out > out/r.txt",
            "outputs": {"globs": ["out/r.txt"], "save": True, "name_template": "saved/{name}"},
        }
    )
    assert saved.artifact_files[0].ref == "artifact://saved/r.txt@1"
    with expect_error(404, "artifact_not_found"):
        a.get_artifact("saved/r.txt")

    # The admin reads and lists A's with ?owner=, audited.
    assert admin.get_artifact("private/plan.txt", owner=A) == b"a's plan"
    assert {x.name for x in admin.list_artifacts(owner=A).artifacts} >= {"private/plan.txt", "only-a.txt"}
    with expect_error(404, "artifact_not_found"):
        admin.get_artifact("private/plan.txt")  # the admin's own namespace is empty
    lines = audit_lines(tenants)
    assert any(
        x["action"] == "artifact.read"
        and x["owner"] == A
        and x["target"] == "private/plan.txt"
        and x["principal"] == ADMIN_ID
        for x in lines
    )
    assert any(x["action"] == "artifact.list" and x["owner"] == A for x in lines)

    # The CLI works on the store directly: the local tenant, or --owner KEY_ID.
    cli = [
        sys.executable,
        "-m",
        "skill_executor.cli.main",
        "artifacts",
        "get",
        "private/plan.txt",
        "--data-dir",
        str(tenants.data_dir),
    ]
    assert subprocess.run([*cli, "--owner", A], cwd=REPO, capture_output=True, timeout=60).stdout == b"a's plan"
    local = subprocess.run(cli, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert local.returncode == 2 and "artifact_not_found" in local.stdout + local.stderr


def test_sessions_are_per_key(clients: tuple[Client, Client, Client], tenants: Server) -> None:
    a, b, _ = clients
    wrote = a.run(
        {
            "skill": "math-tools",
            "session": "shared-name",
            "command": "echo a-secret > $WORK_DIR/note.txt && ls $WORK_DIR",
        }
    )
    assert wrote.exit_code == 0 and "note.txt" in wrote.stdout
    looked = b.run(
        {
            "skill": "math-tools",
            "session": "shared-name",
            "command": "ls -A $WORK_DIR; cat $WORK_DIR/note.txt; echo b-own > $WORK_DIR/mine.txt",
        }
    )
    assert "a-secret" not in looked.stdout and "note.txt" not in looked.stdout
    assert "No such file" in looked.stderr  # cat found nothing
    again = a.run(
        {"skill": "math-tools", "session": "shared-name", "command": "ls -A $WORK_DIR; cat $WORK_DIR/note.txt"}
    )
    assert again.stdout.split() == ["inputs", "note.txt", "a-secret"]  # no mine.txt from B
    with expect_error(404, "input_not_found"):  # nor can B stage A's session work by name
        b.run(
            {
                "skill": "math-tools",
                "session": "shared-name",
                "command": "true",
                "inputs": [{"from": "workspace://work/note.txt"}],
            }
        )
    sessions = tenants.data_dir / "workspaces" / "sessions"
    assert (sessions / A / "shared-name").is_dir() and (sessions / B / "shared-name").is_dir()


# -- idempotency --------------------------------------------------------------------------------


def test_idempotent_replay_comes_before_validation_and_admission(tmp_path: Path) -> None:
    srv = Server(
        tmp_path,
        env={
            "SKILL_EXECUTOR_API_KEYS": f"{KEY_A},{KEY_B}",
            "SKILL_EXECUTOR_ADMIN_KEYS": ADMIN,
            "SKILL_EXECUTOR_MAX_CONCURRENT_RUNS": "1",
            "SKILL_EXECUTOR_MAX_QUEUED_RUNS": "0",
            "SKILL_EXECUTOR_POOL_SIZE": "0",
        },
    ).start()
    try:
        with (
            Client(srv.url, api_key=KEY_A) as a,
            Client(srv.url, api_key=KEY_B) as b,
            Client(srv.url, api_key=ADMIN) as admin,
        ):
            admin.install_skill(skill_zip("short-lived"))
            request = {"skill": "short-lived", "command": "bash scripts/hi.sh"}
            first = a.run(request, idempotency_key="retry-1")
            assert first.stdout == "hello from upload\n"

            blocker = a.submit({"skill": "math-tools", "command": "echo busy; sleep 30"})
            for event in a.events(blocker.run_id):
                if event.event == "stdout":
                    break
            with expect_error(429, "busy"):
                a.run({"skill": "math-tools", "command": "true"})
            admin.delete_skill("short-lived")
            with expect_error(404, "skill_not_found"):
                a.run(request)

            # Full limiter and the skill gone: the replay still answers with the first run.
            headers = {"Authorization": f"Bearer {KEY_A}", "Idempotency-Key": "retry-1"}
            replay = httpx.post(f"{srv.url}/v1/runs", json=request, headers=headers, timeout=30)
            assert replay.status_code == 200, replay.text
            assert RunResult.model_validate(replay.json()) == first and replay.headers["idempotent-replayed"] == "true"
            queued = a.submit(request, idempotency_key="retry-1")
            assert queued.model_dump() == {"run_id": first.run_id, "status": "completed", "replayed": True}
            with expect_error(409, "idempotency_key_reused"):
                a.run({**request, "command": "echo other"}, idempotency_key="retry-1")
            # Keys are per API key: B's "retry-1" is a new request (refused on its own merits).
            with expect_error(404, "skill_not_found"):
                b.run(request, idempotency_key="retry-1")
            with expect_error(404, "run_not_found"):
                b.get_run(first.run_id)
            a.cancel_run(blocker.run_id)
    finally:
        srv.stop()


# -- one submit path: tools/call is POST /v1/runs -----------------------------------------------------


def test_tool_calls_are_authorized_and_owned_like_runs(clients: tuple[Client, Client, Client]) -> None:
    a, b, admin = clients
    host = {"skill": "math-tools", "command": "cat inputs/hostname", "inputs": [{"from": "host:///etc/hostname"}]}
    for who, status, code in ((a, 403, "admin_required"), (admin, 403, "host_input_refused")):
        refused = error_of(lambda: who.run(host))
        assert (refused.status, refused.code) == (status, code)
        tool = who.call_tool("skill_run", host)
        same = {
            "code": refused.code,
            "message": refused.message,
            **({"details": refused.details} if refused.details else {}),
        }
        assert tool.is_error and tool.data == {"error": same}
        assert tool.content == f"error ({refused.code}): {refused.message}"
    ran = a.call_tool("skill_run", {"skill": "math-tools", "command": "echo via tool"})
    assert not ran.is_error and ran.data["stdout"] == "via tool\n"
    run_id = ran.data["run_id"]
    assert a.get_run(run_id).owner == A  # recorded by the run manager, owned by the caller
    with expect_error(404, "run_not_found"):
        b.get_run(run_id)
    # A tool run stages the caller's artifacts, like POST /v1/runs.
    a.put_artifact("tool-input.txt", b"a's input")
    staged = a.call_tool(
        "skill_run",
        {
            "skill": "math-tools",
            "command": "cat inputs/tool-input.txt",
            "inputs": [{"from": "artifact://tool-input.txt"}],
        },
    )
    assert staged.data["stdout"] == "a's input"
    refused = b.call_tool(
        "skill_run", {"skill": "math-tools", "command": "true", "inputs": [{"from": "artifact://tool-input.txt"}]}
    )
    assert refused.is_error and refused.data["error"]["code"] == "artifact_not_found"


def test_waiting_tool_calls_hold_no_request_threads(tmp_path: Path) -> None:
    """More skill_run tool calls in flight than the request thread pool has threads
    (40): a plain request is still answered at once (the calls are awaited)."""
    import asyncio

    calls = 44
    srv = Server(
        tmp_path,
        env={
            "SKILL_EXECUTOR_RUNTIME": "local",
            "SKILL_EXECUTOR_MAX_CONCURRENT_RUNS": str(calls),
            "SKILL_EXECUTOR_MAX_QUEUED_RUNS": "0",
        },
    ).start()

    async def scenario() -> tuple[float, list[dict[str, Any]]]:
        async with httpx.AsyncClient(
            base_url=srv.url, timeout=60, limits=httpx.Limits(max_connections=calls + 5)
        ) as http:
            call = {"name": "skill_run", "arguments": {"skill": "math-tools", "command": "sleep 4; echo done"}}
            pending = [asyncio.create_task(http.post("/v1/tools/call", json=call)) for _ in range(calls)]
            await asyncio.sleep(1.5)
            started = time.monotonic()
            listed = await http.get("/v1/skills")
            latency = time.monotonic() - started
            assert listed.status_code == 200
            return latency, [(await p).json() for p in pending]

    try:
        latency, results = asyncio.run(scenario())
    finally:
        srv.stop()
    assert all(not r["is_error"] and r["data"]["stdout"] == "done\n" for r in results), results[:2]
    assert latency < 1.5, latency


# -- the browser guard --------------------------------------------------------------------------


def _get(server: Server, path: str = "/v1/skills", **headers: str) -> httpx.Response:
    return httpx.get(f"{server.url}{path}", headers=headers, timeout=30)


def assert_refused(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, (response.status_code, response.text)
    body = response.json()
    assert set(body) == {"error"} and body["error"]["code"] == code and body["error"]["message"]
    assert response.headers["x-request-id"]


def test_no_key_mode_refuses_foreign_host_headers(open_local: Server) -> None:
    port = open_local.port
    for host in (
        "evil.example",
        f"evil.example:{port}",
        "127.0.0.1.evil.example",
        f"localhost:{port + 1}",
        f"127.0.0.1:{port}.evil.example",
        "[::1]:1",
        f"10.0.0.1:{port}",
    ):
        assert_refused(_get(open_local, Host=host), 421, "host_not_allowed")
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", f"LOCALHOST:{port}"):
        assert _get(open_local, Host=host).status_code == 200, host
    refused = httpx.post(
        f"{open_local.url}/v1/runs",
        json={"skill": "math-tools", "command": "touch /tmp/x"},
        headers={"Host": "attacker.example"},
    )
    assert_refused(refused, 421, "host_not_allowed")


def test_cross_origin_browser_requests_are_refused(open_local: Server, tenants: Server) -> None:
    same = f"http://127.0.0.1:{open_local.port}"
    assert _get(open_local, Origin=same).status_code == 200
    assert _get(open_local, **{"Sec-Fetch-Site": "same-origin"}).status_code == 200
    assert _get(open_local, **{"Sec-Fetch-Site": "none"}).status_code == 200  # typed into the address bar
    for headers in (
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Origin": f"http://localhost:{open_local.port + 1}"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
    ):
        assert_refused(_get(open_local, **headers), 403, "cross_origin_refused")
    created = httpx.post(
        f"{open_local.url}/v1/runs",
        json={"skill": "math-tools", "command": "echo pwned"},
        headers={"Origin": "http://evil.example", "Content-Type": "text/plain"},
    )
    assert_refused(created, 403, "cross_origin_refused")
    preflight = httpx.options(
        f"{open_local.url}/v1/runs", headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"}
    )
    assert_refused(preflight, 403, "cross_origin_refused")

    # With keys: any Host (a deployment behind a proxy), still no foreign origins...
    auth = {"Authorization": f"Bearer {KEY_A}"}
    assert _get(tenants, Host="skills.internal.example", **auth).status_code == 200
    assert_refused(_get(tenants, Origin="http://evil.example", **auth), 403, "cross_origin_refused")
    # ...but the listed ones, with CORS headers.
    allowed = _get(tenants, Origin=APP_ORIGIN, **auth)
    assert allowed.status_code == 200 and allowed.headers["access-control-allow-origin"] == APP_ORIGIN
    preflight = httpx.options(
        f"{tenants.url}/v1/runs",
        headers={
            "Origin": APP_ORIGIN,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization,content-type,idempotency-key",
        },
    )
    assert preflight.status_code == 200 and preflight.headers["access-control-allow-origin"] == APP_ORIGIN


def test_guard_serves_only_loopback_connections_without_keys_or_isolation() -> None:
    from skill_executor.api.middleware import BrowserGuard

    def scope(server: tuple[str, int], host: str) -> dict[str, Any]:
        return {"type": "http", "server": server, "headers": [(b"host", host.encode())]}

    public = scope(("10.1.2.3", 8080), "10.1.2.3:8080")
    assert BrowserGuard(None, auth_enabled=False).check(public)[:2] == (403, "loopback_only")  # type: ignore[index]
    local_runtime = BrowserGuard(None, auth_enabled=True, local_runtime=True)
    assert local_runtime.check(public)[:2] == (403, "loopback_only")  # type: ignore[index]
    assert BrowserGuard(None, auth_enabled=True).check(public) is None
    v6 = BrowserGuard(None, auth_enabled=False)
    assert v6.check(scope(("::1", 9000), "[::1]:9000")) is None
    assert v6.check(scope(("::1", 9000), "[::1]x:9000"))[:2] == (421, "host_not_allowed")  # type: ignore[index]
    assert v6.check(scope(("127.0.0.1", 80), "localhost")) is None  # the default port may be left out
    assert v6.check(scope(("127.0.0.1", 9000), "localhost"))[:2] == (421, "host_not_allowed")  # type: ignore[index]


def test_local_runtime_refuses_a_public_bind(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "skill_executor.cli.main",
            "serve",
            "--host",
            "0.0.0.0",
            "--port",
            str(free_port()),
            "--runtime",
            "local",
            "--data-dir",
            str(tmp_path),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SKILL_EXECUTOR_API_KEYS": "some-key"},
    )
    assert result.returncode == 2 and "local runtime" in result.stderr and "0.0.0.0" in result.stderr


# -- client input on the API surface: 4xx, never 5xx ----------------------------------------------------


def raw_request(server: Server, data: bytes) -> tuple[int, bytes, bytes]:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(data)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), head, body


def test_hostile_input_is_a_clean_4xx(open_local: Server) -> None:
    url, long = open_local.url, "a" * 10_000
    cases: list[httpx.Response] = []
    with httpx.Client(base_url=url, timeout=30) as http:
        for path in (
            f"/v1/artifacts/{long}",
            f"/v1/artifacts/{long}/versions",
            f"/v1/artifacts/{'a/' * 5000}x",
            "/v1/artifacts/%FF%FE",
            "/v1/artifacts/%00",
            f"/v1/skills/{long}",
            f"/v1/skills/{long}/docs",
            f"/v1/skills/math-tools/files/{long}",
            "/v1/skills/math-tools/files/%FF",
            f"/v1/runs/{long}",
            f"/v1/runs/{long}/events",
            "/v1/runs/%FF%00",
            f"/v1/artifacts?owner={long}",
            "/v1/artifacts?owner=%FF",
            "/v1/artifacts/x?version=99999999999999999999999",
            "/v1/artifacts/x?version=-1",
            f"/v1/skills?q={long}",
            "/v1/skills?limit=99999999999999999999",
            f"/v1/skills/math-tools/docs?names={long}",
        ):
            cases.append(http.get(path))
        cases.append(http.delete(f"/v1/runs/{long}"))
        cases.append(http.post(f"/v1/artifacts/{long}", content=b"x"))
        cases.append(http.post("/v1/runs", json={"skill": "math-tools", "command": "true", "session": long}))
        cases.append(http.post("/v1/runs", json={"skill": long, "command": "true"}))
        cases.append(
            http.post("/v1/runs", json={"skill": "math-tools", "command": "true"}, headers={"Idempotency-Key": long})
        )
        cases.append(http.post("/v1/tools/call", json={"name": long, "arguments": {}}))
        cases.append(http.post("/v1/artifacts/typed", content=b"x", headers={"Content-Type": long}))
        cases.append(http.post("/v1/artifacts/typed", content=b"x", headers={"Content-Type": "text/plain\x7f"}))
        cases.append(http.get("/v1/skills/nope", headers={"X-Request-ID": long, "Authorization": "Bearer " + long}))
    for response in cases:
        assert 400 <= response.status_code < 500, (
            response.request.url.path[:80],
            response.status_code,
            response.text[:300],
        )
        body = response.json()
        assert set(body) == {"error"} and body["error"]["code"] and body["error"]["message"], response.text[:300]
    # What an HTTP parser refuses (raw bytes in the target, a 200 kB URL) is JSON too.
    for data in (
        b"GET /v1/artifacts/\xff\xfe HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        b"GET /v1/skills/" + b"a" * 200_000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        b"GET /v1/artifacts?owner=\xff HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    ):
        status, head, body = raw_request(open_local, data)
        assert status == 400 and b"content-type: application/json" in head.lower(), head
        assert json.loads(body)["error"]["code"] == "invalid_http"
    # Raw bytes in header values and a big header block are served (or refused) cleanly.
    port = open_local.port
    status, _, body = raw_request(
        open_local,
        b"GET /v1/skills HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nX-Odd: \xff\xfe\r\n"
        b"Idempotency-Key: \xff\r\nConnection: close\r\n\r\n" % port,
    )
    assert status == 200
    status, _, _ = raw_request(
        open_local,
        b"GET /v1/skills HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nX-Big: %s\r\n"
        b"Connection: close\r\n\r\n" % (port, b"b" * 60_000),
    )
    assert status in (200, 400, 431)
    time.sleep(0.2)
    assert "Traceback" not in open_local.log() and '"status": 500' not in open_local.log()
