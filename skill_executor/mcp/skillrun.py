"""``skill_run`` over MCP: submitted through the run manager like ``POST /v1/runs``; a run held
for approval asks the client's user (``elicitation/create``), and so does a host its egress rule
holds for approval (``ask``) while it runs; stdout and stderr chunks sent as progress; a cancelled
call cancels the run; a task handle at once when the client asks for tasks."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext

from ..access import Principal
from ..errors import ExecutorError
from ..lifecycle import RunHandle, RunManager
from ..lifecycle.records import RunRecord
from ..lifecycle.status import PENDING
from ..runs.models import RunRequest
from ..tools import ResultBudget, keep_outputs, run_request
from ..tools.neutral import neutralise
from .backend import McpBackend
from .protocol import call_result
from .tasks import SkillTasks, wants_tasks

T = TypeVar("T")
log = logging.getLogger(__name__)

#: How often a question about a held run checks whether the run was decided elsewhere.
ELICITATION_WATCH_SECONDS = 0.5
#: The longest reason recorded with a decision (``ApprovalRequest.reason``'s over REST).
MAX_REASON_CHARS = 1000
#: What ``elicitation/create`` asks about a run held for approval.
APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decision": {
            "type": "string",
            "title": "Decision",
            "enum": ["approve", "reject"],
            "description": "approve: the run starts; reject: it ends, nothing runs",
        },
        "reason": {"type": "string", "title": "Reason", "description": "recorded with the decision"},
    },
    "required": ["decision"],
}
#: What ``elicitation/create`` asks about a host a run waits to reach (egress ``ask``).
HOST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decision": {
            "type": "string",
            "title": "Decision",
            "enum": ["approve", "reject"],
            "description": "approve: the run (and later runs of this key and skill) may reach the host; "
            "reject: its requests there are refused",
        },
        "reason": {"type": "string", "title": "Reason", "description": "recorded with the decision"},
    },
    "required": ["decision"],
}


class SkillRun:
    """Answers ``skill_run`` calls for one server."""

    def __init__(self, backend: McpBackend) -> None:
        self.backend = backend

    async def _offload(self, fn: Callable[[], T]) -> T:
        return await anyio.to_thread.run_sync(fn)

    async def skill_run(
        self, ctx: ServerRequestContext[Any, Any], arguments: dict[str, Any], budget: ResultBudget
    ) -> types.CallToolResult | dict[str, Any]:
        manager = self.backend.manager()
        who = self.backend.principal(ctx)
        # What the result refers to is kept (artifact:// refs); binary files are read for blobs and images.
        request = await self._offload(lambda: keep_outputs(run_request(arguments), "mcp"))
        # Shielded: a cancellation during admission would leave the accepted run unowned;
        # it is delivered at the next await below, which cancels the run.
        with anyio.CancelScope(shield=True):
            record, handle, _ = await manager.submit_async(request, principal=who)
        if wants_tasks(ctx):  # a task handle at once; the run goes on, tasks/get tells (tasks.py)
            manager.answered(record)
            await self._context_used(who, request)
            return SkillTasks.created(record)
        try:
            if record.status == PENDING:  # held by the command policy: ask the user, if the client can
                record, handle = await self._elicit_approval(ctx, manager, who, record)
            return await self._answer_run(ctx, manager, who, request, record, handle, budget)
        finally:
            manager.answered(record)  # the run's root span ends

    async def _elicit_approval(
        self, ctx: ServerRequestContext[Any, Any], manager: RunManager, who: Principal, record: RunRecord
    ) -> tuple[RunRecord, RunHandle | None]:
        """A run held for approval, when the client declared elicitation and may decide (the
        rule lets the caller approve): ``elicitation/create`` asks its user, and the answer is
        the caller's decision (``via: mcp-elicitation``, audited).  Otherwise, or when the user
        dismisses the question, the run stays pending for an admin (or the timeout)."""
        capabilities = ctx.session.client_capabilities
        if capabilities is None or capabilities.elicitation is None or not ctx.session.can_send_request:
            return record, None
        request = RunRequest.model_validate(record.request)
        checked = await manager.offload(manager.held_for, record)
        decision = checked.decision
        if decision.approver == "admin" and not who.admin:
            return record, None
        programs = ", ".join(decision.programs) or "(not all known before the run)"
        message = (
            f"Run {record.run_id} of skill {checked.skill.id!r} waits for your approval "
            f"(policy rule {decision.rule!r}).\nCommand: {request.command}\nPrograms: {programs}"
        )
        answers: list[types.ElicitResult] = []
        async with anyio.create_task_group() as group:

            async def ask() -> None:
                answers.append(
                    await ctx.session.elicit_form(message, APPROVAL_SCHEMA, related_request_id=ctx.request_id)
                )
                group.cancel_scope.cancel()

            async def watch() -> None:  # decided elsewhere (an admin, the timeout, a cancel): stop asking
                while (await manager.offload(manager.reload, record)).status == PENDING:
                    await anyio.sleep(ELICITATION_WATCH_SECONDS)
                group.cancel_scope.cancel()

            group.start_soon(ask)
            group.start_soon(watch)
        if not answers:  # unanswered while the run was decided or expired: as it is now
            return await manager.offload(manager.reload, record), None
        answer = answers[0]
        content = answer.content or {}
        if answer.action == "cancel":
            return record, None
        given = content.get("reason")
        reason = given[:MAX_REASON_CHARS] if isinstance(given, str) else None  # as over REST
        verdict = "approve" if answer.action == "accept" and content.get("decision") == "approve" else "reject"
        if answer.action == "decline" and reason is None:
            reason = "declined by the user"
        try:
            return await manager.offload(
                lambda: manager.decide(record.run_id, who, verdict, reason, via="mcp-elicitation")
            )
        except ExecutorError as exc:
            if exc.code != "approval_not_pending":  # decided meanwhile (an admin, the timeout): as it is
                raise
            return await manager.offload(manager.reload, record), None

    async def _elicit_host(
        self, ctx: ServerRequestContext[Any, Any], manager: RunManager, who: Principal, record: RunRecord, approval: str
    ) -> None:
        """A host the run waits to reach (its egress rule's ``ask``), when the client declared
        elicitation and the caller may decide: its user is asked, and the answer is the caller's
        decision (``via: mcp-elicitation``, audited). Otherwise, or dismissed, it waits for a
        decision over REST (or its timeout)."""
        capabilities = ctx.session.client_capabilities
        if capabilities is None or capabilities.elicitation is None or not ctx.session.can_send_request:
            return
        try:
            held = manager.hosts.get(approval, who)
        except ExecutorError:  # decided already, or not the caller's
            return
        if held.ask.approver == "admin" and not who.admin:
            return
        message = (
            f"Run {record.run_id} of skill {record.skill!r} wants to reach {held.ask.host}, which its policy rule "
            f"{held.ask.rule!r} does not list; approved, this run and later runs of this key and skill may reach it."
        )
        answers: list[types.ElicitResult] = []
        async with anyio.create_task_group() as group:

            async def ask() -> None:
                answers.append(await ctx.session.elicit_form(message, HOST_SCHEMA, related_request_id=ctx.request_id))
                group.cancel_scope.cancel()

            async def watch() -> None:  # decided elsewhere (REST, the timeout, the run's end): stop asking
                while any(h.approval_id == approval for h in manager.hosts.pending(who)):
                    await anyio.sleep(ELICITATION_WATCH_SECONDS)
                group.cancel_scope.cancel()

            group.start_soon(ask)
            group.start_soon(watch)
        if not answers or answers[0].action == "cancel":
            return
        answer = answers[0]
        content = answer.content or {}
        given = content.get("reason")
        reason = given[:MAX_REASON_CHARS] if isinstance(given, str) else None
        verdict = "approve" if answer.action == "accept" and content.get("decision") == "approve" else "reject"
        if answer.action == "decline" and reason is None:
            reason = "declined by the user"
        try:
            await manager.offload(lambda: manager.hosts.decide(approval, who, verdict, reason, via="mcp-elicitation"))
        except ExecutorError as exc:  # decided meanwhile (approval_not_pending): as it is; the run goes on
            if exc.code != "approval_not_pending":
                log.warning("the decision on egress approval %s failed: %s", approval, exc.message)

    async def _context_used(self, who: Principal, request: RunRequest) -> None:
        contexts = self.backend.tools().contexts
        session = request.session
        if contexts is not None and session is not None:  # the agent uses this skill: its context says so
            await self._offload(lambda: contexts.used(who.id, session, request.skill))

    async def _answer_run(
        self,
        ctx: ServerRequestContext[Any, Any],
        manager: RunManager,
        who: Principal,
        request: RunRequest,
        record: RunRecord,
        handle: RunHandle | None,
        budget: ResultBudget,
    ) -> types.CallToolResult:
        await self._context_used(who, request)
        try:
            await anyio.lowlevel.checkpoint()
            if handle is not None:
                sent = 0
                async with anyio.create_task_group() as asking:  # questions about held hosts, meanwhile
                    async for _, kind, data in handle.stream():
                        if kind in ("stdout", "stderr"):
                            sent += 1
                            await ctx.session.report_progress(sent, message=f"{kind}: {neutralise(data)}")
                        elif kind == "status":
                            sent += 1
                            await ctx.session.report_progress(sent, message=f"run {record.run_id}: {data}")
                        elif kind == "egress" and isinstance(data, dict) and data.get("approval"):
                            asking.start_soon(self._elicit_host, ctx, manager, who, record, str(data["approval"]))
                    asking.cancel_scope.cancel()  # the run has ended: a question still open is moot
            final = await manager.wait(record, handle)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                try:
                    await manager.offload(manager.cancel, record.run_id, who)
                    if handle is not None:
                        await manager.settle(handle, 10.0)
                except ExecutorError:
                    pass
            raise
        result = await manager.offload(manager.result, final)
        tools = self.backend.tools()
        return await self._offload(lambda: call_result(tools.result(result, budget, "mcp", who.id)))
