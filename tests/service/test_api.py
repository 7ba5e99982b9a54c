"""The HTTP API, driven through the typed client (``skill_executor_client``) against a real server process."""

from __future__ import annotations

import asyncio
import io
import json
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from skill_executor_client import ApiError, AsyncClient, Client
from skill_executor_client.calls import Calls

from ..api_server import Server, api_runtime, free_port
from ..conftest import REPO
from ..helpers import eventually

USER, ADMIN = "user-key-123", "admin-key-456"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(tmp_path_factory.mktemp("api"), env={"SKILL_EXECUTOR_MAX_REQUEST_BYTES": str(8 * 1024 * 1024)})
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(
        tmp_path_factory.mktemp("api-auth"), env={"SKILL_EXECUTOR_API_KEYS": USER, "SKILL_EXECUTOR_ADMIN_KEYS": ADMIN}
    )
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def client(server: Server) -> Iterator[Client]:
    with Client(server.url) as c:
        yield c


def skill_zip(name: str, description: str = "An uploaded skill.") -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr(
            f"{name}/SKILL.md", f"---\nname: {name}\ndescription: {description}\n---\n# {name}\nRun scripts/hi.sh\n"
        )
        zf.writestr(f"{name}/scripts/hi.sh", "echo hello from upload\n")
    return buf.getvalue()


def expect_error(status: int, code: str | None = None):  # type: ignore[no-untyped-def]
    class _Ctx:
        def __enter__(self) -> _Ctx:
            return self

        error: ApiError

        def __exit__(self, kind, exc, tb) -> bool:  # type: ignore[no-untyped-def]
            assert isinstance(exc, ApiError), f"expected ApiError {status}, got {exc!r}"
            self.error = exc
            assert exc.status == status, (exc.status, exc.code, exc.message)
            if code is not None:
                assert exc.code == code, exc.code
            return True

    return _Ctx()


# -- system ---------------------------------------------------------------------------------------


def test_health_openapi_docs(client: Client, server: Server) -> None:
    health = client.health()
    assert health.status == "ok" and health.runtime == api_runtime()
    assert health.checks["data_dir"].ok and health.checks["database"].ok
    assert "3 skills" in health.checks["skills"].detail and health.failing == []
    if api_runtime() == "docker":
        assert health.checks["engine"].ok and health.checks["image"].ok
        assert health.checks["workers"].ok
    spec = httpx.get(f"{server.url}/openapi.json").json()
    assert {"/v1/runs", "/v1/skills", "/v1/tools/call", "/healthz", "/metrics"} <= set(spec["paths"])
    assert httpx.get(f"{server.url}/docs").status_code == 200


def test_docs_work_offline(server: Server) -> None:
    """/docs and /redoc load everything from this service: no CDN, no fonts, no validator."""
    for page, assets in (("/docs", {".js", ".css", ".png"}), ("/redoc", {".js", ".png"})):
        response = httpx.get(f"{server.url}{page}")
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
        html = response.text
        assert re.findall(r"(?:https?:)?//[\w.-]+\.\w+", html) == [], f"{page} references another host"
        urls = set(re.findall(r"""(?:src|href|spec-url)=["']([^"']+)["']""", html))
        urls |= set(re.findall(r"url: ?'([^']+)'", html))
        assert "/openapi.json" in urls and {Path(u).suffix for u in urls if u != "/openapi.json"} == assets
        for url in urls:
            assert url.startswith("/"), url
            fetched = httpx.get(f"{server.url}{url}")
            assert fetched.status_code == 200 and fetched.content, url
    swagger = httpx.get(f"{server.url}/docs").text
    assert '"validatorUrl": null' in swagger  # the online validator badge would send the spec out
    assert "SwaggerUIBundle" in httpx.get(f"{server.url}/docs/assets/swagger-ui-bundle.js").text


def test_openapi_declares_the_bearer_key(server: Server, secured: Server) -> None:
    """Every route that checks the key says so (components.securitySchemes.bearer), so /docs
    can authorize and a generated client knows to send it; the open routes do not."""
    spec = httpx.get(f"{server.url}/openapi.json").json()
    scheme = spec["components"]["securitySchemes"]["bearer"]
    assert (
        scheme["type"] == "http" and scheme["scheme"] == "bearer" and "Authorization: Bearer" in scheme["description"]
    )
    open_routes, protected = set(), set()
    for path, methods in spec["paths"].items():
        for method, operation in methods.items():
            (protected if operation.get("security") == [{"bearer": []}] else open_routes).add(f"{method} {path}")
            assert operation.get("security") in (None, [{"bearer": []}]), (method, path)
    assert open_routes == {"get /healthz"}
    assert {"get /v1/runs", "post /v1/runs", "post /v1/tools/call", "get /metrics", "post /v1/skills"} <= protected
    # what the schema says holds: each protected route refuses a request without the key
    for route in sorted(protected):
        method, path = route.split(" ", 1)
        if "{" in path:
            continue
        answer = httpx.request(method, f"{secured.url}{path}")
        assert answer.status_code == 401 and answer.json()["error"]["code"] == "unauthorized", route
    assert httpx.get(f"{secured.url}/healthz").status_code in (200, 503)


