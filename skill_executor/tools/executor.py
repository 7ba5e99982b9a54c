"""Function-tool definitions for agents, and an executor for their calls.

Four tools teach the progressive-disclosure protocol: ``skill_load`` (instructions),
``skill_list_docs`` / ``skill_select_docs`` (extra docs on demand) and ``skill_run``
(execute, never paste scripts).  Definitions come in OpenAI, Anthropic and MCP shapes;
:class:`ToolExecutor` runs a call and returns the text an agent loop feeds back.

``skill_run`` is not executed here: the executor is given a ``run`` function (the
library's runner, or the service's run manager, so a tool call is authorized,
validated and admitted exactly like ``POST /v1/runs``).  :meth:`ToolExecutor.call_async`
awaits an async ``run`` and hands everything else that costs time -- the other tools,
which read skill files, and turning arguments and results into models and text -- to an
``offload`` function (a thread pool) so an event loop never blocks.

A ``skill_run`` whose command failed -- a non-zero exit, a timeout, out of memory,
killed by a signal -- is an error for the model (``is_error``; the text starts with
``error:``), with the whole result still in it: stdout, stderr and files are what the
model needs to fix the call.  :meth:`ToolResult.message` shapes a result as each
format's tool-result message.

Bodies and docs are served with the skill-folder placeholders of published skills
(``{baseDir}``, ``${CLAUDE_SKILL_DIR}``, ``<path-to-skill>``) replaced by the folder a run
sees; doc names match ignoring case when that is unambiguous.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from ..access import LOCAL_TENANT
from ..artifacts.store import ArtifactStore
from ..context import ContextService
from ..errors import BadRequest, ExecutorError, NotFound
from ..lifecycle.outcomes import ShuttingDown
from ..processes.base import Processes
from ..registry import SkillRepository
from ..runs.models import RunRequest, RunResult
from ..skills import docs, expand_placeholders, inventory, match_path, read_file, sandbox_dir
from ..skills.model import estimate_tokens
from .arguments import bound, call_arguments, keep_outputs, refusal, run_arguments, run_request
from .budget import ResultBudget, Surface, head_tail
from .catalogue import CONTEXT_TOOLS, PROCESS_TOOLS
from .contexttools import context_tool
from .processtools import process_tool
from .results import ToolResult, kept_result

T = TypeVar("T")
#: The most of one doc a tool call returns.
DOC_MAX_BYTES = 256 * 1024
#: The progressive-disclosure tools (the context tools are CONTEXT_TOOLS).
SKILL_TOOLS = ("skill_load", "skill_list_docs", "skill_select_docs", "skill_run")
RunFunction = Callable[[RunRequest], RunResult]
AsyncRunFunction = Callable[[RunRequest], Awaitable[RunResult]]


class Offload(Protocol):
    """Runs a blocking function off the event loop (``run_in_threadpool``)."""

    def __call__(self, fn: Callable[[], T], /) -> Awaitable[T]: ...


class ToolExecutor:
    """Executes tool calls against a repository and a run function."""

    def __init__(
        self,
        repository: SkillRepository,
        run: RunFunction | None = None,
        *,
        visible_skills_dir: str | None = None,
        contexts: ContextService | None = None,
        artifacts: ArtifactStore | None = None,
        budget: ResultBudget | None = None,
        processes: Processes | None = None,
    ) -> None:
        """``visible_skills_dir``: where runs see the skills (the runtime's), for the
        placeholders in bodies and docs; None: host paths.  ``processes``: serves the
        ``process_*`` tools (None: they are unavailable).  ``contexts``: serves the
        ``context_*`` tools (None: they are unavailable).  ``artifacts``: where a run's
        stream cut to fit the result budget is kept whole (None: not kept).  ``budget``:
        the default tool-result budget (:class:`ResultBudget`'s defaults when None)."""
        self.repository = repository
        self._run = run
        self.visible_skills_dir = visible_skills_dir
        self.contexts = contexts
        self.artifacts = artifacts
        self.budget = budget or ResultBudget()
        self.processes = processes

    def call(
        self,
        name: str,
        arguments: Any,
        *,
        tenant: str = LOCAL_TENANT,
        session: str | None = None,
        budget: ResultBudget | None = None,
        surface: Surface = "text",
    ) -> ToolResult:
        """Execute one call (blocking).  Every refusal is an error result for the model:
        an unknown tool (``tool_not_found``), arguments that are not a JSON object
        (``invalid_arguments``), a refused run.

        ``tenant``: whose contexts the ``context_*`` tools reach (the caller's key), and
        whose artifacts keep what a result refers to; ``session``: the binding (the
        framework's session): every tool with a session -- ``skill_run``, ``process_*``,
        ``context_*`` -- acts in it, and arguments naming another session are refused
        (403 ``session_mismatch``).  The result fits ``budget`` (the executor's default
        when None), shaped for ``surface``."""
        budget = budget or self.budget
        parsed = call_arguments(name, arguments)
        if isinstance(parsed, ToolResult):
            return parsed
        if name == "skill_run":
            try:
                return self._skill_run(bound(name, parsed, session), budget, surface, tenant)
            except ExecutorError as exc:
                return refusal(name, exc)
        if name in PROCESS_TOOLS:
            try:
                return _fitted(process_tool(self.processes, name, bound(name, parsed, session), tenant, budget), budget)
            except ExecutorError as exc:
                return refusal(name, exc)
        return _fitted(self._call(name, parsed, tenant, session), budget)

    def _call(self, name: str, parsed: dict[str, Any], tenant: str, session: str | None) -> ToolResult:
        if name in CONTEXT_TOOLS:
            try:  # the framework's session binds; the model cannot reach another one
                return context_tool(self.contexts, name, bound(name, parsed, session), tenant)
            except ExecutorError as exc:
                return refusal(name, exc)
        handler = {
            "skill_load": self._load,
            "skill_list_docs": self._list_docs,
            "skill_select_docs": self._select_docs,
        }.get(name)
        if handler is None:  # the model's mistake: fed back, for it to call one that exists
            tools = ", ".join([*SKILL_TOOLS, *(CONTEXT_TOOLS if self.contexts is not None else ())])
            return refusal(name, NotFound(f"unknown tool {name[:80]!r}; the tools: {tools}", code="tool_not_found"))
        try:
            return handler(parsed)
        except ExecutorError as exc:
            return refusal(name, exc)

    async def call_async(
        self,
        name: str,
        arguments: Any,
        *,
        run: AsyncRunFunction,
        offload: Offload,
        tenant: str = LOCAL_TENANT,
        session: str | None = None,
        budget: ResultBudget | None = None,
        surface: Surface = "text",
    ) -> ToolResult:
        """:meth:`call` for an event loop: ``skill_run`` awaits ``run``; the other tools
        (file reads) and the parsing and rendering around a run go through ``offload``.
        A :class:`~skill_executor.lifecycle.outcomes.ShuttingDown` from ``run`` is raised, not fed
        back to the model: the call failed, the tool did not."""
        budget = budget or self.budget
        if name != "skill_run":
            return await offload(
                lambda: self.call(name, arguments, tenant=tenant, session=session, budget=budget, surface=surface)
            )
        try:
            request = await offload(lambda: run_arguments(arguments, surface, session))
            if isinstance(request, ToolResult):
                return request
            result = await run(request)
            return await offload(lambda: self.result(result, budget, surface, tenant))
        except ShuttingDown:
            raise
        except ExecutorError as exc:
            return refusal(name, exc)

    def result(self, result: RunResult, budget: ResultBudget, surface: Surface, tenant: str) -> ToolResult:
        """A run's result as a tool result within ``budget`` (a stream cut to fit is kept
        whole as ``tenant``'s artifact)."""
        return kept_result(result, budget, surface, artifacts=self.artifacts, tenant=tenant)

    def _skill(self, arguments: dict[str, Any]):  # type: ignore[no-untyped-def]
        skill = arguments.get("skill")
        if not isinstance(skill, str) or not skill:
            raise BadRequest("the 'skill' argument is required", code="invalid_arguments")
        return self.repository.get(skill)

    def _doc_texts(self, skill, arguments: dict[str, Any]) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
        available = [e.path for e in docs(inventory(skill))]
        if arguments.get("include_all_docs"):
            matches: list[tuple[str, str | None]] = [(path, None) for path in available]
        else:
            wanted = arguments.get("docs") or []
            if not isinstance(wanted, list) or not all(isinstance(d, str) for d in wanted):
                raise BadRequest("'docs' must be a list of doc paths", code="invalid_arguments")
            matches = []
            for name in wanted:
                try:
                    found = match_path(skill, name, available)
                except NotFound as exc:
                    listing = ", ".join(available) or "none"
                    raise NotFound(f"{exc.message} (available: {listing})", code=exc.code) from None
                matches.append((found.path, found.note))
        out = []
        where = sandbox_dir(skill, self.visible_skills_dir)
        for path, note in matches:
            content = read_file(skill, path, max_bytes=DOC_MAX_BYTES)
            text = expand_placeholders(content.text, where) if content.text is not None else "(binary file)"
            doc = {"path": path, "content": text, "truncated": content.truncated, "tokens": estimate_tokens(text)}
            if note:
                doc["note"] = note
            out.append(doc)
        return out

    @staticmethod
    def _doc_heading(doc: dict[str, Any]) -> str:
        return f"## Doc: {doc['path']}" + (f" ({doc['note']})" if doc.get("note") else "")

    def _load(self, arguments: dict[str, Any]) -> ToolResult:
        skill = self._skill(arguments)
        selected = self._doc_texts(skill, arguments)
        files = inventory(skill)
        body = expand_placeholders(skill.body, sandbox_dir(skill, self.visible_skills_dir))
        parts = [f"# Skill: {skill.id}", "", body]
        if files:
            parts += ["", "Files (run scripts with skill_run; read docs with skill_select_docs):"]
            parts += [f"- {f.path} ({f.size} bytes)" for f in files]
        for doc in selected:
            parts += ["", self._doc_heading(doc), "", doc["content"]]
        data = {
            "skill": skill.id,
            "version": skill.version,
            "digest": skill.digest,
            "body": body,
            "docs": selected,
            "files": [{"path": f.path, "size": f.size, "kind": f.kind} for f in files],
        }
        return ToolResult("skill_load", "\n".join(parts), False, data)

    def _list_docs(self, arguments: dict[str, Any]) -> ToolResult:
        skill = self._skill(arguments)
        listed = [{"path": e.path, "size": e.size, "tokens": -(-e.size // 4)} for e in docs(inventory(skill))]
        text = "\n".join(f"- {d['path']} (~{d['tokens']} tokens)" for d in listed) or "(no docs)"
        return ToolResult("skill_list_docs", text, False, {"skill": skill.id, "docs": listed})

    def _select_docs(self, arguments: dict[str, Any]) -> ToolResult:
        skill = self._skill(arguments)
        selected = self._doc_texts(skill, arguments)
        text = "\n\n".join(f"{self._doc_heading(d)}\n\n{d['content']}" for d in selected) or "(no docs selected)"
        return ToolResult("skill_select_docs", text, False, {"skill": skill.id, "docs": selected})

    def _skill_run(self, arguments: dict[str, Any], budget: ResultBudget, surface: Surface, tenant: str) -> ToolResult:
        if self._run is None:
            raise BadRequest("skill_run is not available here", code="tool_unavailable")
        return self.result(self._run(keep_outputs(run_request(arguments), surface)), budget, surface, tenant)


def _fitted(result: ToolResult, budget: ResultBudget) -> ToolResult:
    """Any other tool's text within the budget: a long doc selection keeps head and tail."""
    total = len(result.content)

    def mark(hidden: int) -> str:
        return (
            f"[... {hidden} of {total} characters of this result cut to fit the tool-result budget; "
            "ask for fewer docs at a time]"
        )

    if total <= budget.max_chars:
        return result
    return ToolResult(
        result.name, head_tail(result.content, budget.max_chars, mark), result.is_error, result.data, result.blocks
    )
