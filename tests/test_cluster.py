"""A cluster on a real Postgres and the real Docker engine: 2 API replicas and 2 workers as
separate processes (tests/cluster.py). One cluster is shared by the tests that do not kill
parts of it; the others start their own."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator
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
