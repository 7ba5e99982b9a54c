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

from .. import leftovers
from ..cluster import FAST, Cluster, run_body, worker_id
from ..conftest import require_runtime
from ..helpers import eventually
from ..pgserver import PostgresServer
from ..s3server import SeaweedS3, s3_server  # noqa: F401 - the fixture

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
    metrics = httpx.get(f"{cluster.api(1)}/metrics", timeout=TIMEOUT).text
    assert "skill_executor_queue_depth 0.0" in metrics and "skill_executor_runs_in_progress 0.0" in metrics
    # per worker: capacity, runs, lease (an autoscaler's and an alert's figures)
    for proc in cluster.workers:
        labels = f'{{worker_id="{worker_id(proc)}"}}'
        assert f"skill_executor_cluster_worker_capacity{labels} 2.0" in metrics
        assert f"skill_executor_cluster_worker_alive{labels} 1.0" in metrics
        assert f"skill_executor_cluster_worker_lease_seconds_left{labels}" in metrics
        assert f"skill_executor_cluster_worker_lease_age_seconds{labels}" in metrics
    assert "skill_executor_cluster_capacity 4.0" in metrics and "skill_executor_cluster_workers_alive 2.0" in metrics
    assert 'skill_executor_cluster_runs{state="queued"} 0.0' in metrics


def test_a_job_delivered_again_never_runs_a_run_twice(cluster: Cluster) -> None:
    """A second job for a finished run (a re-delivery, a crafted row): the claim guard
    starts nothing; the run, its attempt and its events stay as they were."""
    from skill_executor.lifecycle.dispatch import queue

    answer = submit(cluster.api(0), run_body("echo only-once"))
    run_id = answer.json()["run_id"]
    before = status_of(cluster.api(1), run_id)
    events = sse(cluster.api(1), run_id)
    database = Database(cluster.database_url)
    try:
        with database.write() as conn:
            job = queue.defer(conn, run_id, queue=queue.tier_queue(queue.DEFAULT_TIER), lock=None)
        deadline = time.monotonic() + TIMEOUT
        while True:  # taken and finished by a worker (successful jobs are deleted)
            with database.read() as conn:
                left = conn.execute(
                    text("SELECT status FROM procrastinate_jobs WHERE id = :j"), {"j": job}
                ).scalar_one_or_none()
            if left in (None, "succeeded"):
                break
            assert time.monotonic() < deadline, left
            time.sleep(0.05)
    finally:
        database.close()
    assert status_of(cluster.api(0), run_id) == before
    assert sse(cluster.api(0), run_id) == events
    assert rows(cluster.database_url, "SELECT attempt FROM runs WHERE run_id = :r", r=run_id)[0][0] == 1


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
    # Cancelled once its first line is out (a "running" status comes before the command runs:
    # a cancel then may stop it before its echo, on a loaded machine).
    with httpx.stream("GET", f"{cluster.api(1)}/v1/runs/{run_id}/events", timeout=TIMEOUT) as events:
        assert events.status_code == 200, events.read()
        kind = ""
        for line in events.iter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: ") and kind == "stdout" and "started" in line:
                break
        else:
            raise AssertionError("the run's events ended before its first line")
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


