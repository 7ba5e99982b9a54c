"""Tools: function-tool definitions for agents and a tool-call executor.

``skill_run`` calls go through the run manager exactly like ``POST /v1/runs`` (same
authorization, validation, admission, tenant) and are awaited, not waited for in a
thread; a refusal comes back as a tool error carrying the same error body.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.concurrency import run_in_threadpool

from ...access import Principal
from ...runs.manager import RunManager
from ...runs.models import RunRequest, RunResult
from ...tools import ToolExecutor, definitions
from ..auth import principal
from ..schemas import ERRORS, ToolCall, ToolCallResult, ToolList
from .runs import submit

router = APIRouter(prefix="/v1/tools", tags=["tools"], responses=ERRORS)


@router.get("", response_model=ToolList,
            summary="Tool definitions (JSON Schema) for skill_load/list_docs/select_docs/run")
def list_tools(
    request: Request,
    format: Literal["openai", "anthropic", "mcp"] = Query(default="openai"),
    _: Principal = Depends(principal),
) -> ToolList:
    return ToolList(format=format, tools=definitions(request.app.state.executor.repository, format))


@router.post("/call", response_model=ToolCallResult, summary="Execute one tool call; returns what to feed back")
async def call_tool(body: ToolCall, request: Request, who: Principal = Depends(principal)) -> ToolCallResult:
    manager: RunManager = request.app.state.manager
    tools: ToolExecutor = request.app.state.tools

    async def run(run_request: RunRequest) -> RunResult:
        record, handle, _ = await submit(request, run_request, who)
        with request.app.state.executor.runtime.activity.running():
            final = await manager.wait(record, handle)
        return manager.result(final)

    result = await tools.call_async(body.name, body.arguments, run=run, offload=run_in_threadpool)
    return ToolCallResult.model_validate(result.to_dict())