def test_error_shapes(server: Server) -> None:
    url = server.url
    cases = [
        (
            httpx.post(f"{url}/v1/runs", content=b"{bad", headers={"content-type": "application/json"}),
            400,
            "malformed_json",
        ),
        (httpx.post(f"{url}/v1/runs", json={"skill": "math-tools"}), 422, "invalid_request"),
        (
            httpx.post(f"{url}/v1/runs", json={"skill": "math-tools", "command": "x", "bogus": 1}),
            422,
            "invalid_request",
        ),
        (httpx.get(f"{url}/v1/nope"), 404, "not_found"),
        (httpx.put(f"{url}/v1/skills"), 405, "method_not_allowed"),
        (httpx.get(f"{url}/v1/skills/nope"), 404, "skill_not_found"),
        (httpx.post(f"{url}/v1/artifacts/big", content=b"x" * (9 * 1024 * 1024)), 413, "too_large"),
        (httpx.get(f"{url}/v1/skills", params={"limit": 0}), 422, "invalid_request"),
    ]
    for response, status, code in cases:
        assert response.status_code == status, (response.status_code, response.text)
        body = response.json()
        assert set(body) == {"error"} and body["error"]["code"] == code and body["error"]["message"]
        assert "Traceback" not in response.text and "detail" not in body
        assert response.headers["x-request-id"]


# -- skills ---------------------------------------------------------------------------------------


def test_overview_search_and_formats(client: Client, server: Server) -> None:
    overview = client.list_skills()
    assert [s.id for s in overview.skills] == ["csv-report", "file-bundle", "math-tools"]
    assert overview.total_tokens == sum(s.tokens for s in overview.skills) > 0
    hits = client.list_skills("csv chart").skills
    assert hits[0].id == "csv-report" and hits[0].score > 0
    xml = client.skills_prompt("xml")
    location = (
        "/workspace/skills/math-tools/SKILL.md"
        if api_runtime() == "docker"
        else str((server.skills_dir / "math-tools" / "SKILL.md").resolve())
    )
    assert xml.startswith("<available_skills>\n<skill>\n<name>\ncsv-report\n</name>")
    assert f"<location>\n{location}\n</location>" in xml
    assert client.skills_prompt("text").startswith("- csv-report: Turn a CSV")


def test_load_docs_and_files(client: Client) -> None:
    loaded = client.load_skill("MATH-TOOLS")
    assert loaded.id == "math-tools" and "Fibonacci" in loaded.body
    assert [d.path for d in loaded.docs] == ["references/REFERENCE.md"]
    assert {s.path for s in loaded.scripts} == {"scripts/fib.py", "scripts/primes.py", "scripts/stats.py"}
    docs = client.list_docs("math-tools").docs
    assert docs[0].path == "references/REFERENCE.md" and docs[0].content is None
    read = client.read_docs("math-tools", ["references/REFERENCE.md"]).docs[0]
    assert "math-tools reference" in read.content and read.tokens > 0
    with expect_error(404, "doc_not_found"):
        client.read_docs("math-tools", ["nope.md"])
    script = client.send(Calls.read_file("math-tools", "scripts/fib.py"))  # the response: its headers
    assert script.text.startswith("#!/usr/bin/env python3") and script.headers["content-type"].startswith(
        "text/x-python"
    )
    csv = client.send(Calls.read_file("csv-report", "assets/sample.csv"))
    assert csv.headers["content-type"].startswith("text/csv") and csv.headers["x-truncated"] == "false"
    for bad in ["../csv-report/SKILL.md", "%2e%2e/%2e%2e/etc/passwd", "scripts/../../../etc/passwd"]:
        response = httpx.get(f"{client._http.base_url}/v1/skills/math-tools/files/{bad}")
        assert response.status_code in (400, 403, 404) and "root:" not in response.text


def test_install_and_delete(client: Client, server: Server) -> None:
    installed = client.install_skill(skill_zip("uploaded-one"))
    assert installed.id == "uploaded-one" and not installed.replaced
    # Installs go under the data dir, never into the (read-only) skills dir.
    assert installed.path == str(server.data_dir / "skills" / "uploaded-one")
    assert (server.data_dir / "skills" / "uploaded-one" / "SKILL.md").exists()
    assert [f.path for f in installed.files] == ["scripts/hi.sh"]
    raw = client.install_skill(skill_zip("uploaded-one", "Second version."), multipart=False)
    assert raw.replaced
    assert client.load_skill("uploaded-one").description == "Second version."
    result = client.run({"skill": "uploaded-one", "command": "bash scripts/hi.sh"})
    assert result.stdout == "hello from upload\n"
    with expect_error(400, "invalid_package"):
        client.install_skill(b"not an archive")
    with expect_error(400, "invalid_skill"):
        client.install_skill(_zip({"SKILL.md": "---\nname: x\nversion: 1\ndescription: d\n---\n"}), strict=True)
    client.delete_skill("uploaded-one")
    with expect_error(404, "skill_not_found"):
        client.load_skill("uploaded-one")
    assert not (server.skills_dir / "uploaded-one").exists()
    assert list((server.data_dir / "skills").iterdir()) == []  # no staging folder left either


def _snapshot(root: Path) -> dict[str, tuple[int, bytes]]:
    return {
        str(p.relative_to(root)): (p.stat().st_mode, p.read_bytes() if p.is_file() else b"")
        for p in sorted(root.rglob("*"))
    }


def test_shipped_skills_are_read_only(client: Client, server: Server) -> None:
    shipped = _snapshot(server.skills_dir)
    with expect_error(403, "read_only_skill") as refusal:
        client.delete_skill("math-tools")
    assert "shipped in the read-only root" in refusal.error.message and str(server.skills_dir) in refusal.error.message
    # An install may not shadow a shipped skill either, by id or by name.
    with expect_error(409, "shadows_read_only_skill"):
        client.install_skill(skill_zip("math-tools", "An impostor."))
    assert client.load_skill("math-tools").description != "An impostor."
    assert _snapshot(server.skills_dir) == shipped
    assert not (server.data_dir / "skills" / "math-tools").exists()


