"""A session's interactive processes: start, stdin, output (polled, or as Server-Sent Events),
signals, kill (:mod:`skill_executor.processes`).

The processes of ``{session}`` are the caller's own (its API key's tenant), as the session
is; an admin key may address another key's with ``?owner=<key id>`` (audited).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from ...access import Principal, resolve_tenant_audited
from ...errors import ExecutorError
from ...processes.base import MAX_POLL_BYTES, MAX_WAIT_SECONDS, Processes, ProcessView
from ...web.auth import principal
from ..schemas import ERRORS, ProcessInfo, ProcessList, ProcessOutput, ProcessSignal, ProcessStart, ProcessWrite

router = APIRouter(prefix="/v1/sessions/{session}/processes", tags=["processes"], responses=ERRORS)
#: How long one wait of the event stream lasts before it looks at the connection again.
STREAM_WAIT_SECONDS = 10.0


def _processes(request: Request) -> Processes:
    """This service's processes: executed here (a runtime without any refuses a start, 501
    ``processes_unsupported``), or, on a cluster's API replica, proxied to the worker running
    each session's (:mod:`skill_executor.processes.cluster`)."""
    processes: Processes | None = getattr(getattr(request.app.state, "service", None), "processes", None)
    if processes is None:
        raise ExecutorError("this service is not started", code="unavailable", status=503)
    return processes


def _owner() -> Any:
    return Query(default=None, max_length=64, description="admins: this key id's session (audited)")


def _tenant(who: Principal, owner: str | None, action: str, session: str) -> str:
    return resolve_tenant_audited(who, owner, action=f"process.{action}", target=session)


def _info(process: ProcessView) -> ProcessInfo:
    return ProcessInfo.model_validate(process.state())


@router.post("", status_code=201, response_model=ProcessInfo, summary="Start a process in the session's sandbox")
def start_process(
    session: str,
    body: ProcessStart,
    request: Request,
    owner: str | None = _owner(),
    who: Principal = Depends(principal),
) -> ProcessInfo:
    tenant = _tenant(who, owner, "start", session)
    process = _processes(request).start(
        tenant,
        session,
        body.command,
        env=body.env,
        cwd=body.cwd,
        pty=body.pty,
        timeout=body.timeout,
        idle_timeout=body.idle_timeout,
    )
    return _info(process)


@router.get("", response_model=ProcessList, summary="The session's processes (ended ones for a while)")
def list_processes(
    session: str, request: Request, owner: str | None = _owner(), who: Principal = Depends(principal)
) -> ProcessList:
    tenant = _tenant(who, owner, "read", session)
    return ProcessList(processes=[_info(p) for p in _processes(request).list(tenant, session)])


@router.get("/{process_id}", response_model=ProcessInfo, summary="A process's state")
def get_process(
    session: str, process_id: str, request: Request, owner: str | None = _owner(), who: Principal = Depends(principal)
) -> ProcessInfo:
    return _info(_processes(request).get(_tenant(who, owner, "read", session), session, process_id))


@router.post("/{process_id}/stdin", response_model=ProcessInfo, summary="Write to a process's stdin (and/or close it)")
def write_stdin(
    session: str,
    process_id: str,
    body: ProcessWrite,
    request: Request,
    owner: str | None = _owner(),
    who: Principal = Depends(principal),
) -> ProcessInfo:
    tenant = _tenant(who, owner, "write", session)
    return _info(_processes(request).write(tenant, session, process_id, body.data.encode(), eof=body.eof))


@router.get("/{process_id}/output", response_model=ProcessOutput, summary="A process's output past an offset")
def poll_output(
    session: str,
    process_id: str,
    request: Request,
    after: int = Query(default=0, ge=0, description="the byte offset to answer from (a poll's `next`)"),
    limit: int = Query(default=64 * 1024, ge=1, le=MAX_POLL_BYTES, description="the most bytes to answer"),
    wait: float = Query(
        default=0.0, ge=0, le=MAX_WAIT_SECONDS, description="wait up to this long for output past `after` (or the end)"
    ),
    owner: str | None = _owner(),
    who: Principal = Depends(principal),
) -> ProcessOutput:
    tenant = _tenant(who, owner, "read", session)
    polled = _processes(request).poll(tenant, session, process_id, after=after, limit=limit, wait=wait)
    return ProcessOutput.model_validate(polled, from_attributes=True)


def _sse(event: str, data: object) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


@router.get(
    "/{process_id}/events",
    summary="Stream a process's output as Server-Sent Events",
    responses={
        200: {
            "content": {"text/event-stream": {}},
            "description": 'output ({"data": text, "offset", "next", "dropped"}) as it arrives, then exit '
            '({"exit_code", "reason"}) once the process has ended; error ({"code", "message"}) when it was '
            "forgotten meanwhile (its session ended)",
        }
    },
)
async def process_events(
    session: str,
    process_id: str,
    request: Request,
    after: int = Query(default=0, ge=0, description="the byte offset to stream from"),
    owner: str | None = _owner(),
    who: Principal = Depends(principal),
) -> StreamingResponse:
    tenant = _tenant(who, owner, "read", session)
    processes = _processes(request)
    processes.get(tenant, session, process_id)  # 404 before the stream starts

    async def stream() -> AsyncIterator[bytes]:
        position = after
        while not await request.is_disconnected():
            try:
                polled = await run_in_threadpool(
                    processes.poll,
                    tenant,
                    session,
                    process_id,
                    after=position,
                    limit=MAX_POLL_BYTES,
                    wait=STREAM_WAIT_SECONDS,
                )
            except ExecutorError as exc:  # forgotten meanwhile (its session ended)
                yield _sse("error", {"code": exc.code, "message": exc.message})
                return
            if polled.next > position or polled.dropped:
                data = {"data": polled.output, "offset": polled.offset, "next": polled.next, "dropped": polled.dropped}
                yield _sse("output", data)
                position = polled.next
            if not polled.running and polled.next >= polled.total:
                yield _sse("exit", {"exit_code": polled.exit_code, "reason": polled.reason})
                return

    return StreamingResponse(
        stream(), media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )


@router.post(
    "/{process_id}/signal", response_model=ProcessInfo, summary="Send a signal to a process and what it started"
)
def signal_process(
    session: str,
    process_id: str,
    body: ProcessSignal,
    request: Request,
    owner: str | None = _owner(),
    who: Principal = Depends(principal),
) -> ProcessInfo:
    tenant = _tenant(who, owner, "signal", session)
    return _info(_processes(request).signal(tenant, session, process_id, body.signal))


@router.delete("/{process_id}", response_model=ProcessInfo, summary="Kill a process and everything it started")
def kill_process(
    session: str, process_id: str, request: Request, owner: str | None = _owner(), who: Principal = Depends(principal)
) -> ProcessInfo:
    return _info(_processes(request).kill(_tenant(who, owner, "kill", session), session, process_id))
