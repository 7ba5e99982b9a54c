"""Two workers, each on a Docker engine of its own (the main one and a second ``dockerd``,
tests/engines.py), under 2 API replicas on a real Postgres (tests/cluster.py): runs
land on both engines and finish exactly once; a session whose worker is killed goes on
on the other engine with its files; a restarted worker sweeps its own engine only.

Both workers run the runner's minimal image (the one copied to the second engine)."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest

from .. import leftovers
from ..cluster import FAST, Cluster, run_body, worker_id
from ..conftest import require_runtime
from ..engines import MAIN_ENGINE, SecondEngine, small_image
from ..helpers import eventually
from ..pgserver import PostgresServer
from ..service.test_cluster import rows, submit, wait_status

#: The engine of worker i (worker 0 on the main engine, worker 1 on the second).
Engines = list[str]


@pytest.fixture
def two_engines(
    postgres_server: PostgresServer, second_engine: SecondEngine, tmp_path: Path
) -> Iterator[Callable[..., tuple[Cluster, Engines]]]:
    """A factory: a cluster (``apis`` replicas, 2 workers, FAST leases) whose worker 0 is
    on the main engine and worker 1 on the second; stopped after, and then neither
    engine holds a container of it."""
    require_runtime("docker")
    image = small_image()
    engines = [MAIN_ENGINE, second_engine.url]
    made: list[tuple[Cluster, str]] = []

    def make(apis: int = 2, **env: str) -> tuple[Cluster, Engines]:
        name = postgres_server.create_database()
        cluster = Cluster(
            tmp_path / f"cluster-{len(made)}",
            postgres_server.url(name),
            apis=apis,
            env={**FAST, "SKILL_EXECUTOR_DOCKER_IMAGE": image, **env},
            worker_env=[{"DOCKER_HOST": url} for url in engines],
        )
        made.append((cluster, name))
        return cluster.start(), engines

    try:
        yield make
    except BaseException:
        for cluster, _ in made:
            print(cluster.logs())
        raise
    finally:
        for cluster, name in made:
            try:
                cluster.close()
                for url in engines:  # nothing of the cluster stays on either engine
                    assert eventually(lambda url=url: not leftovers.containers(cluster.base, url), timeout=30), url
            finally:
                postgres_server.drop_database(name)


def managed_on(engine: str, data_root: Path) -> set[str]:
    """Ids of the managed containers on ``engine`` owned by the data dir(s) below ``data_root``."""
    return {line.split()[1] for line in leftovers.containers(data_root, engine)}


def started_on(engine: str, since: float) -> set[str]:
    """Ids of the containers that ``engine`` started since ``since`` (its event log)."""
    client = docker.DockerClient(base_url=engine, version="auto", timeout=30)
    try:
        events = client.api.events(
            since=int(since), until=int(time.time()) + 1, filters={"type": "container", "event": "start"}, decode=True
        )
        return {event["id"] for event in events}
    finally:
        client.close()


def test_runs_through_both_replicas_finish_once_and_run_on_both_engines(two_engines: Any) -> None:
    """Runs submitted to both replicas at once: each finishes once (attempt 1), both
    workers took some, and every run ran in a container of its worker's engine (the
    container's host name is its id: found in that engine's event log, not the other's)."""
    since = time.time() - 1  # warm containers start with their worker
    cluster, engines = two_engines()
    command = "cat /etc/hostname; python3 -c 'sum(i * i for i in range(300000))'"
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda i: submit(cluster.api(i), run_body(command)), range(12)))
    assert all(a.status_code == 200 and a.json()["exit_code"] == 0 for a in answers), [a.text for a in answers]
    ids = [a.json()["run_id"] for a in answers]
    found = rows(
        cluster.database_url, "SELECT run_id, status, attempt, worker_id FROM runs WHERE run_id = ANY(:ids)", ids=ids
    )
    assert sorted(r[0] for r in found) == sorted(ids)  # each run once
    assert {(r[1], r[2]) for r in found} == {("completed", 1)}
    engine_of = {worker_id(proc): engines[i] for i, proc in enumerate(cluster.workers)}
    by_run = {r[0]: engine_of[r[3]] for r in found}
    assert set(by_run.values()) == set(engines)  # both engines executed some
    started = {url: started_on(url, since) for url in engines}
    for answer in answers:
        host = answer.json()["stdout"].split()[0]
        mine = by_run[answer.json()["run_id"]]
        other = next(url for url in engines if url != mine)
        assert any(c.startswith(host) for c in started[mine]), (host, mine)
        assert not any(c.startswith(host) for c in started[other]), (host, other)
    # each worker made containers on its own engine only
    for i, proc in enumerate(cluster.workers):
        assert managed_on(engines[i], proc.base)  # its warm pool
        assert not managed_on(engines[1 - i], proc.base)


