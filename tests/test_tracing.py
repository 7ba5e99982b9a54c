"""Traces of runs: with the standard OTEL_* variables set, a service process exports one
trace per run (the skill_run span and its steps) over OTLP/HTTP to a real receiver on
loopback, and its log lines carry the trace id; without them it sends nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .api_server import Server
from .otlp import Receiver

STEPS = {"skill_run", "sandbox", "stage", "execute", "collect", "cleanup"}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    started = Receiver().start()
    yield started
    started.close()


def test_a_run_is_one_trace_with_its_steps(tmp_path: Path, receiver: Receiver) -> None:
    server = Server(tmp_path, env=receiver.env()).start()
    try:
        answer = httpx.post(f"{server.url}/v1/runs", json={"skill": "math-tools", "command": "echo traced"}, timeout=60)
        assert answer.status_code == 200 and answer.json()["stdout"] == "traced\n", answer.text
        run_id = answer.json()["run_id"]
        root = next(
            s
            for s in receiver.wait_for({"skill_run"})
            if s.name == "skill_run" and s.attributes.get("skill_executor.run_id") == run_id
        )
        spans = receiver.wait_for(STEPS, trace_id=root.trace_id)
    finally:
        server.stop()
    by_name = {s.name: s for s in spans}
    assert root.attributes["skill_executor.skill"] == "math-tools"
    assert root.resource["skill_executor.role"] == "all" and root.resource["service.name"] == "skill-executor"
    assert by_name["sandbox"].parent_id == root.span_id and by_name["cleanup"].parent_id == root.span_id
    for step in ("stage", "execute", "collect"):
        assert by_name[step].parent_id == by_name["sandbox"].parent_id or by_name[step].parent_id == root.span_id
    assert by_name["execute"].attributes["skill_executor.exit_code"] == 0
    assert not any(s.error for s in spans)


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
    finally:
        server.stop()
    assert receiver.requests == 0