@pytest.fixture
def steady_cluster(postgres_server: PostgresServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A cluster whose leases outlast a restart of Postgres on a loaded machine, and whose
    workers poll the queue only every 5 minutes: a run they take in time was announced."""
    require_runtime("docker")
    name = postgres_server.create_database()
    env = {**FAST, "SKILL_EXECUTOR_WORKER_LEASE_SECONDS": "30", "SKILL_EXECUTOR_WORKER_POLL_SECONDS": "300"}
    started = Cluster(tmp_path_factory.mktemp("steady"), postgres_server.url(name), env=env)
    try:
        started.start()
        yield started
    finally:
        started.close()
        postgres_server.drop_database(name)


def test_a_postgres_restart_mid_traffic_gives_clean_503s_and_the_cluster_recovers(
    steady_cluster: Cluster, postgres_server: PostgresServer
) -> None:
    cluster = steady_cluster
    kept = submit(cluster.api(0), run_body("sleep 3; echo kept"), params={"wait": "false"}).json()["run_id"]
    wait_status(cluster.api(1), kept, {"running"})
    answers: list[tuple[int, dict[str, Any], str | None]] = []
    stop = time.monotonic() + 8

    def traffic(i: int) -> None:
        while time.monotonic() < stop:
            try:
                answer = submit(cluster.api(i), run_body("echo through"))
            except httpx.HTTPError as exc:  # never a hang: the timeout is the test's
                answers.append((0, {"transport": str(exc)}, None))
                continue
            answers.append((answer.status_code, answer.json(), answer.headers.get("Retry-After")))
            if answer.status_code != 200:
                time.sleep(0.2)

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        flows = [pool.submit(traffic, i) for i in range(2)]
        time.sleep(1.0)
        postgres_server.stop("fast")
        time.sleep(1.0)
        postgres_server.start()
        for flow in flows:
            flow.result()
    codes = sorted({status for status, _, _ in answers})
    print("answers during the restart:", {c: sum(1 for s, _, _ in answers if s == c) for c in codes})
    assert set(codes) <= {200, 503}, answers
    for status, body, retry_after in answers:
        if status == 503:
            assert body["error"]["code"] == "database_unavailable" and retry_after is not None, body
        else:
            assert body["stdout"] == "through\n"
    assert 200 in codes
    # the run acknowledged before the restart finished on its worker
    assert wait_status(cluster.api(0), kept, {"completed", "failed", "cancelled"})["result"]["stdout"] == "kept\n"
    # both workers kept their leases, and are told of new runs again (they poll only every
    # 5 minutes): runs through both replicas, on both workers
    assert all(w.alive for w in cluster.workers), cluster.logs()
    with concurrent.futures.ThreadPoolExecutor(6) as pool:  # more than one worker's capacity (2)
        for again in pool.map(lambda i: submit(cluster.api(i), run_body("sleep 1; echo after")), range(6)):
            assert again.status_code == 200 and again.json()["stdout"] == "after\n", again.text
    ran = rows(cluster.database_url, "SELECT DISTINCT worker_id FROM runs WHERE request LIKE '%echo after%'")
    assert len(ran) == 2, (ran, cluster.logs())
    assert all(w.alive for w in cluster.workers), cluster.logs()


def test_mcp_and_tool_calls_on_a_replica_run_on_the_workers(cluster: Cluster) -> None:
    """Every front end goes through the same manager: MCP's skill_run and /v1/tools/call."""
    import anyio

    from ..service.test_mcp import http_client

    async def main() -> None:
        async with http_client(cluster.apis[1]) as client:  # type: ignore[arg-type]
            done = await client.call_tool("skill_run", {"skill": "math-tools", "command": "echo via-mcp"})
            assert not done.is_error and done.content[0].text.splitlines()[1:] == ["stdout:", "via-mcp"]  # type: ignore[union-attr]

    anyio.run(main)
    called = httpx.post(
        f"{cluster.api(0)}/v1/tools/call",
        json={"name": "skill_run", "arguments": {"skill": "math-tools", "command": "echo via-tools"}},
        timeout=TIMEOUT,
    )
    assert called.status_code == 200 and "via-tools" in called.text, called.text
    ran = rows(cluster.database_url, "SELECT status, worker_id FROM runs WHERE request LIKE '%via-%'")
    assert len(ran) == 2 and all(status == "completed" and worker for status, worker in ran)


def test_cluster_status_shows_the_workers_and_the_queue(cluster: Cluster) -> None:
    import json
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "skill_executor.cli.main", "cluster", "status"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**cluster.env},
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    ids = {worker_id(w) for w in cluster.workers}
    assert {w["worker_id"] for w in report["workers"]} == ids
    assert all(w["alive"] and w["lease_seconds_left"] > 0 and w["capacity"] == 2 for w in report["workers"])
    assert report["capacity"] == 4 and report["queued"] >= 0 and "***" in report["database"]


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


