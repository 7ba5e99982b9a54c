"""Traces of runs: with the standard OTEL_* variables set, a service process exports one
trace per run (the skill_run root, its admission, queue wait and run with its steps) over
OTLP/HTTP to a real receiver on loopback, its record names the trace and its log lines carry
the trace id; without them it sends nothing and records none. (Across processes, an API
replica and a worker: tests/service/test_cluster_tracing.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ..api_server import Server
from ..otlp import Receiver

CALLERS = "c" * 32
STEPS = {"skill_run", "admission", "queue_wait", "run", "sandbox", "stage", "execute", "collect", "cleanup"}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    started = Receiver().start()
    yield started
    started.close()


def test_a_run_is_one_trace_with_its_steps(tmp_path: Path, receiver: Receiver) -> None:
    server = Server(tmp_path, env=receiver.env()).start()
    try:
        # a caller's traceparent (another tenant's run's trace id, say) does not become the run's
        answer = httpx.post(
            f"{server.url}/v1/runs",
            json={"skill": "math-tools", "command": "echo traced"},
            headers={"traceparent": f"00-{CALLERS}-{'b' * 16}-01"},
            timeout=60,
        )
        assert answer.status_code == 200 and answer.json()["stdout"] == "traced\n", answer.text
        run_id = answer.json()["run_id"]
        root = next(
            s
            for s in receiver.wait_for({"skill_run"})
            if s.name == "skill_run" and s.attributes.get("skill_executor.run_id") == run_id
        )
        spans = receiver.wait_for(STEPS, trace_id=root.trace_id)
        record = httpx.get(f"{server.url}/v1/runs/{run_id}", timeout=10).json()
    finally:
        server.stop()
    assert record["trace_id"] == root.trace_id
    by_name = {s.name: s for s in spans}
    assert [s.name for s in spans].count("skill_run") == 1
    assert root.parent_id == "" and root.trace_id != CALLERS and root.attributes["skill_executor.skill"] == "math-tools"
    assert root.resource["skill_executor.role"] == "all" and root.resource["service.name"] == "skill-executor"
    for step in ("admission", "queue_wait", "run"):
        assert by_name[step].parent_id == root.span_id, step
    for step in ("sandbox", "stage", "execute", "collect", "cleanup"):
        assert by_name[step].parent_id == by_name["run"].span_id, step
    assert by_name["run"].attributes["skill_executor.run_id"] == run_id
    assert by_name["execute"].attributes["skill_executor.exit_code"] == 0
    assert not any(s.error for s in spans)


def test_a_refused_run_is_a_failed_admission(tmp_path: Path, receiver: Receiver) -> None:
    """A run refused at admission (an unknown skill) is a trace of its own: skill_run and
    admission, both failed, nothing executed."""
    server = Server(tmp_path, env=receiver.env()).start()
    try:
        answer = httpx.post(f"{server.url}/v1/runs", json={"skill": "no-such-skill", "command": "true"}, timeout=60)
        assert answer.status_code == 404, answer.text
        spans = receiver.wait_for({"skill_run", "admission"})
    finally:
        server.stop()
    (root,) = [s for s in spans if s.name == "skill_run"]
    assert root.attributes["skill_executor.skill"] == "no-such-skill" and root.error
    assert {s.name for s in spans if s.trace_id == root.trace_id} == {"skill_run", "admission"}
    assert all(s.error for s in spans if s.trace_id == root.trace_id)


LOGGING = """
import logging, sys
from skill_executor import tracing
from skill_executor.api.middleware import configure_logging
configure_logging(True)
assert tracing.configure("worker")
log = logging.getLogger("skill_executor.runs")
log.warning("outside")
with tracing.span("skill_run", run_id="r1") as root:
    log.warning("inside")
    print(tracing.trace_id(root), flush=True)
tracing.shutdown()
"""


def test_log_lines_inside_a_run_carry_its_trace_id(receiver: Receiver) -> None:
    done = subprocess.run(
        [sys.executable, "-c", LOGGING],
        env={**os.environ, **receiver.env()},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = {entry["message"]: entry for entry in map(json.loads, done.stderr.splitlines())}
    assert "trace_id" not in lines["outside"]
    assert lines["inside"]["trace_id"] == done.stdout.strip() and len(lines["inside"]["span_id"]) == 16
    (root,) = receiver.wait_for({"skill_run"})
    assert root.trace_id == done.stdout.strip() and root.resource["skill_executor.role"] == "worker"


def test_without_otel_variables_nothing_is_sent(tmp_path: Path, receiver: Receiver) -> None:
    server = Server(tmp_path).start()
    try:
        answer = httpx.post(f"{server.url}/v1/runs", json={"skill": "math-tools", "command": "true"}, timeout=60)
        assert answer.status_code == 200
        record = httpx.get(f"{server.url}/v1/runs/{answer.json()['run_id']}", timeout=10).json()
    finally:
        server.stop()
    assert receiver.requests == 0
    assert record["trace_id"] is None


EXPORTER_THREAD = """
import threading
from skill_executor import tracing
print(tracing.configure("all"), sorted(t.name for t in threading.enumerate() if t.name != "MainThread"), flush=True)
tracing.shutdown()
"""


@pytest.mark.parametrize("on", [False, True])
def test_an_exporter_thread_only_when_tracing_is_on(receiver: Receiver, on: bool) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", EXPORTER_THREAD],
        env={**env, **(receiver.env() if on else {})},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    configured, threads = done.stdout.split(" ", 1)
    assert configured == str(on)
    assert ("OtelBatchSpan" in threads) is on and (on or threads.strip() == "[]"), threads


MALFORMED = """
import json, logging, sys
from skill_executor import tracing
from skill_executor.api.middleware import configure_logging
configure_logging(True)
assert tracing.configure("worker")
good = tracing.start("skill_run")
header = tracing.traceparent(good)
assert tracing.adopt(header, "skill_run", run_id="ok") == (None, header)
found = []
for bad in [None, "", "garbage", "00-" + "0" * 32 + "-" + "1" * 16 + "-01", "00-" + "a" * 32 + "-" + "b" * 16 + "-01" + "x" * 10000]:
    fresh, parent = tracing.adopt(bad, "skill_run", run_id="r")
    with tracing.under(parent):
        with tracing.span("run") as child:
            found.append([tracing.trace_id(fresh), tracing.trace_id(child), tracing.trace_of(parent)])
    tracing.end(fresh)
tracing.end(good)
print(json.dumps(found), flush=True)
tracing.shutdown()
"""


def test_a_missing_or_malformed_parent_starts_a_fresh_trace_and_says_so(receiver: Receiver) -> None:
    """What a worker finds in a run's record as its trace parent -- nothing, garbage, an
    all-zero trace id, a huge header -- never fails: a fresh trace, and a log line in it."""
    done = subprocess.run(
        [sys.executable, "-c", MALFORMED],
        env={**os.environ, **receiver.env()},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert len(found) == 5 and len({fresh for fresh, _, _ in found}) == 5
    for fresh, child, named in found:
        assert len(fresh) == 32 and child == fresh and named == fresh
    warnings = [json.loads(line) for line in done.stderr.splitlines() if "fresh trace" in line]
    assert [w["trace_id"] for w in warnings] == [fresh for fresh, _, _ in found]
    assert all(w["level"] == "warning" and w["logger"] == "skill_executor.tracing" for w in warnings)
