"""Tools: function-tool definitions for agents and a tool-call executor."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Query, Request

from ...errors import ExecutorError, Forbidden
from ...runs.models import RunRequest, RunResult
from ...tools import ToolExecutor, definitions
from ..auth import Principal, principal
from ..schemas import ERRORS, ToolCall, ToolCallResult, ToolList

router = APIRouter(prefix="/v1/tools", tags=["tools"], responses=ERRORS)


@router.get("", response_model=ToolList, summary="Tool definitions (JSON Schema) for skill_load/list_docs/select_docs/run")
def list_tools(
    request: Request,
    format: Literal["openai", "anthropic", "mcp"] = Query(default="openai"),
    _: Principal = Depends(principal),
) -> ToolList:
    return ToolList(format=format, tools=definitions(request.app.state.executor.repository, format))


@router.post("/call", response_model=ToolCallResult, summary="Execute one tool call; returns what to feed back")
def call_tool(body: ToolCall, request: Request, who: Principal = Depends(principal)) -> ToolCallResult:
    manager = request.app.state.manager

    def run(run_request: RunRequest) -> RunResult:
        if any(i.from_.startswith("host://") for i in run_request.inputs) and not who.admin:
            raise Forbidden("host:// inputs need an admin key", code="admin_required")
        record, handle, _ = manager.submit(run_request, principal=who.id)
        final = handle.future.result() if handle is not None else manager.get(record.run_id)
        if final.status == "failed":
            error = final.error or {}
            raise ExecutorError(error.get("message", "run failed"), code=error.get("code", "error"),
                                status=int(error.get("status", 400)))
        return RunResult.model_validate(final.result)

    executor = ToolExecutor(request.app.state.executor.repository, run)
    return ToolCallResult.model_validate(executor.call(body.name, body.arguments).to_dict())
