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

import json
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar, cast

from pydantic import ValidationError

from ..access import LOCAL_TENANT
from ..artifacts.store import ArtifactStore
from ..context import ContextService
from ..errors import BadRequest, ExecutorError, Forbidden, NotFound
from ..registry import SkillRepository
from ..runs.manager import ShuttingDown
from ..runs.models import OutputSpec, RunRequest, RunResult
from ..runs.processes import Processes, ProcessView
from ..skills import docs, expand_placeholders, inventory, match_path, read_file, sandbox_dir
from ..skills.model import estimate_tokens
from .budget import ResultBudget, Surface, head_tail
from .catalogue import CONTEXT_TOOLS, PROCESS_TOOLS
from .neutral import MAX_GROWTH, neutralise
from .results import ToolResult, kept_result

T = TypeVar("T")
#: The most of one doc a tool call returns.
DOC_MAX_BYTES = 256 * 1024
#: The progressive-disclosure tools (the context tools are CONTEXT_TOOLS).
SKILL_TOOLS = ("skill_load", "skill_list_docs", "skill_select_docs", "skill_run")
#: The artifact names a tool's run saves its outputs under, so every ref its result prints
#: can be read (REST, MCP) and staged by a later run.
OUTPUT_TEMPLATE = "runs/{run_id}/{safe_path}"
RunFunction = Callable[[RunRequest], RunResult]
AsyncRunFunction = Callable[[RunRequest], Awaitable[RunResult]]


class Offload(Protocol):
    """Runs a blocking function off the event loop (``run_in_threadpool``)."""

    def __call__(self, fn: Callable[[], T], /) -> Awaitable[T]: ...


def _without_nulls(value: Any) -> Any:
    """``value`` with every object's null members left out: in a strict-mode call (OpenAI)
    an optional argument is there, null, when the model does not give it."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _arguments(name: str, arguments: Any) -> dict[str, Any] | ToolResult:
    """A call's arguments as a dict (nulls left out), or the error result to feed back."""
    if isinstance(arguments, str):
        try:
            arguments = cast(Any, json.loads(arguments) if arguments.strip() else {})
        except ValueError:
            return _refusal(name, BadRequest("arguments are not valid JSON", code="invalid_arguments"))
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return _refusal(name, BadRequest("arguments must be a JSON object", code="invalid_arguments"))
    return cast(dict[str, Any], _without_nulls(arguments))


def _refusal(name: str, exc: ExecutorError) -> ToolResult:
    return ToolResult(name, f"error ({exc.code}): {exc.message}", True, exc.to_dict())


def _env_pairs(env: Any) -> Any:
    """skill_run's ``env`` as a map; strict-mode definitions give it as ``{name, value}`` pairs."""
    if not isinstance(env, list):
        return env
    pairs: dict[str, Any] = {}
    for item in env:
        if not isinstance(item, dict) or set(item) != {"name", "value"}:
            raise BadRequest("invalid skill_run arguments: env: items must be {name, value}", code="invalid_arguments")
        pairs[item["name"]] = item["value"]
    return pairs


def run_request(arguments: dict[str, Any]) -> RunRequest:
    """skill_run's arguments as a :class:`RunRequest` (400 ``invalid_arguments`` if not one).
    Null members mean "not given"; ``env`` may be a list of ``{name, value}`` pairs."""
    arguments = cast(dict[str, Any], _without_nulls(arguments))
    if "env" in arguments:
        arguments = {**arguments, "env": _env_pairs(arguments["env"])}
    try:
        return RunRequest.model_validate(arguments)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise BadRequest(f"invalid skill_run arguments: {problems}", code="invalid_arguments") from None


def keep_outputs(request: RunRequest, surface: Surface) -> RunRequest:
    """A tool's run keeps what its result refers to: unless the request says otherwise
    (``outputs.save``, legacy ``save_as_artifacts``), every collected file is saved as the
    artifact ``runs/<run id>/<path>`` (:data:`OUTPUT_TEMPLATE`; characters a name cannot
    hold as ``_``), so its ``artifact://`` ref round-trips; binary outputs are read for the
    surfaces that show them (MCP blobs, MCP and Anthropic image blocks)."""
    spec = request.outputs
    if spec is None and not request.output_files:
        return request
    spec = spec or OutputSpec()
    update: dict[str, Any] = {}
    if "save" not in spec.model_fields_set and not request.save_as_artifacts:
        update["save"] = True
        if spec.name_template is None and not request.artifact_prefix:
            update["name_template"] = OUTPUT_TEMPLATE
    if "inline_binary" not in spec.model_fields_set and surface != "text":
        update["inline_binary"] = True
    return request.model_copy(update={"outputs": spec.model_copy(update=update)}) if update else request


