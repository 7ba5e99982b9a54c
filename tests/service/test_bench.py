"""The soak benchmark (bench/soak.py) works end to end on a small load (about 10 s).

The full soak (2,000 runs) is not part of the suite: ``./scripts/bench.sh --soak``.
Only what does not depend on the machine's speed is asserted here: every run
succeeded, nothing was left, and the report has every figure.
"""

from __future__ import annotations

import json
import subprocess
import sys

from ..conftest import REPO, require_runtime


def test_soak_smoke() -> None:
    require_runtime("docker")
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "soak.py"), "--runs", "20", "--concurrency", "2", "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode in (0, 1), done.stderr[-3000:]
    result = json.loads(done.stdout)
    load = result["load"]
    assert load["ok"] == 20 and load["errors"] == 0, load
    assert load["runs_per_s"] > 0 and 0 < load["latency_ms"]["p50"] <= load["latency_ms"]["p99"]
    for key in ("containers_total", "workspaces", "fds", "threads", "rss_mb"):
        assert key in result["before"] and key in result["after"]
    # The warm pool (2) before and after; nothing of the runs left, nothing after shutdown.
    assert result["before"]["containers"] == {"running": 2} and result["before"]["workspaces"] == 2
    assert result["backlog"]["samples"] > 0 and result["backlog"]["max"] >= 0
    if result["backlog"]["drain_s"] is not None:
        assert result["deltas"]["containers_total"] <= 0 and result["deltas"]["workspaces"] <= 0
    assert result["after_shutdown"] == {"containers": {}, "containers_total": 0, "workspaces": 0}
    failures = result["verdict"]["failures"]
    assert (done.returncode == 0) == (not failures), failures
