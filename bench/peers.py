"""skill-executor next to its peers: the same `true`, the same engine, the same image.

    ./scripts/bench-peers.sh [--samples N] [--throughput-runs N]   (creates the peer venvs)
    python bench/peers.py [--samples N] [--throughput-runs N] [--out FILE]

Peers (each in its own virtualenv under build/bench-peers/<peer>/, made by
scripts/bench-peers.sh; a missing or failing peer is reported, not fatal):

* llm-sandbox (``SandboxSession``): a fresh session (container) per run; one session
  shared by every run; and its container pool (``PooledSandboxSession``, 2..4 containers);
* AutoGen's ``DockerCommandLineCodeExecutor``: one container, every run ``docker exec``s
  a code file written into a bind-mounted directory;
* epicbox: ``epicbox.run`` creates, starts, waits for and removes a container per run.

Ours through the library: warm pool (pool size 2: pre-started single-use containers) and
the per-run container (pool size 0).  Every peer runs our runner image
(``SKILL_EXECUTOR_DOCKER_IMAGE``); it is present locally, so no peer pulls (each one only
pulls when the image is missing).  Per peer: p50/p90 of one run after two warm-up runs,
started at 4 runs/s (so our pool keeps up, as in bench/run.py), and throughput at
concurrency 4.  Each peer runs in a subprocess of a small driver (bench/peers_driver.py)
inside its venv, which prints JSON.  Prints a Markdown table; writes JSON to
bench/results/peers-<date>.json.  Containers the peers leave behind are removed at the end.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
VENVS = REPO / "build" / "bench-peers"
DRIVER = Path(__file__).resolve().parent / "peers_driver.py"
LABEL = "se-bench-peer"  # label (=1) or name prefix of every container a peer makes (epicbox: "epicbox-")
INTERVAL = 0.25  # latency samples start at 4 runs/s, as bench/run.py's warm-pool samples

# (row name, venv folder, driver argument, isolation model)
PEERS = [
    (
        "llm-sandbox, session per run",
        "llm-sandbox",
        "llm-sandbox:session",
        "fresh container per run (created, started, exec'd, stopped, removed)",
    ),
    (
        "llm-sandbox, one shared session",
        "llm-sandbox",
        "llm-sandbox:shared",
        "one shared container reused by every run (exec; runs serialized)",
    ),
    (
        "llm-sandbox, container pool",
        "llm-sandbox",
        "llm-sandbox:pool",
        "pool of 2..4 reused containers (exec; not reset between runs)",
    ),
    (
        "AutoGen DockerCommandLineCodeExecutor",
        "autogen",
        "autogen",
        "one shared container reused by every run (exec of a file in a bind mount)",
    ),
    ("epicbox", "epicbox", "epicbox", "fresh container per run (create+start+wait+remove)"),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=20, help="latency samples per peer (default 20)")
    parser.add_argument("--throughput-runs", type=int, default=40, help="runs at concurrency 4 (default 40)")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--out", type=Path, default=None, help="JSON file (default bench/results/peers-<date>.json)")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from skill_executor.config import Settings

    image = Settings().docker_image  # SKILL_EXECUTOR_DOCKER_IMAGE, as bench/run.py reads it
    os.environ["SKILL_EXECUTOR_DOCKER_IMAGE"] = image
    out = args.out or REPO / "bench" / "results" / f"peers-{datetime.date.today().isoformat()}.json"
    began = time.time()

    import docker

    client = docker.DockerClient(base_url="unix:///var/run/docker.sock", version="auto", timeout=120)
    client.images.get(image)  # present locally: no peer will pull
    rows: list[dict[str, Any]] = []
    try:
        rows.extend(ours(image, args.samples, args.throughput_runs, args.concurrency))
        for name, venv, peer, isolation in PEERS:
            rows.append(run_peer(name, venv, peer, isolation, image, args))
    finally:
        removed = clean_up(client, began)
    warm = rows[0]
    for row in rows:
        if "p50_ms" in row:
            row["ours_warm_over_peer_p50"] = warm["p50_ms"] / row["p50_ms"]
            row["ours_warm_over_peer_throughput"] = warm["throughput_runs_per_s"] / row["throughput_runs_per_s"]
    results = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "engine": client.version().get("Version"),
        "image": image,
        "samples": args.samples,
        "throughput_runs": args.throughput_runs,
        "concurrency": args.concurrency,
        "latency_pacing_s": INTERVAL,
        "rows": rows,
        "leftover_containers_removed": removed,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(table(rows, args.concurrency))
    print(f"\nJSON: {out}; leftover peer containers removed: {len(removed)}")
    return 0


def ours(image: str, samples: int, tp_runs: int, concurrency: int) -> list[dict[str, Any]]:
    sys.path.insert(0, str(REPO))
    from skill_executor.config import Settings
    from skill_executor.core import Executor
    from skill_executor.runs.models import RunRequest

    base = Path(tempfile.mkdtemp(prefix="se-bench-peers-"))
    skill = base / "skills" / "bench-noop"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(
        "---\nname: bench-noop\ndescription: Does nothing; for benchmarks.\n---\n\nRun `true`.\n"
    )
    rows = []
    try:
        for pool, name, isolation in (
            (
                2,
                "ours, warm pool (library)",
                "pool of 2 pre-started single-use containers (fresh container per run, destroyed after it)",
            ),
            (0, "ours, per-run container (library)", "fresh container per run (create+start+wait+remove)"),
        ):
            executor = Executor.from_settings(
                Settings(
                    runtime="docker",
                    skills_dirs=[base / "skills"],
                    data_dir=base / f"data{pool}",
                    pool_size=pool,
                    docker_image=image,
                )
            )
            try:
                if pool:
                    executor.runtime.pool.wait_ready()  # type: ignore[attr-defined]
                request = RunRequest(skill="bench-noop", command="true")

                def run() -> None:
                    result = executor.runner.run(request)
                    if result.exit_code != 0:
                        raise RuntimeError(f"`true` exited with {result.exit_code}")

                row = measure(run, samples, tp_runs, concurrency)
            finally:
                executor.close()
            rows.append({"peer": name, "isolation": isolation, **row})
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return rows


def measure(run: Callable[[], None], samples: int, tp_runs: int, concurrency: int) -> dict[str, Any]:
    for _ in range(2):
        run()
    time.sleep(1.0)  # let a warm pool refill after the warm-up
    latencies = []
    for _ in range(samples):
        began = time.perf_counter()
        run()
        latencies.append((time.perf_counter() - began) * 1000)
        time.sleep(max(0.0, INTERVAL - (time.perf_counter() - began)))
    began = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(lambda _: run(), range(tp_runs)))
    return {**stats(latencies), "throughput_runs_per_s": tp_runs / (time.perf_counter() - began)}


def run_peer(name: str, venv: str, peer: str, isolation: str, image: str, args: argparse.Namespace) -> dict[str, Any]:
    python = VENVS / venv / "bin" / "python"
    row: dict[str, Any] = {"peer": name, "isolation": isolation}
    if not python.exists():
        row["error"] = f"no virtualenv at {python.parent.parent} (run scripts/bench-peers.sh)"
        return row
    command = [
        str(python),
        str(DRIVER),
        peer,
        image,
        str(args.samples),
        str(args.throughput_runs),
        str(args.concurrency),
        LABEL,
        str(INTERVAL),
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        row["error"] = "driver timed out after 600 s"
        return row
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        row["error"] = f"driver exited with {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"
        return row
    measured = json.loads(lines[-1])
    row.update(
        version=measured["version"],
        **stats(measured["latency_ms"]),
        throughput_runs_per_s=measured["throughput_runs_per_s"],
    )
    return row


def stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p90 = ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]
    return {"p50_ms": statistics.median(ordered), "p90_ms": p90, "n": len(ordered)}


def clean_up(client: Any, since: float) -> list[str]:
    """Remove the containers the peers left: our label, our name prefix, or epicbox's
    prefix on our image created during this run."""
    removed = []
    for container in client.containers.list(all=True):
        attrs = container.attrs
        name = container.name
        created = (
            datetime.datetime.fromisoformat(attrs["Created"][:26].rstrip("Z"))
            .replace(tzinfo=datetime.timezone.utc)
            .timestamp()
        )
        ours = (
            container.labels.get(LABEL) == "1"
            or name.startswith(LABEL + "-")
            or (name.startswith("epicbox-") and created >= since - 5)
        )
        if ours:
            try:
                container.remove(force=True)
                removed.append(name)
            except Exception as error:  # noqa: BLE001 -- report, keep cleaning
                print(f"could not remove {name}: {error}", file=sys.stderr)
    return removed


def table(rows: list[dict[str, Any]], concurrency: int) -> str:
    lines = [
        f"| peer | isolation model | p50 | p90 | c={concurrency} runs/s | ours (warm pool) / peer p50 "
        "| ours / peer throughput |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        name = row["peer"] + (f" {row['version']}" if "version" in row else "")
        if "error" in row:
            lines.append(f"| {name} | {row['isolation']} | failed: {row['error']} | | | | |")
            continue
        lines.append(
            f"| {name} | {row['isolation']} | {row['p50_ms']:.1f} ms | {row['p90_ms']:.1f} ms "
            f"| {row['throughput_runs_per_s']:.1f} | {row['ours_warm_over_peer_p50']:.2f}x "
            f"| {row['ours_warm_over_peer_throughput']:.2f}x |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
