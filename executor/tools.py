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

import copy
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar, cast

from pydantic import ValidationError

from .access import LOCAL_TENANT
from .context import ContextService
from .context.render import FORMATS
from .errors import BadRequest, ExecutorError, Forbidden, NotFound
from .registry import SkillRepository
from .runs.manager import ShuttingDown
from .runs.models import RunRequest, RunResult
from .skills import docs, expand_placeholders, inventory, match_path, read_file, sandbox_dir
from .skills.model import estimate_tokens

Format = Literal["openai", "anthropic", "mcp"]
#: Up to this many skills, ``skill`` parameters carry an ``enum`` of their names.
ENUM_LIMIT = 64
DOC_MAX_BYTES = 256 * 1024

_DOCS = {"type": "array", "items": {"type": "string"}, "description": "doc paths as listed by skill_list_docs"}


def _skill_param(names: list[str]) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string", "description": "the skill's name"}
    if 0 < len(names) <= ENUM_LIMIT:
        schema["enum"] = names
    return schema


def _run_schema() -> dict[str, Any]:
    """skill_run's parameters: the RunRequest JSON Schema, inlined for tool use."""
    schema = RunRequest.model_json_schema()
    defs = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                return inline(copy.deepcopy(defs[node["$ref"].rsplit("/", 1)[-1]]))
            return {k: inline(v) for k, v in node.items() if k != "title"}
        if isinstance(node, list):
            return [inline(v) for v in node]
        return node

    inlined: dict[str, Any] = inline(schema)
    return inlined


_SESSION = {"type": "string", "description": "the session id whose context this is (the framework's, as for runs)"}
_EVICT = {
    "type": "string",
    "enum": ["none", "lru", "mention"],
    "description": "when the context would overflow: none (refuse), lru (unload the least recently used "
    "first), mention (unload skills the recent messages do not mention first)",
}
_MESSAGES = {
    "type": "array",
    "items": {"type": "string"},
    "description": "the text of the last few messages (for evict: mention)",
}
_BUDGET = {
    "type": "object",
    "additionalProperties": False,
    "description": "overrides of the context budget",
    "properties": {
        "max_tokens": {"type": "integer", "minimum": 1, "maximum": 1_000_000_000},
        "skill_tokens": {"type": "integer", "minimum": 1, "maximum": 1_000_000_000},
        "doc_tokens": {"type": "integer", "minimum": 1, "maximum": 1_000_000_000},
        "high_water": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
    },
}
#: The context tools: what an agent has loaded, kept by the service per session.
CONTEXT_TOOLS = (
    "context_load",
    "context_unload",
    "context_select_docs",
    "context_list_docs",
    "context_touch",
    "context_render",
    "context_clear",
)