def test_roles_of_a_cluster_refuse_a_store_of_their_own(tmp_path: Path) -> None:
    """On Postgres but with the default object store (this process's data dir), a session
    moved to another worker would silently start empty: refused at start."""
    import subprocess
    import sys

    for command in (["serve", "--role", "api"], ["worker"]):
        done = subprocess.run(
            [sys.executable, "-m", "skill_executor.cli.main", *command, "--data-dir", str(tmp_path / "data")],
            capture_output=True,
            text=True,
            timeout=60,
            env={"PATH": "/usr/bin:/bin", "SKILL_EXECUTOR_DATABASE_URL": "postgresql://u:p@127.0.0.1:1/x"},
        )
        assert done.returncode == 2, done.stderr
        assert "role_needs_shared_store" in done.stderr or "needs the object store" in done.stderr, done.stderr


# -- faults (each on a cluster of its own) ----------------------------------------------------


@pytest.fixture
def own_cluster(postgres_server: PostgresServer, tmp_path: Path) -> Iterator[Any]:
    """A factory: ``own_cluster(apis=, workers=, env=)`` starts a cluster on a fresh database."""
    require_runtime("docker")
    made: list[tuple[Cluster, str]] = []

    def make(**kwargs: Any) -> Cluster:
        name = postgres_server.create_database()
        started = Cluster(tmp_path / f"cluster-{len(made)}", postgres_server.url(name), **kwargs)
        made.append((started, name))
        return started.start()

    try:
        yield make
    except BaseException:
        for started, _ in made:
            print(started.logs())
        raise
    finally:
        for started, name in made:
            try:
                started.close()
            finally:
                postgres_server.drop_database(name)


def containers_of(data_root: Path) -> set[str]:
    """Ids of the managed containers owned by the data dir(s) below ``data_root``."""
    return {line.split()[1] for line in leftovers.containers(data_root)}


def status_of(base: str, run_id: str) -> dict[str, Any]:
    return dict(httpx.get(f"{base}/v1/runs/{run_id}", timeout=TIMEOUT).json())


def wait_status(base: str, run_id: str, wanted: set[str], timeout: float = TIMEOUT) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        record = status_of(base, run_id)
        if record["status"] in wanted:
            return record
        assert time.monotonic() < deadline, record
        time.sleep(0.1)


def test_a_worker_killed_mid_run_loses_its_lease_in_bound_and_its_runs_end_cleanly(own_cluster: Any) -> None:
    """kill -9 with the default heartbeat 5 s, lease 20 s, sweep 5 s: its running run ends
    failed ``interrupted`` (attempt 1, never re-executed) within lease + sweep; its
    session's queued run ends ``session_lost``, as does the session's next submission
    (sessions not kept in the object store: SESSION_SNAPSHOTS=false); runs queued for the
    tier are done by the other worker."""
    cluster = own_cluster(
        apis=1, workers=2, env={"SKILL_EXECUTOR_WORKER_CAPACITY": "1", "SKILL_EXECUTOR_SESSION_SNAPSHOTS": "false"}
    )
    api = cluster.api(0)
    long = submit(api, run_body("echo in; sleep 120", session="doomed"), params={"wait": "false"}).json()["run_id"]
    wait_status(api, long, {"running"})
    holder = rows(cluster.database_url, "SELECT worker_id FROM runs WHERE run_id = :r", r=long)[0][0]
    victim = next(i for i, w in enumerate(cluster.workers) if worker_id(w) == holder)
    behind = submit(api, run_body("echo never", session="doomed"), params={"wait": "false"}).json()["run_id"]
    queued = [submit(api, run_body(f"echo q{i}"), params={"wait": "false"}).json()["run_id"] for i in range(3)]
    killed = time.monotonic()
    cluster.kill_worker(victim)
    record = wait_status(api, long, {"failed", "completed", "cancelled"}, timeout=45)
    detected = time.monotonic() - killed
    print(f"kill -9 -> interrupted: {detected:.1f} s")
    assert detected <= 30.0
    assert record["status"] == "failed" and record["error"]["code"] == "interrupted"
    assert record["error"]["details"] == {"reason": "worker_lost", "attempt": 1}
    lost = wait_status(api, behind, {"failed", "completed", "cancelled"})
    assert lost["status"] == "failed" and lost["error"]["code"] == "session_lost"
    for run_id in queued:
        done = wait_status(api, run_id, {"completed", "failed", "cancelled"})
        assert done["status"] == "completed", done
    survivors = rows(cluster.database_url, "SELECT DISTINCT worker_id FROM runs WHERE run_id = ANY(:ids)", ids=queued)
    assert [r[0] for r in survivors] == [worker_id(cluster.workers[1 - victim])]
    assert rows(cluster.database_url, "SELECT attempt FROM runs WHERE run_id = :r", r=long)[0][0] == 1
    refused = submit(api, run_body("echo again", session="doomed"))
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "session_lost"
    # the stream of the interrupted run ends with the error
    events = sse(api, long)
    assert events[-1][1] == "error" and events[-1][2]["code"] == "interrupted"
    assert rows(cluster.database_url, "SELECT count(*) FROM workers WHERE worker_id = :w", w=holder)[0][0] == 0
    # restarted on its data dir, the worker removes the containers its predecessor left
    # (the killed run's among them), and only those: the other worker's stay
    left = containers_of(cluster.workers[victim].base)
    others = containers_of(cluster.workers[1 - victim].base)
    assert left and others
    cluster.restart_worker(victim)
    eventually(lambda: not (left & containers_of(cluster.workers[victim].base)), timeout=60)
    assert others <= containers_of(cluster.workers[1 - victim].base)  # idle: its warm pool untouched


