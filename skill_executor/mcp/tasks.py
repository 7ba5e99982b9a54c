"""The Tasks extension (SEP-2663, ``io.modelcontextprotocol/tasks``) for ``skill_run``.

On a 2026-07-28 request whose client capabilities (the request's own ``_meta``, or the
connection's) declare the extension, ``skill_run`` answers at once with a task handle
(``resultType: "task"``) instead of a result that may outlive the client's timeout; the run
goes on as any run does.  The task *is* the run: its ``taskId`` is the run id (time-ordered,
96 random bits: unguessable), its state is read from the run record on every
``tasks/get`` -- so a task survives the request, the connection, and is answered by any
API replica of a cluster -- and only the key that started it sees it (another key's run is
"not found", as over REST).

* ``tasks/get``: ``working`` while queued or running, then ``completed`` with the
  ``CallToolResult`` ``skill_run`` would have returned (``isError`` for a failed command),
  within the tool-result budget (the server's, or the one the ``tasks/get`` request's
  ``_meta["skill-executor/result_budget"]`` asks for; a stream cut to fit is kept once, as
  the run owner's artifact, so every poll names the same ref),
  ``failed`` with the JSON-RPC error for a run that ended in an error of ours, or
  ``cancelled``.  ``ttlMs`` is null: run records do not expire.
* ``tasks/cancel``: cancels the run (its container is killed); an empty acknowledgement,
  also for a run that had already ended.
* ``tasks/update``: an empty acknowledgement (a run never asks for input).
* Unknown or another key's ``taskId``: ``-32602``.  A request that does not declare the
  extension: ``-32021`` (missing required client capability).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ConfigDict

from ..access import Principal
from ..errors import Conflict, ExecutorError
from ..lifecycle.manager import RunManager
from ..lifecycle.records import RunRecord
from ..lifecycle.status import FINAL
from ..tools import ResultBudget, ToolExecutor
from .protocol import call_result, invalid_params, request_budget

TASKS = "io.modelcontextprotocol/tasks"
#: How often a client should poll ``tasks/get`` (``pollIntervalMs``).
POLL_INTERVAL_MS = 1000


class TaskParams(types.RequestParams):
    model_config = ConfigDict(extra="allow")
    taskId: str  # noqa: N815 (the wire's name)


class TaskUpdateParams(TaskParams):
    inputResponses: dict[str, Any] | None = None  # noqa: N815


def wants_tasks(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the request declares the extension (2026-07-28 only): in its own ``_meta``
    client capabilities, else in the connection's."""
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    declared = (ctx.meta or {}).get(types.CLIENT_CAPABILITIES_META_KEY)
    if isinstance(declared, dict):
        extensions = declared.get("extensions")
        return isinstance(extensions, dict) and TASKS in extensions
    capabilities = getattr(ctx.session, "client_capabilities", None)
    extensions = getattr(capabilities, "extensions", None)
    return isinstance(extensions, dict) and TASKS in extensions


def _require(ctx: ServerRequestContext[Any, Any]) -> None:
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        raise MCPError(types.METHOD_NOT_FOUND, "Method not found")
    if not wants_tasks(ctx):
        raise MCPError(
            types.MISSING_REQUIRED_CLIENT_CAPABILITY,
            f"Missing required client capability: the {TASKS} extension",
            {"requiredCapabilities": {"extensions": {TASKS: {}}}},
        )


def _iso(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).isoformat().replace("+00:00", "Z")


def task_state(record: RunRecord) -> dict[str, Any]:
    """The ``Task`` of a run (no result yet: see :func:`detailed`)."""
    if record.status == "pending_approval":  # held by the command policy: an admin decides over REST
        status, message = "working", f"run {record.run_id}: pending_approval (waits for an approval)"
    elif record.status in ("queued", "running"):
        status, message = "working", f"run {record.run_id}: {record.status}"
    elif record.status == "cancelled":
        status, message = "cancelled", f"run {record.run_id} was cancelled"
    else:
        status, message = "completed", f"run {record.run_id} has ended"
    return {
        "taskId": record.run_id,
        "status": status,
        "statusMessage": message,
        "createdAt": _iso(record.created_at),
        "lastUpdatedAt": _iso(record.updated_at),
        "ttlMs": None,
        "pollIntervalMs": POLL_INTERVAL_MS,
    }


def detailed(record: RunRecord, tools: ToolExecutor, budget: ResultBudget) -> dict[str, Any]:
    """``tasks/get``: the task, with the tool's result (or the run's error) once it ended:
    the run's result within ``budget``, as ``skill_run`` answers it."""
    state = task_state(record)
    if record.status not in FINAL or record.status == "cancelled":
        return state
    try:
        result = RunManager.result(record)
    except ExecutorError as exc:
        code = types.INTERNAL_ERROR if exc.status >= 500 else types.INVALID_PARAMS
        state.update(
            status="failed",
            statusMessage=f"run {record.run_id} failed: {exc.code}: {exc.message}",
            error={"code": code, "message": f"{exc.code}: {exc.message}"},
        )
        return state
    content = call_result(tools.result(result, budget, "mcp", record.owner))
    state["result"] = content.model_dump(mode="json", by_alias=True, exclude_none=True)
    return state


class SkillTasks:
    """The extension's methods; runs are the backend's (its manager, who is calling)."""

    def __init__(
        self,
        manager: Callable[[], RunManager],
        principal: Callable[[ServerRequestContext[Any, Any]], Principal],
        tools: Callable[[], ToolExecutor],
    ) -> None:
        self.manager = manager
        self.principal = principal
        self.tools = tools

    @staticmethod
    def created(record: RunRecord) -> dict[str, Any]:
        """The ``CreateTaskResult`` for a run just accepted."""
        return {"resultType": "task", **task_state(record)}

    def _record(self, ctx: ServerRequestContext[Any, Any], task_id: str) -> RunRecord:
        try:
            return self.manager().get(task_id, self.principal(ctx))
        except ExecutorError:
            raise invalid_params(f"Failed to retrieve task: no task {task_id[:128]!r}") from None

    async def get(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        _require(ctx)
        manager = self.manager()
        tools = self.tools()
        try:
            budget = request_budget(tools.budget, ctx.meta)
        except ExecutorError as exc:
            raise invalid_params(f"{exc.code}: {exc.message}") from None
        record = await manager.offload(self._record, ctx, params.taskId)
        return await manager.offload(detailed, record, tools, budget)

    async def update(self, ctx: ServerRequestContext[Any, Any], params: TaskUpdateParams) -> dict[str, Any]:
        _require(ctx)
        manager = self.manager()
        await manager.offload(self._record, ctx, params.taskId)
        return {}  # a run never asks for input: every response is for no outstanding request

    async def cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        _require(ctx)
        manager = self.manager()
        who = self.principal(ctx)
        await manager.offload(self._record, ctx, params.taskId)
        try:
            await manager.cancel_and_settle(params.taskId, who, 0.0)
        except Conflict:
            pass  # it ended meanwhile: cancellation is eventually consistent
        return {}
