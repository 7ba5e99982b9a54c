"""Prometheus metrics of one service instance (its own registry, no global state)."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

#: Container states always reported (0 when none), so dashboards see every series.
STATES = ("created", "running", "exited", "removing", "dead", "paused", "restarting")


class RuntimeCollector(Collector):
    """The runtime's figures (``Runtime.stats()``), read at each scrape; never raises."""

    def __init__(self, stats: Callable[[], dict[str, Any]]) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        try:
            stats = self.stats()
        except Exception as exc:  # a scrape never fails
            log.warning("metrics: runtime figures unavailable: %s", exc)
            stats = {}
        containers = stats.get("containers")
        if containers is not None:
            family = GaugeMetricFamily(
                "skill_executor_containers", "Containers of this instance by state", labels=["state"]
            )
            for state in sorted(set(STATES) | set(containers)):
                family.add_metric([state], containers.get(state, 0))
            yield family
            yield GaugeMetricFamily(
                "skill_executor_containers_alive",
                "Running containers of this instance",
                value=containers.get("running", 0),
            )
        if stats.get("engine_up") is not None:
            yield GaugeMetricFamily(
                "skill_executor_engine_up", "1 when the Docker engine answers", value=1 if stats["engine_up"] else 0
            )
        for key, text in (
            ("cleanup_backlog", "Cleanup jobs (used containers, workspaces) waiting or in progress"),
            ("cleanup_leftovers", "Leftovers found by the last reconciliation, not yet removed"),
            ("workspaces", "Workspace folders under the workspace root"),
        ):
            if key in stats:
                yield GaugeMetricFamily(f"skill_executor_{key}", text, value=stats[key])
        cleaned = stats.get("crash_cleanup")
        if cleaned is not None:
            family = GaugeMetricFamily(
                "skill_executor_crash_leftovers_removed",
                "What this start removed of a crashed predecessor's on its data dir, by kind "
                "(containers, workspaces, volumes: a mount and its loop device each)",
                labels=["kind"],
            )
            for kind, count in sorted(cleaned.items()):
                family.add_metric([kind], count)
            yield family
        workers = stats.get("workers") or {}
        failures = CounterMetricFamily(
            "skill_executor_worker_failures", "Failed steps of background workers", labels=["worker"]
        )
        restarts = CounterMetricFamily(
            "skill_executor_worker_restarts", "Background workers restarted after their thread died", labels=["worker"]
        )
        for name, figures in sorted(workers.items()):
            failures.add_metric([name], figures.failures)
            restarts.add_metric([name], figures.restarts)
        yield failures
        yield restarts
        claims = stats.get("sandbox_claims")
        if claims is not None:
            yield from _claim_families(claims)


def _claim_families(claims: dict[str, Any]) -> Iterator[Metric]:
    """The agent-sandbox runtime's claims (:meth:`ClaimFigures.snapshot`)."""
    seconds = HistogramMetricFamily(
        "skill_executor_sandbox_claim_seconds", "Time to claim a sandbox pod, by tier", labels=["tier"]
    )
    for tier, figures in sorted(claims["claim_seconds"].items()):
        buckets = [("+Inf" if math.isinf(le) else str(le), n) for le, n in figures["buckets"]]
        seconds.add_metric([tier], buckets, figures["sum"])
    yield seconds
    waiting = GaugeMetricFamily(
        "skill_executor_sandbox_claims_waiting", "Runs waiting for a sandbox pod, by tier", labels=["tier"]
    )
    for tier, n in sorted(claims["claims_waiting"].items()):
        waiting.add_metric([tier], n)
    yield waiting
    outcomes = CounterMetricFamily(
        "skill_executor_sandbox_claims", "Sandbox pod claims by tier and outcome", labels=["tier", "outcome"]
    )
    for tier, by_outcome in sorted(claims["claims"].items()):
        for outcome, n in sorted(by_outcome.items()):
            outcomes.add_metric([tier, outcome], n)
    yield outcomes
    yield CounterMetricFamily(
        "skill_executor_sandbox_claim_release_failures",
        "Claims whose deletion failed (the claim's TTL ends them)",
        value=claims["claim_release_failures"],
    )


