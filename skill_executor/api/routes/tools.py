"""Tools: function-tool definitions for agents and a tool-call executor.

``skill_run`` calls go through the run manager exactly like ``POST /v1/runs`` (same
authorization, validation, admission, tenant, threads) and are awaited, not waited for
in a thread; a refusal comes back as a tool error carrying the same error body.  So does
everything the model got wrong -- an unknown tool, arguments that are not a JSON object --:
an agent loop hands the result back (HTTP 200, ``is_error``, the code and message inside)
and the model tries again.  What the caller got wrong stays an HTTP error (no key, a
``format`` without the call's ``id``, a body that is no call), and so does a shutdown: 503
``shutting_down`` like ``POST /v1/runs``.

A run's result and every other tool's text fit the tool-result budget (``result_budget``,
else the settings'; a refusal's short text is as it is), shaped for the ``format`` asked
(Anthropic: image blocks; MCP: image, embedded and link blocks; OpenAI and Responses: the text).

A body may also be an OpenAI Responses ``function_call`` item as the model produced it;
its answer's ``message`` is the ``function_call_output`` item to send back.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import Discriminator, Tag

from ...access import Principal
from ...activity import Activity
from ...errors import BadRequest
from ...lifecycle.manager import RunManager
from ...runs.models import RunRequest, RunResult
from ...tools import Surface, ToolExecutor, ToolResult, definitions
from ...web.auth import principal
from ..schemas import ERRORS, FunctionCallItem, ToolCall, ToolCallResult, ToolFormat, ToolList

router = APIRouter(prefix="/v1/tools", tags=["tools"], responses=ERRORS)


@router.get(
    "", response_model=ToolList, summary="Tool definitions (JSON Schema) for skill_load/list_docs/select_docs/run"
)
def list_tools(
    request: Request,
    format: ToolFormat = Query(
        default="openai",
        description="openai: Chat Completions `tools`; openai-responses: Responses `tools` (both strict); "
        "anthropic; mcp",
    ),
    context: bool = Query(default=False, description="also the context_* tools (per-session agent context)"),
    processes: bool = Query(default=False, description="also the process_* tools (a session's long-lived processes)"),
    _: Principal = Depends(principal),
) -> ToolList:
    repository = request.app.state.executor.repository
    return ToolList(format=format, tools=definitions(repository, format, context=context, processes=processes))


def _shape(body: Any) -> str:
    """A Responses item says it is one (``type``); every other body is our call."""
    kind = body.get("type") if isinstance(body, dict) else getattr(body, "type", None)
    return "function_call" if kind == "function_call" else "call"


def _answer(result: ToolResult, call: ToolCall, activity: Activity) -> JSONResponse:
    with activity.running():  # a large answer costs CPU: housekeeping steps aside meanwhile
        body = result.to_dict()
        if call.format is not None:
            body["message"] = result.message(call.format, call.id or "")
        return JSONResponse(ToolCallResult.model_validate(body).model_dump(mode="json"))


@router.post("/call", response_model=ToolCallResult, summary="Execute one tool call; returns what to feed back")
async def call_tool(
    call: Annotated[
        Annotated[FunctionCallItem, Tag("function_call")] | Annotated[ToolCall, Tag("call")],
        Discriminator(_shape),
    ],
    request: Request,
    who: Principal = Depends(principal),
) -> JSONResponse:
    manager: RunManager = request.app.state.manager
    tools: ToolExecutor = request.app.state.tools
    body = call.as_call() if isinstance(call, FunctionCallItem) else call
    if body.format in ("anthropic", "openai", "openai-responses") and not body.id:
        raise BadRequest(
            f"a {body.format} tool-result message answers a call by its id: give the call's id",
            code="tool_call_id_missing",
        )

    async def run(run_request: RunRequest) -> RunResult:
        record, handle, _ = await manager.submit_async(run_request, principal=who)
        try:
            if run_request.session is not None:  # the agent uses this skill: its context says so
                await manager.offload(
                    request.app.state.executor.contexts.used, who.id, run_request.session, run_request.skill
                )
            final = await manager.wait(record, handle)
        finally:
            manager.answered(record)  # the run's root span ends
        return await manager.offload(manager.result, final)

    budget = body.result_budget.apply(tools.budget) if body.result_budget else tools.budget
    surface: Surface = "mcp" if body.format == "mcp" else "anthropic" if body.format == "anthropic" else "text"
    result = await tools.call_async(
        body.name,
        body.arguments,
        run=run,
        offload=run_in_threadpool,
        tenant=who.id,
        session=body.session,
        budget=budget,
        surface=surface,
    )
    return await manager.offload(_answer, result, body, request.app.state.executor.runtime.activity)
