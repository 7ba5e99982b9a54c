"""What the metrics show of a worker's claims (thread-safe; :meth:`ClaimFigures.snapshot` per scrape)."""

from __future__ import annotations

import math
import threading
from collections import Counter
from typing import Any

#: Histogram buckets of the claim seconds (a warm claim: tens of ms; an exhausted pool: up to the timeout).
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, math.inf)


class ClaimFigures:
    """Counters and a histogram for the metrics (thread-safe; :meth:`snapshot` for a scrape)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seconds: dict[str, list[int]] = {}
        self._sums: dict[str, float] = {}
        self.waiting: Counter[str] = Counter()
        self.outcomes: Counter[tuple[str, str]] = Counter()
        self.release_failures = 0

    def observe(self, tier: str, outcome: str, seconds: float) -> None:
        with self._lock:
            self.outcomes[(tier, outcome)] += 1
            counts = self._seconds.setdefault(tier, [0] * len(BUCKETS))
            counts[next(i for i, le in enumerate(BUCKETS) if seconds <= le)] += 1
            self._sums[tier] = self._sums.get(tier, 0.0) + seconds

    def wait(self, tier: str, delta: int) -> None:
        with self._lock:
            self.waiting[tier] += delta

    def release_failed(self) -> None:
        with self._lock:
            self.release_failures += 1

    def snapshot(self) -> dict[str, Any]:
        """``claim_seconds`` (tier -> cumulative ``buckets`` [(le, n)], ``sum``), ``claims_waiting``
        (tier -> n), ``claims`` (tier -> outcome -> n), ``claim_release_failures``."""
        with self._lock:
            seconds = {}
            for tier, counts in self._seconds.items():
                running, cumulative = 0, []
                for le, n in zip(BUCKETS, counts, strict=True):
                    running += n
                    cumulative.append((le, running))
                seconds[tier] = {"buckets": cumulative, "sum": self._sums[tier]}
            claims: dict[str, dict[str, int]] = {}
            for (tier, outcome), n in self.outcomes.items():
                claims.setdefault(tier, {})[outcome] = n
            return {
                "claim_seconds": seconds,
                "claims_waiting": dict(self.waiting),
                "claims": claims,
                "claim_release_failures": self.release_failures,
            }
