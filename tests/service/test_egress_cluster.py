"""Egress in a cluster, on a real Postgres and the real Docker engine: an API replica and a
worker as separate processes (tests/cluster.py). The worker runs its own gateway and executes
the claimed run with its grant there; the replica validates the request's ``network`` (422)
but starts no gateway; the run's egress events are read through the replica (the record and
the event stream)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ..cluster import FAST, Cluster
from ..conftest import require_runtime
from ..helpers import eventually
from ..pgserver import PostgresServer
from .test_egress_gateway import egress_python
from .test_egress_runs import NAMES, POLICY, SECRET, Upstream, upstream  # noqa: F401, F811 - the fixture

pytestmark = pytest.mark.skipif(
    egress_python() is None, reason="no egress environment (scripts/test.sh makes .venv-egress)"
)


@pytest.fixture(scope="module")
def cluster(
    postgres_server: PostgresServer,
    tmp_path_factory: pytest.TempPathFactory,
    upstream: tuple[int, Path],  # noqa: F811 - the fixture
) -> Iterator[Cluster]:
    require_runtime("docker")
    port, ca = upstream
    base = tmp_path_factory.mktemp("egress-cluster")
    (base / "policy.yaml").write_text(POLICY)
    (base / "secrets.yaml").write_text("GITHUB_TOKEN: env:EGRESS_E2E_TOKEN\n")
    env = {
        **FAST,
        "SKILL_EXECUTOR_POLICY_FILE": str(base / "policy.yaml"),
        "SKILL_EXECUTOR_SECRETS_FILE": str(base / "secrets.yaml"),
        "SKILL_EXECUTOR_EGRESS_PYTHON": str(egress_python()),
        "SKILL_EXECUTOR_EGRESS_CA_BUNDLE": str(ca),
        "SKILL_EXECUTOR_EGRESS_HOSTS": json.dumps({name: f"127.0.0.1:{port}" for name in NAMES}),
        "EGRESS_E2E_TOKEN": SECRET,
        "SKILL_EXECUTOR_POOL_SIZE": "1",
    }
    name = postgres_server.create_database()
    started = Cluster(base, postgres_server.url(name), apis=1, workers=1, env=env)
    try:
        started.start()
        yield started
    except BaseException:
        print(started.logs())
        raise
    finally:
        started.close()
        postgres_server.drop_database(name)
    assert SECRET not in started.logs()


def children(pid: int) -> list[str]:
    """The command lines of a process's descendants."""
    found: list[str] = []
    todo = [pid]
    while todo:
        current = todo.pop()
        for task in Path(f"/proc/{current}/task").iterdir():
            for child in (task / "children").read_text().split():
                todo.append(int(child))
                try:
                    found.append(Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode())
                except OSError:
                    pass
    return found


def events_of(base: str, run_id: str, got: list[tuple[str, Any]] | None = None) -> list[tuple[str, Any]]:
    """The run's events through its end (appended to ``got`` as they come)."""
    got = [] if got is None else got
    with httpx.stream("GET", f"{base}/v1/runs/{run_id}/events", timeout=120) as response:
        assert response.status_code == 200, response.read()
        kind = ""
        for line in response.iter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                got.append((kind, json.loads(line[6:])))
    return got


COMMAND = r"""
curl -sS https://api.example.test/from-worker
curl -sS https://denied.example.test/ 2>&1 | head -c 200; echo
echo "GH=$GITHUB_TOKEN"
"""


def test_the_worker_runs_the_gateway_and_the_replica_reads_the_runs_egress(cluster: Cluster) -> None:
    api, worker = cluster.apis[0], cluster.workers[0]
    assert worker.process is not None and api.process is not None
    # one gateway per worker; none on the replica (it executes nothing)
    assert any("egress/proxy.py" in line for line in children(worker.process.pid)), children(worker.process.pid)
    assert not any("egress/proxy.py" in line for line in children(api.process.pid))
    assert not (api.base / "data" / "egress").exists()

    before = len(Upstream.seen)
    accepted = httpx.post(
        f"{api.url}/v1/runs",
        params={"wait": "false"},
        json={"skill": "math-tools", "command": COMMAND, "timeout": 90},
        timeout=60,
    )
    assert accepted.status_code == 202, accepted.text
    run_id = accepted.json()["run_id"]
    events = events_of(api.url, run_id)  # through the replica, from the worker
    record = httpx.get(f"{api.url}/v1/runs/{run_id}", timeout=60).json()
    assert record["status"] == "completed", record
    out = record["result"]["stdout"]
    assert "hello /from-worker" in out and "GH=se-placeholder-" in out, (out, record["result"]["stderr"])
    assert "CONNECT tunnel failed, response 403" in out
    seen = {entry["path"]: entry["headers"] for entry in Upstream.seen[before:]}
    assert seen["/from-worker"]["Authorization"] == f"Bearer {SECRET}"
    live = [data for kind, data in events if kind == "egress"]
    kept = record["result"]["egress"]
    assert kept == live, (kept, live)
    assert [(e["host"], e["path"], e["decision"]) for e in kept if e["host"] == "api.example.test"] == [
        ("api.example.test", "/from-worker", "allowed")
    ]
    denied = [e for e in kept if e["host"] == "denied.example.test"]
    assert denied and all(e["decision"] == "denied" and e["rule"] == "math-net" for e in denied), kept
    assert SECRET not in json.dumps(record) + json.dumps(events)


