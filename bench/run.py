"""skill-executor benchmark: ours against the raw Docker floor and its peers, side by side, in one run.

    python bench/run.py [--quick] [--out FILE] [--skip SECTION ...]

Measures on the same engine and image, and prints one table with every row, its ratio
and MET / NOT MET against each target (JSON: every figure, and ``targets``):

* floor: SDK ``exec_run`` of ``true`` in a running container; SDK create+start+wait+remove
  with ``network_mode=none`` (the floor the targets name) and with ``network_disabled``
  (what ours uses), taken in turn;
* the warm launcher's own round trip: a pool container's launcher driven directly (connect,
  request, ``bash -c true``, exit frame) -- the floor of a warm run;
* ours through the library: warm pool (paced at 4 runs/s so the pool keeps up) and pool
  size 0 (in turn with the floor), throughput at c=4;
* ours over HTTP (``skill-executor serve`` in a subprocess): warm pool, pool size 0 (in
  turn with both floors), throughput at concurrency 1, 2, 4, 8 next to the floors' churn;
* the cold path (bench/coldpath.py): create+start+wait+remove with each engine
  alternative (network, init, tmpfs, mounts, log driver, OCI runtime) against
  ``network_mode=none``;
* real workloads (bench/workloads.py): document-skill invocations through ours vs the same
  command in a plain container of the same image;
* peers (bench/peers.py; virtualenvs made by scripts/bench-peers.sh): llm-sandbox (a
  session per run, one shared session, its pool), AutoGen's Docker executor, epicbox;
* output collection (1,000 small files; one 64 MiB file) next to a plain read; catalog
  overview and search over 1,000 generated skills; the service's RSS idle and under 8
  concurrent output floods;
* the egress gateway (bench/egress_latency.py): added latency p50/p99 through it vs direct,
  HTTP and HTTPS kept alive, from the host and (not --quick) from a runc sandbox, requests/s
  -- skipped (with the reason) without the egress environment;
* gVisor (the engine's ``runsc``) next to runc: the floor, ours warm / pool 0, throughput
  at c=4, ``import pandas`` -- skipped (with the reason) when the engine has no usable runsc.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import docker
import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from skill_executor.config import Settings  # noqa: E402
from skill_executor.core import Executor  # noqa: E402
from skill_executor.errors import ExecutorError  # noqa: E402
from skill_executor.outputs.collect import CollectLimits, collect  # noqa: E402
from skill_executor.registry import SkillRepository  # noqa: E402
from skill_executor.runs.models import RunRequest  # noqa: E402
from skill_executor.runtimes.docker.engine import CONTAINER_WORKSPACE  # noqa: E402
from skill_executor.runtimes.docker.oci import check_oci_runtime  # noqa: E402
from skill_executor.runtimes.docker.launcher import LauncherFrames, connect_unix, request_bytes  # noqa: E402
from skill_executor.skills import render_text, render_xml
from skill_executor.workspace.layout import Workspace, WorkspaceManager, environment  # noqa: E402

MiB = 1024 * 1024


def stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p90 = ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]
    return {"p50": statistics.median(ordered), "p90": p90, "n": len(ordered)}


def timed(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1000


def paced(fn: Callable[[], Any], count: int, interval: float) -> list[float]:
    """Run ``fn`` ``count`` times, starting one every ``interval`` seconds."""
    samples = []
    next_start = time.monotonic()
    for _ in range(count):
        delay = next_start - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        next_start = time.monotonic() + interval
        samples.append(timed(fn))
    return samples


def throughput(fn: Callable[[], Any], concurrency: int, total: int) -> float:
    """Runs per second with ``concurrency`` workers doing ``total`` runs."""
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        started = time.perf_counter()
        list(pool.map(lambda _: fn(), range(total)))
        return total / (time.perf_counter() - started)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Service:
    """``skill-executor serve`` in a subprocess, as users run it."""

    def __init__(self, base: Path, **settings: Any) -> None:
        self.base = base
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("SKILL_EXECUTOR_")}
        env.update({f"SKILL_EXECUTOR_{k.upper()}": str(v) for k, v in settings.items()})
        env["SKILL_EXECUTOR_LOG_JSON"] = "1"
        self.log = open(base / f"service-{self.port}.log", "wb")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "skill_executor.cli.main",
                "serve",
                "--port",
                str(self.port),
                "--skills-dir",
                str(REPO / "skills"),
                "--data-dir",
                str(base / f"data-{self.port}"),
            ],
            cwd=REPO,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.url = f"http://127.0.0.1:{self.port}"
        self.http = httpx.Client(base_url=self.url, timeout=600)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if self.http.get("/healthz").status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("the service did not start")

    def run(self, command: str = "true") -> dict[str, Any]:
        response = self.http.post("/v1/runs", json={"skill": "math-tools", "command": command})
        if response.status_code != 200:
            raise RuntimeError(f"{command!r}: HTTP {response.status_code} {response.text[:500]}")
        result: dict[str, Any] = response.json()
        if result.get("exit_code") != 0:
            raise RuntimeError(f"{command!r} failed: {result}")
        return result

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> None:
        self.http.close()
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()


def floor_exec_run(client: docker.DockerClient, image: str, count: int) -> list[float]:
    container = client.containers.run(image, ["sleep", "infinity"], detach=True, network_disabled=True)
    try:
        container.exec_run(["true"])  # warm-up
        return [timed(lambda: container.exec_run(["true"])) for _ in range(count)]
    finally:
        container.remove(force=True)


def floor_cold_once(client: docker.DockerClient, image: str, runtime: str | None = None, network: str = "none") -> None:
    """SDK create+start+wait+remove of ``true``: ``network`` ``none`` (``network_mode=none``,
    the floor the targets name) or ``disabled`` (``network_disabled``, what ours uses)."""
    kwargs: dict[str, Any] = {"network_disabled": True} if network == "disabled" else {"network_mode": "none"}
    container = client.containers.create(image, ["true"], runtime=runtime, **kwargs)
    container.start()
    container.wait()
    container.remove(force=True)


def in_turn(fns: dict[str, Callable[[], Any]], count: int, pause: float = 0.3) -> dict[str, list[float]]:
    """``count`` samples of each, taken in turn, each after a pause (this engine drifts)."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(count):
        for name, fn in fns.items():
            time.sleep(pause)
            samples[name].append(timed(fn))
    return samples


