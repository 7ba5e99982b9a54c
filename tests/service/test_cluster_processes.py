"""A session's interactive processes on a real cluster (tests/cluster.py: Postgres, 2 API
replicas, 2 workers on the real Docker engine): a process lives on its session's worker and
every call for it, on either replica, reaches it there; a run of the session submitted to
the other replica joins its loopback; a worker killed with ``kill -9``: its processes are
reported lost, never silently forgotten, and the session goes on on the other worker."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from skill_executor_client import Client

from ..cluster import FAST, Cluster, worker_id
from ..conftest import require_runtime, runsc_problem
from ..pgserver import PostgresServer
from ..service.test_api import expect_error
from ..service.test_api_tenancy import KEY_A, KEY_B
from ..service.test_cluster import rows

TIMEOUT = 120.0


@pytest.fixture(scope="module")
def cluster(postgres_server: PostgresServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    require_runtime("docker")
    name = postgres_server.create_database()
    env = {**FAST, "SKILL_EXECUTOR_API_KEYS": f"{KEY_A},{KEY_B}"}
    started = Cluster(tmp_path_factory.mktemp("cluster-processes"), postgres_server.url(name), env=env)
    try:
        started.start()
        yield started
    except BaseException:
        print(started.logs())
        raise
    finally:
        started.close()
        postgres_server.drop_database(name)


@pytest.fixture
def clients(cluster: Cluster) -> Iterator[tuple[Client, Client]]:
    """A client of each API replica, with the same key."""
    with (
        Client(cluster.api(0), api_key=KEY_A, timeout=TIMEOUT) as a,
        Client(cluster.api(1), api_key=KEY_A, timeout=TIMEOUT) as b,
    ):
        yield a, b


def poll_until(client: Client, session: str, pid: str, wanted: str, after: int = 0, timeout: float = 30.0) -> int:
    """Poll from ``after`` until ``wanted`` is in what came since; the offset to poll from next."""
    seen, deadline = "", time.monotonic() + timeout
    while wanted not in seen:
        assert time.monotonic() < deadline, f"{wanted!r} not in {seen!r}"
        polled = client.process_poll(session, pid, after, wait=2)
        seen += polled.output
        after = polled.next
    return after


def placed(cluster: Cluster, session: str, pid: str) -> str:
    """The worker the cluster recorded the process on; it holds the session's lease too."""
    [(worker,)] = rows(cluster.database_url, "SELECT worker_id FROM session_processes WHERE process_id = :p", p=pid)
    [(home,)] = rows(cluster.database_url, "SELECT worker_id FROM session_leases WHERE session = :s", s=session)
    assert home == worker
    return str(worker)


def test_a_repl_started_on_one_replica_is_driven_from_the_other(
    cluster: Cluster, clients: tuple[Client, Client]
) -> None:
    a, b = clients
    started = a.process_start("repl", ["python3", "-i", "-u"])
    pid = started.id
    assert started.running and pid.startswith("p-")
    assert placed(cluster, "repl", pid) in {worker_id(w) for w in cluster.workers}
    ready = poll_until(b, "repl", pid, ">>> ")  # the banner and the prompt, through the other replica
    b.process_write("repl", pid, "6*7\n")
    after = poll_until(a, "repl", pid, "42", ready)
    b.process_write("repl", pid, "print('x' * 3)\n")
    after = poll_until(b, "repl", pid, "xxx", after)
    took = []
    for i in range(20):  # a write through one replica, its answer polled through the other
        begin = time.perf_counter()
        b.process_write("repl", pid, f"print({i} * 1000 + 7)\n")
        after = poll_until(a, "repl", pid, f"{i * 1000 + 7}", after)
        took.append(time.perf_counter() - begin)
    took.sort()
    print(f"write via B + its answer polled via A: median {took[10] * 1000:.1f} ms, max {took[-1] * 1000:.1f} ms")
    assert a.process_poll("repl", pid, 0).output == b.process_poll("repl", pid, 0).output
    assert [p.id for p in b.processes("repl").processes] == [pid]
    assert a.process("repl", pid).running
    killed = b.process_kill("repl", pid)
    assert not killed.running and killed.reason == "killed" and killed.exit_code == 137
    with expect_error(409, "process_ended"):  # the worker's own error, through the other replica
        a.process_write("repl", pid, "1\n")
    assert a.process("repl", pid).reason == "killed"
    with Client(cluster.api(1), api_key=KEY_B, timeout=TIMEOUT) as other:  # another key never reaches it
        with expect_error(404, "process_not_found"):
            other.process("repl", pid)


