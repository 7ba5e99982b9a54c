"""Runs: skill_run (sync or async), status, live events (SSE), cancel.

Who may do what is the run manager's (and :mod:`skill_executor.access`'s) business; these
routes only translate.  Nothing here blocks the event loop or holds a thread of the web
server's pool while a run waits: admission (SQLite, the skill catalog) and building a
large answer run on the manager's own threads (:meth:`RunManager.offload`), waiting for
a run is awaited.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.background import BackgroundTask

from ...access import Principal
from ...activity import Activity
from ...lifecycle import RunManager
from ...lifecycle.handle import terminal
from ...lifecycle.listing import RunFilter
from ...lifecycle.records import RunRecord
from ...lifecycle.seam import StreamEvent
from ...lifecycle.status import Status
from ...runs.models import RunRequest, RunResult
from ...web.auth import principal
from ...web.problems import error_response
from ..schemas import ERRORS, ApprovalRequest, RunAccepted, RunList, RunRecordModel, RunSummary

router = APIRouter(prefix="/v1/runs", tags=["runs"], responses=ERRORS)

#: How long ``DELETE /v1/runs/{id}`` waits for the run to stop before answering 202.
CANCEL_SETTLE_SECONDS = 5.0
#: An answer with at most this much text (output, error, file contents) is built on the
#: event loop (microseconds); a larger one on the run manager's threads.
INLINE_ANSWER_CHARS = 64 * 1024
#: The longest an answer holds housekeeping back (a client that went away never takes it).
HOLD_SECONDS = 5.0


def final_response(record: RunRecord) -> JSONResponse:
    """A finished run's answer: its result, or the error it ended with (blocking for a
    large result: build it through :meth:`RunManager.offload`)."""
    kind, body = terminal(record)
    if kind == "error":
        status = int((record.error or {}).get("status", 500))
        return error_response(status, body.get("code", "error"), body.get("message", ""), body.get("details"))
    return JSONResponse(body, status_code=200)


def _small(record: RunRecord) -> bool:
    """Whether the answer for ``record`` is cheap enough to build on the event loop."""
    body = record.result or {}
    size = len(body.get("stdout") or "") + len(body.get("stderr") or "") + len(body.get("warnings") or ())
    for item in body.get("output_files") or ():
        size += len(item.get("content") or "")
    return size + len(body.get("output_files") or ()) * 512 <= INLINE_ANSWER_CHARS


def _answer(record: RunRecord, activity: Activity) -> JSONResponse:
    # Building a large answer costs CPU: housekeeping steps aside meanwhile.
    with activity.running():
        return final_response(record)


@router.post(
    "",
    summary="skill_run: run a command of a skill",
    responses={
        200: {"model": RunResult, "description": "the finished run (wait=true)"},
        202: {"model": RunAccepted, "description": "accepted (wait=false)"},
    },
    response_model=None,
)
async def create_run(
    body: RunRequest,
    request: Request,
    wait: bool = Query(default=True, description="false: return 202 with the run id at once"),
    idempotency_key: str | None = Header(default=None, alias="Idempotency-Key", max_length=255),
    who: Principal = Depends(principal),
) -> JSONResponse:
    manager: RunManager = request.app.state.manager
    activity: Activity = request.app.state.executor.runtime.activity
    # Until the answer is sent, housekeeping (refilling the pool, removing the container)
    # steps aside: on a small machine it would otherwise compete with the answer.
    hold = activity.hold() if wait else None
    record: RunRecord | None = None
    try:
        record, handle, replayed = await manager.submit_async(body, principal=who, idempotency_key=idempotency_key)
        if body.session is not None and not replayed:  # the agent uses this skill: its context says so
            await manager.offload(request.app.state.executor.contexts.used, who.id, body.session, body.skill)
        if not wait:
            accepted = RunAccepted(run_id=record.run_id, status=record.status, replayed=replayed)
            return JSONResponse(
                accepted.model_dump(), status_code=202, headers={"Location": f"/v1/runs/{record.run_id}"}
            )
        final = await manager.wait(record, handle)
        if _small(final):
            response = final_response(final)
        else:
            response = await manager.offload(_answer, final, activity)
    except BaseException:
        if hold is not None:
            hold.release()
        raise
    finally:
        if record is not None:
            manager.answered(record)  # the run's root span ends with its answer
    if replayed:
        response.headers["Idempotent-Replayed"] = "true"
    if hold is not None:
        response.background = BackgroundTask(hold.release)  # once the body is sent
        # A client gone before that skips background tasks: never hold housekeeping longer.
        asyncio.get_running_loop().call_later(HOLD_SECONDS, hold.release)
    return response


#: ``GET /v1/runs``: runs per page by default, and at most.
LIST_LIMIT = 20
LIST_LIMIT_MAX = 100


@router.get("", response_model=RunList, summary="The runs of the caller's key, newest first (cursor pages)")
def list_runs(
    request: Request,
    skill: str | None = Query(default=None, max_length=256, description="only this skill's runs (any case)"),
    status: list[Status] | None = Query(default=None, description="only runs in one of these statuses (repeatable)"),
    session: str | None = Query(default=None, max_length=128, description="only this session's runs"),
    created_after: float | None = Query(default=None, description="made at or after (seconds since the epoch)"),
    created_before: float | None = Query(default=None, description="made before (seconds since the epoch)"),
    limit: int = Query(default=LIST_LIMIT, ge=1, le=LIST_LIMIT_MAX, description="runs per page"),
    cursor: str | None = Query(default=None, max_length=512, description="next_cursor of the previous page"),
    owner: str | None = Query(default=None, max_length=64, description="admins: list this key id's runs (audited)"),
    who: Principal = Depends(principal),
) -> RunList:
    manager: RunManager = request.app.state.manager
    filters = RunFilter(
        skill=skill,
        statuses=tuple(dict.fromkeys(status or ())),
        session=session,
        created_after=created_after,
        created_before=created_before,
    )
    page, next_cursor = manager.listing(who, filters, limit=limit, cursor=cursor, owner=owner)
    summaries = []
    for item in page:
        data = item.to_dict()
        if data["error"]:
            data["error"] = {k: v for k, v in data["error"].items() if k != "status"}
        summaries.append(RunSummary.model_validate(data))
    return RunList(runs=summaries, next_cursor=next_cursor)


@router.get("/{run_id}", response_model=RunRecordModel, summary="A run's status and, once finished, its result")
def get_run(run_id: str, request: Request, who: Principal = Depends(principal)) -> RunRecordModel:
    record = request.app.state.manager.get(run_id, who)
    data = record.to_dict()
    if data["error"]:
        data["error"] = {k: v for k, v in data["error"].items() if k != "status"}
    return RunRecordModel.model_validate(data)


def _sse(event: str, data: object, event_id: int | None = None) -> bytes:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _payload(kind: str, data: object) -> object:
    if kind in ("stdout", "stderr"):
        return {"data": data}
    if kind == "status":
        return {"status": data}
    return data


def _last_event_id(value: str | None) -> int:
    """The id a reconnecting client saw last (ids are 1, 2, ...); anything else is 0."""
    text = (value or "").strip()
    return int(text) if text.isdigit() and len(text) <= 18 else 0


async def _sse_stream(events: AsyncIterator[StreamEvent]) -> AsyncIterator[bytes]:
    async for event_id, kind, data in events:
        yield _sse(kind, _payload(kind, data), event_id)


@router.get(
    "/{run_id}/events",
    summary="Stream a run's output and result as Server-Sent Events",
    responses={
        200: {
            "content": {"text/event-stream": {}},
            "description": "events, each with an id: status (queued, running, then the final one, each "
            'once), stdout, stderr ({"data": text}), egress (a request through the egress gateway: '
            "{host, method, path, status, bytes, decision, rule, reason, limit}), then result or error. "
            "A run executed again after its cluster worker was lost (its request's retry): retry "
            "({reason, attempt, retries_left}), then status queued and running again. With Last-Event-ID, "
            "only the events after that id",
        },
        204: {"description": "Last-Event-ID names the run's last event: nothing more will come"},
    },
)
async def run_events(
    run_id: str,
    request: Request,
    who: Principal = Depends(principal),
    last_event_id: str | None = Header(default=None, alias="Last-Event-ID", max_length=64),
) -> Response:
    manager: RunManager = request.app.state.manager
    after = _last_event_id(last_event_id)
    record = await manager.offload(lambda: manager.get(run_id, who, action="run.events"))
    events = await manager.offload(manager.events, record, after)
    if events is None:  # Last-Event-ID names the run's last event
        return Response(status_code=204)
    return StreamingResponse(
        _sse_stream(events),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.delete(
    "/{run_id}",
    response_model=RunAccepted,
    summary="Cancel a run (kills its container) and answer the state it ended in",
    responses={
        200: {
            "model": RunAccepted,
            "description": "the run has stopped: its final status (cancelled, or "
            "completed/failed when it ended before the cancellation)",
        },
        202: {
            "model": RunAccepted,
            "description": f"still stopping after {CANCEL_SETTLE_SECONDS:g} s: its current status (queued or running)",
        },
    },
)
async def cancel_run(run_id: str, request: Request, who: Principal = Depends(principal)) -> JSONResponse:
    manager: RunManager = request.app.state.manager
    status, final = await manager.cancel_and_settle(run_id, who, CANCEL_SETTLE_SECONDS)
    return JSONResponse(RunAccepted(run_id=run_id, status=status).model_dump(), status_code=200 if final else 202)


@router.post(
    "/{run_id}/approval",
    response_model=RunAccepted,
    summary="Approve or reject a run held for approval by the command policy (pending_approval)",
    responses={
        200: {
            "model": RunAccepted,
            "description": "decided: approved, the run is queued (then runs as any run); rejected, it has "
            "ended failed with approval_rejected",
        },
    },
)
async def decide_run(
    run_id: str, body: ApprovalRequest, request: Request, who: Principal = Depends(principal)
) -> RunAccepted:
    """An admin key decides on any key's run (audited); the run's own key too, unless its policy
    rule says ``approver: admin`` (the calling application, asking its user)."""
    manager: RunManager = request.app.state.manager
    record, _ = await manager.offload(lambda: manager.decide(run_id, who, body.decision, body.reason))
    return RunAccepted(run_id=run_id, status=record.status)
