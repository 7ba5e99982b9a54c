"""The command policy end to end on the real service (Docker when there is an engine): a
denied command refused before anything starts, and runs held for approval approved, rejected
and expired over REST, as an agent loop drives them; a bad policy file stops the start."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.session import ElicitationFnT
from mcp.client.streamable_http import streamable_http_client
from sqlalchemy import text

from skill_executor_client import Client as ExecutorClient
from skill_executor.core import Executor
from skill_executor.db import Database
from skill_executor.errors import ExecutorError
from skill_executor.runs.models import RunRequest

from ..api_server import Server, free_port
from ..cluster import FAST, Cluster, run_body
from ..conftest import REPO, make_settings, require_runtime
from ..pgserver import PostgresServer

KEY = "policy-tenant-key"
ADMIN = "policy-admin-key"
KEY_ID = hashlib.sha256(KEY.encode()).hexdigest()[:12]
POLICY = f"""
rules:
  - name: tenant-math
    key: {KEY_ID}
    skill: math-tools
    allow: [python3, ls, cat]
    deny: [curl]
    approval: always
  - name: first-use
    key: "*"
    skill: csv-report
    approval: on-first-use
  - name: everyone
    key: "*"
    skill: "*"
    deny: [curl]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    base = tmp_path_factory.mktemp("policy")
    (base / "policy.yaml").write_text(POLICY)
    srv = Server(
        base,
        env={
            "SKILL_EXECUTOR_API_KEYS": KEY,
            "SKILL_EXECUTOR_ADMIN_KEYS": ADMIN,
            "SKILL_EXECUTOR_POLICY_FILE": str(base / "policy.yaml"),
            "SKILL_EXECUTOR_APPROVAL_TIMEOUT_SECONDS": "4",
            "SKILL_EXECUTOR_POOL_SIZE": "0",
        },
    ).start()
    yield srv
    srv.stop()


