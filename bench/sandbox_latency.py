"""A run of ``true`` through the library, per runtime: bwrap against local and Docker's warm pool.

    python bench/sandbox_latency.py [--runs N] [--runtimes bwrap,local,docker-pool]

Each runtime gets an executor of its own (a fresh data dir; bwrap's workspace root outside
it, as a root service needs); its runs are timed in turn with the others' (bwrap, local,
docker-pool, bwrap, ...), since this machine drifts.  Prints p50 and p90 in ms per runtime.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from skill_executor.config import Settings
from skill_executor.core import Executor
from skill_executor.runs.models import RunRequest

SKILLS = Path(__file__).resolve().parent.parent / "skills"


def executor(name: str, root: Path) -> Executor:
    values: dict[str, object] = {
        "runtime": "docker" if name.startswith("docker") else name,
        "pool_size": 2 if name == "docker-pool" else 0,
        "skills_dirs": [SKILLS],
        "data_dir": root / name / "data",
        "skills_refresh_seconds": 60.0,
    }
    if name == "bwrap":
        values["workspace_root"] = root / name / "workspaces"
    made = Executor.from_settings(Settings(**values))  # type: ignore[arg-type]
    pool = getattr(made.runtime, "pool", None)
    if pool is not None:
        pool.wait_ready()
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--runtimes", default="bwrap,local,docker-pool")
    args = parser.parse_args()
    names = args.runtimes.split(",")
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as tmp:
        root = Path(tmp)
        os.chmod(root, 0o711)  # bwrap starts as the run's user under root: it must reach its workspaces
        executors = {name: executor(name, root) for name in names}
        times: dict[str, list[float]] = {name: [] for name in names}
        request = RunRequest.model_validate({"skill": "math-tools", "command": "true"})
        try:
            for _ in range(args.runs):
                for name, made in executors.items():
                    started = time.perf_counter()
                    result = made.runner.run(request)
                    times[name].append((time.perf_counter() - started) * 1000)
                    assert result.exit_code == 0, (name, result.stderr)
                    pool = getattr(made.runtime, "pool", None)
                    if pool is not None:
                        pool.wait_ready()  # a warm container for every run, as the pool promises when idle
        finally:
            for made in executors.values():
                made.close()
    for name, samples in times.items():
        cuts = statistics.quantiles(samples, n=10)
        print(f"{name:12s} p50 {statistics.median(samples):7.1f} ms  p90 {cuts[-1]:7.1f} ms  ({len(samples)} runs)")


if __name__ == "__main__":
    main()
