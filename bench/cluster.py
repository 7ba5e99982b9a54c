"""Cluster benchmarks (issue 32), each a section of one JSON report:

* ``latency``: warm run latency through a cluster (one API replica + one worker over
  Postgres) against the embedded single process, taken in turn, and the queue's pick-up
  latency;
* ``throughput``: N short CPU-bound runs (a Python loop of ``--cpu-seconds`` of CPU time)
  submitted at concurrency C through one API replica, with 1 worker and with 2 workers each
  on its own Docker engine (the main one and a second ``dockerd``, tests/engines.py), the
  same capacity per worker; runs/s and the ratio, for each capacity of ``--capacities``;
* ``takeover``: a session on worker A, ``kill -9`` A, the session's next run submitted at
  once: the time until it completes on worker B (on the other engine), split into
  detection (kill -> A's lease swept), dispatch (-> the run claimed by B) and restore + run
  (-> completed; the same command's time once the session is at home on B beside it).

    python bench/cluster.py [--sections latency,throughput,takeover] [--runs N]
        [--database-url postgresql://...] [--throughput-runs N] [--concurrency C]
        [--capacities 1,2] [--cpu-seconds 0.2] [--takeover-trials N] [--fast-leases]

Without ``--database-url`` a throw-away Postgres is started (tests/pgserver.py: Debian's
binaries), a fresh database per cluster; with it, the clusters share that database in turn.
Throughput and takeover run on the runner's minimal image on both engines (the one copied
to the second engine). The store is a shared folder. Prints JSON.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.cluster import Cluster, worker_id  # noqa: E402
from tests.engines import MAIN_ENGINE, SecondEngine, small_image  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
from run import Service  # noqa: E402

SECTIONS = ("latency", "throughput", "takeover")
#: The service's lease defaults (config.py), and the tests' faster ones (tests/cluster.py FAST).
LEASES = {
    "default": {"heartbeat_seconds": 5.0, "lease_seconds": 20.0, "sweep_seconds": 5.0},
    "fast": {"heartbeat_seconds": 1.0, "lease_seconds": 5.0, "sweep_seconds": 1.0},
}


def stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "n": len(ordered),
        "p50": round(statistics.median(ordered), 1),
        "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 1),
        "max": round(ordered[-1], 1),
    }


def timed_post(client: httpx.Client, command: str = "true", **more: Any) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    answer = client.post("/v1/runs", json={"skill": "math-tools", "command": command, **more})
    elapsed = (time.perf_counter() - started) * 1000
    if answer.status_code != 200 or answer.json().get("exit_code") != 0:
        raise RuntimeError(answer.text[:500])
    return elapsed, dict(answer.json())


def query(url: str, sql: str, **params: Any) -> list[Any]:
    from sqlalchemy import text

    from skill_executor.db import Database

    database = Database(url)
    try:
        with database.read() as conn:
            return list(conn.execute(text(sql), params).all())
    finally:
        database.close()


# -- latency ----------------------------------------------------------------------------------


def latency(base: Path, url: str, runs: int) -> dict[str, Any]:
    (base / "embedded").mkdir(parents=True)
    embedded = Service(base / "embedded")
    # the service's defaults (as the embedded one has them): the tests' rescan on every read is off
    cluster = Cluster(base / "cluster", url, apis=1, workers=1, env={"SKILL_EXECUTOR_SKILLS_REFRESH_SECONDS": "2"})
    out: dict[str, Any] = {}
    try:
        cluster.start()
        with (
            httpx.Client(base_url=embedded.url, timeout=120) as local,
            httpx.Client(base_url=cluster.api(0), timeout=120) as remote,
        ):
            for client in (local, remote, local, remote):  # warm-up: pools full, paths hot
                timed_post(client)
            times: dict[str, list[float]] = {"embedded": [], "cluster": []}
            for _ in range(runs):
                times["embedded"].append(timed_post(local)[0])
                time.sleep(0.5)  # the warm pool refills
                times["cluster"].append(timed_post(remote)[0])
                time.sleep(0.5)
        out["embedded_warm_ms"] = stats(times["embedded"])
        out["cluster_warm_ms"] = stats(times["cluster"])
        pickups = query(url, "SELECT started_at - created_at FROM runs WHERE started_at IS NOT NULL")
        out["pickup_ms"] = stats([float(row[0]) * 1000 for row in pickups])
    finally:
        cluster.close()
        embedded.stop()
    return out


# -- two engines ------------------------------------------------------------------------------


def engine_cluster(
    base: Path, url: str, engine: SecondEngine, image: str, *, workers: int, capacity: int, leases: dict[str, float]
) -> Cluster:
    """1 API replica and ``workers`` workers (the first on the main engine, the second on
    the second engine), ``capacity`` runs at once each, a warm pool of that size."""
    settings = {
        "SKILL_EXECUTOR_SKILLS_REFRESH_SECONDS": "2",
        "SKILL_EXECUTOR_DOCKER_IMAGE": image,
        "SKILL_EXECUTOR_WORKER_CAPACITY": str(capacity),
        "SKILL_EXECUTOR_POOL_SIZE": str(capacity),
        "SKILL_EXECUTOR_MAX_CONCURRENT_RUNS": "64",  # the API replica admits; the workers' capacity limits
        **{f"SKILL_EXECUTOR_WORKER_{key.upper()}": str(value) for key, value in leases.items()},
    }
    engines = [{"DOCKER_HOST": MAIN_ENGINE}, {"DOCKER_HOST": engine.url}]
    return Cluster(base, url, apis=1, workers=workers, env=settings, worker_env=engines[:workers]).start()


def cpu_command(seconds: float) -> str:
    return f"python3 -c 'import time\nwhile time.process_time() < {seconds}: pass'"


def throughput(
    base: Path,
    database: Callable[[], str],
    engine: SecondEngine,
    image: str,
    *,
    runs: int,
    concurrency: int,
    capacities: list[int],
    cpu_seconds: float,
) -> dict[str, Any]:
    command = cpu_command(cpu_seconds)
    out: dict[str, Any] = {
        "runs": runs,
        "concurrency": concurrency,
        "cpu_seconds_per_run": cpu_seconds,
        "by_capacity": {},
    }
    for capacity in capacities:
        rates: dict[str, Any] = {}
        for workers in (1, 2):
            url = database()
            cluster = engine_cluster(
                base / f"throughput-c{capacity}-w{workers}",
                url,
                engine,
                image,
                workers=workers,
                capacity=capacity,
                leases=LEASES["default"],
            )
            try:
                with httpx.Client(base_url=cluster.api(0), timeout=600) as client:
                    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:  # warm-up: every worker's pool
                        list(pool.map(lambda _: timed_post(client, command), range(2 * workers * capacity)))
                    time.sleep(1.0)
                    started = time.perf_counter()
                    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
                        done = list(pool.map(lambda _: timed_post(client, command), range(runs)))
                    wall = time.perf_counter() - started
                ids = [answer["run_id"] for _, answer in done]
                by_worker = query(
                    url,
                    "SELECT worker_id, count(*) FROM runs WHERE run_id = ANY(:ids) GROUP BY worker_id",
                    ids=ids,
                )
                names = {worker_id(proc): ("main" if i == 0 else "second") for i, proc in enumerate(cluster.workers)}
                rates[f"{workers}_worker{'s' if workers > 1 else ''}"] = {
                    "runs_per_second": round(runs / wall, 2),
                    "wall_seconds": round(wall, 2),
                    "latency_ms": stats([ms for ms, _ in done]),
                    "runs_by_engine": {names[w]: n for w, n in by_worker},
                }
            finally:
                cluster.close()
        rates["ratio_2_to_1"] = round(rates["2_workers"]["runs_per_second"] / rates["1_worker"]["runs_per_second"], 2)
        out["by_capacity"][str(capacity)] = rates
    return out


# -- takeover ---------------------------------------------------------------------------------


def gone_at(url: str, worker: str, stop: threading.Event, seen: dict[str, float]) -> None:
    """Record when ``worker``'s registration disappears (its lease swept)."""
    while not stop.is_set():
        if not query(url, "SELECT 1 FROM workers WHERE worker_id = :w", w=worker):
            seen["swept"] = time.time()
            return
        time.sleep(0.02)


