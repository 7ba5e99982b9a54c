"""How runs end, typed: the errors a run's record keeps and gives back, and the shutdown's."""

from __future__ import annotations

from typing import Any

from ..errors import ExecutorError, Unavailable
from ..runs.models import RunResult
from .handle import terminal
from .records import RunRecord

#: The error of a run that failed inside the service (its record never stays unfinished).
INTERNAL = {"code": "internal", "message": "the run failed inside the service", "status": 500}


class ShuttingDown(Unavailable):
    """The service is shutting down: no new runs, and a run it had to cancel."""

    code = "shutting_down"


def shutdown_error(run_id: str | None = None) -> ShuttingDown:
    if run_id is None:
        return ShuttingDown("the service is shutting down; retry the request elsewhere or after it restarts")
    return ShuttingDown(
        "the service shut down before this run finished; the run was cancelled",
        details={"run_id": run_id, "status": "cancelled"},
    )


def error_body(exc: ExecutorError) -> dict[str, Any]:
    """An error as a run's record keeps it: its body plus the HTTP status a waiting client gets."""
    return {**exc.to_dict()["error"], "status": exc.status}


def not_started(run_id: str, skill: str, session: str | None, why: str) -> dict[str, Any]:
    """The result of a run that ended before anything ran (cancelled while it waited)."""
    return RunResult(run_id=run_id, skill=skill, session=session, warnings=[why]).model_dump(mode="json")


def result(record: RunRecord) -> RunResult:
    """A finished run's result, or the error it ended with raised as the
    :class:`ExecutorError` it was (``shutting_down`` as :class:`ShuttingDown`)."""
    kind, body = terminal(record)
    if kind == "error" or record.result is None:
        error = dict(record.error or {"code": "error", "message": "the run failed"})
        cls = ShuttingDown if error.get("code") == ShuttingDown.code else ExecutorError
        raise cls(
            error.get("message", "the run failed"),
            code=error.get("code", "error"),
            status=int(error.get("status", 500)),
            details=error.get("details"),
        )
    return RunResult.model_validate(body)