def launcher_round_trip(executor: Executor) -> float:
    """One warm container's launcher driven directly: connect, send the request of a run
    of ``true`` (with a run's environment), read frames to the exit frame; then discard it."""
    runtime: Any = executor.runtime
    pool = runtime.pool
    assert pool.wait_ready()
    time.sleep(0.1)
    warm = pool.acquire()
    assert warm is not None
    try:
        env = {**environment(CONTAINER_WORKSPACE, "math-tools"), "PWD": CONTAINER_WORKSPACE}
        started = time.perf_counter()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            connect_unix(conn, warm.socket)
            conn.sendall(request_bytes("true", CONTAINER_WORKSPACE, "", env))
            frames = LauncherFrames(1 << 20, 1 << 20, None)
            while not frames.exited:
                data = conn.recv(65536)
                if not data:
                    break
                frames.feed(memoryview(data))
        elapsed = (time.perf_counter() - started) * 1000
        if frames.exit_code != 0:
            raise RuntimeError(f"the launcher's `true` ended with {frames.exit_code}")
        return elapsed
    finally:
        runtime.discard(warm)


def bench_library(
    base: Path, client: docker.DockerClient, image: str, n_warm: int, n_cold: int, tp_runs: int
) -> dict[str, Any]:
    """The launcher's round trip, ours through the library (warm -- in turn with the soft,
    polled disk cap of before -- and pool 0 in turn with the floor), and the library's
    throughput at c=4."""
    out: dict[str, Any] = {}
    request = RunRequest(skill="math-tools", command="true")
    for pool in (2, 0):
        executor = Executor.from_settings(
            Settings(skills_dirs=[REPO / "skills"], data_dir=base / f"lib{pool}", pool_size=pool, docker_image=image)
        )
        try:

            def run(on: Executor = executor) -> None:
                result = on.runner.run(request)
                if result.exit_code != 0:
                    raise RuntimeError(f"`true` exited with {result.exit_code}")

            if pool:
                runtime: Any = executor.runtime
                soft = Executor.from_settings(
                    Settings(
                        skills_dirs=[REPO / "skills"],
                        data_dir=base / "lib-soft",
                        pool_size=pool,
                        docker_image=image,
                        disk_cap="soft",
                    )
                )
                try:
                    soft_runtime: Any = soft.runtime
                    pools: list[tuple[Executor, Any, list[float]]] = [
                        (executor, runtime.pool, []),
                        (soft, soft_runtime.pool, []),
                    ]
                    for on, warm, _ in pools:
                        assert warm.wait_ready()
                        run(on)
                    launcher = []
                    for _ in range(n_warm):  # in turn, each on a full, quiet pool
                        launcher.append(launcher_round_trip(executor))
                        for on, _, taken in pools:  # both pools full: no refill runs beside a sample
                            assert all(warm.wait_ready() for _, warm, _ in pools)
                            time.sleep(0.1)
                            taken.append(timed(functools.partial(run, on)))
                    library, library_soft = pools[0][2], pools[1][2]
                finally:
                    soft.close()
                out["launcher_round_trip_ms"] = stats(launcher)
                out["library_warm_pool_ms"] = stats(library)
                out["library_warm_pool_soft_cap_ms"] = stats(library_soft)
                out["throughput_library_c4"] = throughput(run, 4, tp_runs)
            else:
                run()
                samples = in_turn({"floor": lambda: floor_cold_once(client, image), "ours": run}, n_cold)
                out["library_pool0_ms"] = stats(samples["ours"])
                out["floor_none_beside_library_ms"] = stats(samples["floor"])
        finally:
            executor.close()
    return out