def test_a_session_outlives_its_worker_through_the_object_store(own_cluster: Any) -> None:
    """With sessions kept in the object store (the default in a cluster), kill -9 of the
    worker holding a session loses only the run it was running: the session's queued run and
    its next ones go to the other worker, which restores the session's work/ as its last
    finished run left it."""
    cluster = own_cluster(apis=2, workers=2, env={**FAST, "SKILL_EXECUTOR_WORKER_CAPACITY": "1"})
    first = submit(cluster.api(0), run_body("cd work && echo kept > f && mkdir d && echo deep > d/g", session="s"))
    assert first.status_code == 200 and first.json()["exit_code"] == 0, first.text
    long = submit(
        cluster.api(1), run_body("cd work && echo partial > p; sleep 120", session="s"), params={"wait": "false"}
    ).json()["run_id"]
    wait_status(cluster.api(0), long, {"running"})
    holder = rows(cluster.database_url, "SELECT worker_id FROM runs WHERE run_id = :r", r=long)[0][0]
    victim = next(i for i, w in enumerate(cluster.workers) if worker_id(w) == holder)
    behind = submit(cluster.api(0), run_body("cd work && cat f d/g; ls", session="s"), params={"wait": "false"}).json()[
        "run_id"
    ]
    cluster.kill_worker(victim)
    interrupted = wait_status(cluster.api(1), long, {"failed", "completed", "cancelled"}, timeout=45)
    assert interrupted["error"]["code"] == "interrupted"
    moved = wait_status(cluster.api(1), behind, {"failed", "completed", "cancelled"}, timeout=45)
    assert moved["status"] == "completed", moved
    assert moved["result"]["stdout"].split() == ["kept", "deep", "d", "f", "inputs"], moved  # not the killed run's p
    survivor = worker_id(cluster.workers[1 - victim])
    assert rows(cluster.database_url, "SELECT worker_id FROM runs WHERE run_id = :r", r=behind)[0][0] == survivor
    after = submit(cluster.api(1), run_body("cd work && cat f", session="s"))
    assert after.status_code == 200 and after.json()["stdout"] == "kept\n", after.text


