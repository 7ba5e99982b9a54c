"""The MCP server: skills by the Skills extension, tools that load and run them, prompts.

One :class:`McpBackend` (the executor, the run manager, who is calling) serves both
transports: stdio (``skill-executor mcp``, the local tenant) and streamable HTTP at
``/mcp`` in the service (the caller of each HTTP request, by its bearer token).

``skill_run`` goes through the :class:`~skill_executor.lifecycle.manager.RunManager` like
``POST /v1/runs`` (same authorization, validation, admission); while it runs, stdout and
stderr chunks are sent as progress notifications (when the client asked for progress);
a ``notifications/cancelled`` for the call cancels the run, which kills its container
(:mod:`.skillrun`).  The tool list is :mod:`.toollist`'s; artifacts are served by :mod:`.artifacts`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import anyio
import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    ToolsListChanged,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .. import __version__
from ..access import Principal
from ..errors import BadRequest, ExecutorError, NotFound
from ..skills import expand_placeholders, render_xml, sandbox_dir
from ..tools import (
    CONTEXT_TOOLS,
    PROCESS_TOOLS,
    ResultBudget,
    bound,
)
from .artifacts import ARTIFACT_TEMPLATE, artifact_tool, read_artifact
from .backend import McpBackend
from .catalog import CACHE_SCOPE, CACHE_TTL_MS, EXTENSION, SCHEME, SkillFiles, UnknownResource, page
from .protocol import (
    INSTRUCTIONS,
    SETTINGS,
    DirectoryParams,
    SkillsListParams,
    UriParams,
    error_result,
    internal_error,
    invalid_params,
    request_budget,
    request_session,
    resource_contents,
    text_content,
)
from .skillrun import SkillRun
from .tasks import TASKS, SkillTasks, TaskParams, TaskUpdateParams
from .toollist import tool_list

log = logging.getLogger("skill_executor.mcp")
T = TypeVar("T")


class _Server(Server[Any]):
    """The SDK's server whose default initialization options (what the HTTP session
    manager uses) are ours: resources ``listChanged``, and the Skills extension declared
    under ``experimental`` too, for 2025-11-25 clients that only read that map (see
    :func:`declare_extension` for ``capabilities.extensions``)."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(resources_changed=True),
            experimental_capabilities or {EXTENSION: dict(SETTINGS)},
            extensions,
        )