def test_the_sse_stream_through_the_other_replica(cluster: Cluster, clients: tuple[Client, Client]) -> None:
    a, _ = clients
    started = a.process_start("sse", "for i in 1 2 3; do echo line $i; sleep 0.2; done; exit 4")
    url = f"{cluster.api(1)}/v1/sessions/sse/processes/{started.id}/events"
    events: list[tuple[str, Any]] = []
    with httpx.stream("GET", url, headers={"Authorization": f"Bearer {KEY_A}"}, timeout=60) as response:
        assert response.status_code == 200
        event = ""
        for line in response.iter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                events.append((event, json.loads(line[6:])))
    assert "".join(data["data"] for kind, data in events if kind == "output") == "line 1\nline 2\nline 3\n"
    assert events[-1] == ("exit", {"exit_code": 4, "reason": "exited"})


def test_a_dev_server_answers_a_run_submitted_through_the_other_replica(
    cluster: Cluster, clients: tuple[Client, Client]
) -> None:
    a, b = clients
    server = a.process_start(
        "web", "echo '<p>served</p>' > page.html; exec python3 -u -m http.server 8766 --bind 127.0.0.1"
    )
    poll_until(a, "web", server.id, "Serving HTTP")
    worker = placed(cluster, "web", server.id)
    for _ in range(2):  # every run of the session goes to the process's worker
        fetched = b.run({"skill": "math-tools", "command": "curl -s http://127.0.0.1:8766/page.html", "session": "web"})
        assert fetched.exit_code == 0 and "<p>served</p>" in fetched.stdout, fetched
        [(ran_on,)] = rows(cluster.database_url, "SELECT worker_id FROM runs WHERE run_id = :r", r=fetched.run_id)
        assert ran_on == worker
    b.process_kill("web", server.id)


def test_the_process_tools_on_a_replica(cluster: Cluster, clients: tuple[Client, Client]) -> None:
    a, b = clients
    started = a.call_tool("process_start", {"command": "cat"}, session="tools")
    assert not started.is_error, started.content
    pid = started.data["id"]
    wrote = b.call_tool("process_write", {"process": pid, "data": "hello\n", "eof": True}, session="tools")
    assert not wrote.is_error, wrote.content
    after = poll_until(a, "tools", pid, "hello")
    assert b.process_poll("tools", pid, after, wait=10).exit_code == 0  # cat ends at the eof


def test_a_worker_only_answers_its_cluster(cluster: Cluster, clients: tuple[Client, Client]) -> None:
    a, _ = clients
    with expect_error(404, "process_not_found"):
        a.process("nowhere", "p-000000000000")
    for headers in ({}, {"Authorization": f"Bearer {KEY_A}"}, {"Authorization": "Bearer nope"}):
        answer = httpx.get(f"{cluster.workers[0].url}/v1/sessions/x/processes", headers=headers, timeout=10)
        assert answer.status_code == 401 and answer.json()["error"]["code"] == "unauthorized", answer.text
    metrics = f"{cluster.workers[0].url}/metrics"  # the worker's other routes take the API keys, as before
    assert httpx.get(metrics, headers={"Authorization": f"Bearer {KEY_A}"}, timeout=10).status_code == 200
    assert httpx.get(metrics, timeout=10).status_code == 401


def test_a_restarted_workers_processes_are_reported_lost(cluster: Cluster, clients: tuple[Client, Client]) -> None:
    """A worker restarted on its data dir keeps its id and its sessions, not its processes."""
    a, b = clients
    before = a.process_start("restarted", "sleep 600")
    worker = placed(cluster, "restarted", before.id)
    index = next(i for i, w in enumerate(cluster.workers) if worker_id(w) == worker)
    cluster.restart_worker(index)
    state = b.process("restarted", before.id)
    assert not state.running and state.reason == "lost"
    with expect_error(410, "process_lost"):
        b.process_poll("restarted", before.id, 0)
    after = a.process_start("restarted", "echo again")  # the session stays on its worker
    assert placed(cluster, "restarted", after.id) == worker
    poll_until(b, "restarted", after.id, "again")


