"""skill-executor soak benchmark: many runs through the real service, and what they leave.

    python bench/soak.py [--runs 2000] [--concurrency 8] [--pool-size 2] [--json] [--out FILE]

(or ``./scripts/bench.sh --soak [...]``). Not part of the test suite.

1. Starts ``skill-executor serve`` in a subprocess (Docker runtime, its own temporary
   data dir, a free loopback port, the image of ``SKILL_EXECUTOR_DOCKER_IMAGE``) and waits
   for ``/healthz``.
2. Warm-up: ``2 x concurrency`` runs (not counted), so the service's lazily made threads
   and keep-alive connections exist; then waits until its cleanup is done.
3. Before: this instance's managed containers by state, the workspace folders under
   ``<data>/workspaces/runs``, the service's open fds, threads and RSS.
4. Load: ``--runs`` runs of ``POST /v1/runs`` (synchronous), ``--concurrency`` at a time,
   alternating two skill-``math-tools`` commands: ``echo soak-<i>`` (stdout checked) and
   ``python3 scripts/fib.py 30 --json out/fib.json`` collected through
   ``outputs.globs`` (the file's content checked). Every 0.5 s a sampler records the
   cleanup backlog (below) and the service's ``/metrics`` gauges whose names contain
   ``cleanup_backlog``, ``containers``, ``queue_depth`` or ``in_progress``.
5. Drain: keeps sampling until the backlog is 0 (at most ``--drain-cap`` s); then the
   after counts (once the warm pool is back to its size, at most 10 s more).
6. Stops the service (SIGTERM, a graceful shutdown) and counts what it left.

This instance's containers: managed containers (label ``io.skill-executor.managed=1``)
not present before the service started that bind-mount a folder of its data dir, or
that carry an owner label (``io.skill-executor.owner``) seen on such a container --
so other services sharing the engine are never counted, whatever the label's format.

Cleanup backlog = containers of this instance that exist but are not running (exited,
dead, removing, or created more than 5 s ago: a container between create and start is
a run's or a refill's, not cleanup's) + workspace folders beyond those in use
(folders - warm pool size - runs in progress, the service's ``runs_in_progress`` gauge,
else the requests in flight; never below 0). With the service's own
``skill_executor_cleanup_backlog`` gauge present, the backlog is the larger of the two.

Exit status 1 (with the reasons) when a run failed (HTTP error, transport error,
wrong result), when containers or workspace folders were left after draining or after
shutdown, when the service's fds grew by more than ``--fd-margin``, or when the issue's
targets were missed: the backlog stayed under 50 items and drained within 10 s of the
load stopping. No latency or throughput figure decides the exit status.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import httpx

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(BENCH))

from run import Service  # noqa: E402  (bench/run.py: the service as users run it)

from skill_executor.config import Settings  # noqa: E402
from skill_executor.runtimes.docker import LABEL_MANAGED, LABEL_OWNER  # noqa: E402

#: The issue's targets (issue 11): the backlog stays under this many items ...
BACKLOG_TARGET = 50
#: ... and drains within this many seconds of the load stopping.
DRAIN_TARGET_S = 10.0
#: A container ``created`` this long ago and still not started is cleanup's, not a run's.
CREATED_GRACE_S = 5.0
#: /metrics series reported (substrings of the metric name).
METRIC_WORDS = ("cleanup_backlog", "containers", "queue_depth", "in_progress")
FIB_COUNT = 30


def percentile(samples: list[float], p: float) -> float:
    """Nearest-rank percentile (0 < p <= 100)."""
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def parse_metrics(text: str) -> dict[str, float]:
    """The Prometheus text lines whose metric name contains one of ``METRIC_WORDS``."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        name = key.split("{", 1)[0]
        if name.endswith("_created") or not any(word in name for word in METRIC_WORDS):
            continue
        try:
            out[key] = float(value)
        except ValueError:
            continue
    return out


def gauge_backlog(metrics: dict[str, float]) -> float | None:
    """The service's own cleanup backlog gauge (summed over labels), when it has one."""
    values = [v for k, v in metrics.items() if "cleanup_backlog" in k.split("{", 1)[0]]
    return sum(values) if values else None


def proc_status(pid: int) -> dict[str, float]:
    """Open fds, threads and RSS (MB) of a process."""
    status = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        status[key] = value.strip()
    return {
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
        "threads": int(status.get("Threads", "0")),
        "rss_mb": round(int(status.get("VmRSS", "0 kB").split()[0]) / 1024, 1),
    }


class Census:
    """The containers and workspace folders of one service instance."""

    def __init__(self, api: docker.APIClient, data_dir: Path, preexisting: set[str]) -> None:
        self.api = api
        self.runs_dir = data_dir / "workspaces" / "runs"
        self.prefixes = tuple({f"{data_dir}/", f"{os.path.realpath(data_dir)}/"})
        self.preexisting = preexisting
        self.owners: set[str] = set()

    def containers(self) -> list[dict[str, Any]]:
        found = []
        for c in self.api.containers(all=True, filters={"label": f"{LABEL_MANAGED}=1"}):
            if c["Id"] in self.preexisting:
                continue
            owner = (c.get("Labels") or {}).get(LABEL_OWNER, "")
            mine = any(str(m.get("Source", "")).startswith(self.prefixes) for m in c.get("Mounts") or [])
            if mine and owner:
                self.owners.add(owner)
            if mine or (owner and owner in self.owners):
                found.append(c)
        return found

    def folders(self) -> int:
        """Workspace folders (a warm container's skill copy made ahead of its run is in its folder)."""
        try:
            return len(os.listdir(self.runs_dir))
        except FileNotFoundError:
            return 0

    def count(self, now: float | None = None) -> dict[str, Any]:
        """Containers by state (and how many are cleanup's), folders."""
        now = time.time() if now is None else now
        containers = self.containers()
        states = Counter(str(c.get("State", "?")) for c in containers)
        stale = sum(
            1
            for c in containers
            if c.get("State") != "running"
            and (c.get("State") != "created" or now - c.get("Created", now) > CREATED_GRACE_S)
        )
        return {
            "containers": dict(states),
            "containers_total": len(containers),
            "containers_running": states.get("running", 0),
            "containers_backlog": stale,
            "workspaces": self.folders(),
        }

    def remove_all(self) -> int:
        """Force-remove whatever of this instance is left (after the service stopped)."""
        removed = 0
        for c in self.containers():
            try:
                self.api.remove_container(c["Id"], force=True, v=True)
                removed += 1
            except docker.errors.DockerException:
                pass
        return removed


class SoakService(Service):
    """bench/run.py's service; never left running when it fails to start."""

    def __init__(self, base: Path, **settings: Any) -> None:
        try:
            super().__init__(base, **settings)
        except BaseException:
            process = getattr(self, "process", None)
            if process is not None:
                process.kill()
                process.wait()
            raise
        self.data_dir = base / f"data-{self.port}"


@dataclass
class Load:
    """The runs: latencies, errors by kind, requests in flight."""

    http: httpx.Client
    latencies_ms: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    error_examples: dict[str, str] = field(default_factory=dict)
    in_flight: int = 0
    done: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @staticmethod
    def request(i: int) -> dict[str, Any]:
        if i % 2:
            return {"skill": "math-tools", "command": f"echo soak-{i}"}
        return {
            "skill": "math-tools",
            "command": f"python3 scripts/fib.py {FIB_COUNT} --json out/fib.json",
            "outputs": {"globs": ["out/*.json"]},
        }

    @staticmethod
    def problem(i: int, result: dict[str, Any]) -> str | None:
        """What is wrong with a 200 answer (None: the expected result)."""
        if result.get("exit_code") != 0:
            return f"run exit_code={result.get('exit_code')}"
        if i % 2:
            return None if result.get("stdout") == f"soak-{i}\n" else "run wrong stdout"
        files = [f for f in result.get("output_files") or [] if str(f.get("name", "")).endswith("fib.json")]
        if not files:
            return "run output file missing"
        try:
            values = json.loads(files[0].get("content") or "")
        except ValueError:
            return "run output file unreadable"
        return None if isinstance(values, list) and len(values) == FIB_COUNT else "run output file wrong"

    def one(self, i: int) -> None:
        with self.lock:
            self.in_flight += 1
        started = time.perf_counter()
        kind: str | None
        detail = ""
        try:
            response = self.http.post("/v1/runs", json=self.request(i), timeout=300)
            if response.status_code == 200:
                kind = self.problem(i, response.json())
                detail = response.text[:300]
            else:
                try:
                    code = response.json()["error"]["code"]
                except (ValueError, KeyError, TypeError):
                    code = "?"
                kind = f"http {response.status_code} {code}"
                detail = response.text[:300]
        except httpx.HTTPError as exc:
            kind = f"transport {type(exc).__name__}"
            detail = str(exc)[:300]
        elapsed = (time.perf_counter() - started) * 1000
        with self.lock:
            self.in_flight -= 1
            self.done += 1
            if kind is None:
                self.latencies_ms.append(elapsed)
            else:
                self.errors[kind] += 1
                self.error_examples.setdefault(kind, detail)

    def drive(self, first: int, count: int, concurrency: int) -> float:
        """Runs ``first .. first+count-1``, ``concurrency`` at a time; the seconds it took."""
        cursor = iter(range(first, first + count))
        cursor_lock = threading.Lock()

        def worker() -> None:
            while True:
                with cursor_lock:
                    i = next(cursor, None)
                if i is None:
                    return
                self.one(i)

        started = time.perf_counter()
        threads = [threading.Thread(target=worker, name=f"soak-{n}") for n in range(concurrency)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return time.perf_counter() - started


class Sampler:
    """Every ``interval`` s: the backlog and the service's gauges, until stopped."""

    def __init__(self, census: Census, url: str, load: Load, pool_size: int, interval: float) -> None:
        self.census = census
        self.http = httpx.Client(base_url=url, timeout=10)
        self.load = load
        self.pool_size = pool_size
        self.interval = interval
        self.samples: list[dict[str, Any]] = []
        self.t0 = time.monotonic()
        self.load_end: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="soak-sampler", daemon=True)

    def sample(self) -> dict[str, Any]:
        now = time.monotonic()
        try:
            metrics = parse_metrics(self.http.get("/metrics").text)
        except httpx.HTTPError:
            metrics = {}
        counts = self.census.count()
        in_progress = next((v for k, v in metrics.items() if k.startswith("skill_executor_runs_in_progress")), None)
        in_use = int(in_progress) if in_progress is not None else self.load.in_flight
        ws_backlog = max(0, counts["workspaces"] - self.pool_size - in_use)
        observed = counts["containers_backlog"] + ws_backlog
        gauge = gauge_backlog(metrics)
        sample = {
            "t": round(now - self.t0, 2),
            "phase": "load" if self.load_end is None else "drain",
            "in_flight": self.load.in_flight,
            "done": self.load.done,
            **counts,
            "workspaces_backlog": ws_backlog,
            "backlog_observed": observed,
            "backlog_gauge": gauge,
            "backlog": max(observed, int(gauge or 0)),
            "metrics": metrics,
        }
        self.samples.append(sample)
        return sample

    def start(self) -> None:
        self.t0 = time.monotonic()
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            self.sample()
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - began)))

    def stop(self) -> None:
        """Stop sampling in the background (:meth:`sample` still works until :meth:`close`)."""
        self._stop.set()
        self._thread.join()

    def close(self) -> None:
        self.http.close()