def test_start_up_sweeps_what_crashed_installs_left(tmp_path: Path) -> None:
    install_root = tmp_path / "data" / "skills"
    leftover = install_root / ".skill-executor-0123456789abcdef" / "packed"
    leftover.mkdir(parents=True)
    (leftover / "SKILL.md").write_text("---\nname: packed\ndescription: half installed\n---\n")
    (leftover / "blob.bin").write_bytes(bytes(1024 * 1024))
    srv = Server(tmp_path, env={"SKILL_EXECUTOR_RUNTIME": "local", "SKILL_EXECUTOR_POOL_SIZE": "0"}).start()
    try:
        assert list(install_root.iterdir()) == []
        with Client(srv.url) as client:
            assert "packed" not in [s.id for s in client.list_skills().skills]
    finally:
        srv.stop()


def test_an_install_root_inside_the_skills_dir_is_refused_at_start_up(tmp_path: Path) -> None:
    srv = Server(
        tmp_path,
        env={"SKILL_EXECUTOR_INSTALL_DIR": str(tmp_path / "skills" / "uploads"), "SKILL_EXECUTOR_RUNTIME": "local"},
    )
    with pytest.raises(RuntimeError) as info:
        srv.start()
    assert "overlaps the read-only skills root" in str(info.value)
    assert not (tmp_path / "skills" / "uploads").exists()


