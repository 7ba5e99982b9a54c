"""What this process's finished runs add up to (:class:`RunFigures`): counts by outcome,
durations and output bytes. The dispatch records each outcome here before any waiter gets
its answer; the metrics read a :meth:`RunFigures.snapshot` at each scrape, so nothing above
the lifecycle is called when a run ends."""

from __future__ import annotations

import bisect
import math
import threading
from typing import Any

from ..egress import EgressEvent
from .records import RunRecord

#: The upper bounds (seconds) of the run-duration histogram's buckets.
DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, math.inf)


def outcome(record: RunRecord) -> str:
    """A final record's outcome: ok, error or timeout for a completed run, else its status."""
    result = record.result or {}
    if record.status == "completed":
        return "timeout" if result.get("timed_out") else ("ok" if result.get("exit_code") == 0 else "error")
    return record.status


class RunFigures:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._outcomes: dict[str, int] = {}
        self._buckets = [0] * len(DURATION_BUCKETS)
        self._sum = 0.0
        self._bytes = 0

    def finished(self, record: RunRecord) -> None:
        """Count a run's final record."""
        result = record.result or {}
        seconds = result.get("duration_ms", 0) / 1000 if result else None
        collected = sum(f.get("size_bytes", 0) for f in result.get("output_files", [])) if result else 0
        with self._lock:
            kind = outcome(record)
            self._outcomes[kind] = self._outcomes.get(kind, 0) + 1
            if seconds is not None:
                self._buckets[bisect.bisect_left(DURATION_BUCKETS, seconds)] += 1
                self._sum += seconds
                self._bytes += collected

    def snapshot(self) -> dict[str, Any]:
        """``outcomes`` (outcome -> count), ``duration`` (cumulative ``buckets`` as (upper
        bound, count) and ``sum``), ``output_bytes``."""
        with self._lock:
            running, cumulative = 0, []
            for bound, count in zip(DURATION_BUCKETS, self._buckets, strict=True):
                running += count
                cumulative.append((bound, running))
            return {
                "outcomes": dict(self._outcomes),
                "duration": {"buckets": cumulative, "sum": self._sum},
                "output_bytes": self._bytes,
            }


class EgressFigures:
    """What this process's egress gateway saw: requests by decision and rule, body bytes by
    direction and rule, and decisions on held hosts (``ask``). Counted from the gateway's
    events (every request, also those without a run: ``rule`` is then empty)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: dict[tuple[str, str], int] = {}
        self._bytes: dict[tuple[str, str], int] = {}
        self._approvals: dict[str, int] = {}

    def count(self, event: EgressEvent) -> None:
        rule = event.rule or ""
        with self._lock:
            key = (event.decision, rule)
            self._requests[key] = self._requests.get(key, 0) + 1
            for direction, size in (("received", event.bytes), ("sent", event.request_bytes)):
                if size:
                    self._bytes[(direction, rule)] = self._bytes.get((direction, rule), 0) + size

    def approval(self, decision: str) -> None:
        """A decision on a held host: approve, reject, expire, refuse (the key's cap), run_ended."""
        with self._lock:
            self._approvals[decision] = self._approvals.get(decision, 0) + 1

    def snapshot(self) -> dict[str, Any]:
        """``requests`` ((decision, rule) -> count), ``bytes`` ((direction, rule) -> count),
        ``approvals`` (decision -> count)."""
        with self._lock:
            return {"requests": dict(self._requests), "bytes": dict(self._bytes), "approvals": dict(self._approvals)}