def _context_tools(skill: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    def obj(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {"session": _SESSION, **properties},
            "required": ["session", *required],
            "additionalProperties": False,
        }

    return [
        (
            "context_load",
            "Load a skill into your context (its instructions and file list stay there, pinned to "
            "this version, until unloaded or evicted). Refused with the numbers when it does not fit the budget.",
            obj({"skill": skill, "evict": _EVICT, "messages": _MESSAGES, "budget": _BUDGET}, ["skill"]),
        ),
        (
            "context_unload",
            "Unload a skill (and its selected docs) from your context.",
            obj({"skill": skill}, ["skill"]),
        ),
        (
            "context_select_docs",
            "Select docs of a loaded skill into your context: mode add (to the selection), "
            "replace (the selection) or clear; docs lists them, all selects every doc.",
            obj(
                {
                    "skill": skill,
                    "docs": _DOCS,
                    "all": {"type": "boolean"},
                    "mode": {"type": "string", "enum": ["add", "replace", "clear"]},
                    "evict": _EVICT,
                    "messages": _MESSAGES,
                    "budget": _BUDGET,
                },
                ["skill", "mode"],
            ),
        ),
        (
            "context_list_docs",
            "List a skill's docs with token counts and whether they are selected.",
            obj({"skill": skill}, ["skill"]),
        ),
        (
            "context_touch",
            "Mark a loaded skill as used (it is then the last to be evicted).",
            obj({"skill": skill}, ["skill"]),
        ),
        (
            "context_render",
            "Render your context: the skills overview with loaded markers, each loaded skill and its selected docs.",
            obj({"format": {"type": "string", "enum": list(FORMATS)}}, []),
        ),
        ("context_clear", "Empty your context.", obj({}, [])),
    ]


def definitions(repository: SkillRepository, fmt: Format = "openai", *, context: bool = False) -> list[dict[str, Any]]:
    """The tools in ``fmt``'s shape; ``context``: the context tools too (``context_*``)."""
    names = [s.id for s in repository.list()]
    skill = _skill_param(names)
    run = _run_schema()
    run["properties"]["skill"] = {**run["properties"]["skill"], **skill}
    tools = [
        (
            "skill_load",
            "Load a skill's full instructions (its SKILL.md body) before using it. Call this when a task "
            "matches a skill from the overview; read the instructions, then follow them. Optionally include docs.",
            {
                "type": "object",
                "properties": {"skill": skill, "docs": _DOCS, "include_all_docs": {"type": "boolean"}},
                "required": ["skill"],
                "additionalProperties": False,
            },
        ),
        (
            "skill_list_docs",
            "List the extra docs (references, guides) a skill ships, with sizes and token estimates, so you can "
            "select only the ones the task needs.",
            {"type": "object", "properties": {"skill": skill}, "required": ["skill"], "additionalProperties": False},
        ),
        (
            "skill_select_docs",
            "Read selected docs of a skill (after skill_list_docs). Prefer a few relevant docs over all of them.",
            {
                "type": "object",
                "properties": {"skill": skill, "docs": _DOCS, "include_all_docs": {"type": "boolean"}},
                "required": ["skill"],
                "additionalProperties": False,
            },
        ),
        (
            "skill_run",
            "Run a shell command of a skill in a fresh, isolated, network-less workspace, as the skill's "
            "instructions say (e.g. 'python3 scripts/x.py > out/result.txt'). Scripts run here; never paste them. "
            "The command starts in the skill's folder; write results to out/ and list them in outputs.globs "
            "(e.g. ['out/**']) to get them back. Stage files with inputs (artifact://, skill://, workspace://).",
            run,
        ),
    ]
    if context:
        tools += _context_tools(skill)
    if fmt == "openai":
        return [{"type": "function", "function": {"name": n, "description": d, "parameters": p}} for n, d, p in tools]
    if fmt == "anthropic":
        return [{"name": n, "description": d, "input_schema": p} for n, d, p in tools]
    if fmt == "mcp":
        return [{"name": n, "description": d, "inputSchema": p} for n, d, p in tools]
    raise BadRequest(f"unknown tool format {fmt!r}; use openai, anthropic or mcp", code="invalid_format")


@dataclass(slots=True)
class ToolResult:
    name: str
    content: str
    is_error: bool
    data: Any

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "content": self.content, "is_error": self.is_error, "data": self.data}

    def message(self, fmt: Format, call_id: str) -> dict[str, Any]:
        """This result as the tool-result message of ``fmt``, answering the call ``call_id``.

        Anthropic: a ``tool_result`` block with ``is_error``; MCP: a ``CallToolResult``
        with ``isError`` (``call_id`` is the JSON-RPC id's business, not the result's);
        OpenAI: a ``tool`` message -- it has no error flag, so an error is told in the
        text, which then starts with ``error:`` (every error result's does).
        """
        if fmt == "anthropic":
            return {"type": "tool_result", "tool_use_id": call_id, "content": self.content, "is_error": self.is_error}
        if fmt == "mcp":
            return {"content": [{"type": "text", "text": self.content}], "isError": self.is_error}
        if fmt == "openai":
            return {"role": "tool", "tool_call_id": call_id, "content": self.content}
        raise BadRequest(f"unknown tool format {fmt!r}; use openai, anthropic or mcp", code="invalid_format")


RunFunction = Callable[[RunRequest], RunResult]
AsyncRunFunction = Callable[[RunRequest], Awaitable[RunResult]]
T = TypeVar("T")


class Offload(Protocol):
    """Runs a blocking function off the event loop (``run_in_threadpool``)."""

    def __call__(self, fn: Callable[[], T], /) -> Awaitable[T]: ...


def _arguments(name: str, arguments: dict[str, Any] | str | None) -> dict[str, Any] | ToolResult:
    """A call's arguments as a dict, or the error result to feed back."""
    if isinstance(arguments, str):
        try:
            arguments = cast(Any, json.loads(arguments) if arguments.strip() else {})
        except ValueError:
            return ToolResult(name, "error: arguments are not valid JSON", True, None)
    arguments = arguments or {}
    if not isinstance(arguments, dict):
        return ToolResult(name, "error: arguments must be a JSON object", True, None)
    return arguments


def _refusal(name: str, exc: ExecutorError) -> ToolResult:
    return ToolResult(name, f"error ({exc.code}): {exc.message}", True, exc.to_dict())


def run_request(arguments: dict[str, Any]) -> RunRequest:
    """skill_run's arguments as a :class:`RunRequest` (400 ``invalid_arguments`` if not one)."""
    try:
        return RunRequest.model_validate(arguments)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise BadRequest(f"invalid skill_run arguments: {problems}", code="invalid_arguments") from None


