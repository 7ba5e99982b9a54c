"""Egress approvals: the hosts runs wait to reach (a policy rule's ``egress.ask``), and the
decision on each (docs: guides/egress.md)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from ...access import Principal
from ...lifecycle import RunManager
from ...web.auth import principal
from ..schemas import ERRORS, ApprovalRequest, EgressApproval, EgressApprovalList, EgressDecided

router = APIRouter(prefix="/v1/egress", tags=["egress"], responses=ERRORS)


@router.get(
    "/approvals",
    response_model=EgressApprovalList,
    summary="The hosts runs wait to reach, held for approval by their egress rule (ask: true)",
)
async def list_egress_approvals(request: Request, who: Principal = Depends(principal)) -> EgressApprovalList:
    """The calling key's runs' held hosts; every key's for an admin key. Oldest first."""
    manager: RunManager = request.app.state.manager
    held = manager.hosts.pending(who)
    return EgressApprovalList(approvals=[EgressApproval.model_validate(h.describe()) for h in held])


@router.post(
    "/approvals/{approval_id}",
    response_model=EgressDecided,
    summary="Approve or reject a host a run waits to reach",
    responses={
        200: {
            "model": EgressDecided,
            "description": "decided: approved, the run's requests to the host go on and later runs of the "
            "key and skill reach it unasked; rejected, they get the gateway's 403",
        },
    },
)
async def decide_egress_approval(
    approval_id: str, body: ApprovalRequest, request: Request, who: Principal = Depends(principal)
) -> EgressDecided:
    """The run's own key decides unless its rule says ``approver: admin``; an admin key always
    (audited). ``approval_not_pending`` (409): decided, expired, its run ended, or not the key's."""
    manager: RunManager = request.app.state.manager
    held = await manager.offload(lambda: manager.hosts.decide(approval_id, who, body.decision, body.reason))
    return EgressDecided(approval_id=approval_id, decision=body.decision, host=held.ask.host, run_id=held.ask.run_id)
