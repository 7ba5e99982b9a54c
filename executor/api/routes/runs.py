"""Runs: skill_run (sync or async), status, live events (SSE), cancel."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse

from ...errors import ExecutorError, Forbidden
from ...runs.models import RunRequest, RunResult
from ...runs.store import FINAL, RunRecord
from ..auth import Principal, principal
from ..errors import error_response
from ..schemas import ERRORS, RunAccepted, RunRecordModel

router = APIRouter(prefix="/v1/runs", tags=["runs"], responses=ERRORS)


def _check_owner(record: RunRecord, who: Principal) -> None:
    if who.admin or record.principal in (None, who.id):
        return
    raise ExecutorError(f"no run {record.run_id!r}", code="run_not_found", status=404)


def _final_response(record: RunRecord) -> JSONResponse:
    if record.status == "failed" and record.error:
        error = dict(record.error)
        status = int(error.pop("status", 500))
        return error_response(status, error.get("code", "error"), error.get("message", ""), error.get("details"))
    return JSONResponse(record.result or {}, status_code=200)


@router.post(
    "",
    summary="skill_run: run a command of a skill",
    responses={200: {"model": RunResult, "description": "the finished run (wait=true)"},
               202: {"model": RunAccepted, "description": "accepted (wait=false)"}},
    response_model=None,
)
async def create_run(
    body: RunRequest,
    request: Request,
    wait: bool = Query(default=True, description="false: return 202 with the run id at once"),
    idempotency_key: str | None = Header(default=None, alias="Idempotency-Key", max_length=255),
    who: Principal = Depends(principal),
) -> JSONResponse:
    if any(i.from_.startswith("host://") for i in body.inputs) and not who.admin:
        raise Forbidden("host:// inputs need an admin key", code="admin_required")
    manager = request.app.state.manager
    record, handle, replayed = manager.submit(body, principal=who.id, idempotency_key=idempotency_key)
    if not wait:
        status = "queued" if record.status == "queued" else record.status
        accepted = RunAccepted(run_id=record.run_id, status=status, replayed=replayed)
        return JSONResponse(accepted.model_dump(), status_code=202, headers={"Location": f"/v1/runs/{record.run_id}"})
    # Until the answer is built, this request counts as activity: housekeeping waits.
    with request.app.state.executor.runtime.activity.running():
        final = await manager.wait(record, handle)
        response = _final_response(final)
    if replayed:
        response.headers["Idempotent-Replayed"] = "true"
    return response


@router.get("/{run_id}", response_model=RunRecordModel, summary="A run's status and, once finished, its result")
def get_run(run_id: str, request: Request, who: Principal = Depends(principal)) -> RunRecordModel:
    record = request.app.state.manager.get(run_id)
    _check_owner(record, who)
    data = record.to_dict()
    if data["error"]:
        data["error"] = {k: v for k, v in data["error"].items() if k != "status"}
    return RunRecordModel.model_validate(data)


def _sse(event: str, data: object) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


@router.get(
    "/{run_id}/events",
    summary="Stream a run's output and result as Server-Sent Events",
    responses={200: {"content": {"text/event-stream": {}},
                     "description": "events: status, stdout, stderr ({\"data\": text}), then result or error"}},
)
async def run_events(run_id: str, request: Request, who: Principal = Depends(principal)) -> StreamingResponse:
    manager = request.app.state.manager
    record = manager.get(run_id)
    _check_owner(record, who)
    handle = manager.handle(run_id)

    async def stream() -> AsyncIterator[bytes]:
        yield _sse("status", {"status": record.status})
        if handle is not None:
            async for kind, data in handle.stream():
                if kind in ("stdout", "stderr"):
                    yield _sse(kind, {"data": data})
                elif kind == "status":
                    yield _sse("status", {"status": data})
                elif kind == "error":
                    yield _sse("error", {k: v for k, v in data.items() if k != "status"})
                else:
                    yield _sse("result", data)
            return
        current = record
        while current.status not in FINAL:
            await asyncio.sleep(0.2)
            current = manager.get(run_id)
        if current.status == "failed" and current.error:
            yield _sse("error", {k: v for k, v in current.error.items() if k != "status"})
        else:
            yield _sse("result", current.result or {})

    return StreamingResponse(stream(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


@router.delete("/{run_id}", response_model=RunAccepted, status_code=202, summary="Cancel a run (kills its container)")
def cancel_run(run_id: str, request: Request, who: Principal = Depends(principal)) -> RunAccepted:
    manager = request.app.state.manager
    _check_owner(manager.get(run_id), who)
    record = manager.cancel(run_id)
    return RunAccepted(run_id=record.run_id, status=record.status)