def test_a_run_that_opts_in_is_executed_again_when_its_worker_is_lost(own_cluster: Any) -> None:
    """``retry: 1``: kill -9 of the worker running it queues it again; the other worker
    executes it (attempt 2) and its one stream tells the whole story."""
    cluster = own_cluster(apis=2, workers=2, env={**FAST, "SKILL_EXECUTOR_WORKER_CAPACITY": "1"})
    run_id = submit(cluster.api(0), run_body("echo go; sleep 4; echo done", retry=1), params={"wait": "false"}).json()[
        "run_id"
    ]
    wait_status(cluster.api(0), run_id, {"running"})
    first = rows(cluster.database_url, "SELECT worker_id FROM runs WHERE run_id = :r", r=run_id)[0][0]
    victim = next(i for i, w in enumerate(cluster.workers) if worker_id(w) == first)
    printed = "SELECT count(*) FROM run_events WHERE run_id = :r AND kind = 'stdout'"
    eventually(lambda: rows(cluster.database_url, printed, r=run_id)[0][0] > 0, timeout=30)  # it is under way
    cluster.kill_worker(victim)
    record = wait_status(cluster.api(1), run_id, {"completed", "failed", "cancelled"}, timeout=60)
    assert record["status"] == "completed" and record["result"]["stdout"] == "go\ndone\n", record
    again = rows(cluster.database_url, "SELECT worker_id, attempt FROM runs WHERE run_id = :r", r=run_id)[0]
    assert again == (worker_id(cluster.workers[1 - victim]), 2)
    kinds = [(kind, data) for _, kind, data in sse(cluster.api(0), run_id) if kind in ("status", "retry")]
    queued, running = ("status", {"status": "queued"}), ("status", {"status": "running"})
    lost = ("retry", {"reason": "worker_lost", "attempt": 1, "retries_left": 0})
    assert kinds == [queued, running, lost, queued, running, ("status", {"status": "completed"})]


def test_a_replica_killed_mid_request_loses_nothing_acknowledged(own_cluster: Any) -> None:
    """The replica dies while the client waits: the run it recorded finishes on a worker,
    and the client's retry with the same Idempotency-Key on the other replica gets it."""
    cluster = own_cluster(apis=2, workers=1)
    key = {"Idempotency-Key": "killed-replica-1"}
    body = run_body("sleep 2; echo survived")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(submit, cluster.api(0), body, headers=key)
        deadline = time.monotonic() + TIMEOUT
        while not rows(cluster.database_url, "SELECT run_id FROM idempotency WHERE key = :k", k=key["Idempotency-Key"]):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        cluster.apis[0].kill()
        with pytest.raises(httpx.HTTPError):
            waiting.result()
    retried = submit(cluster.api(1), body, headers=key)
    assert retried.status_code == 200, retried.text
    assert retried.json()["stdout"] == "survived\n"
    assert retried.headers.get("Idempotent-Replayed") == "true"
    assert rows(cluster.database_url, "SELECT count(*) FROM runs")[0][0] == 1


def test_the_whole_cluster_stopped_and_started_again_keeps_every_record(own_cluster: Any) -> None:
    cluster = own_cluster(apis=2, workers=2)
    ids = [submit(cluster.api(i), run_body(f"echo before-{i}")).json()["run_id"] for i in range(4)]
    first = submit(cluster.api(0), run_body("echo kept > $WORK_DIR/k.txt", session="lasting"))
    assert first.status_code == 200
    before = {run_id: status_of(cluster.api(0), run_id) for run_id in ids}
    streams = {run_id: sse(cluster.api(1), run_id) for run_id in ids}
    codes = cluster.stop()
    # a clean stop (uvicorn re-raises the SIGTERM it handled once it has shut down)
    assert set(codes.values()) <= {0, -15}, (codes, cluster.logs())
    assert "Finished server process" in cluster.workers[0].log()
    cluster.start()
    for i, run_id in enumerate(ids):
        assert status_of(cluster.api(i + 1), run_id) == before[run_id]
        assert sse(cluster.api(i), run_id) == streams[run_id]
    # a worker restarted on its data dir is the same worker: the session's files are there
    again = submit(cluster.api(1), run_body("cat $WORK_DIR/k.txt", session="lasting"))
    assert again.status_code == 200 and again.json()["stdout"] == "kept\n", again.text


