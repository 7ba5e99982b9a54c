"""Prometheus metrics of one service instance (its own registry, no global state)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.runs = Counter(
            "skill_executor_runs", "Finished runs by outcome", ["outcome"], registry=self.registry
        )
        self.duration = Histogram(
            "skill_executor_run_duration_seconds",
            "Wall-clock duration of finished runs",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900),
            registry=self.registry,
        )
        self.queue_depth = Gauge("skill_executor_queue_depth", "Runs waiting for a slot", registry=self.registry)
        self.running = Gauge("skill_executor_runs_in_progress", "Runs holding a slot", registry=self.registry)
        self.containers = Gauge(
            "skill_executor_containers_alive", "Run containers of this instance that exist now", registry=self.registry
        )
        self.bytes_collected = Counter(
            "skill_executor_output_bytes_collected", "Bytes of output files returned", registry=self.registry
        )
        self.refusals = Counter(
            "skill_executor_refusals", "Requests refused, by reason", ["reason"], registry=self.registry
        )