def test_a_session_goes_on_on_the_other_engine_and_a_restart_sweeps_only_its_engine(two_engines: Any) -> None:
    """kill -9 of the worker holding a session: the run in flight ends ``interrupted``; the
    session's next run completes on the other worker, on the other engine, with the files
    its last finished run left (the snapshot); the killed worker's containers stay on its
    engine until it is started again, which removes them and nothing on the other engine."""
    since = time.time() - 1
    cluster, engines = two_engines(apis=2, SKILL_EXECUTOR_WORKER_CAPACITY="1")
    first = submit(cluster.api(0), run_body("cd work && echo kept > f && mkdir d && echo deep > d/g", session="s"))
    assert first.status_code == 200 and first.json()["exit_code"] == 0, first.text
    long = submit(
        cluster.api(1), run_body("cd work && echo partial > p; sleep 120", session="s"), params={"wait": "false"}
    ).json()["run_id"]
    wait_status(cluster.api(0), long, {"running"})
    holder = rows(cluster.database_url, "SELECT worker_id FROM runs WHERE run_id = :r", r=long)[0][0]
    victim = next(i for i, w in enumerate(cluster.workers) if worker_id(w) == holder)
    survivor = 1 - victim
    left = managed_on(engines[victim], cluster.workers[victim].base)
    kept = managed_on(engines[survivor], cluster.workers[survivor].base)
    assert left and kept
    cluster.kill_worker(victim)
    interrupted = wait_status(cluster.api(1), long, {"failed", "completed", "cancelled"}, timeout=45)
    assert interrupted["status"] == "failed" and interrupted["error"]["code"] == "interrupted", interrupted
    moved = submit(cluster.api(0), run_body("cat /etc/hostname; cd work && cat f d/g; ls", session="s"))
    assert moved.status_code == 200 and moved.json()["exit_code"] == 0, moved.text
    host, *rest = moved.json()["stdout"].split()
    assert rest == ["kept", "deep", "d", "f", "inputs"]  # the snapshot, not the killed run's p
    assert rows(cluster.database_url, "SELECT worker_id FROM runs WHERE run_id = :r", r=moved.json()["run_id"])[0][
        0
    ] == worker_id(cluster.workers[survivor])
    assert any(c.startswith(host) for c in started_on(engines[survivor], since))
    assert not any(c.startswith(host) for c in started_on(engines[victim], since))
    # what the killed worker left stays on its engine (no one else sweeps it) ...
    assert left <= managed_on(engines[victim], cluster.workers[victim].base)
    # ... until it starts again on its data dir: then it is gone, and the survivor's stay
    # (all but the one its run used)
    kept = {c for c in kept if not c.startswith(host)}
    cluster.restart_worker(victim)
    assert eventually(lambda: not (left & managed_on(engines[victim], cluster.workers[victim].base)), timeout=60)
    assert kept <= managed_on(engines[survivor], cluster.workers[survivor].base)
    again = submit(cluster.api(1), run_body("cat work/f", session="s"))
    assert again.status_code == 200 and again.json()["stdout"] == "kept\n", again.text
    assert httpx.get(f"{cluster.workers[victim].url}/healthz", timeout=10).status_code == 200
