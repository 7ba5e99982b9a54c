"""Streamable HTTP at ``/mcp`` in the service.

Same rules as the REST API: the bearer token of every request says who is calling
(:class:`~executor.api.auth.KeyRing`; 401 without a valid one when keys are configured),
runs and artifacts are that key's tenant's, and the app's ``BrowserGuard`` checks
``Host``/``Origin`` before anything here runs.  An MCP session belongs to the key that
opened it: another (non-admin) key presenting its id is answered 404, as if it did not
exist.  The SDK's session manager runs inside the app's lifespan (:meth:`McpHttp.running`).
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from fastapi import FastAPI
from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from ..access import Principal
from ..api.auth import KeyRing
from ..api.errors import error_response
from ..errors import ExecutorError
from .server import Backend, SkillServer
from .watch import watch_catalog

PATH = "/mcp"
SESSION_HEADER = b"mcp-session-id"
#: Sessions idle this long are closed by the SDK.
IDLE_SECONDS = 30 * 60.0


def _principal(ctx: ServerRequestContext[Any, Any]) -> Principal:
    request = ctx.request
    state = getattr(request, "scope", {}).get("state", {}) if request is not None else {}
    found = state.get("principal")
    if isinstance(found, Principal):
        return found
    raise ExecutorError("an MCP request without a caller", code="internal")


class McpHttp:
    """The ``/mcp`` endpoint: authentication, session ownership, then the SDK."""

    def __init__(self, app: FastAPI) -> None:
        state = app.state
        backend = Backend(
            repository=lambda: state.executor.repository,
            manager=lambda: state.manager,
            tools=lambda: state.tools,
            artifacts=lambda: state.executor.artifacts,
            visible_skills_dir=lambda: state.executor.runtime.visible_skills_dir,
            principal=_principal,
        )
        self.keyring: KeyRing = state.keyring
        self.skills = SkillServer(backend)
        self.manager = StreamableHTTPSessionManager(self.skills.server, session_idle_timeout=IDLE_SECONDS)
        self._owners: dict[str, str] = {}
        self._lock = threading.Lock()
        app.router.routes.append(Route(PATH, endpoint=self, methods=["GET", "POST", "DELETE"]))

    @asynccontextmanager
    async def running(self, app: FastAPI) -> AsyncIterator[None]:
        async with self.manager.run(), anyio.create_task_group() as group:
            group.start_soon(watch_catalog, app.state.executor.repository, self.skills)
            try:
                yield
            finally:
                group.cancel_scope.cancel()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope.get("headers") or [])
        try:
            who = self.keyring.authenticate(_header(headers, b"authorization"))
        except ExecutorError as exc:
            response = error_response(exc.status, exc.code, exc.message)
            response.headers["WWW-Authenticate"] = "Bearer"
            await response(scope, receive, send)
            return
        session = _header(headers, SESSION_HEADER)
        if session is not None:
            with self._lock:
                owner = self._owners.get(session)
            if owner is not None and owner != who.id and not who.admin:
                await error_response(404, "session_not_found", "no such MCP session")(scope, receive, send)
                return
        scope.setdefault("state", {})["principal"] = who

        async def remember(message: Message) -> None:
            if message["type"] == "http.response.start":
                for key, value in message.get("headers") or []:
                    if key.lower() == SESSION_HEADER:
                        with self._lock:
                            if len(self._owners) > 100_000:
                                self._owners.clear()
                            self._owners.setdefault(value.decode("latin-1"), who.id)
            await send(message)

        await self.manager.handle_request(scope, receive, remember)


def _header(headers: dict[bytes, bytes], name: bytes) -> str | None:
    value = headers.get(name)
    return value.decode("latin-1") if value is not None else None