def takeover(
    base: Path, url: str, engine: SecondEngine, image: str, *, trials: int, leases: dict[str, float]
) -> dict[str, Any]:
    cluster = engine_cluster(base / "takeover", url, engine, image, workers=2, capacity=1, leases=leases)
    files = "head -c 4000000 /dev/urandom > work/blob && mkdir -p work/d && for i in $(seq 50); do echo $i > work/d/$i; done"
    check = "cat work/d/50 && wc -c < work/blob"
    samples: dict[str, list[float]] = {
        "total": [],
        "detection": [],
        "dispatch": [],
        "restore_and_run": [],
        "at_home": [],
    }
    try:
        with httpx.Client(base_url=cluster.api(0), timeout=600) as client:
            for trial in range(trials):
                session = f"takeover-{trial}"
                _, first = timed_post(client, files, session=session)
                holder = query(url, "SELECT worker_id FROM runs WHERE run_id = :r", r=first["run_id"])[0][0]
                victim = next(i for i, proc in enumerate(cluster.workers) if worker_id(proc) == holder)
                time.sleep(1.0)  # the snapshot of the first run is taken after its answer
                seen: dict[str, float] = {}
                stop = threading.Event()
                watcher = threading.Thread(target=gone_at, args=(url, holder, stop, seen), daemon=True)
                watcher.start()
                killed = time.time()
                cluster.kill_worker(victim)
                _, moved = timed_post(client, check, session=session)
                done = time.time()
                stop.set()
                watcher.join()
                if moved["stdout"].split() != ["50", "4000000"]:
                    raise RuntimeError(f"the session's files did not move: {moved['stdout']!r}")
                claimed, finished, by = query(
                    url, "SELECT started_at, updated_at, worker_id FROM runs WHERE run_id = :r", r=moved["run_id"]
                )[0]
                if by == holder:
                    raise RuntimeError("the session's next run ran on the killed worker")
                home_ms, again = timed_post(client, check, session=session)
                at_home = query(url, "SELECT updated_at - started_at FROM runs WHERE run_id = :r", r=again["run_id"])
                samples["total"].append((done - killed) * 1000)
                # the sweep as polled (every 20 ms, plus a query): never after B's claim
                swept = min(seen.get("swept", claimed), claimed)
                samples["detection"].append((swept - killed) * 1000)
                samples["dispatch"].append((claimed - swept) * 1000)
                samples["restore_and_run"].append((finished - claimed) * 1000)
                samples["at_home"].append(float(at_home[0][0]) * 1000)
                cluster.restart_worker(victim)  # it sweeps what it left on its engine
    finally:
        cluster.close()
    return {
        "trials": trials,
        "leases": leases,
        "snapshot": "4 MB of random bytes and 50 small files in work/",
        "ms": {name: stats(values) for name, values in samples.items()},
    }