def _run_arguments(arguments: dict[str, Any] | str | None) -> RunRequest | ToolResult:
    parsed = _arguments("skill_run", arguments)
    return parsed if isinstance(parsed, ToolResult) else run_request(parsed)


def failed(result: RunResult) -> bool:
    """The command did not succeed: a non-zero (or no) exit code, a timeout, out of
    memory, or killed by a signal."""
    return result.exit_code != 0 or result.timed_out or result.oom_killed or result.signal is not None


def run_result(result: RunResult) -> ToolResult:
    return ToolResult("skill_run", render_result(result), failed(result), result.model_dump(mode="json"))


class ToolExecutor:
    """Executes tool calls against a repository and a run function."""

    def __init__(
        self,
        repository: SkillRepository,
        run: RunFunction | None = None,
        *,
        visible_skills_dir: str | None = None,
        contexts: ContextService | None = None,
    ) -> None:
        """``visible_skills_dir``: where runs see the skills (the runtime's), for the
        placeholders in bodies and docs; None: host paths.  ``contexts``: serves the
        ``context_*`` tools (None: they are unavailable)."""
        self.repository = repository
        self._run = run
        self.visible_skills_dir = visible_skills_dir
        self.contexts = contexts

    def call(
        self,
        name: str,
        arguments: dict[str, Any] | str | None,
        *,
        tenant: str = LOCAL_TENANT,
        session: str | None = None,
    ) -> ToolResult:
        """Execute one call (blocking); an unknown tool raises 404 ``tool_not_found``.

        ``tenant``: whose contexts the ``context_*`` tools reach (the caller's key);
        ``session``: their session when the arguments name none (the framework's)."""
        parsed = _arguments(name, arguments)
        if isinstance(parsed, ToolResult):
            return parsed
        if name in CONTEXT_TOOLS:
            if session is not None:  # the framework's session binds; the model cannot reach another one
                named = parsed.get("session")
                if named is not None and named != session:
                    return _refusal(
                        name,
                        Forbidden(
                            f"this call is bound to session {session!r}; the arguments name {str(named)[:80]!r}",
                            code="session_mismatch",
                        ),
                    )
                parsed = {**parsed, "session": session}
            try:
                return self._context_tool(name, parsed, tenant)
            except ExecutorError as exc:
                return _refusal(name, exc)
        handler = {
            "skill_load": self._load,
            "skill_list_docs": self._list_docs,
            "skill_select_docs": self._select_docs,
            "skill_run": self._skill_run,
        }.get(name)
        if handler is None:
            raise NotFound(f"unknown tool {name!r}", code="tool_not_found")
        try:
            return handler(parsed)
        except ExecutorError as exc:
            return _refusal(name, exc)

    async def call_async(
        self,
        name: str,
        arguments: dict[str, Any] | str | None,
        *,
        run: AsyncRunFunction,
        offload: Offload,
        tenant: str = LOCAL_TENANT,
        session: str | None = None,
    ) -> ToolResult:
        """:meth:`call` for an event loop: ``skill_run`` awaits ``run``; the other tools
        (file reads) and the parsing and rendering around a run go through ``offload``.
        A :class:`~executor.runs.manager.ShuttingDown` from ``run`` is raised, not fed
        back to the model: the call failed, the tool did not."""
        if name != "skill_run":
            return await offload(lambda: self.call(name, arguments, tenant=tenant, session=session))
        try:
            request = await offload(lambda: _run_arguments(arguments))
            if isinstance(request, ToolResult):
                return request
            result = await run(request)
        except ShuttingDown:
            raise
        except ExecutorError as exc:
            return _refusal(name, exc)
        return await offload(lambda: run_result(result))

    def _context_tool(self, name: str, arguments: dict[str, Any], tenant: str) -> ToolResult:
        contexts = self.contexts
        if contexts is None:
            raise BadRequest(f"{name} is not available here", code="tool_unavailable")
        allowed = {"session", "skill", "evict", "messages", "budget", "docs", "all", "mode", "format"}
        unknown = set(arguments) - allowed
        if unknown:
            raise BadRequest(f"unknown argument(s) for {name}: {', '.join(sorted(unknown))}", code="invalid_arguments")
        session = arguments.get("session")
        if not isinstance(session, str) or not session:
            raise BadRequest("the 'session' argument is required", code="invalid_arguments")
        skill = arguments.get("skill")
        if name not in ("context_render", "context_clear") and (not isinstance(skill, str) or not skill):
            raise BadRequest("the 'skill' argument is required", code="invalid_arguments")
        messages = arguments.get("messages") or []
        if not isinstance(messages, list) or not all(isinstance(m, str) for m in messages):
            raise BadRequest("'messages' must be a list of strings", code="invalid_arguments")
        budget = arguments.get("budget")
        if budget is not None and not isinstance(budget, dict):
            raise BadRequest("'budget' must be an object", code="invalid_arguments")
        evict = arguments.get("evict") or "none"
        if not isinstance(evict, str):
            raise BadRequest("'evict' must be a string", code="invalid_arguments")
        data: dict[str, Any]
        if name == "context_load":
            data = contexts.load(tenant, session, str(skill), evict=evict, messages=messages, budget=budget)
            text = ("already loaded: " if data["already_loaded"] else "loaded ") + _item(data, data["loaded"])
        elif name == "context_unload":
            data = contexts.unload(tenant, session, str(skill))
            text = f"unloaded {data['unloaded']['skill']} ({data['unloaded']['tokens']} tokens)"
        elif name == "context_select_docs":
            docs_ = arguments.get("docs")
            if docs_ is not None and not isinstance(docs_, list):
                raise BadRequest("'docs' must be a list of doc paths", code="invalid_arguments")
            every, mode = arguments.get("all", False), arguments.get("mode", "add")
            if not isinstance(every, bool) or not isinstance(mode, str):
                raise BadRequest("'all' must be a boolean and 'mode' a string", code="invalid_arguments")
            data = contexts.select_docs(
                tenant,
                session,
                str(skill),
                docs=docs_,
                all=every,
                mode=mode,
                evict=evict,
                messages=messages,
                budget=budget,
            )
            text = (
                f"selected docs of {data['skill']}: {', '.join(data['selected']) or '(none)'}"
                + (f"; added {', '.join(data['added'])}" if data["added"] else "")
                + (f"; removed {', '.join(data['removed'])}" if data["removed"] else "")
            )
        elif name == "context_list_docs":
            data = contexts.list_docs(tenant, session, str(skill))
            text = (
                "\n".join(
                    f"- {d['name']} ({d['tokens']} tokens{', selected' if d['selected'] else ''})" for d in data["docs"]
                )
                or "(no docs)"
            )
            return ToolResult(name, text, False, data)
        elif name == "context_touch":
            data = contexts.touch(tenant, session, str(skill))
            text = f"marked {skill} as used"
        elif name == "context_render":
            fmt = arguments.get("format", "text")
            if not isinstance(fmt, str):
                raise BadRequest("'format' must be a string", code="invalid_arguments")
            data = contexts.render(tenant, session, fmt)
            content = data["content"]
            return ToolResult(name, content if isinstance(content, str) else json.dumps(content, indent=1), False, data)
        else:
            data = contexts.clear(tenant, session)
            return ToolResult(name, "context cleared" if data["cleared"] else "the context was empty", False, data)
        text += f"\ncontext: {data['total_tokens']} of {data['budget']['limit']} tokens ({data['counter']})"
        text += "".join(
            f"\nevicted: {e['skill']}{'/' + e['doc'] if e['doc'] else ''} ({e['reason']}, {e['tokens']} tokens)"
            for e in data.get("evicted", [])
        )
        return ToolResult(name, text, False, data)

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

    def _skill_run(self, arguments: dict[str, Any]) -> ToolResult:
        if self._run is None:
            raise BadRequest("skill_run is not available here", code="tool_unavailable")
        return run_result(self._run(run_request(arguments)))