def test_the_replica_refuses_a_wider_network_before_queueing(cluster: Cluster) -> None:
    api = cluster.apis[0]
    wider = httpx.post(
        f"{api.url}/v1/runs",
        json={"skill": "math-tools", "command": "true", "network": {"allow": ["evil.example"]}},
        timeout=60,
    )
    assert wider.status_code == 422, wider.text
    error = wider.json()["error"]
    assert error["code"] == "network_not_allowed" and error["details"] == {"rule": "math-net", "host": "evil.example"}
    # a narrower one is queued and runs on the worker: only its host
    narrow = httpx.post(
        f"{api.url}/v1/runs",
        json={
            "skill": "math-tools",
            "command": "curl -sS https://files.example.test/narrow; curl -sS https://api.example.test/no 2>&1 | head -c 200",
            "network": {"allow": ["files.example.test"]},
            "timeout": 90,
        },
        timeout=120,
    )
    assert narrow.status_code == 200, narrow.text
    result = narrow.json()
    assert "hello /narrow" in result["stdout"] and "response 403" in result["stdout"], result


def gateway_pid(worker_pid: int) -> int | None:
    """The worker's gateway process (None: there is none now)."""
    for task in Path(f"/proc/{worker_pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            try:
                if b"egress/proxy.py" in Path(f"/proc/{child}/cmdline").read_bytes():
                    return int(child)
            except OSError:
                pass
    return None


#: Requests for about 6 s, each with its own connection: some fail while the gateway is down.
LOOP = r"""
for i in $(seq 1 30); do
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 https://api.example.test/loop-$i)
  echo "req $i $code"
  sleep 0.2
done
"""


def test_a_killed_gateway_is_started_again_and_runs_in_flight_finish(cluster: Cluster) -> None:
    """kill -9 of the worker's gateway during a run: the run ends (some requests failed, none
    hangs it), its later requests go through the new gateway with the same grant, and the
    next run reaches its host as before."""
    import os
    import signal
    import threading
    import time

    api, worker = cluster.apis[0], cluster.workers[0]
    assert worker.process is not None
    first = gateway_pid(worker.process.pid)
    assert first is not None
    accepted = httpx.post(
        f"{api.url}/v1/runs",
        params={"wait": "false"},
        json={"skill": "math-tools", "command": LOOP, "timeout": 90},
        timeout=60,
    )
    assert accepted.status_code == 202, accepted.text
    run_id = accepted.json()["run_id"]
    events: list[tuple[str, Any]] = []
    reader = threading.Thread(target=events_of, args=(api.url, run_id, events))
    reader.start()
    deadline = time.monotonic() + 60
    while not any(kind == "egress" for kind, _ in events) and time.monotonic() < deadline:
        time.sleep(0.05)  # the run's first request went through: kill the gateway under it
    assert any(kind == "egress" for kind, _ in events), events
    os.kill(first, signal.SIGKILL)
    reader.join(120)
    assert not reader.is_alive()
    record = httpx.get(f"{api.url}/v1/runs/{run_id}", timeout=60).json()
    assert record["status"] == "completed", record
    codes = [line.split()[2] for line in record["result"]["stdout"].splitlines() if line.startswith("req ")]
    assert len(codes) == 30 and codes[0] == "200"
    assert codes[-1] == "200", codes  # the same grant, at the new process
    assert set(codes) <= {"200", "502", "000"}, codes  # failed requests at most, never a hang
    pid = worker.process.pid
    assert eventually(lambda: gateway_pid(pid) != first, timeout=30)
    assert "the egress gateway is running again" in worker.log_path.read_text()
    print("request codes across the kill:", codes)
    after = httpx.post(
        f"{api.url}/v1/runs",
        json={"skill": "math-tools", "command": "curl -sS https://api.example.test/next-run", "timeout": 90},
        timeout=120,
    )
    assert after.status_code == 200 and "hello /next-run" in after.json()["stdout"], after.text