def bench_http(
    base: Path, client: docker.DockerClient, image: str, n_warm: int, n_cold: int, tp_runs: int, levels: tuple[int, ...]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    warm = Service(base, pool_size=2, docker_image=image)
    try:
        time.sleep(1.0)
        warm.run()
        warm.run()
        time.sleep(1.0)
        out["http_warm_pool_ms"] = stats(paced(warm.run, n_warm, 0.5))
        # The floors' churn and ours back to back at each level: this machine's speed drifts.
        none_tp, disabled_tp, ours_tp = {}, {}, {}
        for c in levels:
            none_tp[str(c)] = throughput(lambda: floor_cold_once(client, image), c, tp_runs)
            disabled_tp[str(c)] = throughput(lambda: floor_cold_once(client, image, network="disabled"), c, tp_runs)
            time.sleep(1.0)
            ours_tp[str(c)] = throughput(warm.run, c, tp_runs)
        out["throughput_floor_none"] = none_tp
        out["throughput_floor_disabled"] = disabled_tp
        out["throughput_ours_http"] = ours_tp
    finally:
        warm.stop()
    cold = Service(base, pool_size=0, docker_image=image)
    try:
        cold.run()
        samples = in_turn(
            {
                "none": lambda: floor_cold_once(client, image),
                "disabled": lambda: floor_cold_once(client, image, network="disabled"),
                "ours": cold.run,
            },
            n_cold,
        )
        out["http_pool0_ms"] = stats(samples["ours"])
        out["floor_none_beside_http_ms"] = stats(samples["none"])
        out["floor_disabled_beside_http_ms"] = stats(samples["disabled"])
    finally:
        cold.stop()
    return out


def bench_peers(image: str, quick: bool) -> dict[str, Any]:
    """Each peer through its driver in its own virtualenv (scripts/bench-peers.sh makes them)."""
    import peers

    samples, tp_runs = (6, 12) if quick else (20, 40)
    args = argparse.Namespace(samples=samples, throughput_runs=tp_runs, concurrency=4)
    began = time.time()
    rows = []
    try:
        for name, venv, peer, isolation in peers.PEERS:
            rows.append(peers.run_peer(name, venv, peer, isolation, image, args))
    finally:
        peers.clean_up(docker.DockerClient(base_url="unix:///var/run/docker.sock", version="auto"), began)
    return {"samples": samples, "throughput_runs": tp_runs, "rows": rows}


def bench_collection(base: Path, quick: bool) -> dict[str, Any]:
    manager = WorkspaceManager(base / "collect")
    root = manager.create_root("bench")
    workspace = Workspace("bench", root, root / "work", None, "x")
    for i in range(1000):
        (workspace.out / "many").mkdir(exist_ok=True)
        (workspace.out / "many" / f"f{i:04}.txt").write_text(f"line {i}\n" * 5)
    big = workspace.out / "big" / "big.bin"
    big.parent.mkdir()
    big.write_bytes(os.urandom(64 * MiB))
    limits = CollectLimits(max_files=1000, max_file_bytes=64 * MiB, max_total_bytes=256 * MiB)
    rounds = 3 if quick else 7

    def read_all(folder: Path) -> None:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                path.read_bytes()

    out = {
        "collect_1000_files_ms": stats(
            [timed(lambda: collect(workspace, ["out/many/**"], limits)) for _ in range(rounds)]
        ),
        "plain_read_1000_files_ms": stats([timed(lambda: read_all(workspace.out / "many")) for _ in range(rounds)]),
        "collect_64mib_file_ms": stats(
            [timed(lambda: collect(workspace, ["out/big/*"], limits)) for _ in range(rounds)]
        ),
        "plain_read_64mib_file_ms": stats([timed(lambda: big.read_bytes()) for _ in range(rounds)]),
    }
    result = collect(workspace, ["out/many/**"], limits)
    assert len(result.files) == 1000 and all(f.mime_type == "text/plain" for f in result.files)
    manager.remove(workspace)
    return out


def bench_catalog(base: Path, quick: bool) -> dict[str, Any]:
    root = base / "catalog"
    words = [
        "pdf",
        "csv",
        "chart",
        "report",
        "image",
        "resize",
        "audio",
        "git",
        "deploy",
        "lint",
        "docx",
        "translate",
        "invoice",
        "summarise",
        "scrape",
        "sql",
        "diagram",
        "slides",
        "email",
        "calendar",
    ]
    for i in range(1000):
        name = f"skill-{i:04}-{words[i % len(words)]}"
        folder = root / name
        folder.mkdir(parents=True)
        description = (
            f"Use this skill to {words[i % 20]} and {words[(i * 7) % 20]} files; "
            f"handles {words[(i * 3) % 20]} workflows with scripts and references (variant {i})."
        )
        (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {description}\n---\n# {name}\n\nBody.\n")
    repository = SkillRepository([root], refresh_interval=3600)
    load_ms = timed(repository.reload)
    rounds = 10 if quick else 30
    overview = stats([timed(lambda: render_text(repository.list())) for _ in range(rounds)])
    xml = stats([timed(lambda: render_xml(repository.list())) for _ in range(rounds)])
    search = stats([timed(lambda: repository.search("pdf report scripts", 10)) for _ in range(rounds)])
    rescan = stats([timed(repository.reload) for _ in range(3)])
    assert len(repository.list()) == 1000
    return {
        "catalog_first_load_ms": {"p50": load_ms, "p90": load_ms, "n": 1},
        "catalog_overview_text_ms": overview,
        "catalog_overview_xml_ms": xml,
        "catalog_search_ms": search,
        "catalog_rescan_unchanged_ms": rescan,
    }


def bench_rss(base: Path, quick: bool) -> dict[str, Any]:
    service = Service(base, max_concurrent_runs=8, pool_size=2)
    try:
        time.sleep(2.0)
        idle = service.rss_mb()
        size = "256M" if quick else "1G"
        peak = idle
        done = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, service.rss_mb())
                time.sleep(0.05)

        sampler = threading.Thread(target=sample)
        sampler.start()
        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=8) as pool:
            results = list(pool.map(lambda _: service.run(f"head -c {size} /dev/zero"), range(8)))
        elapsed = time.perf_counter() - started
        done.set()
        sampler.join()
        assert all(r["stdout_truncated"] for r in results)
        return {"rss_idle_mb": idle, "rss_flood_peak_mb": peak, "flood_per_run": size, "flood_seconds": elapsed}
    finally:
        service.stop()