def client(server: Server, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def test_a_denied_command_is_refused_before_anything_starts(server: Server) -> None:
    with client(server, KEY) as http:
        answer = http.post("/v1/runs", json={"skill": "math-tools", "command": "ls; curl http://x"})
        assert answer.status_code == 403, answer.text
        error = answer.json()["error"]
        assert error["code"] == "command_denied"
        assert error["details"] == {"rule": "tenant-math", "program": "curl", "reason": "program 'curl' is denied"}
        answer = http.post("/v1/runs", json={"skill": "math-tools", "command": "$(echo rm) -rf ."})
        assert answer.json()["error"]["code"] == "command_denied"
        assert http.get("/v1/runs").json()["runs"] == []  # nothing was recorded, nothing started


#: Commands that hid a program from the policy (each ran it in the runner image's bash): the
#: service refuses them as it refuses the program itself.
ATTACKS = [
    "getopts x PATH; ls",  # PATH becomes "?": ls from a folder the command made
    "ls \v#$(curl http://x)",  # a vertical tab: a comment to the parser, a word to bash
    "echo \"${x-'$(curl http://x)'}\"",  # single quotes inside double quotes are no quotes
    "echo $(( 'a[$(curl http://x)]' ))",  # arithmetic runs a subscript's substitution
    "a=(1); read 'a[$(curl http://x)]' <<< x",  # so does a name read assigns
    "echo 'curl http://x' > ~/.profile; bash -lc ls",  # a login shell runs ~/.profile
    "jobs -x curl http://x",
    'TEXTDOMAINDIR=locale TEXTDOMAIN=t\necho $"hi"',  # a translation a shipped catalog holds is expanded
    "a=(1)ls curl http://x",  # bash reads a=(1)ls as one word
    "ls >& '$(curl http://x)'",  # bash expands the word of >& twice
]


def test_commands_that_hid_a_program_are_refused_before_anything_starts(server: Server) -> None:
    with client(server, KEY) as http:
        before = len(http.get("/v1/runs").json()["runs"])
        for command in ATTACKS:
            answer = http.post("/v1/runs", json={"skill": "math-tools", "command": command})
            assert answer.status_code == 403, (command, answer.text)
            error = answer.json()["error"]
            assert error["code"] == "command_denied" and error["details"]["rule"] == "tenant-math", command
        assert len(http.get("/v1/runs").json()["runs"]) == before  # nothing was recorded


def test_a_held_run_cancelled_is_an_audit_line_as_every_decision(server: Server) -> None:
    with client(server, KEY) as http:
        held = http.post("/v1/runs?wait=false", json={"skill": "math-tools", "command": "echo cancel-me"})
        run_id = held.json()["run_id"]
        assert held.json()["status"] == "pending_approval"
        assert http.delete(f"/v1/runs/{run_id}").status_code < 300
        assert http.get(f"/v1/runs/{run_id}").json()["status"] == "cancelled"
    deadline = time.monotonic() + 5
    while True:
        lines = [json.loads(line) for line in server.log_lines() if line.startswith("{") and run_id in line]
        audited = [(line.get("action"), line.get("decision")) for line in lines if line.get("audit")]
        if ("run.approval", "cancel") in audited or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert ("run.approval_requested", None) in audited and ("run.approval", "cancel") in audited, audited


def test_a_tool_call_gets_the_refusal_as_a_tool_error_and_waits_for_approval(server: Server) -> None:
    with client(server, KEY) as http, client(server, ADMIN) as admin:
        call = {"name": "skill_run", "arguments": {"skill": "math-tools", "command": "wget http://x"}}
        answer = http.post("/v1/tools/call", json=call)
        assert answer.status_code == 200, answer.text
        assert answer.json()["is_error"] is True
        assert answer.json()["content"].startswith(
            "error (command_denied): command refused by policy rule 'tenant-math': program 'wget' is not allowed"
        )
        import threading

        answers: list[httpx.Response] = []
        call = {"name": "skill_run", "arguments": {"skill": "math-tools", "command": "echo tool-approved"}}
        thread = threading.Thread(target=lambda: answers.append(http.post("/v1/tools/call", json=call)))
        thread.start()
        deadline = time.monotonic() + 10
        while not (pending := http.get("/v1/runs", params={"status": "pending_approval"}).json()["runs"]):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert admin.post(f"/v1/runs/{pending[0]['run_id']}/approval", json={"decision": "approve"}).status_code == 200
        thread.join(60)
        assert answers[0].json()["is_error"] is False, answers[0].text
        assert "tool-approved" in answers[0].json()["content"]


def test_a_held_run_waits_then_an_admin_approves_it(server: Server) -> None:
    with client(server, KEY) as http, client(server, ADMIN) as admin:
        answer = http.post("/v1/runs?wait=false", json={"skill": "math-tools", "command": "echo approved-ran"})
        assert answer.status_code == 202, answer.text
        run_id = answer.json()["run_id"]
        assert answer.json()["status"] == "pending_approval"
        time.sleep(0.5)
        assert http.get(f"/v1/runs/{run_id}").json()["status"] == "pending_approval"
        decided = admin.post(f"/v1/runs/{run_id}/approval", json={"decision": "approve", "reason": "looks fine"})
        assert decided.status_code == 200, decided.text
        assert decided.json()["status"] in ("queued", "running", "completed")
        again = admin.post(f"/v1/runs/{run_id}/approval", json={"decision": "reject"})
        assert again.status_code == 409 and again.json()["error"]["code"] == "approval_not_pending"
        deadline = time.monotonic() + 60
        while (record := http.get(f"/v1/runs/{run_id}").json())["status"] not in ("completed", "failed"):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert record["status"] == "completed", record
        assert record["result"]["stdout"] == "approved-ran\n"


def test_a_sessions_run_is_held_and_approved_like_any(server: Server) -> None:
    with client(server, KEY) as http, client(server, ADMIN) as admin:
        for command, expected in (("echo kept > $WORK_DIR/note", ""), ("cat $WORK_DIR/note", "kept\n")):
            body = {"skill": "math-tools", "command": command, "session": "policy-session"}
            held = http.post("/v1/runs?wait=false", json=body).json()
            assert held["status"] == "pending_approval"
            assert admin.post(f"/v1/runs/{held['run_id']}/approval", json={"decision": "approve"}).status_code == 200
            deadline = time.monotonic() + 60
            while (record := http.get(f"/v1/runs/{held['run_id']}").json())["status"] not in ("completed", "failed"):
                assert time.monotonic() < deadline
                time.sleep(0.2)
            assert record["status"] == "completed" and record["result"]["stdout"] == expected, record
            assert record["result"]["session"] == "policy-session"


def test_a_sync_run_waits_for_its_approval_by_the_calling_key(server: Server) -> None:
    with client(server, KEY) as http:
        import threading

        answers: list[httpx.Response] = []
        thread = threading.Thread(
            target=lambda: answers.append(http.post("/v1/runs", json={"skill": "math-tools", "command": "ls"}))
        )
        thread.start()
        deadline = time.monotonic() + 10
        while not (pending := http.get("/v1/runs", params={"status": "pending_approval"}).json()["runs"]):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        with client(server, KEY) as own:  # the calling application, on behalf of its user
            decided = own.post(f"/v1/runs/{pending[0]['run_id']}/approval", json={"decision": "approve"})
        assert decided.status_code == 200, decided.text
        thread.join(60)
        assert answers[0].status_code == 200, answers[0].text
        assert "SKILL.md" in answers[0].json()["stdout"]


def test_a_rejected_run_ends_failed_and_nothing_runs(server: Server) -> None:
    with client(server, KEY) as http, ExecutorClient(server.url, api_key=ADMIN) as admin:  # the service's own client
        run_id = http.post("/v1/runs?wait=false", json={"skill": "math-tools", "command": "ls"}).json()["run_id"]
        decided = admin.decide_run(run_id, "reject", "not today")
        assert decided.model_dump() == {"run_id": run_id, "status": "failed", "replayed": False}
        record = http.get(f"/v1/runs/{run_id}").json()
        assert record["status"] == "failed" and record["result"] is None
        assert record["error"]["code"] == "approval_rejected"
        assert record["error"]["details"]["reason"] == "not today"


def test_on_first_use_remembers_the_approved_programs_per_key_and_skill(server: Server) -> None:
    with client(server, KEY) as http, client(server, ADMIN) as admin:
        body = {"skill": "csv-report", "command": "ls -d scripts"}
        first = http.post("/v1/runs?wait=false", json=body).json()
        assert first["status"] == "pending_approval"
        assert admin.post(f"/v1/runs/{first['run_id']}/approval", json={"decision": "approve"}).status_code == 200
        again = http.post("/v1/runs", json={"skill": "csv-report", "command": "ls -d . && ls -d scripts"})
        assert again.status_code == 200 and again.json()["stdout"] == ".\nscripts\n"  # ls was approved: no hold
        other = http.post("/v1/runs?wait=false", json={"skill": "csv-report", "command": "ls && cat SKILL.md"})
        assert other.json()["status"] == "pending_approval"  # cat is new
        own = http.post("/v1/runs?wait=false", json={"skill": "math-tools", "command": "ls"})
        assert own.json()["status"] == "pending_approval"  # another rule (always)
        for held in (other.json()["run_id"], own.json()["run_id"]):  # cancelled while held: nothing ran
            assert http.delete(f"/v1/runs/{held}").json() == {"run_id": held, "status": "cancelled", "replayed": False}


def test_a_held_run_expires(server: Server) -> None:
    with client(server, KEY) as http:
        unread = http.post("/v1/runs?wait=false", json={"skill": "math-tools", "command": "ls"}).json()["run_id"]
        started = time.monotonic()
        answer = http.post("/v1/runs", json={"skill": "math-tools", "command": "ls"})  # sync: waits, then expires
        assert answer.status_code == 408, answer.text
        assert answer.json()["error"]["code"] == "approval_expired"
        assert 3.5 < time.monotonic() - started < 30
        time.sleep(3)  # the run nobody read was expired at its deadline by the service itself
        record = http.get(f"/v1/runs/{unread}").json()
        assert record["status"] == "failed" and record["error"]["code"] == "approval_expired"
        assert 4 <= record["updated_at"] - record["created_at"] < 5.5


def test_a_bad_policy_file_stops_the_start(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text("rules: [{key: '*', alow: [ls]}]\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILL_EXECUTOR_")}
    env.update({"SKILL_EXECUTOR_POLICY_FILE": str(tmp_path / "policy.yaml"), "SKILL_EXECUTOR_RUNTIME": "local"})
    done = subprocess.run(
        [sys.executable, "-m", "skill_executor.cli.main", "serve", "--port", str(free_port())]
        + ["--data-dir", str(tmp_path / "d")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert (
        done.stderr
        == f"skill-executor: policy file {tmp_path / 'policy.yaml'}: rules.0.alow: Extra inputs are not permitted\n"
    )
    assert f"policy file {tmp_path / 'policy.yaml'}: rules.0.alow: Extra inputs are not permitted" in done.stderr


# -- MCP: elicitation where the client declared it, else the run waits for an admin -------------


@asynccontextmanager
async def mcp_client(server: Server, key: str, elicit: ElicitationFnT | None) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=120) as http:
        transport = streamable_http_client(f"{server.url}/mcp", http_client=http)
        async with Client(transport, mode="legacy", read_timeout_seconds=120, elicitation_callback=elicit) as client:
            yield client


def test_mcp_elicitation_approves_and_rejects(server: Server) -> None:
    asked: list[str] = []

    def answering(decision: str) -> ElicitationFnT:
        async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
            asked.append(params.message)
            return types.ElicitResult(action="accept", content={"decision": decision, "reason": f"user: {decision}"})

        return elicit

    async def main() -> None:
        async with mcp_client(server, KEY, answering("approve")) as client:
            result = await client.call_tool("skill_run", {"skill": "math-tools", "command": "echo via-mcp"})
            assert not result.is_error, result.content
            assert result.structured_content is not None and result.structured_content["exit_code"] == 0
            assert "via-mcp" in result.content[0].text  # type: ignore[union-attr]
        async with mcp_client(server, KEY, answering("reject")) as client:
            result = await client.call_tool("skill_run", {"skill": "math-tools", "command": "echo never"})
            assert result.is_error
            assert result.content[0].text.startswith("error (approval_rejected): ")  # type: ignore[union-attr]
            assert "user: reject" in result.content[0].text  # type: ignore[union-attr]

    anyio.run(main)
    assert len(asked) == 2
    assert "waits for your approval (policy rule 'tenant-math')" in asked[0]
    assert "Command: echo via-mcp" in asked[0]


def test_mcp_a_client_that_never_answers_the_elicitation_is_not_waited_for(server: Server) -> None:
    """A client that declared elicitation and never answers: the call ends with the run's
    expiry (it does not hang on the question), and an admin's decision meanwhile ends the
    question too."""

    async def never(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        await anyio.sleep(3600)
        raise AssertionError("unreachable")

    async def main() -> None:
        async with mcp_client(server, KEY, never) as session:
            with anyio.fail_after(30):  # the approval timeout is 4 s
                result = await session.call_tool("skill_run", {"skill": "math-tools", "command": "echo unanswered"})
            assert result.is_error
            assert result.content[0].text.startswith("error (approval_expired): ")  # type: ignore[union-attr]
            async with anyio.create_task_group() as group:
                results: list[types.CallToolResult] = []

                async def call() -> None:
                    results.append(
                        await session.call_tool("skill_run", {"skill": "math-tools", "command": "echo admin-decided"})
                    )

                group.start_soon(call)
                with client(server, ADMIN) as admin, anyio.fail_after(3):  # before the expiry
                    while not (
                        listed := await anyio.to_thread.run_sync(
                            lambda: admin.get(
                                "/v1/runs", params={"status": "pending_approval", "owner": KEY_ID}
                            ).json()["runs"]
                        )
                    ):
                        await anyio.sleep(0.1)
                    run_id = listed[0]["run_id"]
                    decided = await anyio.to_thread.run_sync(
                        lambda: admin.post(f"/v1/runs/{run_id}/approval", json={"decision": "approve"})
                    )
                    assert decided.status_code == 200, decided.text
            assert not results[0].is_error, results[0].content
            assert "admin-decided" in results[0].content[0].text  # type: ignore[union-attr]

    anyio.run(main)


def test_mcp_an_elicitation_reason_is_bounded_as_over_rest(server: Server) -> None:
    async def long_reason(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"decision": "reject", "reason": "x" * 100_000})

    async def main() -> None:
        async with mcp_client(server, KEY, long_reason) as session:
            result = await session.call_tool("skill_run", {"skill": "math-tools", "command": "echo long-reason"})
            assert result.is_error
            assert result.content[0].text.startswith("error (approval_rejected): ")  # type: ignore[union-attr]
            assert len(result.content[0].text) < 2000  # type: ignore[union-attr]

    anyio.run(main)
    url = f"sqlite:///{server.data_dir / 'skill-executor.db'}"
    reasons = [row[0] for row in _rows(url, "SELECT reason FROM run_approvals WHERE reason LIKE 'xxx%'")]
    assert reasons and all(len(reason) <= 1000 for reason in reasons)


def test_mcp_without_elicitation_waits_for_an_admin(server: Server) -> None:
    async def main() -> None:
        async with mcp_client(server, KEY, None) as session:
            async with anyio.create_task_group() as group:
                results: list[types.CallToolResult] = []

                async def call() -> None:
                    results.append(
                        await session.call_tool("skill_run", {"skill": "math-tools", "command": "echo admin-said-yes"})
                    )

                group.start_soon(call)
                with client(server, ADMIN) as admin:
                    with anyio.fail_after(20):
                        while True:
                            listed = await anyio.to_thread.run_sync(
                                lambda: admin.get(
                                    "/v1/runs", params={"status": "pending_approval", "owner": KEY_ID}
                                ).json()["runs"]
                            )
                            if listed:
                                break
                            await anyio.sleep(0.1)
                    run_id = listed[0]["run_id"]
                    decided = await anyio.to_thread.run_sync(
                        lambda: admin.post(f"/v1/runs/{run_id}/approval", json={"decision": "approve"})
                    )
                    assert decided.status_code == 200, decided.text
            assert not results[0].is_error, results[0].content
            assert "admin-said-yes" in results[0].content[0].text  # type: ignore[union-attr]

    anyio.run(main)


# -- scale-out: a held run is decided through any API replica; only then does a worker take it --


def test_a_held_run_is_approved_through_another_replica_and_runs_on_a_worker(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    require_runtime("docker")
    (tmp_path / "policy.yaml").write_text(
        "rules:\n  - {name: cluster-gate, key: '*', skill: math-tools, approval: always, deny: [curl]}\n"
    )
    name = postgres_server.create_database()
    env = {**FAST, "SKILL_EXECUTOR_POLICY_FILE": str(tmp_path / "policy.yaml")}
    cluster = Cluster(tmp_path / "cluster", postgres_server.url(name), apis=2, workers=1, env=env)
    try:
        cluster.start()
        first, second = cluster.api(0), cluster.api(1)
        held = httpx.post(f"{first}/v1/runs?wait=false", json=run_body("echo approved-elsewhere"), timeout=60)
        assert held.status_code == 202 and held.json()["status"] == "pending_approval", held.text
        run_id = held.json()["run_id"]
        refused = httpx.post(f"{first}/v1/runs", json=run_body("curl http://x"), timeout=60)
        assert refused.status_code == 403 and refused.json()["error"]["details"]["rule"] == "cluster-gate"
        time.sleep(1.5)  # a worker would have taken a queued run by now
        assert httpx.get(f"{second}/v1/runs/{run_id}").json()["status"] == "pending_approval"
        (job,) = _rows(postgres_server.url(name), "SELECT job_id, worker_id FROM runs WHERE run_id = :r", r=run_id)
        assert tuple(job) == (None, None)  # not queued for the workers, not claimed
        decided = httpx.post(f"{second}/v1/runs/{run_id}/approval", json={"decision": "approve"}, timeout=60)
        assert decided.status_code == 200 and decided.json()["status"] == "queued", decided.text
        deadline = time.monotonic() + 60
        while (record := httpx.get(f"{first}/v1/runs/{run_id}").json())["status"] not in ("completed", "failed"):
            assert time.monotonic() < deadline, record
            time.sleep(0.2)
        assert record["status"] == "completed" and record["result"]["stdout"] == "approved-elsewhere\n", record
        rejected = httpx.post(f"{first}/v1/runs?wait=false", json=run_body("echo never"), timeout=60).json()["run_id"]
        answer = httpx.post(f"{second}/v1/runs/{rejected}/approval", json={"decision": "reject", "reason": "no"})
        assert answer.json()["status"] == "failed"
        assert httpx.get(f"{first}/v1/runs/{rejected}").json()["error"]["code"] == "approval_rejected"
        audit = _rows(
            postgres_server.url(name),
            "SELECT run_id, decision, decided_by, via, reason FROM run_approvals ORDER BY decided_at",
        )
        assert [tuple(r) for r in audit] == [
            (run_id, "approve", "local", "rest", None),
            (rejected, "reject", "local", "rest", "no"),
        ]
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.close()
        postgres_server.drop_database(name)


def _rows(url: str, query: str, **params: Any) -> list[Any]:
    database = Database(url)
    try:
        with database.read() as conn:
            return list(conn.execute(text(query), params).all())
    finally:
        database.close()


def test_the_cli_local_run_applies_the_policy(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text(
        "rules:\n"
        "  - {name: cli-deny, key: local, skill: math-tools, allow: [python3, echo]}\n"
        "  - {name: cli-held, key: '*', skill: csv-report, approval: always}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILL_EXECUTOR_")}
    env["SKILL_EXECUTOR_POLICY_FILE"] = str(tmp_path / "policy.yaml")

    def run(skill: str, command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "skill_executor.cli.main", "run", "--runtime", "local"]
            + ["--data-dir", str(tmp_path / "data"), "--request", "-"],
            input=json.dumps({"skill": skill, "command": command}),
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    # The local runtime has no sandbox to enforce allow/deny at exec in: a run the parser lets
    # through is refused all the same (fail closed), never run unenforced.
    ran = run("math-tools", "python3 scripts/fib.py 5")
    assert ran.returncode == 2 and ran.stdout == "", ran.stderr
    refused = json.loads(ran.stderr.splitlines()[-1])["error"]
    assert refused["code"] == "policy_unenforceable" and refused["details"] == {"rule": "cli-deny", "runtime": "local"}
    denied = run("math-tools", "env python3 x.py; ls")
    assert denied.returncode == 2 and denied.stdout == ""
    error = json.loads(denied.stderr.splitlines()[-1])["error"]
    assert error["code"] == "command_denied" and error["details"]["rule"] == "cli-deny"
    assert error["details"]["program"] == "ls"
    held = run("csv-report", "ls")
    assert held.returncode == 2
    assert json.loads(held.stderr.splitlines()[-1])["error"]["message"].startswith(
        "policy rule 'cli-held' holds this run for approval; a local run cannot wait for one"
    )


def test_a_key_holds_at_most_so_many_runs_for_approval(tmp_path: Path) -> None:
    """Held runs take no run slot: without a bound one key held 600 runs in 2 s for admins to
    wade through (and as many records and expiry entries)."""
    (tmp_path / "policy.yaml").write_text("rules:\n  - {key: '*', skill: '*', approval: always}\n")
    srv = Server(
        tmp_path,
        env={
            "SKILL_EXECUTOR_API_KEYS": KEY,
            "SKILL_EXECUTOR_ADMIN_KEYS": ADMIN,
            "SKILL_EXECUTOR_POLICY_FILE": str(tmp_path / "policy.yaml"),
            "SKILL_EXECUTOR_MAX_PENDING_APPROVALS": "3",
            "SKILL_EXECUTOR_POOL_SIZE": "0",
        },
    ).start()
    try:
        body = {"skill": "math-tools", "command": "echo held"}
        with client(srv, KEY) as http, client(srv, ADMIN) as admin:
            held = [http.post("/v1/runs?wait=false", json=body) for _ in range(3)]
            assert [answer.json()["status"] for answer in held] == ["pending_approval"] * 3
            refused = http.post("/v1/runs?wait=false", json=body)
            assert refused.status_code == 429, refused.text
            error = refused.json()["error"]
            assert error["code"] == "too_many_pending_approvals"
            assert (
                error["message"]
                == "this key has 3 runs waiting for approval, the most it may have; decide or cancel one"
            )
            assert admin.post("/v1/runs?wait=false", json=body).json()["status"] == "pending_approval"  # per key
            assert http.delete(f"/v1/runs/{held[0].json()['run_id']}").status_code < 300
            assert http.post("/v1/runs?wait=false", json=body).json()["status"] == "pending_approval"
    finally:
        srv.stop()


def test_on_first_use_keeps_a_bundles_approvals_apart_from_the_installed_skill(tmp_path: Path) -> None:
    """A bundle's name is its sender's choice: approving ``echo`` in a bundle named
    math-tools must not approve ``echo`` in the installed math-tools (nor the other way)."""
    import base64
    import io
    import zipfile

    (tmp_path / "policy.yaml").write_text("rules:\n  - {key: '*', skill: '*', approval: on-first-use}\n")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(
            "math-tools/SKILL.md", "---\nname: math-tools\ndescription: A look-alike.\n---\n# Look-alike\n"
        )
    bundled = {"command": "echo from-bundle", "bundle": {"data": base64.b64encode(buffer.getvalue()).decode()}}
    installed = {"skill": "math-tools", "command": "echo from-installed"}
    srv = Server(
        tmp_path,
        env={
            "SKILL_EXECUTOR_API_KEYS": KEY,
            "SKILL_EXECUTOR_ADMIN_KEYS": ADMIN,
            "SKILL_EXECUTOR_POLICY_FILE": str(tmp_path / "policy.yaml"),
            "SKILL_EXECUTOR_POOL_SIZE": "0",
        },
    ).start()
    try:
        with client(srv, KEY) as http, client(srv, ADMIN) as admin:

            def approved_run(body: dict[str, Any]) -> None:
                held = http.post("/v1/runs?wait=false", json=body)
                assert held.json()["status"] == "pending_approval", held.text
                run_id = held.json()["run_id"]
                assert admin.post(f"/v1/runs/{run_id}/approval", json={"decision": "approve"}).status_code == 200
                deadline = time.monotonic() + 60
                while http.get(f"/v1/runs/{run_id}").json()["status"] not in ("completed", "failed"):
                    assert time.monotonic() < deadline
                    time.sleep(0.1)

            approved_run(bundled)
            approved_run(installed)  # echo approved in the bundle is not approved in the installed skill
            assert http.post("/v1/runs?wait=false", json=installed).json()["status"] == "queued"  # remembered
            approved_run(bundled)  # a bundle's runs are never remembered: its code is its sender's
    finally:
        srv.stop()


def test_a_held_run_the_policy_now_refuses_ends_with_an_audit_line(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text("rules:\n  - {key: '*', skill: '*', approval: always}\n")
    env = {
        "SKILL_EXECUTOR_API_KEYS": KEY,
        "SKILL_EXECUTOR_ADMIN_KEYS": ADMIN,
        "SKILL_EXECUTOR_POLICY_FILE": str(tmp_path / "policy.yaml"),
        "SKILL_EXECUTOR_POOL_SIZE": "0",
    }
    srv = Server(tmp_path, env=env).start()
    try:
        with client(srv, KEY) as http:
            run_id = http.post("/v1/runs?wait=false", json={"skill": "math-tools", "command": "cat /dev/null"}).json()[
                "run_id"
            ]
        srv.stop()
        (tmp_path / "policy.yaml").write_text(
            "rules:\n  - {name: now, key: '*', skill: '*', allow: [ls], approval: always}\n"
        )
        srv.start()
        with client(srv, ADMIN) as admin:
            answer = admin.post(f"/v1/runs/{run_id}/approval", json={"decision": "approve"})
            assert answer.status_code == 403 and answer.json()["error"]["code"] == "command_denied", answer.text
            assert admin.get(f"/v1/runs/{run_id}").json()["status"] == "failed"
        lines = [json.loads(line) for line in srv.log_lines() if line.startswith("{") and run_id in line]
        audited = [(line.get("action"), line.get("decision"), line.get("rule")) for line in lines if line.get("audit")]
        assert ("run.approval", "reject", "now") in audited, audited
    finally:
        srv.stop()


def test_the_library_runner_refuses_a_run_its_rule_would_hold(tmp_path: Path) -> None:
    """``SkillRunner.run`` (``skills test``, the pytest plugin, the doctor's probe) has no one
    to ask either: a run its rule would hold is refused, as the CLI's ``run`` refuses it."""
    (tmp_path / "policy.yaml").write_text(
        "rules:\n  - {name: lib-held, key: local, skill: math-tools, approval: always}\n"
    )
    executor = Executor.from_settings(make_settings(tmp_path, "local", policy_file=tmp_path / "policy.yaml"))
    try:
        with pytest.raises(ExecutorError) as caught:
            executor.runner.run(RunRequest(skill="math-tools", command="echo never-held"))
    finally:
        executor.close()
    assert caught.value.code == "command_denied"
    assert caught.value.message.startswith("policy rule 'lib-held' holds this run for approval; a local run cannot")


def test_an_mcp_task_of_a_held_run_works_until_it_is_approved(server: Server) -> None:
    from ..service.test_mcp import _task_done, _TasksExtension, raw

    async def main() -> None:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}, timeout=120) as http:
            transport = streamable_http_client(f"{server.url}/mcp", http_client=http)
            async with Client(transport, mode="auto", extensions=[_TasksExtension()]) as session:
                arguments = {"skill": "math-tools", "command": "echo task-approved"}
                created = await raw(session, "tools/call", {"name": "skill_run", "arguments": arguments})
                assert created["status"] == "working"
                got = await raw(session, "tasks/get", {"taskId": created["taskId"]})
                assert got["status"] == "working" and "pending_approval" in got["statusMessage"]
                with client(server, ADMIN) as admin:
                    decided = await anyio.to_thread.run_sync(
                        lambda: admin.post(f"/v1/runs/{created['taskId']}/approval", json={"decision": "approve"})
                    )
                assert decided.status_code == 200, decided.text
                done = await _task_done(session, created["taskId"])
                assert done["status"] == "completed" and done["result"]["isError"] is False
                assert "task-approved" in done["result"]["content"][0]["text"]

    anyio.run(main)
