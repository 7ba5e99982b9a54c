"""Two trees of the service, A and B, measured in one run: the warm ``POST /v1/runs``
(``true`` in ``math-tools``, a warm pool of 2, paced as bench/run.py paces its HTTP warm
runs so the pool keeps up) of each, interleaved request by request, so both see the same
machine at the same moments.

    python bench/ab.py --before <git rev>            # B is this tree
    python bench/ab.py --before /path/to/tree --after /path/to/other --runs 400

A tree given as a git revision is checked out into a temporary worktree. Both trees run
with this interpreter (the same dependencies), each as ``skill-executor serve`` in a
subprocess with its own data dir. Prints a JSON summary: p50 and p90 of each, in ms, and
B's p50 over A's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

from run import free_port  # noqa: E402


def tree(spec: str, scratch: Path) -> Path:
    """A folder holding the tree ``spec`` names (a path, or a git revision of this repo)."""
    if Path(spec).is_dir():
        return Path(spec).resolve()
    folder = scratch / f"tree-{spec.replace('/', '_')}"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(folder), spec], check=True)
    return folder


class Served:
    def __init__(self, root: Path, base: Path) -> None:
        self.root = root
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("SKILL_EXECUTOR_")}
        env.update({"SKILL_EXECUTOR_POOL_SIZE": "2", "PYTHONPATH": str(root)})
        self.log = open(base / f"service-{self.port}.log", "wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "skill_executor.cli.main", "serve", "--port", str(self.port)]
            + ["--skills-dir", str(REPO / "skills"), "--data-dir", str(base / f"data-{self.port}")],
            cwd=root,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=120)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if self.http.get("/healthz").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        else:
            raise RuntimeError(f"the service of {root} did not start (log: {self.log.name})")

    def run(self) -> float:
        started = time.perf_counter()
        response = self.http.post("/v1/runs", json={"skill": "math-tools", "command": "true"})
        took = time.perf_counter() - started
        if response.status_code != 200 or response.json().get("exit_code") != 0:
            raise RuntimeError(f"{self.root}: HTTP {response.status_code} {response.text[:300]}")
        return took * 1000

    def stop(self) -> None:
        self.http.close()
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()


def summary(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {"p50_ms": round(statistics.median(ordered), 2), "p90_ms": round(ordered[int(len(ordered) * 0.9)], 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="tree A: a path or a git revision")
    parser.add_argument("--after", default=str(REPO), help="tree B: a path or a git revision (default: this tree)")
    parser.add_argument("--runs", type=int, default=300, help="measured runs per tree")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--pace", type=float, default=0.5, help="seconds between two runs of one tree")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch)
        roots = [tree(args.before, base), tree(args.after, base)]
        served: list[Served] = []
        try:
            for root in roots:
                served.append(Served(root, base))
            times: list[list[float]] = [[], []]
            for i in range(args.warmup + args.runs):
                order = (0, 1) if i % 2 == 0 else (1, 0)  # neither always goes first
                for which in order:
                    took = served[which].run()
                    if i >= args.warmup:
                        times[which].append(took)
                    time.sleep(args.pace / 2)
        finally:
            for one in served:
                one.stop()
            for root in roots:
                if root.parent == base:
                    subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(root)], check=False)
    a, b = summary(times[0]), summary(times[1])
    result: dict[str, Any] = {
        "before": {"tree": args.before, **a},
        "after": {"tree": args.after, **b},
        "runs": args.runs,
        "p50_after_over_before": round(b["p50_ms"] / a["p50_ms"], 3),
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