# -- main -------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sections", default=",".join(SECTIONS))
    parser.add_argument("--runs", type=int, default=40, help="latency: runs per process")
    parser.add_argument("--database-url")
    parser.add_argument("--throughput-runs", type=int, default=60)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--capacities", default="1,2", help="throughput: runs at once per worker (each a case)")
    parser.add_argument("--cpu-seconds", type=float, default=0.2)
    parser.add_argument("--takeover-trials", type=int, default=2)
    parser.add_argument("--fast-leases", action="store_true", help="takeover: the tests' leases (1/5/1 s)")
    args = parser.parse_args()
    sections = [s for s in args.sections.split(",") if s]
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections: {sorted(unknown)} (known: {', '.join(SECTIONS)})")
    base = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    server = None
    given = args.database_url

    def database() -> str:
        nonlocal server
        if given is not None:
            return str(given)
        if server is None:
            from tests.pgserver import PostgresServer

            server = PostgresServer(base / "pg-records")
            server.start()
        return server.url(server.create_database())

    out: dict[str, Any] = {"host_cpus": os.cpu_count()}
    engine: SecondEngine | None = None
    try:
        if "latency" in sections:
            out.update(latency(base / "latency", database(), args.runs))  # top level, as before
        if {"throughput", "takeover"} & set(sections):
            image = small_image()
            engine = SecondEngine()
            engine.acquire()
            engine.start()
            engine.load_image(image)
            out["image"] = image
            if "throughput" in sections:
                out["throughput"] = throughput(
                    base,
                    database,
                    engine,
                    image,
                    runs=args.throughput_runs,
                    concurrency=args.concurrency,
                    capacities=[int(c) for c in args.capacities.split(",")],
                    cpu_seconds=args.cpu_seconds,
                )
            if "takeover" in sections:
                leases = LEASES["fast" if args.fast_leases else "default"]
                out["takeover"] = takeover(base, database(), engine, image, trials=args.takeover_trials, leases=leases)
    finally:
        if engine is not None:
            engine.stop()
            engine.release()
        if server is not None:
            server.close()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