PANDAS = "python3 -c 'import pandas'"


def runsc_problem(client: docker.DockerClient) -> str | None:
    """Why the engine cannot run our containers on gVisor (None when it can)."""
    skip = os.environ.get("SKILL_EXECUTOR_BENCH_RUNSC_SKIP")
    if skip:
        return skip
    try:
        check_oci_runtime("runsc", client.info(), pool=True)
    except ExecutorError as exc:
        return exc.message
    return None


def bench_oci_runtime(
    base: Path, client: docker.DockerClient, image: str, runtime: str | None, counts: tuple[int, int, int, int]
) -> dict[str, Any]:
    """The rows compared between runc (``runtime`` None: the engine's default) and runsc."""
    n_warm, n_cold, per_level, n_heavy = counts
    out: dict[str, Any] = {}
    floor_cold_once(client, image, runtime, network="disabled")
    out["floor_create_start_wait_remove_ms"] = stats(
        [timed(lambda: floor_cold_once(client, image, runtime, network="disabled")) for _ in range(n_cold)]
    )
    settings: dict[str, Any] = {"docker_image": image}
    if runtime is not None:
        settings["docker_oci_runtime"] = runtime
    warm = Service(base, pool_size=2, **settings)
    try:
        time.sleep(1.0)
        warm.run()
        # Paced so the pool keeps up: a gVisor container takes longer to start.
        out["http_warm_pool_ms"] = stats(paced(warm.run, n_warm, 0.5))
        out["throughput_http_c4"] = throughput(warm.run, 4, per_level)
        time.sleep(2.0)
        out["http_warm_pool_import_pandas_ms"] = stats(paced(lambda: warm.run(PANDAS), n_heavy, 1.0))
    finally:
        warm.stop()
    cold = Service(base, pool_size=0, **settings)
    try:
        cold.run()
        out["http_pool0_ms"] = stats([timed(cold.run) for _ in range(n_cold)])
    finally:
        cold.stop()
    return out


