"""The agent-sandbox runtime's per-run overhead against our Docker warm path, same machine, same run.

    python bench/agentsandbox.py [--runs N] [--oci-runtime runsc] [--out FILE]

agent-sandbox (the real k8s-agent-sandbox SDK against tests/fakekube.py, pods = our in-pod
server in hardened containers of the runner image, reached over loopback through a unix-socket
relay; both in a process of their own, bench/kubehost.py, as a cluster's are outside the
worker's; the fake binds at once, so a real cluster's 35-80 ms bind is NOT in these figures), per
run of ``true``, by phase: claim (create + watch to Ready + one GET of the Sandbox), put (the
math-tools skill view + an input: one tar streamed into the Start that unpacks it), exec (Start streamed,
WriteStdin EOF, exit), get (list + GET of ``out/``), release (DELETE of the claim); the wire
total (put + exec + get) and the whole; and a library run of ``true`` through the
``agent-sandbox`` runtime (``agentsandbox_library``: the pipeline, claim to result; the
release is off the run's path).  Docker, in turn with it: the warm launcher's round trip
(``true``) and a library run of ``true`` on a warm pool.  Then output streaming throughput
(200 MB through ``Start``, 1 MiB kept).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from run import launcher_round_trip, stats  # noqa: E402

from skill_executor.config import Settings  # noqa: E402
from skill_executor.core import Executor  # noqa: E402
from skill_executor.runs.models import RunRequest  # noqa: E402
from skill_executor.runtimes.agentsandbox.claims import Claims, api_client  # noqa: E402
from skill_executor.runtimes.agentsandbox.client import PodClient  # noqa: E402
from skill_executor.runtimes.agentsandbox.process import execute  # noqa: E402
from skill_executor.runtimes.agentsandbox.transfer import MirrorLimits  # noqa: E402
from skill_executor.workspace.fs import Tree  # noqa: E402


def staged(base: Path) -> Path:
    """A workspace as staging leaves it: the skill's files, an input, empty run/."""
    ws = base / "ws"
    shutil.copytree(REPO / "skills" / "math-tools", ws / "skills" / "math-tools", symlinks=True)
    (ws / "work" / "inputs").mkdir(parents=True)
    (ws / "work" / "inputs" / "data.csv").write_text("a,b\n1,2\n")
    (ws / "run").mkdir()
    return ws


def sandbox_run(claims: Claims, ws: Path, into: Path) -> dict[str, float]:
    times: dict[str, float] = {}
    t0 = time.perf_counter()
    claim = claims.claim("base", "bench", run_timeout=60)
    t1 = time.perf_counter()
    pod = PodClient(claim.sandbox.connector)
    pod.put({t: ws / t for t in ("skills", "work", "run")}, folders=["out"])
    t2 = time.perf_counter()
    done = execute(pod.start(["true"], cwd="/workspace", env={}), timeout=30, stdout_max=1 << 20, stderr_max=1 << 20)
    if done.exit_code != 0:
        raise RuntimeError(f"`true` ended with {done.exit_code}")
    t3 = time.perf_counter()
    with Tree(into) as tree:
        pod.get("out", tree, limits=MirrorLimits(max_bytes=1 << 20), owner=None)
    t4 = time.perf_counter()
    if not claims.release(claim):
        raise RuntimeError("release failed")
    t5 = time.perf_counter()
    for name, a, b in (("claim", t0, t1), ("put", t1, t2), ("exec", t2, t3), ("get", t3, t4), ("release", t4, t5)):
        times[name] = (b - a) * 1000
    times["wire"] = times["put"] + times["exec"] + times["get"]
    times["total"] = (t5 - t0) * 1000
    return times


def throughput(claims: Claims, total: int) -> float:
    claim = claims.claim("base", "flood", run_timeout=60)
    try:
        pod = PodClient(claim.sandbox.connector)
        started = time.perf_counter()
        process = pod.start(["head", "-c", str(total), "/dev/zero"], cwd="/workspace", env={})
        done = execute(process, timeout=120, stdout_max=1 << 20, stderr_max=1 << 20)
        seconds = time.perf_counter() - started
        assert done.stdout.total == total, done.stdout.total
        return total / seconds / 1e6
    finally:
        claims.release(claim)