def wait_drained(sampler: Sampler, cap: float) -> float | None:
    """Sample until the backlog is 0; the seconds that took (None: not within ``cap``)."""
    started = time.monotonic()
    while True:
        s = sampler.sample()
        if s["backlog"] == 0 and s["backlog_gauge"] in (None, 0):
            return time.monotonic() - started
        if time.monotonic() - started > cap:
            return None
        time.sleep(sampler.interval)


def snapshot(census: Census, pid: int) -> dict[str, Any]:
    return {**census.count(), **proc_status(pid)}


def settle_pool(census: Census, pool_size: int, cap: float) -> None:
    """Wait (at most ``cap`` s) until exactly the warm pool is there: its containers, its folders."""
    deadline = time.monotonic() + cap
    while time.monotonic() < deadline:
        c = census.count()
        if c["containers_total"] == c["containers_running"] == pool_size and c["workspaces"] == pool_size:
            return
        time.sleep(0.25)


def progress(message: str) -> None:
    print(f"[soak] {message}", file=sys.stderr, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2000, help="runs measured (default 2000)")
    parser.add_argument("--concurrency", type=int, default=8, help="runs at a time (default 8)")
    parser.add_argument("--pool-size", type=int, default=2, help="the service's SKILL_EXECUTOR_POOL_SIZE (default 2)")
    parser.add_argument("--oci-runtime", help="the service's SKILL_EXECUTOR_DOCKER_OCI_RUNTIME (runsc: gVisor)")
    parser.add_argument(
        "--disk-cap",
        choices=("hard", "soft"),
        default="hard",
        help="the service's SKILL_EXECUTOR_DISK_CAP (default hard)",
    )
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between backlog samples (default 0.5)")
    parser.add_argument("--drain-cap", type=float, default=60.0, help="longest wait for the backlog to drain (s)")
    parser.add_argument("--fd-margin", type=int, default=10, help="fd growth tolerated before/after (default 10)")
    parser.add_argument("--json", action="store_true", help="print the JSON result instead of the table")
    parser.add_argument("--out", type=Path, help="also write the JSON result to this file")
    args = parser.parse_args()
    if args.runs < 1 or args.concurrency < 1 or args.pool_size < 0:
        parser.error("--runs and --concurrency must be >= 1, --pool-size >= 0")

    image = Settings().docker_image
    client = docker.DockerClient(base_url="unix:///var/run/docker.sock", version="auto", timeout=120)
    client.images.get(image)
    preexisting = {c["Id"] for c in client.api.containers(all=True, filters={"label": f"{LABEL_MANAGED}=1"})}
    base = Path(tempfile.mkdtemp(prefix="se-soak-"))
    settings: dict[str, Any] = {"docker_image": image, "pool_size": args.pool_size, "disk_cap": args.disk_cap}
    if args.oci_runtime:
        settings["docker_oci_runtime"] = args.oci_runtime
    began = time.monotonic()
    result: dict[str, Any] = {
        "runs": args.runs,
        "concurrency": args.concurrency,
        "pool_size": args.pool_size,
        "oci_runtime": args.oci_runtime or "engine default",
        "image": image,
        "engine": client.version().get("Version"),
        "workload": f"math-tools, alternating `echo soak-<i>` and "
        f"`python3 scripts/fib.py {FIB_COUNT} --json out/fib.json` with outputs.globs out/*.json",
    }
    progress(f"starting the service (pool size {args.pool_size}, image {image})")
    service = SoakService(base, **settings)
    census = Census(client.api, service.data_dir, preexisting)
    try:
        pid = service.process.pid
        warmup = Load(service.http)
        warmup.drive(0, 2 * args.concurrency, args.concurrency)
        if warmup.errors:
            result["warmup_errors"] = dict(warmup.errors)
            progress(f"warm-up errors: {dict(warmup.errors)}; examples: {warmup.error_examples}")
        load = Load(service.http)
        sampler = Sampler(census, service.url, load, args.pool_size, args.interval)
        result["warmup_settle_s"] = wait_drained(sampler, args.drain_cap)
        sampler.samples.clear()
        settle_pool(census, args.pool_size, 10.0)
        result["before"] = snapshot(census, pid)
        progress(f"before: {result['before']}; {args.runs} runs at concurrency {args.concurrency}")

        sampler.start()
        reporter_stop = threading.Event()

        def report_progress() -> None:
            while not reporter_stop.wait(10.0):
                last = sampler.samples[-1] if sampler.samples else {}
                progress(
                    f"{load.done}/{args.runs} runs, {sum(load.errors.values())} errors, "
                    f"backlog {last.get('backlog')} (containers {last.get('containers')}, "
                    f"folders {last.get('workspaces')}, gauge {last.get('backlog_gauge')})"
                )

        reporter = threading.Thread(target=report_progress, daemon=True)
        reporter.start()
        seconds = load.drive(2 * args.concurrency, args.runs, args.concurrency)
        reporter_stop.set()
        sampler.load_end = time.monotonic()
        progress(f"load done in {seconds:.1f} s; waiting for the backlog to drain (at most {args.drain_cap:.0f} s)")
        drained = None
        while drained is None and time.monotonic() - sampler.load_end <= args.drain_cap:
            last = sampler.samples[-1] if sampler.samples else None
            if (
                last is not None
                and last["phase"] == "drain"
                and last["backlog"] == 0
                and last["backlog_gauge"] in (None, 0)
            ):
                drained = last["t"] - (sampler.load_end - sampler.t0)
                break
            time.sleep(args.interval / 5)
        sampler.stop()
        if drained is None:  # one more look, in case the last sample came late
            last = sampler.sample()
            if last["backlog"] == 0 and last["backlog_gauge"] in (None, 0):
                drained = last["t"] - (sampler.load_end - sampler.t0)
        sampler.close()
        settle_pool(census, args.pool_size, 10.0)
        result["after"] = snapshot(census, pid)

        ok = load.latencies_ms
        result["load"] = {
            "seconds": round(seconds, 2),
            "ok": len(ok),
            "errors": sum(load.errors.values()),
            "runs_per_s": round(args.runs / seconds, 2),
            "latency_ms": {
                "p50": percentile(ok, 50),
                "p90": percentile(ok, 90),
                "p99": percentile(ok, 99),
                "max": max(ok) if ok else float("nan"),
            },
            "errors_by_kind": dict(load.errors.most_common()),
            "error_examples": load.error_examples,
        }
        result["backlog"] = summarize(sampler.samples, drained)
        result["samples"] = sampler.samples
    finally:
        service.stop()
        # What a graceful shutdown left: the containers at once, the folders too.
        time.sleep(1.0)
        left = census.count()
        result["after_shutdown"] = {
            "containers": left["containers"],
            "containers_total": left["containers_total"],
            "workspaces": left["workspaces"],
        }
        census.remove_all()
        shutil.rmtree(base, ignore_errors=True)
    result["seconds"] = round(time.monotonic() - began, 1)
    result["deltas"] = {
        k: round(result["after"][k] - result["before"][k], 1)
        for k in (
            "containers_total",
            "containers_running",
            "containers_backlog",
            "workspaces",
            "fds",
            "threads",
            "rss_mb",
        )
    }
    result["verdict"] = verdict(result, args.fd_margin)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        report(result)
        if args.out:
            print(f"\nJSON: {args.out}")
    return 0 if not result["verdict"]["failures"] else 1


