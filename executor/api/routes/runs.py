"""Runs: skill_run (sync or async), status, live events (SSE), cancel.

Who may do what is the run manager's (and :mod:`executor.access`'s) business; these
routes only translate.  Nothing here blocks the event loop: submitting (SQLite, the
skill catalog) runs in the thread pool, waiting for a run is awaited.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, StreamingResponse

from ...access import Principal
from ...runs.manager import RunHandle, RunManager
from ...runs.models import RunRequest, RunResult
from ...runs.store import FINAL, RunRecord
from ..auth import principal
from ..errors import error_response
from ..schemas import ERRORS, RunAccepted, RunRecordModel

router = APIRouter(prefix="/v1/runs", tags=["runs"], responses=ERRORS)


def _final_response(record: RunRecord) -> JSONResponse:
    if record.status == "failed" and record.error:
        error = dict(record.error)
        status = int(error.pop("status", 500))
        return error_response(status, error.get("code", "error"), error.get("message", ""), error.get("details"))
    return JSONResponse(record.result or {}, status_code=200)


async def submit(
    request: Request, body: RunRequest, who: Principal, idempotency_key: str | None = None
) -> tuple[RunRecord, RunHandle | None, bool]:
    """Hand a run to the manager (every front end's one way in), off the event loop."""
    manager: RunManager = request.app.state.manager
    return await run_in_threadpool(manager.submit, body, principal=who, idempotency_key=idempotency_key)


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
    manager: RunManager = request.app.state.manager
    record, handle, replayed = await submit(request, body, who, idempotency_key)
    if not wait:
        accepted = RunAccepted(run_id=record.run_id, status=record.status, replayed=replayed)
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
    record = request.app.state.manager.get(run_id, who)
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
    manager: RunManager = request.app.state.manager
    record = await run_in_threadpool(manager.get, run_id, who, action="run.events")
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
            current = await run_in_threadpool(manager.reload, current)
        if current.status == "failed" and current.error:
            yield _sse("error", {k: v for k, v in current.error.items() if k != "status"})
        else:
            yield _sse("result", current.result or {})

    return StreamingResponse(stream(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


@router.delete("/{run_id}", response_model=RunAccepted, status_code=202, summary="Cancel a run (kills its container)")
def cancel_run(run_id: str, request: Request, who: Principal = Depends(principal)) -> RunAccepted:
    record = request.app.state.manager.cancel(run_id, who)
    return RunAccepted(run_id=record.run_id, status=record.status)
