"""skill-executor benchmark: ours against the raw Docker floor, side by side, in one run.

    python bench/run.py [--quick] [--out FILE]

Measures on the same engine and image:

* floor: SDK ``exec_run`` of ``true`` in a running container; SDK create+start+wait+remove
  (with the same network setting as ours);
* ours: ``POST /v1/runs`` of ``true`` over HTTP with a warm pool (paced at 4 runs/s so
  the pool keeps up) and with pool size 0; the same through the library, no HTTP.  Pool
  0 is compared with floor samples taken in turn with its own (this machine's engine
  drifts by tens of percent within a minute);
* throughput at concurrency 1, 2, 4, 8 for the floor (create+start+wait+remove) and
  ours (HTTP, default pool);
* output collection (1,000 small files; one 64 MiB file) next to a plain read of the
  same files; catalog overview and search over 1,000 generated skills;
* the service's RSS idle and under 8 concurrent runs each printing 1 GiB (256 MiB with
  ``--quick``);
* gVisor (the engine's ``runsc`` runtime), next to runc: the floor's create+start+wait+remove,
  ours over HTTP with a warm pool and with pool size 0, throughput at concurrency 4, and a
  run of ``import pandas`` through a warm pool -- each with the ratio runsc/runc.  Skipped
  (with the reason) when the engine has no usable ``runsc``.

Prints a table of p50/p90 and the ratios ours/floor, and writes JSON.
"""

from __future__ import annotations

import argparse
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

from executor.config import Settings  # noqa: E402
from executor.core import Executor  # noqa: E402
from executor.outputs.collect import CollectLimits, collect  # noqa: E402
from executor.runs.models import RunRequest  # noqa: E402
from executor.errors import ExecutorError  # noqa: E402
from executor.runtimes.docker.engine import check_oci_runtime  # noqa: E402
from executor.skills import SkillRepository, render_text, render_xml  # noqa: E402
from executor.workspace.layout import Workspace, WorkspaceManager  # noqa: E402

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


def alternate(floor: Callable[[], Any], ours: Callable[[], Any], count: int,
              pause: float = 0.3) -> tuple[list[float], list[float]]:
    """``count`` samples of each, taken in turn (floor, ours, floor, ...), each after a
    pause in which the engine settles: this machine's speed drifts by tens of percent
    within a minute, so a ratio is only fair between samples taken side by side."""
    floor_samples, ours_samples = [], []
    for _ in range(count):
        time.sleep(pause)
        floor_samples.append(timed(floor))
        time.sleep(pause)
        ours_samples.append(timed(ours))
    return floor_samples, ours_samples


def throughput(fn: Callable[[], Any], concurrency: int, total: int) -> float:
    """Runs per second with ``concurrency`` workers doing ``total`` runs."""
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        started = time.perf_counter()
        list(pool.map(lambda _: fn(), range(total)))
        return total / (time.perf_counter() - started)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
            [sys.executable, "-m", "executor.cli.main", "serve", "--port", str(self.port),
             "--skills-dir", str(REPO / "skills"), "--data-dir", str(base / f"data-{self.port}")],
            cwd=REPO, env=env, stdout=self.log, stderr=subprocess.STDOUT,
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


def floor_cold_once(client: docker.DockerClient, image: str, runtime: str | None = None) -> None:
    container = client.containers.create(image, ["true"], network_disabled=True, runtime=runtime)
    container.start()
    container.wait()
    container.remove(force=True)


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
        "collect_1000_files_ms": stats([timed(lambda: collect(workspace, ["out/many/**"], limits)) for _ in range(rounds)]),
        "plain_read_1000_files_ms": stats([timed(lambda: read_all(workspace.out / "many")) for _ in range(rounds)]),
        "collect_64mib_file_ms": stats([timed(lambda: collect(workspace, ["out/big/*"], limits)) for _ in range(rounds)]),
        "plain_read_64mib_file_ms": stats([timed(lambda: big.read_bytes()) for _ in range(rounds)]),
    }
    result = collect(workspace, ["out/many/**"], limits)
    assert len(result.files) == 1000 and all(f.mime_type == "text/plain" for f in result.files)
    manager.remove(workspace)
    return out