def summarize(samples: list[dict[str, Any]], drained: float | None) -> dict[str, Any]:
    metric_max: dict[str, float] = {}
    for s in samples:
        for key, value in s["metrics"].items():
            metric_max[key] = max(metric_max.get(key, value), value)
    gauges = [s["backlog_gauge"] for s in samples if s["backlog_gauge"] is not None]

    def peak(key: str) -> int:
        return max((int(s[key]) for s in samples), default=0)

    return {
        "samples": len(samples),
        "max": peak("backlog"),
        "max_observed": peak("backlog_observed"),
        "max_containers": peak("containers_backlog"),
        "max_workspaces": peak("workspaces_backlog"),
        "max_gauge": max(gauges) if gauges else None,
        "max_folders": peak("workspaces"),
        "max_containers_existing": peak("containers_total"),
        "at_load_end": next((s["backlog"] for s in samples if s["phase"] == "drain"), None),
        "drain_s": None if drained is None else round(max(0.0, drained), 2),
        "metrics_max": metric_max,
        "metrics_last": samples[-1]["metrics"] if samples else {},
    }


def verdict(r: dict[str, Any], fd_margin: int) -> dict[str, Any]:
    failures = []
    load, backlog, d = r["load"], r["backlog"], r["deltas"]
    if load["errors"]:
        failures.append(f"{load['errors']} run(s) failed")
    backlog_met = backlog["max"] < BACKLOG_TARGET
    drain_met = backlog["drain_s"] is not None and backlog["drain_s"] <= DRAIN_TARGET_S
    if not backlog_met:
        failures.append(f"backlog target missed: max {backlog['max']} >= {BACKLOG_TARGET}")
    if not drain_met:
        failures.append(
            "drain target missed: "
            + ("did not drain" if backlog["drain_s"] is None else f"{backlog['drain_s']} s > {DRAIN_TARGET_S:.0f} s")
        )
    if d["containers_total"] > 0:
        failures.append(f"{d['containers_total']} container(s) left after draining")
    if d["workspaces"] > 0:
        failures.append(f"{d['workspaces']} workspace folder(s) left after draining")
    if d["fds"] > fd_margin:
        failures.append(f"the service's fds grew by {d['fds']} (> {fd_margin})")
    shutdown = r["after_shutdown"]
    if shutdown["containers_total"]:
        failures.append(f"{shutdown['containers_total']} container(s) left after shutdown: {shutdown['containers']}")
    if shutdown["workspaces"]:
        failures.append(f"{shutdown['workspaces']} workspace folder(s) left after shutdown")
    return {"backlog_target_met": backlog_met, "drain_target_met": drain_met, "failures": failures}