def _item(state: dict[str, Any], name: str) -> str:
    item = next(s for s in state["skills"] if s["name"] == name)
    version = f"version {item['version']}, " if item["version"] is not None else ""
    return f"{name} ({version}{item['tokens']} tokens)"


def render_result(result: RunResult) -> str:
    """The run result as compact text for a model; a failed command's starts with
    ``error:`` and says how it failed (an OpenAI tool message has no error flag)."""
    if result.timed_out:
        status = f"timed out (exit code {result.exit_code})"
    elif result.oom_killed:
        status = f"out of memory (exit code {result.exit_code})"
    elif result.signal is not None:
        status = f"killed by {result.signal} (exit code {result.exit_code})"
    elif result.exit_code is None:
        status = "no exit code"
    else:
        status = f"exit code {result.exit_code}"
    lines = [f"{'error: the command failed: ' if failed(result) else ''}{status} in {result.duration_ms} ms"]
    if result.stdout:
        lines += ["stdout:", result.stdout.rstrip("\n") + (" [truncated]" if result.stdout_truncated else "")]
    if result.stderr:
        lines += ["stderr:", result.stderr.rstrip("\n") + (" [truncated]" if result.stderr_truncated else "")]
    for item in result.output_files:
        lines.append(f"file {item.name} ({item.mime_type}, {item.size_bytes} bytes, {item.ref})")
        if item.encoding == "utf-8" and item.content is not None:
            lines.append(item.content.rstrip("\n") + (" [truncated]" if item.truncated else ""))
    lines += [f"warning: {w}" for w in result.warnings]
    return "\n".join(lines)
