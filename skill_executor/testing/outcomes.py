"""What a test run of skills yields: each case's :class:`Outcome` (its verdict, failures
and output tails) and the :class:`Report` over them (counts, summary, exit code), as
every report format (:mod:`.report`, :mod:`.console`) shows them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from .checks import Failure
from .diffs import tail

Status = Literal["passed", "failed", "error", "skipped"]


@dataclass(slots=True)
class Outcome:
    """One case's verdict, as every report shows it."""

    skill: str
    name: str
    source: str  # the test file (or SKILL.md / evals.json) it comes from
    status: Status
    duration_ms: int = 0
    failures: list[Failure] = field(default_factory=list)
    message: str | None = None  # why it errored or was skipped
    command: str | None = None
    exit_code: int | None = None
    stdout: str = ""  # the last Options.keep_chars characters of the stream
    stderr: str = ""
    stdout_omitted: int = 0  # characters before those, not kept
    stderr_omitted: int = 0
    files: list[str] = field(default_factory=list)
    run_id: str | None = None
    over_budget: str | None = None  # the soft duration budget, when exceeded
    golden_updated: list[str] = field(default_factory=list)
    needs_grader: list[str] = field(default_factory=list)
    infrastructure: bool = False

    @property
    def id(self) -> str:
        return f"{self.skill}::{self.name}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "skill": self.skill,
            "name": self.name,
            "source": self.source,
            "status": self.status,
            "duration_ms": self.duration_ms,
            "failures": [f.to_dict() for f in self.failures],
            "message": self.message,
            "command": self.command,
            "exit_code": self.exit_code,
            "run_id": self.run_id,
            "stdout_tail": tail(self.stdout),
            "stderr_tail": tail(self.stderr),
            "files": self.files,
            "over_budget": self.over_budget,
            "golden_updated": self.golden_updated,
            "needs_grader": self.needs_grader,
        }


@dataclass(slots=True)
class Report:
    outcomes: list[Outcome]
    backend: str
    started_at: datetime
    duration_ms: int
    deselected: int = 0

    def count(self, status: Status) -> int:
        return sum(1 for o in self.outcomes if o.status == status)

    @property
    def exit_code(self) -> int:
        """0 all passed, 1 a case failed or errored, 3 the infrastructure was missing."""
        if any(o.infrastructure for o in self.outcomes):
            return 3
        return 1 if any(o.status in ("failed", "error") for o in self.outcomes) else 0

    def summary(self) -> str:
        parts = [f"{self.count(s)} {s}" for s in ("passed", "failed", "error", "skipped") if self.count(s)]
        if self.deselected:
            parts.append(f"{self.deselected} deselected")
        over = sum(1 for o in self.outcomes if o.over_budget)
        if over:
            parts.append(f"{over} over their time budget")
        return f"{len(self.outcomes)} cases: {', '.join(parts) or 'none'} in {self.duration_ms / 1000:.1f} s"

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "started_at": self.started_at.isoformat(),
            "duration_ms": self.duration_ms,
            "summary": {s: self.count(s) for s in ("passed", "failed", "error", "skipped")}
            | {"total": len(self.outcomes), "deselected": self.deselected},
            "exit_code": self.exit_code,
            "cases": [o.to_dict() for o in self.outcomes],
        }