def _run_arguments(arguments: Any, surface: Surface, session: str | None = None) -> RunRequest | ToolResult:
    """A ``skill_run`` call's request; under a binding (``session``), in the bound session
    (arguments naming another one: 403 ``session_mismatch``)."""
    parsed = _arguments("skill_run", arguments)
    if isinstance(parsed, ToolResult):
        return parsed
    return keep_outputs(run_request(bound("skill_run", parsed, session)), surface)


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
        parsed = _arguments(name, arguments)
        if isinstance(parsed, ToolResult):
            return parsed
        if name == "skill_run":
            try:
                return self._skill_run(bound(name, parsed, session), budget, surface, tenant)
            except ExecutorError as exc:
                return _refusal(name, exc)
        if name in PROCESS_TOOLS:
            try:
                return _fitted(self._process_tool(name, bound(name, parsed, session), tenant, budget), budget)
            except ExecutorError as exc:
                return _refusal(name, exc)
        return _fitted(self._call(name, parsed, tenant, session), budget)

    def _call(self, name: str, parsed: dict[str, Any], tenant: str, session: str | None) -> ToolResult:
        if name in CONTEXT_TOOLS:
            try:  # the framework's session binds; the model cannot reach another one
                return self._context_tool(name, bound(name, parsed, session), tenant)
            except ExecutorError as exc:
                return _refusal(name, exc)
        handler = {
            "skill_load": self._load,
            "skill_list_docs": self._list_docs,
            "skill_select_docs": self._select_docs,
        }.get(name)
        if handler is None:  # the model's mistake: fed back, for it to call one that exists
            tools = ", ".join([*SKILL_TOOLS, *(CONTEXT_TOOLS if self.contexts is not None else ())])
            return _refusal(name, NotFound(f"unknown tool {name[:80]!r}; the tools: {tools}", code="tool_not_found"))
        try:
            return handler(parsed)
        except ExecutorError as exc:
            return _refusal(name, exc)

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
        A :class:`~skill_executor.runs.manager.ShuttingDown` from ``run`` is raised, not fed
        back to the model: the call failed, the tool did not."""
        budget = budget or self.budget
        if name != "skill_run":
            return await offload(
                lambda: self.call(name, arguments, tenant=tenant, session=session, budget=budget, surface=surface)
            )
        try:
            request = await offload(lambda: _run_arguments(arguments, surface, session))
            if isinstance(request, ToolResult):
                return request
            result = await run(request)
            return await offload(lambda: self.result(result, budget, surface, tenant))
        except ShuttingDown:
            raise
        except ExecutorError as exc:
            return _refusal(name, exc)

    def result(self, result: RunResult, budget: ResultBudget, surface: Surface, tenant: str) -> ToolResult:
        """A run's result as a tool result within ``budget`` (a stream cut to fit is kept
        whole as ``tenant``'s artifact)."""
        return kept_result(result, budget, surface, artifacts=self.artifacts, tenant=tenant)

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

    def _process_tool(self, name: str, arguments: dict[str, Any], tenant: str, budget: ResultBudget) -> ToolResult:
        processes = self.processes
        if processes is None:
            raise BadRequest(f"{name} is not available here", code="tool_unavailable")
        allowed = {
            "process_start": {"session", "command", "pty", "timeout", "idle_timeout"},
            "process_write": {"session", "process", "data", "eof"},
            "process_poll": {"session", "process", "after", "wait"},
            "process_kill": {"session", "process", "signal"},
        }[name]
        unknown = set(arguments) - allowed
        if unknown:
            raise BadRequest(f"unknown argument(s) for {name}: {', '.join(sorted(unknown))}", code="invalid_arguments")
        session = _text_argument(arguments, "session")
        if name == "process_start":
            pty, timeout, idle = arguments.get("pty", False), arguments.get("timeout"), arguments.get("idle_timeout")
            if not isinstance(pty, bool) or not all(v is None or _is_number(v) for v in (timeout, idle)):
                raise BadRequest("'pty' must be a boolean and the timeouts numbers", code="invalid_arguments")
            started = processes.start(
                tenant, session, _text_argument(arguments, "command"), pty=pty, timeout=timeout, idle_timeout=idle
            )
            return _process_result(name, f"started process {started.id} in session {session!r}", started)
        process_id = _text_argument(arguments, "process")
        if name == "process_write":
            data, eof = arguments.get("data"), arguments.get("eof", False)
            if not isinstance(data, str) or not isinstance(eof, bool):
                raise BadRequest("'data' must be a string and 'eof' a boolean", code="invalid_arguments")
            written = processes.write(tenant, session, process_id, data.encode(), eof=eof)
            closed = " and closed its stdin" if eof else ""
            return _process_result(name, f"wrote {len(data.encode())} bytes to {process_id}{closed}", written)
        if name == "process_kill":
            signal = arguments.get("signal", "KILL")
            if not isinstance(signal, str):
                raise BadRequest("'signal' must be a string", code="invalid_arguments")
            if signal.upper().removeprefix("SIG") == "KILL":
                killed = processes.kill(tenant, session, process_id)
                return _process_result(name, f"killed {process_id} ({_ending(killed)})", killed)
            signalled = processes.signal(tenant, session, process_id, signal)
            return _process_result(name, f"sent {signal.upper()} to {process_id}", signalled)
        after, wait = arguments.get("after", 0), arguments.get("wait", 2)
        if not isinstance(after, int) or isinstance(after, bool) or after < 0 or not _is_number(wait):
            raise BadRequest("'after' must be an offset (>= 0) and 'wait' seconds", code="invalid_arguments")
        limit = max(256, budget.max_chars - 400)  # the rest is for the next poll: nothing is cut
        polled = processes.poll(tenant, session, process_id, after=after, limit=limit, wait=float(wait))
        output = neutralise(polled.output)
        if len(output) > limit:  # escapes grew it past the budget: less of it now, the rest next poll
            polled = processes.poll(tenant, session, process_id, after=after, limit=max(64, limit // MAX_GROWTH))
            output = neutralise(polled.output)
        state = "running" if polled.running else f"ended: exit code {polled.exit_code} ({polled.reason})"
        lost = f"; {polled.dropped} bytes before were dropped (the output ring is full)" if polled.dropped else ""
        more = "; more output waits: poll again" if polled.next < polled.total else ""
        empty = "" if output else "; no new output"
        status = f"[{process_id} {state}; next offset {polled.next} of {polled.total}{lost}{more}{empty}]"
        data = {
            "output": output,
            "offset": polled.offset,
            "next": polled.next,
            "total": polled.total,
            "dropped": polled.dropped,
            "running": polled.running,
            "exit_code": polled.exit_code,
            "reason": polled.reason,
        }
        # The output (neutralised: no escape is interpreted) is the content; the state is not a
        # line inside it, which the output could imitate, but the result's status and data.
        return ToolResult(name, output, False, data, status=status)

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


def _item(state: dict[str, Any], name: str) -> str:
    item = next(s for s in state["skills"] if s["name"] == name)
    version = f"version {item['version']}, " if item["version"] is not None else ""
    return f"{name} ({version}{item['tokens']} tokens)"


def bound(name: str, parsed: dict[str, Any], session: str | None) -> dict[str, Any]:
    """The arguments with the framework's session, which binds (the model cannot reach another one)."""
    if session is None:
        return parsed
    named = parsed.get("session")
    if named is not None and named != session:
        raise Forbidden(
            f"this call is bound to session {session!r}; the arguments name {str(named)[:80]!r}",
            code="session_mismatch",
        )
    return {**parsed, "session": session}


def _text_argument(arguments: dict[str, Any], key: str) -> str:
    value = arguments.get(key)
    if not isinstance(value, str) or not value:
        raise BadRequest(f"the {key!r} argument is required", code="invalid_arguments")
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def _ending(process: ProcessView) -> str:
    return "still ending" if not process.ended else f"exit code {process.exit_code}"


def _process_result(name: str, text: str, process: ProcessView) -> ToolResult:
    return ToolResult(name, text, False, process.state())
