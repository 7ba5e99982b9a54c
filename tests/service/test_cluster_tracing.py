"""One trace per run across processes: an API replica (``serve --role api``) and a worker
(``skill-executor worker``), each with its own ``OTEL_SERVICE_NAME``, export over OTLP/HTTP
to a real receiver on loopback (tests/otlp.py); real Postgres, real Docker. The replica's
``skill_run`` root is the ancestor of the worker's spans, the run's record names the trace
(from any replica), and the run's log lines of both processes carry it. A replica with
tracing off records no parent: the worker starts a fresh trace, says so, and records it."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ..cluster import FAST, Cluster, Proc, run_body, worker_id
from ..conftest import require_runtime
from ..otlp import Receiver, ReceivedSpan
from ..pgserver import PostgresServer

TIMEOUT = 60.0
STEPS = {"run", "sandbox", "stage", "execute", "collect", "cleanup"}


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    started = Receiver().start()
    yield started
    started.close()


@pytest.fixture(scope="module")
def cluster(
    postgres_server: PostgresServer, tmp_path_factory: pytest.TempPathFactory, receiver: Receiver
) -> Iterator[Cluster]:
    """api-0 (traced), api-1 (tracing off), one worker (traced)."""
    require_runtime("docker")
    name = postgres_server.create_database()
    started = Cluster(
        tmp_path_factory.mktemp("traced"), postgres_server.url(name), workers=1, env={**FAST, **receiver.env()}
    )
    for proc, service in ((started.apis[0], "api-0"), (started.workers[0], "worker-0")):
        proc.env = {**proc.env, "OTEL_SERVICE_NAME": service}
    started.apis[1].env = {k: v for k, v in started.apis[1].env.items() if not k.startswith("OTEL_")}
    try:
        started.start()
        yield started
    except BaseException:
        print(started.logs())
        raise
    finally:
        started.close()
        postgres_server.drop_database(name)


def lines(proc: Proc) -> list[dict[str, Any]]:
    found = []
    for line in proc.log_path.read_text(errors="replace").splitlines():
        try:
            found.append(json.loads(line))
        except ValueError:
            pass
    return found


def about(proc: Proc, run_id: str) -> list[dict[str, Any]]:
    """The service's own log lines about ``run_id`` (not the job library's)."""
    return [e for e in lines(proc) if e.get("logger", "").startswith("skill_executor") and e.get("run_id") == run_id]


def root_of(receiver: Receiver, run_id: str) -> ReceivedSpan:
    """The ``skill_run`` span of ``run_id`` (waiting for it)."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        for span in list(receiver.spans):
            if span.name == "skill_run" and span.attributes.get("skill_executor.run_id") == run_id:
                return span
        time.sleep(0.1)
    raise AssertionError(f"no skill_run span of run {run_id}")


def by_name(spans: list[ReceivedSpan]) -> dict[str, ReceivedSpan]:
    named: dict[str, ReceivedSpan] = {}
    for span in spans:
        assert span.name not in named, f"two {span.name} spans in one trace"
        named[span.name] = span
    return named


def test_a_run_through_a_replica_and_a_worker_is_one_trace(cluster: Cluster, receiver: Receiver) -> None:
    answer = httpx.post(f"{cluster.api(0)}/v1/runs", json=run_body("echo traced"), timeout=TIMEOUT)
    assert answer.status_code == 200 and answer.json()["stdout"] == "traced\n", answer.text
    run_id = answer.json()["run_id"]
    root = root_of(receiver, run_id)
    spans = by_name(receiver.wait_for({"skill_run", "admission", "queue_wait"} | STEPS, trace_id=root.trace_id))
    # the root and its admission are the replica's; the rest is the worker's, in the same trace
    assert root.parent_id == "" and root.resource["service.name"] == "api-0"
    assert root.resource["skill_executor.role"] == "api" and not root.error
    assert spans["admission"].parent_id == root.span_id and spans["admission"].resource["service.name"] == "api-0"
    for name in ("queue_wait", "run", *STEPS):
        assert spans[name].resource["service.name"] == "worker-0", name
        assert spans[name].resource["skill_executor.role"] == "worker", name
    assert spans["queue_wait"].parent_id == root.span_id and spans["run"].parent_id == root.span_id
    for step in STEPS - {"run"}:
        assert spans[step].parent_id == spans["run"].span_id, step
    assert spans["execute"].attributes["skill_executor.exit_code"] == 0
    # the record (read through the other replica) names the trace; queue_wait began at its creation
    record = httpx.get(f"{cluster.api(1)}/v1/runs/{run_id}", timeout=TIMEOUT).json()
    assert record["trace_id"] == root.trace_id
    assert spans["queue_wait"].start == int(record["created_at"] * 1e9) <= spans["queue_wait"].end
    assert spans["queue_wait"].end <= spans["run"].start
    # the run's log lines, in both processes, carry its trace id
    replica, worker = about(cluster.apis[0], run_id), about(cluster.workers[0], run_id)
    assert [e["message"] for e in replica] == [f"run {run_id} queued"]
    said = {e["message"] for e in worker}
    wid = worker_id(cluster.workers[0])
    assert {f"run {run_id} claimed by worker {wid}", f"run {run_id} ended: completed"} <= said, said
    for entry in replica + worker:
        assert entry.get("trace_id") == root.trace_id, entry


def test_a_run_without_a_parent_gets_a_fresh_trace_from_its_worker(cluster: Cluster, receiver: Receiver) -> None:
    """api-1 traces nothing: its run has no traceparent. The worker starts a fresh trace
    (its own skill_run root), logs that it did, and records the trace id with the run."""
    answer = httpx.post(f"{cluster.api(1)}/v1/runs", json=run_body("echo fresh"), timeout=TIMEOUT)
    assert answer.status_code == 200, answer.text
    run_id = answer.json()["run_id"]
    root = root_of(receiver, run_id)
    spans = by_name(receiver.wait_for({"skill_run", "queue_wait"} | STEPS, trace_id=root.trace_id))
    assert root.resource["service.name"] == "worker-0" and root.attributes["skill_executor.fresh"] is True
    assert "admission" not in spans and spans["run"].parent_id == root.span_id
    for via in (0, 1):
        assert httpx.get(f"{cluster.api(via)}/v1/runs/{run_id}", timeout=TIMEOUT).json()["trace_id"] == root.trace_id
    warned = [e for e in lines(cluster.workers[0]) if "without a valid trace parent (none)" in e["message"]]
    assert [e["message"] for e in warned] == [f"run {run_id} came without a valid trace parent (none): a fresh trace"]
    assert warned[0]["trace_id"] == root.trace_id
    for entry in about(cluster.workers[0], run_id):
        assert entry.get("trace_id") == root.trace_id, entry
    assert about(cluster.apis[1], run_id) and all("trace_id" not in e for e in about(cluster.apis[1], run_id))