def test_on_s3_an_artifact_and_an_installed_skill_cross_replicas_and_survive_a_full_restart(
    own_cluster: Any,
    s3_server: SeaweedS3,  # noqa: F811
) -> None:
    """The store is a real S3 bucket: a skill installed through one replica runs on the
    workers; the artifact its run saved on a worker downloads from the other replica and lies
    in the bucket; the whole cluster stopped and started again keeps the run, the artifact and
    the skill version."""
    import io
    import uuid
    import zipfile

    prefix = f"c-{uuid.uuid4().hex[:12]}"
    env = {
        **FAST,
        "SKILL_EXECUTOR_OBJECT_STORE": f"s3://{s3_server.bucket}/{prefix}",
        "SKILL_EXECUTOR_S3_ENDPOINT_URL": s3_server.endpoint,
        "AWS_ACCESS_KEY_ID": s3_server.access_key,
        "AWS_SECRET_ACCESS_KEY": s3_server.secret_key,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    cluster = own_cluster(apis=2, workers=2, env=env)
    bundle = io.BytesIO()
    with zipfile.ZipFile(bundle, "w") as archive:
        archive.writestr("kept/SKILL.md", "---\nname: kept\ndescription: Installed on a replica.\n---\n# kept\n")
        archive.writestr("kept/scripts/make.sh", 'echo made-by-kept > "$OUTPUT_DIR/made.txt"\n')
    installed = httpx.post(f"{cluster.api(0)}/v1/skills", content=bundle.getvalue(), timeout=TIMEOUT)
    assert installed.status_code == 201, installed.text
    outputs = {"globs": ["out/made.txt"], "save": True, "name_template": "kept/{name}"}
    ran = submit(cluster.api(1), {"skill": "kept", "command": "bash scripts/make.sh", "outputs": outputs})
    assert ran.status_code == 200 and ran.json()["exit_code"] == 0, ran.text
    saved = ran.json()["artifact_files"]
    assert [a["name"] for a in saved] == ["kept/made.txt"]
    got = httpx.get(f"{cluster.api(0)}/v1/artifacts/kept/made.txt", timeout=TIMEOUT)
    assert got.status_code == 200 and got.content == b"made-by-kept\n"
    sha = got.headers["X-Artifact-SHA256"]
    key = f"{prefix}/artifacts/sha256/{sha[:2]}/{sha}"
    in_bucket = s3_server.client(admin=True).get_object(Bucket=s3_server.bucket, Key=key)["Body"].read()
    assert in_bucket == b"made-by-kept\n"
    before = status_of(cluster.api(0), ran.json()["run_id"])
    for i in (0, 1):  # every replica lists the skill installed through one of them
        listed = httpx.get(f"{cluster.api(i)}/v1/skills", timeout=TIMEOUT).json()
        assert "kept" in {s["id"] for s in listed["skills"]}, listed

    codes = cluster.stop()
    assert set(codes.values()) <= {0, -15}, (codes, cluster.logs())
    cluster.start()
    assert status_of(cluster.api(1), ran.json()["run_id"]) == before
    again = httpx.get(f"{cluster.api(1)}/v1/artifacts/kept/made.txt", timeout=TIMEOUT)
    assert again.status_code == 200 and again.content == b"made-by-kept\n"
    versions = httpx.get(f"{cluster.api(1)}/v1/skills/kept/versions", timeout=TIMEOUT).json()
    assert [v["version"] for v in versions["versions"]] == [1]
    rerun = submit(cluster.api(0), {"skill": "kept@1", "command": "bash scripts/make.sh; cat $OUTPUT_DIR/made.txt"})
    assert rerun.status_code == 200 and rerun.json()["stdout"] == "made-by-kept\n", rerun.text
    # deleted through the replica that did not install it: gone everywhere
    deleted = httpx.delete(f"{cluster.api(1)}/v1/skills/kept", timeout=TIMEOUT)
    assert deleted.status_code in (200, 204), deleted.text
    for i in (0, 1):
        gone = httpx.get(f"{cluster.api(i)}/v1/skills/kept", timeout=TIMEOUT)
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "skill_not_found", gone.text
    assert (cluster.apis[0].base / "data" / "skills").is_dir()
    assert not (cluster.apis[0].base / "data" / "skills" / "kept").exists()  # its copy removed too


def test_a_worker_paused_past_its_lease_writes_nothing_and_exits_non_zero(own_cluster: Any) -> None:
    """Split brain: SIGSTOP longer than the lease; the run is declared interrupted; once
    resumed, the worker finds its lease gone, stops its sandbox, records nothing and exits 4."""
    import signal

    cluster = own_cluster(apis=1, workers=1)
    api = cluster.api(0)
    run_id = submit(api, run_body("sleep 15; echo late"), params={"wait": "false"}).json()["run_id"]
    wait_status(api, run_id, {"running"})
    proc = cluster.workers[0]
    assert proc.process is not None
    proc.process.send_signal(signal.SIGSTOP)
    try:
        record = wait_status(api, run_id, {"failed", "completed", "cancelled"}, timeout=30)
    finally:
        proc.process.send_signal(signal.SIGCONT)
    assert record["error"]["code"] == "interrupted"
    events = sse(api, run_id)
    assert proc.process.wait(timeout=60) == 4, proc.log()
    assert status_of(api, run_id) == record
    assert sse(api, run_id) == events
    cluster.restart_worker(0)
    assert submit(api, run_body("echo back")).json()["stdout"] == "back\n"


def test_stopping_a_worker_or_a_replica_lets_acknowledged_runs_finish(own_cluster: Any) -> None:
    """SIGTERM of a worker: it takes no new run and its run in flight finishes within the
    grace, recorded; SIGTERM of a replica: its waiting client gets 503 ``shutting_down``,
    the run goes on, and the other replica serves it."""
    cluster = own_cluster(apis=2, workers=1)
    key = {"Idempotency-Key": "stopped-replica-1"}
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(submit, cluster.api(0), run_body("sleep 1.5; echo drained"), headers=key)
        deadline = time.monotonic() + TIMEOUT
        while not rows(cluster.database_url, "SELECT run_id FROM runs WHERE status = 'running'"):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        run_id = rows(cluster.database_url, "SELECT run_id FROM runs")[0][0]
        with concurrent.futures.ThreadPoolExecutor(2) as stoppers:
            replica = stoppers.submit(cluster.apis[0].stop)
            worker = stoppers.submit(cluster.workers[0].stop)
            assert replica.result() in (0, -15) and worker.result() in (0, -15)
        answer = waiting.result()
    assert answer.status_code == 503 and answer.json()["error"]["code"] == "shutting_down"
    record = status_of(cluster.api(1), run_id)
    assert record["status"] == "completed" and record["result"]["stdout"] == "drained\n"
    replay = submit(cluster.api(1), run_body("sleep 1.5; echo drained"), headers=key)
    assert replay.status_code == 200 and replay.json()["run_id"] == run_id
    # no worker left: a new run is refused at once, never queued to wait for nobody
    refused = submit(cluster.api(1), run_body("echo nobody"))
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "no_workers", refused.text
    assert refused.headers.get("Retry-After") == "5"


#: Run inside the sandbox: ``make`` writes a corpus of odd names (tests/unit/test_snapshot_names.py's,
#: a path past PATH_MAX, links with odd targets) into work/odd; both modes print a listing of
#: work/odd as bytes (path, kind, mode, content's sha256 or the link's target), one line each.
ODD_TREE = r"""
import hashlib, os, sys
NAMES = %(names)r
def mkdirs_fd(fd, name):
    os.mkdir(name, dir_fd=fd)
    return os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
def write(fd, name, data, mode=0o644):
    out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode, dir_fd=fd)
    os.write(out, data)
    os.close(out)
    os.chmod(name, mode, dir_fd=fd)
os.chdir(os.environ["WORK_DIR"])
if sys.argv[1] == "make":
    os.mkdir(b"odd")
    top = os.open(b"odd", os.O_RDONLY | os.O_DIRECTORY)
    for i, name in enumerate(NAMES):
        write(top, name, b"content %%d: " %% i + name, 0o600 if i %% 3 == 0 else 0o755 if i %% 3 == 1 else 0o644)
        sub = mkdirs_fd(top, b"d%%d" %% i)
        write(sub, name, name * 3)
        os.symlink(name, b"link", dir_fd=sub)
        os.close(sub)
    for i, target in enumerate([b"\xff\xfe", b"back\\slash", b"/etc/shadow", b"../../../outside", b"dangling\n"]):
        os.symlink(target, b"odd-link-%%d" %% i, dir_fd=top)
    fd = os.dup(top)
    for level in range(20):
        child = mkdirs_fd(fd, bytes([0x61 + level]) * 250)
        os.close(fd)
        fd = child
    write(fd, b"\xfe bottom", b"at the bottom")
    os.close(fd)
    os.close(top)
lines = []
for root, dirs, files, rootfd in os.fwalk(b"odd"):
    for name in dirs + files:
        st = os.stat(name, dir_fd=rootfd, follow_symlinks=False)
        path = hashlib.sha256(os.path.join(root, name)).hexdigest()[:20]
        if os.path.stat.S_ISLNK(st.st_mode):
            what = "link " + os.readlink(name, dir_fd=rootfd).hex()
        elif os.path.stat.S_ISDIR(st.st_mode):
            what = "dir"
        else:
            fd = os.open(name, os.O_RDONLY, dir_fd=rootfd)
            with os.fdopen(fd, "rb") as f:
                what = "file " + hashlib.sha256(f.read()).hexdigest()[:20]
        lines.append("%%s %%o %%s" %% (path, st.st_mode & 0o7777 if not what.startswith("link") else 0, what))
print("\n".join(sorted(lines)))
print("entries", len(lines))
"""


def test_on_s3_a_session_of_odd_names_outlives_its_worker_byte_for_byte(
    own_cluster: Any,
    s3_server: SeaweedS3,  # noqa: F811
) -> None:
    """Issue 39, class 3: a session's work/ holding every name Linux allows (a backslash, a
    newline, bytes that are not UTF-8, leading dashes, 255-byte names, two spellings of one
    accented letter, a path past PATH_MAX, links with odd targets) is written on worker A;
    A is killed with SIGKILL; the session's next run, on worker B, restores it from the
    snapshot in a real S3 bucket and sees every file byte-identical (before: 503
    session_snapshot_failed, manifest invalid, and the files were gone)."""
    import base64
    import uuid

    from ..unit.test_snapshot_names import ODD_NAMES

    prefix = f"odd-{uuid.uuid4().hex[:12]}"
    env = {
        **FAST,
        "SKILL_EXECUTOR_WORKER_CAPACITY": "1",
        "SKILL_EXECUTOR_OBJECT_STORE": f"s3://{s3_server.bucket}/{prefix}",
        "SKILL_EXECUTOR_S3_ENDPOINT_URL": s3_server.endpoint,
        "AWS_ACCESS_KEY_ID": s3_server.access_key,
        "AWS_SECRET_ACCESS_KEY": s3_server.secret_key,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    cluster = own_cluster(apis=1, workers=2, env=env)
    script = base64.b64encode((ODD_TREE % {"names": ODD_NAMES}).encode()).decode()

    def command(mode: str) -> str:
        return f"echo {script} | base64 -d > $RUN_DIR/odd.py && python3 $RUN_DIR/odd.py {mode}"

    written = submit(cluster.api(0), run_body(command("make"), session="odd"))
    assert written.status_code == 200, written.text
    first = written.json()
    assert first["exit_code"] == 0 and not first["warnings"], first
    listing = first["stdout"]
    assert f"entries {len(ODD_NAMES) * 4 + 5 + 21}" in listing, listing[-300:]
    holder = rows(cluster.database_url, "SELECT worker_id FROM runs WHERE run_id = :r", r=first["run_id"])[0][0]
    victim = next(i for i, w in enumerate(cluster.workers) if worker_id(w) == holder)
    cluster.kill_worker(victim)
    moved = submit(cluster.api(0), run_body(command("list"), session="odd"), params={"wait": "false"}).json()
    record = wait_status(cluster.api(0), moved["run_id"], {"completed", "failed", "cancelled"}, timeout=90)
    assert record["status"] == "completed", record
    survivor = worker_id(cluster.workers[1 - victim])
    assert (
        rows(cluster.database_url, "SELECT worker_id FROM runs WHERE run_id = :r", r=moved["run_id"])[0][0] == survivor
    )
    assert record["result"]["exit_code"] == 0 and not record["result"]["warnings"], record["result"]
    assert record["result"]["stdout"] == listing
