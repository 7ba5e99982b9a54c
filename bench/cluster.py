"""Warm run latency through a cluster (one API replica + one worker over Postgres) against
the embedded single process, taken in turn, and the queue's pick-up latency.

    python bench/cluster.py [--runs N] [--database-url postgresql://...]

Without ``--database-url`` a throw-away Postgres is started (tests/pgserver.py: Debian's
binaries). Prints JSON: ``embedded_warm_ms`` and ``cluster_warm_ms`` (p50/p90/max of
``POST /v1/runs`` of ``true`` with ``wait=true``, each on a full warm pool, paced), and
``pickup_ms`` (a run's record: created -> claimed by the worker).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.cluster import Cluster  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
from run import Service  # noqa: E402


def stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "n": len(ordered),
        "p50": round(statistics.median(ordered), 1),
        "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 1),
        "max": round(ordered[-1], 1),
    }


def timed_post(client: httpx.Client) -> float:
    started = time.perf_counter()
    answer = client.post("/v1/runs", json={"skill": "math-tools", "command": "true"})
    elapsed = (time.perf_counter() - started) * 1000
    if answer.status_code != 200 or answer.json().get("exit_code") != 0:
        raise RuntimeError(answer.text[:500])
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--database-url")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    server = None
    url = args.database_url
    if url is None:
        from tests.pgserver import PostgresServer

        server = PostgresServer(base / "pg-records")
        server.start()
        url = server.url(server.create_database())
    (base / "embedded").mkdir()
    embedded = Service(base / "embedded")
    # the service's defaults (as the embedded one has them): the tests' rescan on every read is off
    cluster = Cluster(
        base / "cluster", url, apis=1, workers=1, env={"SKILL_EXECUTOR_SKILLS_REFRESH_SECONDS": "2"}
    ).start()
    out: dict[str, Any] = {}
    try:
        with (
            httpx.Client(base_url=embedded.url, timeout=120) as local,
            httpx.Client(base_url=cluster.api(0), timeout=120) as remote,
        ):
            for client in (local, remote, local, remote):  # warm-up: pools full, paths hot
                timed_post(client)
            times: dict[str, list[float]] = {"embedded": [], "cluster": []}
            for _ in range(args.runs):
                times["embedded"].append(timed_post(local))
                time.sleep(0.5)  # the warm pool refills
                times["cluster"].append(timed_post(remote))
                time.sleep(0.5)
        out["embedded_warm_ms"] = stats(times["embedded"])
        out["cluster_warm_ms"] = stats(times["cluster"])
        from sqlalchemy import text

        from skill_executor.db import Database

        database = Database(url)
        try:
            with database.read() as conn:
                pickups = [
                    float(row[0]) * 1000
                    for row in conn.execute(
                        text("SELECT started_at - created_at FROM runs WHERE started_at IS NOT NULL")
                    )
                ]
        finally:
            database.close()
        out["pickup_ms"] = stats(pickups)
    finally:
        cluster.close()
        embedded.stop()
        if server is not None:
            server.close()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
