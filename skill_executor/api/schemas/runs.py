"""Runs: accepted, approved or rejected, recorded and listed."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ...runs.models import RunResult
from .errors import ErrorBody


class RunAccepted(BaseModel):
    run_id: str
    status: Literal["pending_approval", "queued", "running", "completed", "failed", "cancelled"]
    replayed: bool = False


class ApprovalRequest(BaseModel):
    """``POST /v1/runs/{id}/approval``: the decision on a run held for approval."""

    model_config = ConfigDict(extra="forbid")

    decision: Literal["approve", "reject"]
    reason: str | None = Field(default=None, max_length=1000, description="recorded with the decision (audit)")


class RunRecordModel(BaseModel):
    run_id: str
    status: Literal["pending_approval", "queued", "running", "completed", "failed", "cancelled"]
    skill: str
    session: str | None = None
    created_at: float
    updated_at: float
    request: dict[str, Any]
    result: RunResult | None = None
    error: ErrorBody | None = None
    owner: str = Field(description="the key id (tenant) the run belongs to")
    trace_id: str | None = Field(
        default=None, description="the run's OpenTelemetry trace id (32 hex digits); null while tracing is off"
    )


class RunSummary(BaseModel):
    """A run in a listing: ``GET /v1/runs/{id}`` has its request and result."""

    run_id: str
    status: Literal["pending_approval", "queued", "running", "completed", "failed", "cancelled"]
    skill: str = Field(description="as the request named it (a pinned name@ref included)")
    session: str | None = None
    created_at: float = Field(description="seconds since the epoch")
    updated_at: float
    owner: str = Field(description="the key id (tenant) the run belongs to")
    trace_id: str | None = None
    error: ErrorBody | None = Field(default=None, description="what a run that ended in an error ended with")


class RunList(BaseModel):
    runs: list[RunSummary] = Field(description="newest first")
    next_cursor: str | None = Field(
        description="pass as ?cursor= for the next page (with the same filters); null: this is the last page"
    )


class EgressApproval(BaseModel):
    """A run's request to a host outside its egress rule's allow-list, held for approval (``ask``)."""

    approval_id: str
    kind: Literal["egress_host"] = "egress_host"
    run_id: str
    key: str = Field(description="the key id (tenant) of the run")
    skill: str = Field(description="the skill (bundle:<name> for an inline bundle's: never remembered)")
    rule: str = Field(description="the policy rule whose egress says ask")
    host: str
    method: str = Field(description="the first held request's method (CONNECT for a tunnel)")
    approver: Literal["caller", "admin"] = Field(description="admin: only an admin key may decide")
    created_at: float
    expires_at: float = Field(
        description="refused (403) then, unless decided (SKILL_EXECUTOR_EGRESS_ASK_TIMEOUT_SECONDS)"
    )


class EgressApprovalList(BaseModel):
    approvals: list[EgressApproval]


class EgressDecided(BaseModel):
    approval_id: str
    decision: Literal["approve", "reject"]
    host: str
    run_id: str
