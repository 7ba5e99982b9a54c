"""A cluster on a real Postgres and the real Docker engine: 2 API replicas and 2 workers as
separate processes (tests/cluster.py). One cluster is shared by the tests that do not kill
parts of it; the others start their own."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from skill_executor.db import Database

from .cluster import Cluster, run_body
from .conftest import require_runtime
from .pgserver import PostgresServer

TIMEOUT = 60.0


@pytest.fixture(scope="module")
def cluster(postgres_server: PostgresServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    require_runtime("docker")
    name = postgres_server.create_database()
    started = Cluster(tmp_path_factory.mktemp("cluster"), postgres_server.url(name))
    try:
        started.start()
        yield started
    except BaseException:
        print(started.logs())
        raise
    finally:
        started.close()
        postgres_server.drop_database(name)


def rows(url: str, query: str, **params: Any) -> list[Any]:
    database = Database(url)
    try:
        with database.read() as conn:
            return list(conn.execute(text(query), params).all())
    finally:
        database.close()


def submit(base: str, body: dict[str, Any], **kwargs: Any) -> httpx.Response:
    return httpx.post(f"{base}/v1/runs", json=body, timeout=TIMEOUT, **kwargs)


def sse(base: str, run_id: str, last: int | None = None) -> list[tuple[int, str, Any]]:
    import json

    headers = {"Last-Event-ID": str(last)} if last is not None else {}
    got: list[tuple[int, str, Any]] = []
    with httpx.stream("GET", f"{base}/v1/runs/{run_id}/events", headers=headers, timeout=TIMEOUT) as response:
        assert response.status_code == 200, response.read()
        event_id, kind = 0, ""
        for line in response.iter_lines():
            if line.startswith("id: "):
                event_id = int(line[4:])
            elif line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                got.append((event_id, kind, json.loads(line[6:])))
    return got


def test_runs_submitted_round_robin_to_both_replicas_all_finish_exactly_once(cluster: Cluster) -> None:
    bodies = [run_body(f"echo run-{i}") for i in range(8)]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda ib: submit(cluster.api(ib[0]), ib[1]), enumerate(bodies)))
    for i, answer in enumerate(answers):
        assert answer.status_code == 200, answer.text
        assert answer.json()["stdout"] == f"run-{i}\n"
    ids = [a.json()["run_id"] for a in answers]
    found = rows(
        cluster.database_url,
        "SELECT run_id, status, attempt, worker_id FROM runs WHERE run_id = ANY(:ids)",
        ids=ids,
    )
    assert sorted(r[0] for r in found) == sorted(ids)
    assert {(r[1], r[2]) for r in found} == {("completed", 1)}
    # both workers took runs, and any replica reads any run
    assert len({r[3] for r in found}) == 2
    for i, run_id in enumerate(ids):
        record = httpx.get(f"{cluster.api(i + 1)}/v1/runs/{run_id}", timeout=TIMEOUT).json()
        assert record["status"] == "completed" and record["result"]["stdout"] == f"run-{i}\n"


def test_a_sessions_runs_through_both_replicas_see_each_others_files(cluster: Cluster) -> None:
    session = "shared-notes"
    steps = [
        "echo one > $WORK_DIR/notes.txt",
        "cat $WORK_DIR/notes.txt && echo two >> $WORK_DIR/notes.txt",
        "cat $WORK_DIR/notes.txt && echo three >> $WORK_DIR/notes.txt",
        "cat $WORK_DIR/notes.txt",
    ]
    outputs = []
    for i, command in enumerate(steps):
        answer = submit(cluster.api(i), run_body(command, session=session))
        assert answer.status_code == 200, answer.text
        outputs.append(answer.json()["stdout"])
    assert outputs[1:] == ["one\n", "one\ntwo\n", "one\ntwo\nthree\n"]
    holders = rows(cluster.database_url, "SELECT worker_id FROM session_leases WHERE session = :s", s=session)
    ran_on = rows(cluster.database_url, "SELECT DISTINCT worker_id FROM runs WHERE session = :s", s=session)
    assert len(holders) == 1 and [r[0] for r in ran_on] == [holders[0][0]]


def test_events_stream_from_the_other_replica_and_resume_with_last_event_id(cluster: Cluster) -> None:
    command = "for i in 1 2 3; do echo line-$i; sleep 0.3; done"
    accepted = submit(cluster.api(0), run_body(command), params={"wait": "false"})
    assert accepted.status_code == 202, accepted.text
    run_id = accepted.json()["run_id"]
    events = sse(cluster.api(1), run_id)
    kinds = [kind for _, kind, _ in events]
    assert [e[0] for e in events] == list(range(1, len(events) + 1))
    assert kinds[:2] == ["status", "status"] and kinds[-2:] == ["status", "result"]
    assert "".join(d["data"] for _, k, d in events if k == "stdout") == "line-1\nline-2\nline-3\n"
    # resumed on the first replica after the third event: exactly the rest, with the same ids
    assert sse(cluster.api(0), run_id, last=3) == events[3:]
    finished = httpx.get(
        f"{cluster.api(0)}/v1/runs/{run_id}/events", headers={"Last-Event-ID": str(len(events))}, timeout=TIMEOUT
    )
    assert finished.status_code == 204


def test_cancel_through_the_other_replica_stops_the_run_on_its_worker(cluster: Cluster) -> None:
    accepted = submit(cluster.api(0), run_body("echo started; sleep 60"), params={"wait": "false"})
    run_id = accepted.json()["run_id"]
    deadline = time.monotonic() + TIMEOUT
    while httpx.get(f"{cluster.api(1)}/v1/runs/{run_id}", timeout=TIMEOUT).json()["status"] != "running":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    started = time.monotonic()
    cancelled = httpx.delete(f"{cluster.api(1)}/v1/runs/{run_id}", timeout=TIMEOUT)
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "cancelled"
    assert time.monotonic() - started < 30  # not the run's 60 s
    record = httpx.get(f"{cluster.api(0)}/v1/runs/{run_id}", timeout=TIMEOUT).json()
    assert record["status"] == "cancelled" and record["result"]["stdout"] == "started\n"
    again = httpx.delete(f"{cluster.api(0)}/v1/runs/{run_id}", timeout=TIMEOUT)
    assert again.status_code == 409 and again.json()["error"]["code"] == "run_finished"


def test_idempotency_keys_hold_across_replicas(cluster: Cluster) -> None:
    key = {"Idempotency-Key": "cluster-key-1"}
    first = submit(cluster.api(0), run_body("echo once"), headers=key)
    replay = submit(cluster.api(1), run_body("echo once"), headers=key)
    assert first.status_code == replay.status_code == 200
    assert replay.json()["run_id"] == first.json()["run_id"]
    assert replay.headers.get("Idempotent-Replayed") == "true"
    reused = submit(cluster.api(1), run_body("echo other"), headers=key)
    assert reused.status_code == 409 and reused.json()["error"]["code"] == "idempotency_key_reused"
    count = rows(cluster.database_url, "SELECT count(*) FROM runs WHERE request LIKE '%echo once%'")
    assert count[0][0] == 1


def test_roles_of_a_cluster_refuse_the_embedded_sqlite(tmp_path: Path) -> None:
    import subprocess
    import sys

    for command in (["serve", "--role", "api"], ["worker"]):
        done = subprocess.run(
            [sys.executable, "-m", "skill_executor.cli.main", *command, "--data-dir", str(tmp_path / "data")],
            capture_output=True,
            text=True,
            timeout=60,
            env={"PATH": "/usr/bin:/bin"},
        )
        assert done.returncode == 2, done.stderr
        assert "needs a shared Postgres database" in done.stderr