@contextmanager
def cluster(oci_runtime: str | None, image: str) -> Iterator[dict[str, Any]]:
    """bench/kubehost.py in a process of its own: its JSON line (url, ports, pool)."""
    argv = [sys.executable, str(REPO / "bench" / "kubehost.py"), "--image", image]
    if oci_runtime:
        argv += ["--oci-runtime", oci_runtime]
    host = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert host.stdout is not None
        line = host.stdout.readline()
        if not line:
            raise RuntimeError(f"bench/kubehost.py did not start (exit {host.wait()})")
        yield json.loads(line)
    finally:
        assert host.stdin is not None
        host.stdin.close()
        host.wait(180)


def state(url: str) -> dict[str, Any]:
    return dict(httpx.get(f"{url}/_bench/state", timeout=10).json())


def full_pool(url: str, pool: str) -> None:
    """Until the pool holds two ready pods again (a quiet, full pool, like the Docker side's)."""
    while state(url)["ready"][pool] < 2:
        time.sleep(0.05)
    time.sleep(0.1)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--oci-runtime", default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    image = Settings().docker_image
    base = Path(tempfile.mkdtemp(prefix="bench-agentsandbox-"))
    samples: dict[str, list[float]] = {}
    executor = Executor.from_settings(
        Settings(
            skills_dirs=[REPO / "skills"],
            data_dir=base / "lib",
            pool_size=2,
            docker_image=image,
            docker_oci_runtime=args.oci_runtime,
        )
    )
    pods: Executor | None = None
    try:
        with cluster(args.oci_runtime, image) as kube:
            url, pool = kube["url"], kube["pool"]
            pods = Executor.from_settings(
                Settings(
                    runtime="agent-sandbox",
                    skills_dirs=[REPO / "skills"],
                    data_dir=base / "pods",
                    agent_sandbox_api_url=url,
                    agent_sandbox_namespace="bench",
                    agent_sandbox_pools={"document": pool},
                    agent_sandbox_rest_port=kube["rest_port"],
                    agent_sandbox_grpc_port=kube["grpc_port"],
                )
            )
            claims = Claims(
                api_client(url),
                pools={"base": pool},
                namespace="bench",
                worker_id="bench",
                rest_port=kube["rest_port"],
                grpc_port=kube["grpc_port"],
            )
            ws = staged(base)
            request = RunRequest(skill="math-tools", command="true")
            runtime: Any = executor.runtime
            for i in range(args.runs + 1):  # the first of each: warm-up, not kept
                out = base / f"out{i}"
                out.mkdir()
                full_pool(url, pool)
                phases = sandbox_run(claims, ws, out)
                pods.runtime.settle()
                full_pool(url, pool)
                started = time.perf_counter()
                through_pods = pods.runner.run(request)
                phases["agentsandbox_library"] = (time.perf_counter() - started) * 1000
                assert through_pods.exit_code == 0, through_pods
                pods.runtime.settle()
                assert runtime.pool.wait_ready()
                time.sleep(0.1)
                launcher = launcher_round_trip(executor)
                assert runtime.pool.wait_ready()
                time.sleep(0.1)
                started = time.perf_counter()
                result = executor.runner.run(request)
                library = (time.perf_counter() - started) * 1000
                assert result.exit_code == 0
                if i:
                    for name, value in {**phases, "docker_launcher": launcher, "docker_library_warm": library}.items():
                        samples.setdefault(name, []).append(value)
            flood = [throughput(claims, 200_000_000) for _ in range(3)]
            api_calls = state(url)["calls"]
            pods.close()
            pods = None
    finally:
        if pods is not None:
            pods.close()
        executor.close()
        shutil.rmtree(base, ignore_errors=True)
    report = {
        "oci_runtime": args.oci_runtime or "runc",
        "runs": args.runs,
        "cpus": os.cpu_count(),
        "ms": {name: stats(values) for name, values in samples.items()},
        "stream_mb_per_s": {"median": statistics.median(flood), "all": flood},
        "api_calls": api_calls,
    }
    print(json.dumps(report, indent=1))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