def report(r: dict[str, Any]) -> None:
    load, b, v = r["load"], r["backlog"], r["verdict"]
    lat = load["latency_ms"]
    print(
        f"\nsoak: {r['runs']} runs at concurrency {r['concurrency']}, pool size {r['pool_size']}, "
        f"OCI runtime {r['oci_runtime']}, engine {r['engine']}, image {r['image']}"
    )
    print(f"workload: {r['workload']}")
    print(f"\n{'load':38} {'value':>12}")
    print(f"{'wall time (s)':38} {load['seconds']:12.1f}")
    print(f"{'runs/s':38} {load['runs_per_s']:12.2f}")
    print(f"{'latency p50 / p90 / p99 (ms)':38} {lat['p50']:8.0f} / {lat['p90']:.0f} / {lat['p99']:.0f}")
    print(f"{'latency max (ms)':38} {lat['max']:12.0f}")
    print(f"{'ok / errors':38} {load['ok']:8} / {load['errors']}")
    for kind, n in load["errors_by_kind"].items():
        print(f"  {kind:36} {n:12}   e.g. {load['error_examples'][kind][:100]!r}")
    print(f"\n{'cleanup backlog':38} {'value':>12}  target")
    print(f"{'max (items)':38} {b['max']:12}  < {BACKLOG_TARGET}: {'MET' if v['backlog_target_met'] else 'MISSED'}")
    print(f"{'  max stale containers':38} {b['max_containers']:12}")
    print(f"{'  max surplus workspace folders':38} {b['max_workspaces']:12}")
    print(f"{'  max service gauge':38} {'absent' if b['max_gauge'] is None else b['max_gauge']:>12}")
    print(f"{'max containers existing / folders':38} {b['max_containers_existing']:8} / {b['max_folders']}")
    print(f"{'at load end (items)':38} {b['at_load_end'] if b['at_load_end'] is not None else '-':>12}")
    drain = "did not drain" if b["drain_s"] is None else f"{b['drain_s']:.1f}"
    print(
        f"{'drained after load end (s)':38} {drain:>12}  <= {DRAIN_TARGET_S:.0f} s: "
        f"{'MET' if v['drain_target_met'] else 'MISSED'}"
    )
    for key, value in sorted(b["metrics_max"].items()):
        print(f"  /metrics max {key:60} {value:g} (last {b['metrics_last'].get(key, float('nan')):g})")
    print(f"\n{'service / engine':38} {'before':>8} {'after':>8} {'delta':>8}")
    before, after, d = r["before"], r["after"], r["deltas"]
    for key, label in (
        ("containers_total", "containers of this instance"),
        ("containers_running", "  running"),
        ("containers_backlog", "  not running (cleanup's)"),
        ("workspaces", "workspace folders"),
        ("fds", "open fds"),
        ("threads", "threads"),
        ("rss_mb", "RSS (MB)"),
    ):
        print(f"{label:38} {before[key]:8} {after[key]:8} {d[key]:+8}")
    print(f"{'containers by state':38} {json.dumps(before['containers'])} -> {json.dumps(after['containers'])}")
    shutdown = r["after_shutdown"]
    print(f"{'left after shutdown':38} {shutdown['containers_total']} container(s), {shutdown['workspaces']} folder(s)")
    print(f"\nfinished in {r['seconds']} s: " + ("OK" if not v["failures"] else "FAILED: " + "; ".join(v["failures"])))


if __name__ == "__main__":
    sys.exit(main())