def _zip(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return buf.getvalue()


# -- runs -----------------------------------------------------------------------------------------


def test_sync_run_and_record(client: Client) -> None:
    result = client.run(
        {
            "skill": "csv-report",
            "command": "python3 scripts/report.py assets/sample.csv out/",
            "outputs": {"globs": ["out/*"]},
        }
    )
    assert result.exit_code == 0
    assert {f.name: f.mime_type for f in result.output_files} == {
        "out/chart.svg": "image/svg+xml",
        "out/report.md": "text/markdown",
        "out/summary.json": "application/json",
    }
    record = client.get_run(result.run_id)
    assert record.status == "completed" and record.result.stdout == result.stdout
    assert record.request["skill"] == "csv-report"
    with expect_error(404, "run_not_found"):
        client.get_run("nope")


def test_refusals_are_errors_not_results(client: Client) -> None:
    with expect_error(404, "skill_not_found"):
        client.run({"skill": "missing", "command": "true"})
    with expect_error(404, "artifact_not_found"):
        client.run({"skill": "math-tools", "command": "true", "inputs": [{"from": "artifact://none"}]})
    with expect_error(403, "host_input_refused"):
        client.run({"skill": "math-tools", "command": "true", "inputs": [{"from": "host:///etc/passwd"}]})
    with expect_error(400):
        client.run(
            {
                "skill": "math-tools",
                "command": "true",
                "inputs": [{"from": "skill://math-tools/SKILL.md", "to": "../../x"}],
            }
        )
    failed_async = client.submit({"skill": "math-tools", "command": "true", "inputs": [{"from": "artifact://none"}]})
    record = eventually(lambda: (r := client.get_run(failed_async.run_id)).status not in ("queued", "running") and r)
    assert record.status == "failed" and record.error.code == "artifact_not_found"


def test_async_run_and_sse_stream(client: Client) -> None:
    accepted = client.submit({"skill": "math-tools", "command": "for i in 1 2 3; do echo line $i; sleep 0.4; done"})
    assert accepted.status in ("queued", "running")
    events = [(e.event, e.data) for e in client.events(accepted.run_id)]
    kinds = [e for e, _ in events]
    assert kinds[0] == "status" and kinds[-1] == "result"
    streamed = "".join(d["data"] for e, d in events if e == "stdout")
    assert streamed == "line 1\nline 2\nline 3\n"
    assert kinds.index("stdout") < kinds.index("result")
    final = events[-1][1]
    assert final["stdout"] == streamed and final["exit_code"] == 0
    assert client.get_run(accepted.run_id).status == "completed"
    # A finished run streams its result at once.
    again = [(e.event, e.data) for e in client.events(accepted.run_id)]
    assert [e for e, _ in again] == ["status", "result"]


def test_sse_arrives_while_running(client: Client) -> None:
    accepted = client.submit({"skill": "math-tools", "command": "echo early; sleep 2; echo late"})
    started = time.monotonic()
    for event in client.events(accepted.run_id):
        if event.event == "stdout" and "early" in event.data["data"]:
            assert time.monotonic() - started < 1.8  # before the run ends
            break
    for _ in client.events(accepted.run_id):
        pass


def test_cancel(client: Client) -> None:
    accepted = client.submit({"skill": "math-tools", "command": "echo started; sleep 60"})
    for event in client.events(accepted.run_id):
        if event.event == "stdout":
            break
    started = time.monotonic()
    answer = client.cancel_run(accepted.run_id)
    assert answer.model_dump() == {
        "run_id": accepted.run_id,
        "status": "cancelled",
        "replayed": False,
    }  # the state it ended in
    assert time.monotonic() - started < 5
    record = client.get_run(accepted.run_id)
    assert record.status == "cancelled" and "cancelled" in " ".join(record.result.warnings)
    with expect_error(409, "run_finished"):
        client.cancel_run(accepted.run_id)


def test_idempotent_retry(client: Client) -> None:
    request = {
        "skill": "math-tools",
        "command": "date +%s%N > out/t.txt; cat out/t.txt",
        "outputs": {"globs": ["out/t.txt"], "save": True, "name_template": "idem/{name}"},
    }
    first = client.run(request, idempotency_key="key-1")
    second = client.run(request, idempotency_key="key-1")
    assert first == second
    assert [v.version for v in client.artifact_versions("idem/t.txt").artifacts] == [1]
    queued = client.submit(request, idempotency_key="key-1")
    assert queued.run_id == first.run_id and queued.replayed
    with expect_error(409, "idempotency_key_reused"):
        client.run({**request, "command": "echo other"}, idempotency_key="key-1")


def test_busy_is_429(tmp_path: Path) -> None:
    srv = Server(
        tmp_path, env={"SKILL_EXECUTOR_MAX_CONCURRENT_RUNS": "1", "SKILL_EXECUTOR_MAX_QUEUED_RUNS": "0"}
    ).start()
    try:
        with Client(srv.url) as c:
            c.submit({"skill": "math-tools", "command": "sleep 2"})
            time.sleep(0.3)
            response = httpx.post(f"{srv.url}/v1/runs", json={"skill": "math-tools", "command": "true"})
            assert response.status_code == 429 and response.json()["error"]["code"] == "busy"
            assert response.headers["retry-after"] == "1"
    finally:
        srv.stop()


def test_restart_with_a_run_in_flight(tmp_path: Path) -> None:
    srv = Server(tmp_path).start()
    with Client(srv.url) as c:
        accepted = c.submit({"skill": "math-tools", "command": "sleep 60"})
        for event in c.events(accepted.run_id):
            if event.event == "status":
                break
        time.sleep(1.0)
    srv.stop(signal.SIGKILL)
    srv.start()
    try:
        with Client(srv.url) as c:
            record = c.get_run(accepted.run_id)
            assert record.status == "failed" and record.error.code == "interrupted"
            assert "restarted" in record.error.message
            assert c.run({"skill": "math-tools", "command": "echo alive"}).stdout == "alive\n"
            if api_runtime() == "docker":
                import docker

                engine = docker.DockerClient(base_url="unix:///var/run/docker.sock", version="auto")
                left = engine.api.containers(all=True, filters={"label": f"io.skill-executor.run={accepted.run_id}"})
                assert left == []
            runs = srv.data_dir / "workspaces" / "runs"
            assert accepted.run_id not in [p.name for p in runs.iterdir()]  # swept at the start

            def workspaces() -> list[str]:  # warm-*: the new server's pool
                return [p.name for p in runs.iterdir() if not p.name.startswith("warm-")]

            # "echo alive"'s folder is removed after its answer.
            eventually(lambda: not workspaces(), timeout=30)
            assert workspaces() == []
    finally:
        srv.stop()


def test_graceful_shutdown_cancels_runs_and_removes_containers(tmp_path: Path) -> None:
    srv = Server(tmp_path).start()
    with Client(srv.url) as c:
        accepted = c.submit({"skill": "math-tools", "command": "echo up; sleep 60"})
        for event in c.events(accepted.run_id):
            if event.event == "stdout":
                break
    exited = srv.terminate()
    assert 8 <= exited < 10  # the default grace (8 s) and the clean-up, within `docker stop`'s 10 s
    if api_runtime() == "docker":
        import docker

        engine = docker.DockerClient(base_url="unix:///var/run/docker.sock", version="auto")
        assert engine.api.containers(all=True, filters={"label": f"io.skill-executor.run={accepted.run_id}"}) == []
    assert list((srv.data_dir / "workspaces" / "runs").iterdir()) == []
    srv.start()
    try:
        with Client(srv.url) as c:
            record = c.get_run(accepted.run_id)
            assert record.status == "cancelled" and record.error.code == "shutting_down"
    finally:
        srv.stop()


@dataclass
class Event:
    id: int | None
    event: str
    data: Any


def sse(lines: Iterable[str]) -> Iterator[Event]:
    """Parse a Server-Sent Events stream, keeping the ids."""
    event_id, kind, data = None, "message", []
    for line in lines:
        if line.startswith("id:"):
            event_id = int(line[3:].strip())
        elif line.startswith("event:"):
            kind = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
        elif not line and data:
            yield Event(event_id, kind, json.loads("\n".join(data)))
            event_id, kind, data = None, "message", []


def stream_events(url: str, last_event_id: int | None = None, until: str | None = None) -> list[Event]:
    headers = {"Last-Event-ID": str(last_event_id)} if last_event_id is not None else {}
    events: list[Event] = []
    with httpx.stream("GET", url, headers=headers, timeout=60) as response:
        assert response.status_code == 200, response.read()
        for event in sse(response.iter_lines()):
            events.append(event)
            if until is not None and event.event in ("stdout", "stderr") and until in event.data["data"]:
                break
    return events


def statuses(events: list[Event]) -> list[str]:
    return [e.data["status"] for e in events if e.event == "status"]


def nothing_left(srv: Server) -> None:
    """No container of this server's runs or pool, no run workspace."""
    if api_runtime() == "docker":
        import docker

        engine = docker.DockerClient(base_url="unix:///var/run/docker.sock", version="auto")
        for container in engine.api.containers(all=True, filters={"label": "io.skill-executor.run"}):
            sources = [m.get("Source", "") for m in container.get("Mounts", [])]
            assert not any(src.startswith(str(srv.base)) for src in sources), container["Labels"]
    assert list((srv.data_dir / "workspaces" / "runs").iterdir()) == []


def test_sse_ids_each_state_once_cancelled_and_resume(client: Client, server: Server) -> None:
    run_id = client.submit({"skill": "math-tools", "command": "echo one; sleep 0.5; echo two; sleep 60"}).run_id
    url = f"{server.url}/v1/runs/{run_id}/events"
    first = stream_events(url, until="one")
    assert [e.id for e in first] == list(range(1, len(first) + 1))
    assert statuses(first) == ["queued", "running"]
    # A client that lost its connection resumes after the last id it saw: nothing twice.
    resumed = stream_events(url, last_event_id=first[-1].id, until="two")
    assert resumed[0].id == first[-1].id + 1
    assert [e.id for e in resumed] == list(range(first[-1].id + 1, first[-1].id + 1 + len(resumed)))
    assert "".join(e.data["data"] for e in first + resumed if e.event == "stdout") == "one\ntwo\n"

    whole: list[Event] = []
    reader = threading.Thread(target=lambda: whole.extend(stream_events(url)))
    reader.start()
    time.sleep(0.3)
    assert client.cancel_run(run_id).status == "cancelled"
    reader.join(timeout=10)
    assert not reader.is_alive()
    ids = [e.id for e in whole]
    assert ids == list(range(1, len(whole) + 1))  # every event once, in order
    assert statuses(whole) == ["queued", "running", "cancelled"]  # each state once, cancelled included
    assert whole[-1].event == "result" and "the run was cancelled" in whole[-1].data["warnings"]
    assert whole[-2].data == {"status": "cancelled"}

    # The run has ended: its last two events keep their ids; after the last one, 204 (EventSource stops).
    last = whole[-1].id
    assert [(e.id, e.event) for e in stream_events(url, last_event_id=last - 2)] == [
        (last - 1, "status"),
        (last, "result"),
    ]
    assert [(e.id, e.event) for e in stream_events(url)] == [(last - 1, "status"), (last, "result")]
    assert httpx.get(url, headers={"Last-Event-ID": str(last)}).status_code == 204


def test_delete_answers_the_state_the_run_ended_in(tmp_path: Path) -> None:
    srv = Server(
        tmp_path, env={"SKILL_EXECUTOR_MAX_CONCURRENT_RUNS": "1", "SKILL_EXECUTOR_MAX_QUEUED_RUNS": "4"}
    ).start()
    try:
        with Client(srv.url) as c:
            blocker = c.submit({"skill": "math-tools", "command": "echo up; sleep 60"}).run_id
            for event in c.events(blocker):
                if event.event == "stdout":
                    break
            # A queued run: cancelled at once, though the blocker still holds the only slot.
            request = {"skill": "math-tools", "command": "echo never"}
            queued = c.submit(request, idempotency_key="queued-1")
            assert queued.status == "queued"
            waiting: list[httpx.Response] = []
            waiter = threading.Thread(
                target=lambda: waiting.append(
                    httpx.post(f"{srv.url}/v1/runs", json=request, headers={"Idempotency-Key": "queued-1"}, timeout=60)
                )
            )
            waiter.start()
            time.sleep(0.3)
            started = time.monotonic()
            assert c.cancel_run(queued.run_id).model_dump() == {
                "run_id": queued.run_id,
                "status": "cancelled",
                "replayed": False,
            }
            assert time.monotonic() - started < 2
            waiter.join(timeout=10)
            assert waiting[0].status_code == 200  # the waiting client gets the run's honest result
            result = waiting[0].json()
            assert result["exit_code"] is None and result["stdout"] == ""
            assert result["warnings"] == ["the run was cancelled before it started"]
            record = c.get_run(queued.run_id)
            assert record.status == "cancelled" and record.result.warnings == result["warnings"]
            assert c.get_run(blocker).status == "running"
            # A running run: the answer is its final state, not "running".
            assert c.cancel_run(blocker).model_dump() == {"run_id": blocker, "status": "cancelled", "replayed": False}
            assert c.get_run(blocker).status == "cancelled"
            with expect_error(409, "run_finished"):
                c.cancel_run(queued.run_id)
    finally:
        srv.stop()


def _tool_run(command: str) -> dict[str, Any]:
    return {"name": "skill_run", "arguments": {"skill": "math-tools", "command": command}}


async def _timed_get(http: httpx.AsyncClient, path: str) -> float:
    started = time.monotonic()
    response = await http.get(path)
    assert response.status_code == 200, response.text
    return time.monotonic() - started


def test_fifty_waiting_tool_calls_leave_the_service_responsive(tmp_path: Path) -> None:
    srv = Server(
        tmp_path, env={"SKILL_EXECUTOR_MAX_CONCURRENT_RUNS": "4", "SKILL_EXECUTOR_SHUTDOWN_GRACE_SECONDS": "0"}
    ).start()

    async def scenario() -> tuple[list[float], list[httpx.Response | BaseException], float]:
        limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
        async with httpx.AsyncClient(base_url=srv.url, timeout=60, limits=limits) as http:
            calls = [asyncio.ensure_future(http.post("/v1/tools/call", json=_tool_run("sleep 60"))) for _ in range(50)]
            latencies = []
            for _ in range(12):
                await asyncio.sleep(0.25)
                latencies += await asyncio.gather(_timed_get(http, "/v1/skills"), _timed_get(http, "/healthz"))
            assert not any(call.done() for call in calls)
            exited = await asyncio.to_thread(srv.terminate)
            answers = await asyncio.gather(*calls, return_exceptions=True)
            return latencies, answers, exited

    try:
        latencies, answers, exited = asyncio.run(scenario())
    finally:
        srv.stop()
    assert max(latencies) < 2.0, sorted(latencies)[-5:]
    # Every waiting call is answered in JSON when the service stops: 503 shutting_down.
    for answer in answers:
        assert isinstance(answer, httpx.Response), answer
        assert answer.status_code == 503 and answer.json()["error"]["code"] == "shutting_down", answer.text
    assert exited < 3.0
    nothing_left(srv)


def test_runs_waiting_for_the_store_hold_no_server_thread(tmp_path: Path) -> None:
    """Another process holds the embedded database's write lock: admissions wait for it (SQLite's busy
    timeout), but on the run manager's threads, so the web server's 40 threads stay free
    for everything else."""
    srv = Server(tmp_path, env={"SKILL_EXECUTOR_SHUTDOWN_GRACE_SECONDS": "0"}).start()
    lock = sqlite3.connect(srv.data_dir / "skill-executor.db", isolation_level=None)

    async def scenario() -> tuple[list[float], list[httpx.Response | BaseException]]:
        limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
        async with httpx.AsyncClient(base_url=srv.url, timeout=60, limits=limits) as http:
            lock.execute("BEGIN IMMEDIATE")
            try:
                calls = [asyncio.ensure_future(http.post("/v1/tools/call", json=_tool_run("true"))) for _ in range(50)]
                await asyncio.sleep(0.5)
                latencies = [await _timed_get(http, path) for path in ("/v1/skills", "/v1/tools", "/v1/skills")]
                assert not any(call.done() for call in calls)
            finally:
                lock.execute("ROLLBACK")
            await asyncio.to_thread(srv.terminate)
            return latencies, await asyncio.gather(*calls, return_exceptions=True)

    try:
        latencies, answers = asyncio.run(scenario())
    finally:
        lock.close()
        srv.stop()
    assert max(latencies) < 2.0, latencies
    for answer in answers:
        assert isinstance(answer, httpx.Response) and answer.headers["content-type"] == "application/json", answer
        assert answer.status_code in (200, 503), answer.text


def test_sigterm_drains_within_the_grace_and_answers_every_waiting_client(tmp_path: Path) -> None:
    grace = 4.0
    srv = Server(
        tmp_path, env={"SKILL_EXECUTOR_SHUTDOWN_GRACE_SECONDS": str(grace), "SKILL_EXECUTOR_MAX_CONCURRENT_RUNS": "4"}
    ).start()
    answers: dict[str, httpx.Response] = {}
    streamed: list[Event] = []

    def post(name: str, path: str, body: dict[str, Any]) -> None:
        answers[name] = httpx.post(f"{srv.url}{path}", json=body, timeout=60)

    with Client(srv.url) as c:
        streamed_id = c.submit({"skill": "math-tools", "command": "echo up; sleep 60"}).run_id
        waiters = [
            threading.Thread(target=post, args=("long", "/v1/runs", {"skill": "math-tools", "command": "sleep 60"})),
            threading.Thread(target=post, args=("tool", "/v1/tools/call", _tool_run("sleep 60"))),
            threading.Thread(
                target=post, args=("short", "/v1/runs", {"skill": "math-tools", "command": "sleep 2; echo finished"})
            ),
            # Queued behind the four: the first to get the slot "short" frees runs until cancelled,
            # the other never starts.
            threading.Thread(
                target=post, args=("queued-a", "/v1/runs", {"skill": "math-tools", "command": "sleep 60"})
            ),
            threading.Thread(
                target=post, args=("queued-b", "/v1/runs", {"skill": "math-tools", "command": "sleep 60"})
            ),
            threading.Thread(target=lambda: streamed.extend(stream_events(f"{srv.url}/v1/runs/{streamed_id}/events"))),
        ]
        for waiter in waiters:
            waiter.start()
            time.sleep(0.2)  # in this order: four runs hold the four slots, two wait
        time.sleep(0.5)
        exited = srv.terminate()
        for waiter in waiters:
            waiter.join(timeout=10)
    assert grace <= exited < grace + 2.5, exited

    assert answers["short"].status_code == 200 and answers["short"].json()["stdout"] == "finished\n"
    cancelled = {}
    for name in ("long", "tool", "queued-a", "queued-b"):
        response = answers[name]
        assert response.status_code == 503, (name, response.text)
        error = response.json()["error"]
        assert error["code"] == "shutting_down" and error["details"]["status"] == "cancelled"
        cancelled[name] = error["details"]["run_id"]
    assert statuses(streamed) == ["queued", "running", "cancelled"]
    assert streamed[-1].event == "error" and streamed[-1].data["code"] == "shutting_down"
    nothing_left(srv)

    srv.start()
    try:
        with Client(srv.url) as c:
            never_started = []
            for name, run_id in [*cancelled.items(), ("streamed", streamed_id)]:
                record = c.get_run(run_id)
                assert record.status == "cancelled" and record.error.code == "shutting_down", (name, record)
                # What ran is kept (its partial output); what never started has no result.
                if record.result is None:
                    never_started.append(name)
            assert never_started in (["queued-a"], ["queued-b"])
            assert c.get_run(streamed_id).result.stdout == "up\n"
    finally:
        srv.stop()


def test_a_request_still_open_after_the_drain_gets_json(tmp_path: Path) -> None:
    """An upload that never finishes: after the drain and a second's wait, 503 shutting_down
    in the error shape (uvicorn alone: a plain-text 500)."""
    srv = Server(tmp_path, env={"SKILL_EXECUTOR_SHUTDOWN_GRACE_SECONDS": "0"}).start()
    import socket

    with socket.create_connection(("127.0.0.1", srv.port)) as sock:
        sock.sendall(
            f"POST /v1/artifacts/slow.txt HTTP/1.1\r\nHost: 127.0.0.1:{srv.port}\r\n"
            "Content-Type: text/plain\r\nContent-Length: 100000\r\n\r\n".encode()
            + b"x" * 1000
        )
        time.sleep(0.3)
        exited = srv.terminate()
        sock.settimeout(5)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503 ") and b"content-type: application/json" in head.lower()
    assert json.loads(body)["error"]["code"] == "shutting_down"
    assert exited < 3


# -- artifacts ------------------------------------------------------------------------------------


def test_artifacts(client: Client) -> None:
    one = client.put_artifact("reports/q1.txt", b"first", mime_type="text/plain")
    two = client.put_artifact("reports/q1.txt", b"second", mime_type="text/plain")
    assert (one.version, two.version) == (1, 2) and two.ref == "artifact://reports/q1.txt@2"
    latest = client.send(Calls.get_artifact("reports/q1.txt", None, None))  # the response: its headers
    assert latest.content == b"second" and latest.headers["x-artifact-version"] == "2"
    assert latest.headers["content-type"].startswith("text/plain")
    assert client.get_artifact("reports/q1.txt", version=1) == b"first"
    assert [a.version for a in client.artifact_versions("reports/q1.txt").artifacts] == [1, 2]
    assert any(a.name == "reports/q1.txt" and a.version == 2 for a in client.list_artifacts().artifacts)
    with expect_error(404, "artifact_not_found"):
        client.get_artifact("reports/none.txt")
    with expect_error(400, "invalid_artifact_name"):
        client.put_artifact("bad name", b"x")
    used = client.run(
        {"skill": "math-tools", "command": "cat inputs/q1.txt", "inputs": [{"from": "artifact://reports/q1.txt@1"}]}
    )
    assert used.stdout == "first"


# -- tools and the agent loop ------------------------------------------------------------------------


def test_tool_definitions(client: Client) -> None:
    openai = client.tools("openai").tools
    assert [t["function"]["name"] for t in openai] == [
        "skill_load",
        "skill_list_docs",
        "skill_select_docs",
        "skill_run",
    ]
    run_params = openai[3]["function"]["parameters"]
    assert run_params["properties"]["skill"]["enum"] == ["csv-report", "file-bundle", "math-tools"]
    # strict mode (tests/unit/test_tool_formats.py checks its rules): every property required, the optional nullable
    assert openai[3]["function"]["strict"] is True and run_params["required"] == list(run_params["properties"])
    assert run_params["properties"]["cwd"]["anyOf"][-1] == {"type": "null"} and "$defs" not in json.dumps(run_params)
    assert "skill_load" in openai[3]["function"]["description"] or "isolated" in openai[3]["function"]["description"]
    responses = client.tools("openai-responses").tools
    assert [t["name"] for t in responses] == [t["function"]["name"] for t in openai]
    assert responses[3] == {"type": "function", "strict": True, **openai[3]["function"]}
    anthropic = client.tools("anthropic").tools
    assert anthropic[0]["name"] == "skill_load" and "input_schema" in anthropic[0]
    assert set(anthropic[3]["input_schema"]["required"]) == {"skill", "command"}
    mcp = client.tools("mcp").tools
    assert mcp[1]["name"] == "skill_list_docs" and "inputSchema" in mcp[1]
    with expect_error(422):
        client.tools("bogus")


def test_agent_loop_through_tool_calls(client: Client) -> None:
    tools = {t["function"]["name"] for t in client.tools().tools}
    assert {"skill_load", "skill_run"} <= tools
    loaded = client.call_tool("skill_load", {"skill": "csv-report"})
    assert not loaded.is_error and "python3 scripts/report.py" in loaded.content
    listed = client.call_tool("skill_list_docs", json.dumps({"skill": "csv-report"}))
    assert "references/FORMAT.md" in listed.content
    selected = client.call_tool("skill_select_docs", {"skill": "csv-report", "docs": ["references/FORMAT.md"]})
    assert "summary.json format" in selected.content
    ran = client.call_tool(
        "skill_run",
        {
            "skill": "csv-report",
            "command": "python3 scripts/report.py inputs/sample.csv out/ --title Agent",
            "inputs": [{"from": "skill://csv-report/assets/sample.csv"}],
            "outputs": {"globs": ["out/report.md"]},
        },
    )
    assert not ran.is_error, ran.content
    assert "exit code 0" in ran.content and "# Agent" in ran.content
    report = ran.data["output_files"][0]
    assert report["name"] == "out/report.md" and report["mime_type"] == "text/markdown"
    # The file's content is in the text the model reads, once (not again in data), and at its ref.
    assert "| region | text |" in ran.content and report["content"] is None
    name, version = report["ref"].removeprefix("artifact://").rsplit("@", 1)
    assert "| region | text |" in client.get_artifact(name, int(version)).decode()
    bad = client.call_tool("skill_run", {"skill": "nope", "command": "true"})
    assert bad.is_error and "skill_not_found" in bad.content
    assert client.call_tool("skill_load", "{not json").is_error


@pytest.mark.parametrize(
    ("name", "arguments", "code"),
    [
        ("rm_rf", {}, "tool_not_found"),
        ("", {}, "tool_not_found"),
        ("x" * 200, None, "tool_not_found"),
        ("skill_load", "{not json", "invalid_arguments"),
        ("skill_load", [1, 2], "invalid_arguments"),
        ("skill_run", 42, "invalid_arguments"),
        ("skill_run", {"skill": "math-tools"}, "invalid_arguments"),
    ],
)
def test_the_models_mistakes_are_tool_results(server: Server, name: str, arguments: object, code: str) -> None:
    """An unknown tool or malformed arguments is the model's mistake: HTTP 200 with an error
    result (its code and message inside) the loop hands back, in every tool-result shape."""
    url = f"{server.url}/v1/tools/call"
    plain = httpx.post(url, json={"name": name, "arguments": arguments})
    assert plain.status_code == 200, plain.text
    body = plain.json()
    assert body["is_error"] is True and body["data"]["error"]["code"] == code and body["message"] is None
    assert body["content"] == f"error ({code}): {body['data']['error']['message']}"
    shapes = {
        "openai": {"role": "tool", "tool_call_id": "c1", "content": body["content"]},
        "anthropic": {"type": "tool_result", "tool_use_id": "c1", "content": body["content"], "is_error": True},
        "mcp": {"content": [{"type": "text", "text": body["content"]}], "isError": True},
        "openai-responses": {"type": "function_call_output", "call_id": "c1", "output": body["content"]},
    }
    for fmt, message in shapes.items():
        answer = httpx.post(url, json={"name": name, "arguments": arguments, "format": fmt, "id": "c1"})
        assert answer.status_code == 200 and answer.json()["message"] == message, (fmt, answer.text)
    item = {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": name, "arguments": arguments}
    answer = httpx.post(url, json=item)
    assert answer.status_code == 200 and answer.json()["message"] == shapes["openai-responses"], answer.text


def test_a_responses_function_call_gets_its_output_item(server: Server) -> None:
    item = {
        "type": "function_call",
        "id": "fc_7",
        "call_id": "call_7",
        "name": "skill_run",
        "arguments": json.dumps(
            {
                "skill": "math-tools",
                "command": "echo $GREETING",
                "cwd": None,
                "timeout": None,
                "env": [{"name": "GREETING", "value": "hi"}],
                "outputs": None,
            }
        ),
        "status": "completed",
    }
    answer = httpx.post(f"{server.url}/v1/tools/call", json=item)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert not body["is_error"] and body["data"]["stdout"] == "hi\n"
    assert body["message"] == {"type": "function_call_output", "call_id": "call_7", "output": body["content"]}


def test_what_the_caller_got_wrong_stays_an_http_error(server: Server) -> None:
    url = f"{server.url}/v1/tools/call"
    missing_id = httpx.post(url, json={"name": "skill_load", "arguments": {}, "format": "openai-responses"})
    assert missing_id.status_code == 400 and missing_id.json()["error"]["code"] == "tool_call_id_missing"
    assert httpx.post(url, json={"arguments": {}}).status_code == 422  # no call at all
    assert httpx.post(url, json={"name": "a" * 257}).status_code == 422  # no name a model API allows
    assert httpx.post(url, json={"type": "function_call", "name": "skill_load"}).status_code == 422  # no call_id
    assert httpx.post(url, content=b"[]", headers={"content-type": "application/json"}).status_code == 422


def test_async_client(server: Server) -> None:
    async def scenario() -> None:
        async with AsyncClient(server.url) as c:
            skills = await c.list_skills()
            assert skills.count == 3
            accepted = await c.submit({"skill": "math-tools", "command": "echo async"})
            kinds = [e.event async for e in c.events(accepted.run_id)]
            assert kinds[-1] == "result"
            assert (await c.get_run(accepted.run_id)).result.stdout == "async\n"
            assert (await c.health()).status == "ok"
            assert (await c.put_artifact("async.txt", b"a")).version >= 1

    asyncio.run(scenario())


def test_metrics(client: Client) -> None:
    client.run({"skill": "math-tools", "command": "exit 3"})
    text = client.metrics()
    assert 'skill_executor_runs_total{outcome="error"}' in text
    assert "skill_executor_run_duration_seconds_bucket" in text
    for name in (
        "skill_executor_queue_depth",
        "skill_executor_containers_alive",
        "skill_executor_output_bytes_collected_total",
        "skill_executor_refusals_total",
    ):
        assert name in text


def test_json_logs_with_request_id_and_no_secrets(secured: Server) -> None:
    httpx.get(f"{secured.url}/v1/skills", headers={"Authorization": f"Bearer {USER}", "X-Request-ID": "trace-abc"})

    def access_lines() -> list[dict[str, Any]]:  # written once the answer is sent: wait for it
        lines = [json.loads(line) for line in secured.log().splitlines() if line.startswith("{")]
        return [line for line in lines if line.get("request_id") == "trace-abc"]

    access = eventually(access_lines)
    assert access and access[0]["path"] == "/v1/skills" and access[0]["status"] == 200
    assert access[0]["principal"] and access[0]["principal"] not in (USER, ADMIN)
    assert USER not in secured.log() and ADMIN not in secured.log()


# -- auth -----------------------------------------------------------------------------------------


def test_auth(secured: Server) -> None:
    url = secured.url
    assert httpx.get(f"{url}/v1/skills").status_code == 401
    assert (
        httpx.get(f"{url}/v1/skills", headers={"Authorization": "Bearer wrong"}).json()["error"]["code"]
        == "unauthorized"
    )
    assert httpx.get(f"{url}/metrics").status_code == 401
    assert httpx.get(f"{url}/healthz").status_code == 200
    with Client(url, api_key=USER) as user, Client(url, api_key=ADMIN) as admin:
        assert user.list_skills().count == 3
        assert user.run({"skill": "math-tools", "command": "echo hi"}).stdout == "hi\n"
        with expect_error(403, "admin_required"):
            user.install_skill(skill_zip("by-user"))
        with expect_error(403, "admin_required"):
            user.run({"skill": "math-tools", "command": "true", "inputs": [{"from": "host:///etc/hostname"}]})
        with expect_error(403, "admin_required"):
            user.delete_skill("math-tools")
        assert admin.install_skill(skill_zip("by-admin")).id == "by-admin"
        admin.delete_skill("by-admin")
        # Runs are private to the key that made them (admins see all).
        mine = user.submit({"skill": "math-tools", "command": "true"})
        assert admin.get_run(mine.run_id).run_id == mine.run_id


def test_refuses_public_bind_without_keys(tmp_path: Path) -> None:
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
            "--data-dir",
            str(tmp_path),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert result.returncode == 2 and "without API keys" in result.stderr


# -- schema fuzzing ---------------------------------------------------------------------------------


def test_schemathesis_finds_no_5xx_and_no_schema_violation(tmp_path: Path) -> None:
    srv = Server(tmp_path, env={"SKILL_EXECUTOR_MAX_TIMEOUT": "5", "SKILL_EXECUTOR_DEFAULT_TIMEOUT": "5"}).start()
    try:
        result = subprocess.run(
            [
                str(Path(sys.executable).parent / "schemathesis"),
                "run",
                f"{srv.url}/openapi.json",
                "--checks",
                "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
                "--max-examples",
                "25",
                "--request-timeout",
                "30",
                "--generation-deterministic",
                "--exclude-path-regex",
                "/events$",
            ],
            capture_output=True,
            text=True,
            timeout=900,
            cwd=tmp_path,
        )
        assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    finally:
        srv.stop()
    assert "Traceback" not in srv.log()