def bench_catalog(base: Path, quick: bool) -> dict[str, Any]:
    root = base / "catalog"
    words = ["pdf", "csv", "chart", "report", "image", "resize", "audio", "git", "deploy", "lint", "docx",
             "translate", "invoice", "summarise", "scrape", "sql", "diagram", "slides", "email", "calendar"]
    for i in range(1000):
        name = f"skill-{i:04}-{words[i % len(words)]}"
        folder = root / name
        folder.mkdir(parents=True)
        description = (f"Use this skill to {words[i % 20]} and {words[(i * 7) % 20]} files; "
                       f"handles {words[(i * 3) % 20]} workflows with scripts and references (variant {i}).")
        (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {description}\n---\n# {name}\n\nBody.\n")
    repository = SkillRepository([root], refresh_interval=3600)
    load_ms = timed(repository.reload)
    rounds = 10 if quick else 30
    overview = stats([timed(lambda: render_text(repository.list())) for _ in range(rounds)])
    xml = stats([timed(lambda: render_xml(repository.list())) for _ in range(rounds)])
    search = stats([timed(lambda: repository.search("pdf report scripts", 10)) for _ in range(rounds)])
    rescan = stats([timed(repository.reload) for _ in range(3)])
    assert len(repository.list()) == 1000
    return {"catalog_first_load_ms": {"p50": load_ms, "p90": load_ms, "n": 1},
            "catalog_overview_text_ms": overview, "catalog_overview_xml_ms": xml,
            "catalog_search_ms": search, "catalog_rescan_unchanged_ms": rescan}


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


def bench_oci_runtime(base: Path, client: docker.DockerClient, image: str, runtime: str | None,
                      counts: tuple[int, int, int, int]) -> dict[str, Any]:
    """The rows compared between runc (``runtime`` None: the engine's default) and runsc."""
    n_warm, n_cold, per_level, n_heavy = counts
    out: dict[str, Any] = {}
    floor_cold_once(client, image, runtime)
    out["floor_create_start_wait_remove_ms"] = stats(
        [timed(lambda: floor_cold_once(client, image, runtime)) for _ in range(n_cold)])
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer samples; finishes within about 90 s")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "latest.json")
    args = parser.parse_args()
    quick = args.quick
    began = time.monotonic()
    settings = Settings()
    image = settings.docker_image
    client = docker.DockerClient(base_url="unix:///var/run/docker.sock", version="auto", timeout=600)
    client.images.get(image)
    base = Path(tempfile.mkdtemp(prefix="se-bench-"))
    n_warm, n_cold, per_level = (24, 8, 8) if quick else (40, 20, 24)
    results: dict[str, Any] = {"quick": quick, "engine": client.version().get("Version"), "image": image}
    try:
        # -- floor ------------------------------------------------------------------------
        results["floor_exec_run_ms"] = stats(floor_exec_run(client, image, n_warm))
        floor_cold_once(client, image)
        results["floor_create_start_wait_remove_ms"] = stats(
            [timed(lambda: floor_cold_once(client, image)) for _ in range(n_cold)])

        # -- ours over HTTP ---------------------------------------------------------------------
        warm = Service(base, pool_size=2, docker_image=image)
        try:
            time.sleep(1.0)
            warm.run()
            results["http_warm_pool_ms"] = stats(paced(warm.run, n_warm, 0.25))
            # Floor and ours back to back at each level: this machine's speed drifts.
            floor_tp, ours_tp = {}, {}
            for c in (1, 2, 4, 8):
                floor_tp[str(c)] = throughput(lambda: floor_cold_once(client, image), c, per_level)
                ours_tp[str(c)] = throughput(warm.run, c, per_level)
            results["throughput_floor_create_start_wait_remove"] = floor_tp
            results["throughput_ours_http"] = ours_tp
        finally:
            warm.stop()
        cold = Service(base, pool_size=0, docker_image=image)
        try:
            cold.run()
            floor_samples, ours_samples = alternate(lambda: floor_cold_once(client, image), cold.run, n_cold)
            results["http_pool0_ms"] = stats(ours_samples)
            results["floor_create_start_wait_remove_beside_http_ms"] = stats(floor_samples)
        finally:
            cold.stop()

        # -- ours through the library ------------------------------------------------------------
        for pool in (2, 0):
            executor = Executor.from_settings(Settings(skills_dirs=[REPO / "skills"], data_dir=base / f"lib{pool}",
                                                       pool_size=pool, docker_image=image))
            try:
                if pool:
                    executor.runtime.pool.wait_ready()  # type: ignore[attr-defined]
                request = RunRequest(skill="math-tools", command="true")
                executor.runner.run(request)
                run = lambda: executor.runner.run(request)  # noqa: E731
                if pool:
                    results["library_warm_pool_ms"] = stats(paced(run, n_warm, 0.25))
                else:
                    floor_samples, ours_samples = alternate(lambda: floor_cold_once(client, image), run, n_cold)
                    results["library_pool0_ms"] = stats(ours_samples)
                    results["floor_create_start_wait_remove_beside_library_ms"] = stats(floor_samples)
            finally:
                executor.close()

        results.update(bench_collection(base, quick))
        results.update(bench_catalog(base, quick))
        results.update(bench_rss(base, quick))

        # -- gVisor next to runc --------------------------------------------------------------
        problem = runsc_problem(client)
        if problem is None:
            counts = (4, 3, 4, 1) if quick else (24, 12, 24, 5)
            results["oci_runtimes"] = {name: bench_oci_runtime(base, client, image, runtime, counts)
                                       for name, runtime in (("runc", None), ("runsc", "runsc"))}
        else:
            results["oci_runtimes"] = {"skipped": problem}
    finally:
        shutil.rmtree(base, ignore_errors=True)
    results["seconds"] = round(time.monotonic() - began, 1)
    report(results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(f"\nJSON: {args.out}")
    return 0


def report(r: dict[str, Any]) -> None:
    exec_p50 = r["floor_exec_run_ms"]["p50"]
    rows = [
        ("floor: exec_run true", r["floor_exec_run_ms"], None, ""),
        ("floor: create+start+wait+remove", r["floor_create_start_wait_remove_ms"], None, ""),
        ("ours: HTTP run, warm pool (4/s)", r["http_warm_pool_ms"], r["http_warm_pool_ms"]["p50"] / exec_p50, "<= 0.30 x exec_run"),
        ("floor: c+s+w+r, beside HTTP pool 0", r["floor_create_start_wait_remove_beside_http_ms"], None, ""),
        ("ours: HTTP run, pool 0", r["http_pool0_ms"],
         r["http_pool0_ms"]["p50"] / r["floor_create_start_wait_remove_beside_http_ms"]["p50"],
         "<= 1.15 x c+s+w+r beside it"),
        ("ours: library, warm pool (4/s)", r["library_warm_pool_ms"], r["library_warm_pool_ms"]["p50"] / exec_p50, "(vs exec_run)"),
        ("floor: c+s+w+r, beside library pool 0", r["floor_create_start_wait_remove_beside_library_ms"], None, ""),
        ("ours: library, pool 0", r["library_pool0_ms"],
         r["library_pool0_ms"]["p50"] / r["floor_create_start_wait_remove_beside_library_ms"]["p50"],
         "(vs c+s+w+r beside it)"),
    ]
    print(f"\n{'measure':42} {'p50 ms':>9} {'p90 ms':>9} {'ratio':>7}  target")
    for name, s, ratio, target in rows:
        ratio_text = f"{ratio:.2f}" if ratio is not None else ""
        ok = "" if ratio is None or not target.startswith("<=") else (
            " MET" if ratio <= float(target.split()[1]) else " MISSED")
        print(f"{name:42} {s['p50']:9.1f} {s['p90']:9.1f} {ratio_text:>7}  {target}{ok}")
    print(f"\n{'throughput (runs/s)':42} {'c=1':>7} {'c=2':>7} {'c=4':>7} {'c=8':>7}")
    for name, key in (("floor: create+start+wait+remove", "throughput_floor_create_start_wait_remove"),
                      ("ours: HTTP", "throughput_ours_http")):
        values = r[key]
        print(f"{name:42} " + " ".join(f"{values[c]:7.1f}" for c in ("1", "2", "4", "8")))
    ratio4 = r["throughput_ours_http"]["4"] / r["throughput_floor_create_start_wait_remove"]["4"]
    print(f"{'ratio at c=4 (target >= 0.80)':42} {ratio4:7.2f}{' MET' if ratio4 >= 0.8 else ' MISSED'}")
    print()
    for key, target in (("collect_1000_files_ms", 300), ("plain_read_1000_files_ms", None),
                        ("collect_64mib_file_ms", None), ("plain_read_64mib_file_ms", None),
                        ("catalog_overview_text_ms", 50), ("catalog_overview_xml_ms", 50),
                        ("catalog_search_ms", None), ("catalog_first_load_ms", None),
                        ("catalog_rescan_unchanged_ms", None)):
        s = r[key]
        verdict = "" if target is None else (f"  <= {target} ms" + (" MET" if s["p50"] <= target else " MISSED"))
        print(f"{key:42} {s['p50']:9.1f} {s['p90']:9.1f}{verdict}")
    print(f"{'service RSS idle (MB)':42} {r['rss_idle_mb']:9.1f}  <= 120{' MET' if r['rss_idle_mb'] <= 120 else ' MISSED'}")
    print(f"{'service RSS peak, 8 x ' + r['flood_per_run'] + ' stdout (MB)':42} {r['rss_flood_peak_mb']:9.1f}  <= 300"
          f"{' MET' if r['rss_flood_peak_mb'] <= 300 else ' MISSED'}")
    report_oci_runtimes(r["oci_runtimes"])
    print(f"\nfinished in {r['seconds']} s")


def report_oci_runtimes(r: dict[str, Any]) -> None:
    if "skipped" in r:
        print(f"\ngVisor (runsc): skipped: {r['skipped']}")
        return
    runc, runsc = r["runc"], r["runsc"]
    print(f"\n{'gVisor (runsc) vs runc, p50':42} {'runc':>9} {'runsc':>9} {'ratio':>7}")
    for name, key in (("floor: create+start+wait+remove (ms)", "floor_create_start_wait_remove_ms"),
                      ("ours: HTTP run, warm pool (ms)", "http_warm_pool_ms"),
                      ("ours: HTTP run, pool 0 (ms)", "http_pool0_ms"),
                      ("ours: import pandas, warm pool (ms)", "http_warm_pool_import_pandas_ms")):
        a, b = runc[key]["p50"], runsc[key]["p50"]
        print(f"{name:42} {a:9.1f} {b:9.1f} {b / a:7.2f}")
    a, b = runc["throughput_http_c4"], runsc["throughput_http_c4"]
    print(f"{'ours: HTTP throughput at c=4 (runs/s)':42} {a:9.1f} {b:9.1f} {b / a:7.2f}")


if __name__ == "__main__":
    sys.exit(main())