class ClusterCollector(Collector):
    """An API replica's view of its cluster (:func:`skill_executor.lifecycle.dispatch.view.status`), read
    at each scrape: per worker its capacity, runs, sessions and lease; the cluster's capacity
    and its runs by state. Never raises: with the database away the families are left out."""

    #: Scrapes within this many seconds share one reading (several Prometheus, a dashboard).
    FRESH_SECONDS = 1.0
    #: After a failed reading (the database away), scrapes leave the figures out this long
    #: instead of each waiting for a connection.
    BACKOFF_SECONDS = 10.0

    def __init__(self, status: Callable[[], dict[str, Any]], lease: float) -> None:
        self.status = status
        self.lease = lease
        self._lock = threading.Lock()
        self._read: tuple[float, dict[str, Any] | None] = (-math.inf, None)

    def _report(self) -> dict[str, Any] | None:
        with self._lock:  # one reading at a time
            at, report = self._read
            age = time.monotonic() - at
            if age < (self.FRESH_SECONDS if report is not None else self.BACKOFF_SECONDS):
                return report
            try:
                report = self.status()
            except Exception as exc:  # a scrape never fails
                log.warning("metrics: cluster figures unavailable: %s", exc)
                report = None
            self._read = (time.monotonic(), report)
            return report

    def collect(self) -> Iterator[Metric]:
        report = self._report()
        if report is None:
            return
        per_worker = {
            "capacity": ("skill_executor_cluster_worker_capacity", "Runs a worker executes at once"),
            "running": ("skill_executor_cluster_worker_running", "Runs executing on a worker"),
            "sessions": ("skill_executor_cluster_worker_sessions", "Sessions whose workspace a worker holds"),
            "lease_seconds_left": (
                "skill_executor_cluster_worker_lease_seconds_left",
                "Seconds until a worker's lease runs out unless renewed (negative: lost)",
            ),
        }
        for key, (name, text) in per_worker.items():
            family = GaugeMetricFamily(name, text, labels=["worker_id"])
            for worker in report["workers"]:
                family.add_metric([worker["worker_id"]], worker[key])
            yield family
        age = GaugeMetricFamily(
            "skill_executor_cluster_worker_lease_age_seconds",
            "Seconds since a worker last renewed its lease (by this replica's WORKER_LEASE_SECONDS)",
            labels=["worker_id"],
        )
        alive = GaugeMetricFamily(
            "skill_executor_cluster_worker_alive", "1 while a worker holds a live lease", labels=["worker_id"]
        )
        for worker in report["workers"]:
            age.add_metric([worker["worker_id"]], max(0.0, self.lease - worker["lease_seconds_left"]))
            alive.add_metric([worker["worker_id"]], 1 if worker["alive"] else 0)
        yield age
        yield alive
        yield GaugeMetricFamily(
            "skill_executor_cluster_workers_alive",
            "Workers holding a live lease",
            value=sum(1 for w in report["workers"] if w["alive"]),
        )
        yield GaugeMetricFamily(
            "skill_executor_cluster_capacity", "Runs the live workers execute at once", value=report["capacity"]
        )
        runs = GaugeMetricFamily("skill_executor_cluster_runs", "Runs of the cluster by state", labels=["state"])
        for state in ("queued", "running"):
            runs.add_metric([state], report[state])
        yield runs


class ProcessCollector(Collector):
    """The sessions' processes (:meth:`~skill_executor.processes.manager.ProcessManager.stats`), read at each scrape."""

    def __init__(self, stats: Callable[[], dict[str, Any]]) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        try:
            stats = self.stats()
        except Exception as exc:  # a scrape never fails
            log.warning("metrics: process figures unavailable: %s", exc)
            return
        yield GaugeMetricFamily(
            "skill_executor_processes_running", "Sessions' processes running", value=stats["running"]
        )
        yield GaugeMetricFamily(
            "skill_executor_process_sandboxes", "Sessions' sandboxes kept for their processes", value=stats["hosts"]
        )
        yield CounterMetricFamily(
            "skill_executor_processes_started", "Sessions' processes started", value=stats["started_total"]
        )
        ended = CounterMetricFamily(
            "skill_executor_processes_ended",
            "Sessions' processes ended, by reason (exited, killed, timeout, idle, session_ended, lost)",
            labels=["reason"],
        )
        for reason, count in sorted(stats["ended_total"].items()):
            ended.add_metric([reason], count)
        yield ended