async def declare_extension(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Middleware: put the Skills extension in ``initialize``'s ``capabilities.extensions``.

    The SDK sieves a 2025-11-25 ``initialize`` result down to that revision's schema,
    which has no ``extensions`` (SEP-2133 came later), yet stock clients (the MCP
    Inspector, SEP-2640 hosts) look for the extension exactly there.  The middleware's
    own return value is not sieved again, so this is the SDK's extension point for it.
    """
    result = await call_next(ctx)
    if ctx.method == "initialize" and isinstance(result, dict):
        capabilities = result.setdefault("capabilities", {})
        if isinstance(capabilities, dict):
            capabilities.setdefault("extensions", {})[EXTENSION] = dict(SETTINGS)
    return result


class SkillServer:
    """Builds the low-level :class:`Server` and answers its requests."""

    def __init__(self, backend: McpBackend) -> None:
        self.backend = backend
        self._files: SkillFiles | None = None
        self.sessions: dict[str | int, Any] = {}
        # 2026-07-28: change notifications travel on subscriptions/listen streams (notify_list_changed).
        self.bus = InMemorySubscriptionBus()
        self.listen = ListenHandler(self.bus)
        server = _Server(
            "skill-executor",
            version=__version__,
            instructions=INSTRUCTIONS,
            on_list_tools=self.list_tools,
            # A mapping result is the SDK's for an extension's own shape (a task handle: tasks.py).
            on_call_tool=cast("Callable[..., Awaitable[types.CallToolResult]]", self.call_tool),
            on_list_resources=self.list_resources,
            on_list_resource_templates=self.list_resource_templates,
            on_read_resource=self.read_resource,
            on_list_prompts=self.list_prompts,
            on_get_prompt=self.get_prompt,
            on_subscriptions_listen=self.listen,
        )
        server.extensions[EXTENSION] = dict(SETTINGS)
        server.middleware.append(declare_extension)
        server.add_request_handler("skills/list", SkillsListParams, self.skills_list)
        server.add_request_handler("skills/get", UriParams, self.skills_get)
        server.add_request_handler("resources/directory/read", DirectoryParams, self.directory_read)
        # The Tasks extension (2026-07-28): a long skill_run as a task handle (tasks.py).
        self.tasks = SkillTasks(backend.manager, backend.principal, backend.tools)
        server.extensions[TASKS] = {}
        server.add_request_handler("tasks/get", TaskParams, self.tasks.get)
        server.add_request_handler("tasks/update", TaskUpdateParams, self.tasks.update)
        server.add_request_handler("tasks/cancel", TaskParams, self.tasks.cancel)
        self.runs = SkillRun(backend)
        self.server = server

    def options(self) -> InitializationOptions:
        return self.server.create_initialization_options()

    @property
    def files(self) -> SkillFiles:
        repository = self.backend.repository()
        if self._files is None or self._files.repository is not repository:
            self._files = SkillFiles(repository)
        return self._files

    def _seen(self, ctx: ServerRequestContext[Any, Any]) -> None:
        """Remember the connection, for ``notifications/resources/list_changed``: an HTTP
        session by its id (until it closes: :meth:`forget`), stdio's one connection; a
        stateless HTTP request (2026-07-28) has no stream to hear it on."""
        connection = getattr(ctx.session, "_connection", None)
        if connection is None:
            return
        session_id = getattr(connection, "session_id", None)
        if isinstance(session_id, str):
            self.sessions.setdefault(session_id, ctx.session)
        elif ctx.request is None:
            self.sessions.setdefault(id(connection), ctx.session)

    def forget(self, session_id: str) -> None:
        """The HTTP session ``session_id`` has closed."""
        self.sessions.pop(session_id, None)

    async def notify_list_changed(self, updated: tuple[str, ...] = ()) -> None:
        """The catalog changed: ``notifications/resources/list_changed`` to every 2025-11-25
        connection; to 2026-07-28 ``subscriptions/listen`` streams the resource, prompt (one
        per skill) and tool (their skill lists) list changes, and ``resources/updated`` for
        the ``updated`` URIs (each changed skill's ``SKILL.md``), as each stream asked."""
        for key, session in list(self.sessions.items()):
            try:
                await session.send_resource_list_changed()
            except Exception:  # a closed connection: forget it
                self.sessions.pop(key, None)
        for event in (ResourcesListChanged(), PromptsListChanged(), ToolsListChanged()):
            await self.bus.publish(event)
        for uri in updated:
            await self.bus.publish(ResourceUpdated(uri=uri))

    async def _offload(self, fn: Callable[[], T]) -> T:
        return await anyio.to_thread.run_sync(fn)

    async def _guard(self, fn: Callable[[], Any], uri: str | None = None) -> Any:
        """``fn`` off the event loop; a refusal is ``-32602`` (with the ``uri`` that is not
        served as its data, SEP-2164), a failure of ours ``-32603``."""
        data = {"uri": uri} if uri is not None else None
        try:
            return await self._offload(fn)
        except UnknownResource as exc:
            raise invalid_params(exc.message, data) from None
        except ExecutorError as exc:
            if exc.status >= 500:
                raise internal_error(f"{exc.code}: {exc.message}") from None
            raise invalid_params(f"{exc.code}: {exc.message}", data) from None

    @staticmethod
    def _cacheable(ctx: ServerRequestContext[Any, Any], result: dict[str, Any]) -> dict[str, Any]:
        """``ttlMs``/``cacheScope``, required on ``skills/list`` and ``skills/get`` from
        2026-07-28 on (``CacheableResult``), and on ``resources/directory/read`` by the
        TypeScript SDK's client; the SDK adds ``resultType`` there itself."""
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            result.update(ttlMs=CACHE_TTL_MS, cacheScope=CACHE_SCOPE)
        return result

    # -- the Skills extension ---------------------------------------------------------

    async def skills_list(self, ctx: ServerRequestContext[Any, Any], params: SkillsListParams) -> dict[str, Any]:
        self._seen(ctx)
        files = self.files

        def build() -> tuple[list[Any], str | None]:
            chosen, after = page(files.repository.list(), params.cursor)
            entries = []
            for skill in chosen:
                try:
                    entries.append(files.entry_of(skill, skill.id))
                except (NotFound, OSError):
                    continue  # removed meanwhile, or no entry for it (SkillFiles.refusal)
            return entries, after

        entries, after = await self._guard(build)
        result: dict[str, Any] = {"skills": entries}
        if after is not None:
            result["nextCursor"] = after
        return self._cacheable(ctx, result)

    async def skills_get(self, ctx: ServerRequestContext[Any, Any], params: UriParams) -> dict[str, Any]:
        self._seen(ctx)
        files = self.files
        return self._cacheable(ctx, {"skill": await self._guard(lambda: files.entry_for_uri(params.uri))})

    async def directory_read(self, ctx: ServerRequestContext[Any, Any], params: DirectoryParams) -> dict[str, Any]:
        self._seen(ctx)
        files = self.files
        children = await self._guard(lambda: files.directory(params.uri))
        chosen, after = page(children, params.cursor)
        result: dict[str, Any] = {"resources": chosen}
        if after is not None:
            result["nextCursor"] = after
        return self._cacheable(ctx, result)  # the TypeScript SDK requires them here too

    async def list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        self._seen(ctx)
        files = self.files
        items = await self._offload(lambda: [files.skill_resource(s) for s in files.repository.list()])
        chosen, after = page(items, params.cursor if params else None)
        return types.ListResourcesResult(
            resources=[types.Resource.model_validate(r) for r in chosen], next_cursor=after
        )

    async def list_resource_templates(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        """Every file of a skill is ``skill://<name>/<path>`` (RFC 6570: ``{+path}`` keeps its
        slashes); ``artifact://``: the caller's artifacts (what results refer to), whole or in parts."""
        self._seen(ctx)
        template = types.ResourceTemplate(
            uri_template=f"{SCHEME}{{skill}}/{{+path}}",
            name="skill-file",
            description="A file of a skill: its SKILL.md, scripts, references and assets (skills/get lists them)",
        )
        return types.ListResourceTemplatesResult(resource_templates=[template, ARTIFACT_TEMPLATE])

    async def read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        self._seen(ctx)
        uri = str(params.uri)
        if uri.startswith("artifact://"):
            who = self.backend.principal(ctx)
            info, data, read = await self._guard(lambda: read_artifact(self.backend.artifacts(), uri, who), uri)
            contents = resource_contents(read, info.mime_type, data)
        else:
            files = self.files
            contents = await self._guard(lambda: files.read(uri), uri)
        model = types.TextResourceContents if "text" in contents else types.BlobResourceContents
        return types.ReadResourceResult(contents=[model.model_validate(contents)])

    # -- prompts ------------------------------------------------------------------------

    async def list_prompts(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        self._seen(ctx)
        repository = self.backend.repository()
        skills = await self._offload(repository.list)
        prompts = [
            types.Prompt(
                name="skills_overview", description="The <available_skills> block: every skill's name and description"
            )
        ]
        prompts += [types.Prompt(name=s.id, description=s.description) for s in skills]
        return types.ListPromptsResult(prompts=prompts)

    async def get_prompt(
        self, ctx: ServerRequestContext[Any, Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        repository = self.backend.repository()
        where = self.backend.visible_skills_dir()
        if params.name == "skills_overview":
            text = await self._offload(
                lambda: render_xml(repository.list(), lambda s: f"{SCHEME}{s.id}/{s.skill_file.name}")
            )
            text += (
                "\n\nLoad a skill with skill_load (or read its skill:// SKILL.md) before using it; "
                "run its scripts with skill_run."
            )
            description = "Every skill available here"
        else:
            try:
                skill = await self._offload(lambda: repository.get(params.name))
            except ExecutorError as exc:  # not found, or a reference the parser refuses
                raise invalid_params(exc.message) from None
            body = expand_placeholders(skill.body, sandbox_dir(skill, where))
            text = (
                f"Use the skill {skill.id!r} (its files: {SCHEME}{skill.id}/...; run them with skill_run, "
                f"skill={skill.id!r}, where they are at {sandbox_dir(skill, where)}).\n\n{body}"
            )
            description = skill.description
        message = types.PromptMessage(role="user", content=types.TextContent(type="text", text=text))
        return types.GetPromptResult(description=description, messages=[message])

    # -- tools --------------------------------------------------------------------------
    def _tool_list(self, *, processes: bool | None = None) -> list[types.Tool]:
        """``processes``: list the process tools (None: when the runtime has processes)."""
        if processes is None:
            processes = self.backend.tools().processes is not None  # a runtime with a session's processes
        return tool_list(self.backend.repository(), processes=processes)

    async def list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        self._seen(ctx)
        return types.ListToolsResult(tools=await self._offload(self._tool_list))

    async def call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | dict[str, Any]:
        self._seen(ctx)
        arguments = dict(params.arguments or {})
        try:
            budget = request_budget(self.backend.tools().budget, params.meta)
            session = request_session(params.meta)  # the host's binding: every tool with a session keeps to it
            if params.name == "skill_run":
                return await self.runs.skill_run(ctx, bound("skill_run", arguments, session), budget)
            if params.name in CONTEXT_TOOLS or params.name in PROCESS_TOOLS:
                who = self.backend.principal(ctx)
                return await self._offload(lambda: self._context_tool(params.name, arguments, who, budget, session))
            if params.name.startswith("artifact_"):
                who = self.backend.principal(ctx)
                return await self._offload(
                    lambda: artifact_tool(self.backend.artifacts(), params.name, arguments, who, budget)
                )
            return await self._offload(lambda: self._read_tool(params.name, arguments, budget))
        except ExecutorError as exc:
            return error_result(f"error ({exc.code}): {exc.message}")

    def _read_tool(self, name: str, arguments: dict[str, Any], budget: ResultBudget) -> types.CallToolResult:
        tools = self.backend.tools()
        if name == "skill_search":
            query = arguments.get("query")
            if not isinstance(query, str):
                raise BadRequest("the 'query' argument is required", code="invalid_arguments")
            limit = arguments.get("limit", 10)
            hits = tools.repository.search(query, int(limit) if isinstance(limit, int) else 10)
            found = [
                {"skill": h.skill.id, "description": h.skill.description, "score": round(h.score, 3)} for h in hits
            ]
            text = "\n".join(f"- {h['skill']}: {h['description']}" for h in found) or "(no matching skill)"
            return types.CallToolResult(content=[text_content(text)], structured_content={"hits": found})
        if name == "skill_read_doc":
            arguments = {"skill": arguments.get("skill"), "docs": [arguments.get("path")]}
            name = "skill_select_docs"
        elif name not in ("skill_load", "skill_list_docs"):
            raise NotFound(f"unknown tool {name!r}", code="tool_not_found")
        result = tools.call(name, arguments, budget=budget)
        return types.CallToolResult(content=[text_content(t) for t in result.texts()], is_error=result.is_error)

    def _context_tool(
        self, name: str, arguments: dict[str, Any], who: Principal, budget: ResultBudget, session: str | None
    ) -> types.CallToolResult:
        """The context of the caller's key (the tenant) and the session the arguments name, or
        the one the call is bound to (``_meta["skill-executor/session"]``)."""
        result = self.backend.tools().call(name, arguments, tenant=who.id, session=session, budget=budget)
        structured = result.data if isinstance(result.data, dict) and not result.is_error else None
        return types.CallToolResult(
            content=[text_content(t) for t in result.texts()], structured_content=structured, is_error=result.is_error
        )
