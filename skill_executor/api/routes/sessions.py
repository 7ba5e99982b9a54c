"""A session's network (``/v1/sessions/{session}/network``: open it, narrow it, read it;
:mod:`skill_executor.runs.sessionnet`) and its end (``DELETE /v1/sessions/{session}``).

A session is the caller's own (its API key's tenant); an admin key may address another key's
with ``?owner=<key id>`` (audited).  On a cluster's API replica these calls are refused (501
``egress_unsupported``): a session's grant lives on the worker holding the session.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query, Request

from ...access import Principal, resolve_tenant_audited
from ...errors import ExecutorError
from ...policy import network_plan
from ...runs.sessionnet import SessionNetwork
from ...runtimes.egress import EgressUnsupported
from ...web.auth import principal
from ..schemas import ERRORS, SessionEnded, SessionNetworkNarrow, SessionNetworkOpen, SessionNetworkState

router = APIRouter(prefix="/v1/sessions/{session}", tags=["sessions"], responses=ERRORS)


def _service(request: Request) -> Any:
    service = getattr(request.app.state, "service", None)
    if service is None:
        raise ExecutorError("this service is not started", code="unavailable", status=503)
    if service.role == "api":
        raise EgressUnsupported(
            "a session's network and its end are not served by a cluster's API replica yet: the session's grant "
            "lives on the worker holding the session"
        )
    return service


def _owner() -> Any:
    return Query(default=None, max_length=64, description="admins: this key id's session (audited)")


def _tenant(who: Principal, owner: str | None, action: str, session: str) -> str:
    return resolve_tenant_audited(who, owner, action=f"session.{action}", target=session)


def _state(network: SessionNetwork) -> SessionNetworkState:
    return SessionNetworkState.model_validate(network.state())


@router.put("/network", response_model=SessionNetworkState, summary="Open the session's network (install, then lock)")
def open_network(
    session: str,
    body: SessionNetworkOpen,
    request: Request,
    owner: str | None = _owner(),
    who: Principal = Depends(principal),
) -> SessionNetworkState:
    service = _service(request)
    tenant = _tenant(who, owner, "network", session)
    runner = service.executor.runner
    runner.sessions.path(session, tenant)  # a valid id (400 invalid_session)
    skill = runner.repository.get(body.skill)
    plan = network_plan(runner.policy, tenant, skill.id, body.allow)
    if plan is None:  # "allow": [] -- a session opened with nothing has nothing to narrow
        raise ExecutorError(
            "network.allow is empty: a session opened with no host has no network; leave 'allow' out for the "
            "rule's hosts, or name some",
            code="network_not_allowed",
            details={"rule": None, "host": None, "session": session},
        )
    processes = service.executor.processes
    network = runner.networks.open(tenant, session, plan, processes_without=processes.without_network(tenant, session))
    return _state(network)


@router.patch("/network", response_model=SessionNetworkState, summary="Narrow the session's network (never widen it)")
def narrow_network(
    session: str,
    body: SessionNetworkNarrow,
    request: Request,
    owner: str | None = _owner(),
    who: Principal = Depends(principal),
) -> SessionNetworkState:
    service = _service(request)
    tenant = _tenant(who, owner, "network", session)
    return _state(service.executor.runner.networks.narrow(tenant, session, body.allow))


@router.get("/network", response_model=SessionNetworkState, summary="The session's network and its requests")
def get_network(
    session: str, request: Request, owner: str | None = _owner(), who: Principal = Depends(principal)
) -> SessionNetworkState:
    service = _service(request)
    tenant = _tenant(who, owner, "read", session)
    network = service.executor.runner.networks.get(tenant, session)
    if network is None:
        raise ExecutorError(
            f"session {session!r} has no network", code="session_network_not_found", details={"session": session}
        )
    return _state(network)


@router.delete("", response_model=SessionEnded, summary="End the session: its processes, its network, its work/")
def end_session(
    session: str, request: Request, owner: str | None = _owner(), who: Principal = Depends(principal)
) -> SessionEnded:
    service = _service(request)
    tenant = _tenant(who, owner, "end", session)
    removed = service.executor.runner.sessions.end(session, tenant)
    return SessionEnded(session=session, removed=removed)