SECTIONS = (
    "floor",
    "library",
    "http",
    "coldpath",
    "workloads",
    "peers",
    "collection",
    "catalog",
    "rss",
    "egress",
    "gvisor",
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer samples and rows; finishes within 90 s")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "latest.json")
    parser.add_argument("--skip", action="append", default=[], choices=SECTIONS, help="leave a section out")
    args = parser.parse_args()
    quick = args.quick
    began = time.monotonic()
    settings = Settings()
    image = settings.docker_image
    client = docker.DockerClient(base_url="unix:///var/run/docker.sock", version="auto", timeout=600)
    client.images.get(image)
    base = Path(tempfile.mkdtemp(prefix="se-bench-"))
    # --quick: fewer samples, throughput at c=4 only, a light cold-path matrix and workload
    # set, no peers and no gVisor rows (each needs services and containers of its own).
    n_warm, n_cold, tp_runs = (10, 4, 8) if quick else (40, 15, 24)
    levels = (4,) if quick else (1, 2, 4, 8)
    results: dict[str, Any] = {
        "quick": quick,
        "engine": client.version().get("Version"),
        "image": image,
        "skipped": sorted(set(args.skip)),
    }
    skip = set(args.skip) | ({"peers", "gvisor"} if quick else set())
    results["skipped"] = sorted(skip)
    wanted = [name for name in SECTIONS if name not in skip]
    timings: dict[str, float] = {}
    try:
        for section in wanted:
            started = time.monotonic()
            if section == "floor":
                results["floor_exec_run_ms"] = stats(floor_exec_run(client, image, max(n_warm, 12)))
                floor_cold_once(client, image)
                floor_cold_once(client, image, network="disabled")
                samples = in_turn(
                    {
                        "none": lambda: floor_cold_once(client, image),
                        "disabled": lambda: floor_cold_once(client, image, network="disabled"),
                    },
                    n_cold,
                )
                results["floor_none_ms"] = stats(samples["none"])
                results["floor_disabled_ms"] = stats(samples["disabled"])
            elif section == "library":
                # (each warm sample waits for a full pool: quick takes fewer)
                results.update(bench_library(base, client, image, 6 if quick else n_warm, n_cold, tp_runs))
            elif section == "http":
                results.update(bench_http(base, client, image, n_warm, n_cold, tp_runs, levels))
            elif section == "coldpath":
                from coldpath import bench_coldpath

                # (quick: the network variants are the floor section's; init is ours with and without)
                results["coldpath"] = bench_coldpath(client, image, quick, {"ours", "ours_no_init"} if quick else None)
            elif section == "workloads":
                from workloads import bench_workloads

                # (quick: the two light ones, one sample each, no LibreOffice first-start split)
                results.update(
                    bench_workloads(
                        base,
                        client,
                        image,
                        quick,
                        ["pdf_form_fill", "import_pandas"] if quick else None,
                        first_start=not quick,
                    )
                )
            elif section == "peers":
                results["peers"] = bench_peers(image, quick)
            elif section == "collection":
                results.update(bench_collection(base, quick))
            elif section == "catalog":
                results.update(bench_catalog(base, quick))
            elif section == "rss":
                results.update(bench_rss(base, quick))
            elif section == "egress":
                from egress_latency import bench_egress, egress_python

                if egress_python() is None:
                    results["egress"] = {"skipped": "no egress environment (requirements/egress-lock.txt)"}
                else:
                    # (quick: the host's rows only, fewer requests)
                    results["egress"] = bench_egress(200 if quick else 500, 400 if quick else 2000, not quick)
            elif section == "gvisor":
                problem = runsc_problem(client)
                if problem is None:
                    counts = (4, 3, 4, 1) if quick else (24, 12, 24, 5)
                    results["oci_runtimes"] = {
                        name: bench_oci_runtime(base, client, image, runtime, counts)
                        for name, runtime in (("runc", None), ("runsc", "runsc"))
                    }
                else:
                    results["oci_runtimes"] = {"skipped": problem}
            timings[section] = round(time.monotonic() - started, 1)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    results["section_seconds"] = timings
    results["seconds"] = round(time.monotonic() - began, 1)
    results["targets"] = targets(results)
    report(results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(f"\nJSON: {args.out}")
    return 0


def p50(r: dict[str, Any], key: str) -> float | None:
    value = r.get(key)
    return float(value["p50"]) if isinstance(value, dict) and "p50" in value else None


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def targets(r: dict[str, Any]) -> list[dict[str, Any]]:
    """Every target with its measured value and verdict (None: not measured in this run)."""
    out: list[dict[str, Any]] = []

    def add(name: str, value: float | None, op: str, limit: float, unit: str = "x") -> None:
        met = None if value is None else (value <= limit if op == "<=" else value >= limit)
        out.append({"target": name, "value": value, "op": op, "limit": limit, "unit": unit, "met": met})

    add(
        "HTTP warm pool p50 / exec_run p50", ratio(p50(r, "http_warm_pool_ms"), p50(r, "floor_exec_run_ms")), "<=", 0.08
    )
    add(
        "library warm pool p50 / launcher round trip p50",
        ratio(p50(r, "library_warm_pool_ms"), p50(r, "launcher_round_trip_ms")),
        "<=",
        3.0,
    )
    add(
        "HTTP pool 0 p50 / c+s+w+r network_mode=none (in turn)",
        ratio(p50(r, "http_pool0_ms"), p50(r, "floor_none_beside_http_ms")),
        "<=",
        0.8,
    )
    add(
        "library pool 0 p50 / c+s+w+r network_mode=none (in turn)",
        ratio(p50(r, "library_pool0_ms"), p50(r, "floor_none_beside_library_ms")),
        "<=",
        0.8,
    )
    tp = r.get("throughput_ours_http", {}).get("4")
    floor_tp = r.get("throughput_floor_none", {}).get("4")
    add("HTTP throughput at c=4 / churn network_mode=none", ratio(tp, floor_tp), ">=", 1.3)
    for name, row in (r.get("workloads") or {}).items():
        add(f"workload {name}: ours / plain docker run", row.get("ratio"), "<=", 1.05)
    add("collect 1,000 files (ms)", p50(r, "collect_1000_files_ms"), "<=", 300, "ms")
    add("catalog overview, 1,000 skills (ms)", p50(r, "catalog_overview_text_ms"), "<=", 50, "ms")
    add("service RSS idle (MB)", r.get("rss_idle_mb"), "<=", 120, "MB")
    add("service RSS peak under 8 floods (MB)", r.get("rss_flood_peak_mb"), "<=", 300, "MB")
    for where in ("host", "sandbox"):
        row = (r.get("egress") or {}).get(where, {}).get("https")
        add(
            f"egress gateway added p50, HTTPS kept alive, {where} (ms)",
            row["added_p50_ms"] if row else None,
            "<=",
            2.0,
            "ms",
        )
    add("--quick finishes within (s)", r["seconds"] if r.get("quick") else None, "<=", 90, "s")
    return out


def fmt(value: float | None, digits: int = 1) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def report(r: dict[str, Any]) -> None:
    exec_p50 = p50(r, "floor_exec_run_ms")
    rows: list[tuple[str, str, dict[str, Any] | None, float | None, str]] = [
        ("floor", "exec_run of true in a running container", r.get("floor_exec_run_ms"), None, ""),
        ("floor", "create+start+wait+remove, network_mode=none", r.get("floor_none_ms"), None, ""),
        (
            "floor",
            "create+start+wait+remove, network_disabled",
            r.get("floor_disabled_ms"),
            ratio(p50(r, "floor_disabled_ms"), p50(r, "floor_none_ms")),
            "vs network_mode=none",
        ),
        (
            "floor",
            "warm launcher round trip (bash -c true)",
            r.get("launcher_round_trip_ms"),
            ratio(p50(r, "launcher_round_trip_ms"), exec_p50),
            "vs exec_run",
        ),
        (
            "library",
            "warm pool",
            r.get("library_warm_pool_ms"),
            ratio(p50(r, "library_warm_pool_ms"), p50(r, "launcher_round_trip_ms")),
            "vs launcher round trip",
        ),
        (
            "library",
            "warm pool, soft disk cap (polled, as before)",
            r.get("library_warm_pool_soft_cap_ms"),
            ratio(p50(r, "library_warm_pool_ms"), p50(r, "library_warm_pool_soft_cap_ms")),
            "hard cap vs this, in turn",
        ),
        (
            "library",
            "pool 0",
            r.get("library_pool0_ms"),
            ratio(p50(r, "library_pool0_ms"), p50(r, "floor_none_beside_library_ms")),
            "vs c+s+w+r none, in turn",
        ),
        (
            "HTTP",
            "warm pool (2 runs/s)",
            r.get("http_warm_pool_ms"),
            ratio(p50(r, "http_warm_pool_ms"), exec_p50),
            "vs exec_run",
        ),
        (
            "HTTP",
            "pool 0",
            r.get("http_pool0_ms"),
            ratio(p50(r, "http_pool0_ms"), p50(r, "floor_none_beside_http_ms")),
            "vs c+s+w+r none, in turn",
        ),
        (
            "HTTP",
            "pool 0 (vs network_disabled floor)",
            r.get("http_pool0_ms"),
            ratio(p50(r, "http_pool0_ms"), p50(r, "floor_disabled_beside_http_ms")),
            "vs c+s+w+r disabled, in turn",
        ),
    ]
    print(f"\n{'section':10} {'measure':52} {'p50 ms':>9} {'p90 ms':>9} {'ratio':>7}  against")
    for section, name, s, value, against in rows:
        if s is None:
            continue
        print(f"{section:10} {name:52} {s['p50']:9.1f} {s['p90']:9.1f} {fmt(value, 2):>7}  {against}")

    if "throughput_ours_http" in r:
        levels = list(r["throughput_ours_http"])
        print(f"\n{'throughput (runs/s)':63} " + " ".join(f"{'c=' + c:>7}" for c in levels))
        for name, key in (
            ("floor: c+s+w+r churn, network_mode=none", "throughput_floor_none"),
            ("floor: c+s+w+r churn, network_disabled", "throughput_floor_disabled"),
            ("ours: HTTP, warm pool", "throughput_ours_http"),
        ):
            print(f"{name:63} " + " ".join(f"{r[key][c]:7.1f}" for c in levels))
        if "throughput_library_c4" in r:
            print(f"{'ours: library, warm pool (c=4 only)':63} {r['throughput_library_c4']:7.1f}")

    report_coldpath(r.get("coldpath"))
    report_workloads(r)
    report_peers(r)
    print()
    for key in (
        "collect_1000_files_ms",
        "plain_read_1000_files_ms",
        "collect_64mib_file_ms",
        "plain_read_64mib_file_ms",
        "catalog_overview_text_ms",
        "catalog_overview_xml_ms",
        "catalog_search_ms",
        "catalog_first_load_ms",
        "catalog_rescan_unchanged_ms",
    ):
        if key in r:
            print(f"{key:63} {r[key]['p50']:9.1f} {r[key]['p90']:9.1f}")
    if "rss_idle_mb" in r:
        print(
            f"{'service RSS idle / peak under 8 x ' + r['flood_per_run'] + ' stdout (MB)':63} "
            f"{r['rss_idle_mb']:9.1f} {r['rss_flood_peak_mb']:9.1f}"
        )
    if "egress" in r:
        from egress_latency import report as report_egress

        egress = r["egress"]
        print("\negress gateway: " + (f"skipped: {egress['skipped']}" if "skipped" in egress else ""))
        if "skipped" not in egress:
            print(report_egress(egress))
    if "oci_runtimes" in r:
        report_oci_runtimes(r["oci_runtimes"])

    print(f"\n{'target':63} {'measured':>10} {'target':>10}  verdict")
    for t in r["targets"]:
        unit = t["unit"]
        measured = "" if t["value"] is None else (f"{t['value']:.2f}x" if unit == "x" else f"{t['value']:.1f} {unit}")
        limit = f"{t['op']} {t['limit']:g}{'x' if unit == 'x' else ' ' + unit}"
        verdict = "not measured" if t["met"] is None else ("MET" if t["met"] else "NOT MET")
        print(f"{t['target']:63} {measured:>10} {limit:>10}  {verdict}")
    print(f"\nfinished in {r['seconds']} s ({', '.join(f'{k} {v} s' for k, v in r['section_seconds'].items())})")


def report_coldpath(c: dict[str, Any] | None) -> None:
    if not c:
        return
    variants = c.get("variants", c)
    print(f"\n{'cold path: create+start+wait+remove of true':52} {'variant':>10} {'baseline':>10} {'ratio':>7}")
    for name, row in variants.items():
        if not isinstance(row, dict) or "ms" not in row:
            continue
        print(f"{name:52} {row['ms']['p50']:10.1f} {row['baseline_ms']['p50']:10.1f} {row['ratio']:7.2f}")
    churn = c.get("churn_c4")
    if isinstance(churn, dict):
        print("churn at c=4 (runs/s): " + ", ".join(f"{k} {v['runs_per_s']:.1f}" for k, v in churn.items()))
    phases = c.get("phases")
    if isinstance(phases, dict):
        for name, by_phase in phases.items():
            print(f"phases of {name} (p50 ms): " + ", ".join(f"{k} {v['p50']:.0f}" for k, v in by_phase.items()))


def report_workloads(r: dict[str, Any]) -> None:
    workloads = r.get("workloads")
    if not workloads:
        return
    print(f"\n{'real workloads (p50)':52} {'plain ms':>10} {'ours ms':>10} {'ratio':>7}")
    for name, row in workloads.items():
        print(f"{name:52} {row['plain_ms']['p50']:10.1f} {row['ours_ms']['p50']:10.1f} {row['ratio']:7.2f}")
    first = r.get("libreoffice_first_start")
    if first:
        print(f"LibreOffice first start: {json.dumps(first)}")


def report_peers(r: dict[str, Any]) -> None:
    peers = r.get("peers")
    if not peers:
        return
    ours_p50 = p50(r, "library_warm_pool_ms")
    ours_tp = r.get("throughput_library_c4")
    print(
        f"\n{'peers (library, true; ' + str(peers['samples']) + ' samples)':44} {'p50 ms':>8} {'p90 ms':>8} "
        f"{'c=4/s':>6} {'ours/p50':>8} {'ours/tp':>7}  isolation"
    )
    rows = [
        {
            "peer": "ours, warm pool (library)",
            "p50_ms": ours_p50,
            "p90_ms": (r.get("library_warm_pool_ms") or {}).get("p90"),
            "throughput_runs_per_s": ours_tp,
            "isolation": "fresh single-use container per run (pre-started), destroyed after it",
        }
    ]
    rows.append(
        {
            "peer": "ours, pool 0 (library)",
            "p50_ms": p50(r, "library_pool0_ms"),
            "p90_ms": (r.get("library_pool0_ms") or {}).get("p90"),
            "throughput_runs_per_s": None,
            "isolation": "fresh container per run",
        }
    )
    for row in [*rows, *peers["rows"]]:
        name = row["peer"] + (f" {row['version']}" if "version" in row else "")
        if "error" in row:
            print(f"{name:44} failed: {row['error']}")
            continue
        tp = row.get("throughput_runs_per_s")
        print(
            f"{name:44} {fmt(row['p50_ms']):>8} {fmt(row['p90_ms']):>8} {fmt(tp):>6} "
            f"{fmt(ratio(ours_p50, row['p50_ms']), 2):>8} {fmt(ratio(ours_tp, tp), 2):>7}  {row['isolation']}"
        )


def report_oci_runtimes(r: dict[str, Any]) -> None:
    if "skipped" in r:
        print(f"\ngVisor (runsc): skipped: {r['skipped']}")
        return
    runc, runsc = r["runc"], r["runsc"]
    print(f"\n{'gVisor (runsc) vs runc, p50':52} {'runc':>10} {'runsc':>10} {'ratio':>7}")
    for name, key in (
        ("floor: c+s+w+r, network_disabled (ms)", "floor_create_start_wait_remove_ms"),
        ("ours: HTTP run, warm pool (ms)", "http_warm_pool_ms"),
        ("ours: HTTP run, pool 0 (ms)", "http_pool0_ms"),
        ("ours: import pandas, warm pool (ms)", "http_warm_pool_import_pandas_ms"),
    ):
        a, b = runc[key]["p50"], runsc[key]["p50"]
        print(f"{name:52} {a:10.1f} {b:10.1f} {b / a:7.2f}")
    a, b = runc["throughput_http_c4"], runsc["throughput_http_c4"]
    print(f"{'ours: HTTP throughput at c=4 (runs/s)':52} {a:10.1f} {b:10.1f} {b / a:7.2f}")


if __name__ == "__main__":
    sys.exit(main())