class RunCollector(Collector):
    """The finished runs' figures (:class:`~skill_executor.lifecycle.figures.RunFigures`),
    read at each scrape."""

    def __init__(self, snapshot: Callable[[], dict[str, Any]]) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        figures = self.snapshot()
        runs = CounterMetricFamily("skill_executor_runs", "Finished runs by outcome", labels=["outcome"])
        for outcome, count in sorted(figures["outcomes"].items()):
            runs.add_metric([outcome], count)
        yield runs
        duration = HistogramMetricFamily("skill_executor_run_duration_seconds", "Wall-clock duration of finished runs")
        buckets = [("+Inf" if math.isinf(le) else str(le), n) for le, n in figures["duration"]["buckets"]]
        duration.add_metric([], buckets, figures["duration"]["sum"])
        yield duration
        yield CounterMetricFamily(
            "skill_executor_output_bytes_collected", "Bytes of output files returned", value=figures["output_bytes"]
        )


class EgressCollector(Collector):
    """The egress gateway's figures (:class:`~skill_executor.lifecycle.figures.EgressFigures`),
    read at each scrape."""

    def __init__(self, snapshot: Callable[[], dict[str, Any]]) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        figures = self.snapshot()
        requests = CounterMetricFamily(
            "skill_executor_egress_requests",
            "Requests through the egress gateway by decision (allowed, denied, limited) and policy rule",
            labels=["decision", "rule"],
        )
        for (decision, rule), count in sorted(figures["requests"].items()):
            requests.add_metric([decision, rule], count)
        yield requests
        sizes = CounterMetricFamily(
            "skill_executor_egress_bytes",
            "Body bytes through the egress gateway by direction (sent, received) and policy rule",
            labels=["direction", "rule"],
        )
        for (direction, rule), count in sorted(figures["bytes"].items()):
            sizes.add_metric([direction, rule], count)
        yield sizes
        approvals = CounterMetricFamily(
            "skill_executor_egress_approvals",
            "Decisions on hosts held for approval (ask): approve, reject, expire, refuse, run_ended",
            labels=["decision"],
        )
        for decision, count in sorted(figures["approvals"].items()):
            approvals.add_metric([decision], count)
        yield approvals


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._runtime: RuntimeCollector | None = None
        self._processes: ProcessCollector | None = None
        self._runs: RunCollector | None = None
        self._egress: EgressCollector | None = None
        self.queue_depth = Gauge("skill_executor_queue_depth", "Runs waiting for a slot", registry=self.registry)
        self.running = Gauge("skill_executor_runs_in_progress", "Runs holding a slot", registry=self.registry)
        self.refusals = Counter(
            "skill_executor_refusals", "Requests refused, by reason", ["reason"], registry=self.registry
        )

    def watch_runs(self, snapshot: Callable[[], dict[str, Any]]) -> None:
        """Report the finished runs' figures (:meth:`RunFigures.snapshot`, once the service exists)."""
        if self._runs is not None:
            self.registry.unregister(self._runs)
        self._runs = RunCollector(snapshot)
        self.registry.register(self._runs)

    def watch_egress(self, snapshot: Callable[[], dict[str, Any]]) -> None:
        """Report the egress gateway's figures (:meth:`EgressFigures.snapshot`)."""
        if self._egress is not None:
            self.registry.unregister(self._egress)
        self._egress = EgressCollector(snapshot)
        self.registry.register(self._egress)

    def watch_cluster(self, status: Callable[[], dict[str, Any]], lease: float) -> None:
        """Report the cluster's figures (an API replica)."""
        self.registry.register(ClusterCollector(status, lease))

    def watch_processes(self, stats: Callable[[], dict[str, Any]]) -> None:
        """Report the sessions' processes (once the runner exists)."""
        if self._processes is not None:
            self.registry.unregister(self._processes)
        self._processes = ProcessCollector(stats)
        self.registry.register(self._processes)

    def watch_runtime(self, stats: Callable[[], dict[str, Any]]) -> None:
        """Report the runtime's figures (once the runtime exists)."""
        if self._runtime is not None:
            self.registry.unregister(self._runtime)
        self._runtime = RuntimeCollector(stats)
        self.registry.register(self._runtime)
