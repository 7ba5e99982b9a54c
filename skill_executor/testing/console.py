"""What a test run prints: a live progress display (a status line on a terminal, one plain
line per case in CI logs), readable failures, the summary line. Everything untrusted is
made inert and bounded (:mod:`.logtext`): per line, per case and for the whole log."""

from __future__ import annotations

import os
import sys
import threading
from typing import TextIO

from .logtext import BoundedLog, Caps, for_log, inert
from .outcomes import Outcome, Report
from .report import describe, one_line

_MARK = {"passed": "PASS", "failed": "FAIL", "error": "ERROR", "skipped": "SKIP"}


class Console:
    """Progress while cases run; failures in full at the end."""

    def __init__(
        self, stream: TextIO | None = None, *, live: bool | None = None, total: int = 0, caps: Caps | None = None
    ) -> None:
        self.stream = stream or sys.stdout
        self.live = self.stream.isatty() and os.environ.get("TERM") != "dumb" if live is None else live
        self.total = total
        self.caps = caps or Caps()
        self.log = BoundedLog(self.stream, self.caps.log_bytes)
        self._lock = threading.Lock()
        self._running: list[str] = []
        self._done: dict[str, int] = {}

    def started(self, case_id: str) -> None:
        with self._lock:
            self._running.append(case_id)
            self._status()

    def finished(self, outcome: Outcome) -> None:
        with self._lock:
            if outcome.id in self._running:
                self._running.remove(outcome.id)
            self._done[outcome.status] = self._done.get(outcome.status, 0) + 1
            self._clear()
            extra = f" ({outcome.duration_ms} ms)" if outcome.duration_ms else ""
            reason = f": {outcome.message}" if outcome.status in ("error", "skipped") and outcome.message else ""
            if outcome.status == "failed" and outcome.failures:
                reason = f": {outcome.failures[0].message}"
            self._write(f"{_MARK[outcome.status]:5} {outcome.id}{extra}{one_line(reason)}")
            self._status()
            self.stream.flush()

    def _write(self, line: str) -> None:
        self.log.write(for_log(line, self.caps) + "\n")

    def _status(self) -> None:
        """The live line: our own \\r and erase codes around inert, cut text (terminals only)."""
        if not self.live:
            return
        done = sum(self._done.values())
        counts = ", ".join(f"{n} {s}" for s, n in self._done.items())
        running = ", ".join(self._running[:3]) + (" ..." if len(self._running) > 3 else "")
        line = f"[{done}/{self.total or '?'}] {counts}" + (f" | running: {running}" if running else "")
        width = max(20, _columns() - 1)
        self.stream.write("\r\x1b[K" + inert(line)[:width])
        self.stream.flush()

    def _clear(self) -> None:
        if self.live:
            self.stream.write("\r\x1b[K")

    def report(self, report: Report) -> None:
        with self._lock:
            self._clear()
            bad = [o for o in report.outcomes if o.status in ("failed", "error")]
            if bad:
                self.log.write("\n" + "=" * 30 + " failures " + "=" * 30 + "\n")
                for outcome in bad:
                    self.log.write(describe(outcome, self.caps) + "\n")
            graded = [o for o in report.outcomes if o.needs_grader and o.status == "skipped"]
            if graded:
                self.log.write("\nneeds a grader (not machine-checkable yet):\n")
                for outcome in graded:
                    self._write(f"  {outcome.id}")
                    for statement in outcome.needs_grader:
                        self._write(f"    - {one_line(statement, 500)}")
            over = [o for o in report.outcomes if o.over_budget]
            if over:
                self.log.write("\nover their time budget (fails only with --strict-timing):\n")
                for outcome in over:
                    self._write(f"  {outcome.id}: {outcome.over_budget}")
            golden = [(o.id, path) for o in report.outcomes for path in o.golden_updated]
            if golden:
                self.log.write("\ngolden files updated:\n")
                for case_id, path in golden:
                    self._write(f"  {path} ({case_id})")
            self.log.last(f"\n{for_log(report.summary(), self.caps)} on {for_log(report.backend, self.caps)}\n")
            self.stream.flush()


def _columns() -> int:
    try:
        return os.get_terminal_size().columns
    except OSError:
        return 100