def test_a_killed_workers_processes_are_reported_lost_and_the_session_goes_on(
    cluster: Cluster, clients: tuple[Client, Client]
) -> None:
    """(Last: it kills a worker.) kill -9 the worker running a session's process: once its
    lease runs out (5 s here) the process is reported ended (``reason: lost``) on both
    replicas, the calls that need it alive answer 410 ``process_lost``; a new process of
    the session starts on the other worker."""
    a, b = clients
    ended = a.process_start("doomed", "sleep 600")
    assert b.process_kill("doomed", ended.id).reason == "killed"
    doomed = a.process_start("doomed", "sleep 600")
    worker = placed(cluster, "doomed", doomed.id)
    index = next(i for i, w in enumerate(cluster.workers) if worker_id(w) == worker)
    cluster.kill_worker(index)
    killed_at = time.monotonic()
    while True:
        try:
            state = b.process("doomed", doomed.id)
        except Exception as exc:  # until its lease runs out: 503 worker_unreachable
            assert getattr(exc, "code", None) == "worker_unreachable", exc
        else:
            if not state.running:
                break
        assert time.monotonic() - killed_at < 30
        time.sleep(0.2)
    lost_after = time.monotonic() - killed_at
    assert state.reason == "lost" and state.exit_code is None
    listed = [(p.id, p.reason) for p in a.processes("doomed").processes]
    assert listed == [(ended.id, "killed"), (doomed.id, "lost")]  # one seen ending keeps its end
    with expect_error(410, "process_lost"):
        a.process_poll("doomed", doomed.id, 0)
    with expect_error(410, "process_lost"):
        b.process_write("doomed", doomed.id, "x\n")
    assert a.process_kill("doomed", doomed.id).reason == "lost"
    print(f"process reported lost {lost_after:.1f} s after its worker was killed")
    # the session goes on on the other worker (its lease moves: sessions are kept in the store)
    deadline = time.monotonic() + 30
    while True:  # until a replica's sweep has dropped the lost worker's lease on the session
        try:
            again = b.process_start("doomed", "echo back")
            break
        except Exception as exc:  # no_workers: the survivor's 5 s lease lapsed on a loaded host ("retry shortly")
            code = getattr(exc, "code", None)
            assert code in ("worker_unreachable", "no_workers") and time.monotonic() < deadline, exc
            time.sleep(0.2)
    assert placed(cluster, "doomed", again.id) != worker
    poll_until(a, "doomed", again.id, "back")


def test_on_gvisor_a_repl_across_replicas(postgres_server: PostgresServer, tmp_path: Path) -> None:
    """The workers' sandboxes on gVisor (runsc), with their warm pools: the same routing."""
    problem = runsc_problem()
    if problem is not None:
        pytest.skip(problem)
    name = postgres_server.create_database()
    env = {**FAST, "SKILL_EXECUTOR_API_KEYS": KEY_A, "SKILL_EXECUTOR_DOCKER_OCI_RUNTIME": "runsc"}
    cluster = Cluster(tmp_path, postgres_server.url(name), workers=1, env=env)
    try:
        cluster.start()
        with (
            Client(cluster.api(0), api_key=KEY_A, timeout=TIMEOUT) as a,
            Client(cluster.api(1), api_key=KEY_A, timeout=TIMEOUT) as b,
        ):
            started = a.process_start("repl", ["python3", "-i", "-u"])
            ready = poll_until(b, "repl", started.id, ">>> ")
            a.process_write("repl", started.id, "6*7\n")
            poll_until(b, "repl", started.id, "42", ready)
            assert b.run({"skill": "math-tools", "command": "echo ran", "session": "repl"}).stdout == "ran\n"
            assert a.process_kill("repl", started.id).reason == "killed"
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.close()
        postgres_server.drop_database(name)
