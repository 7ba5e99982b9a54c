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
import time
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
#: The ownership map is pruned of idle sessions once it holds this many.
PRUNE_AT = 10_000


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
        #: session id -> (the key id that opened it, when it was last used); only sessions opened here
        self._owners: dict[str, tuple[str, float]] = {}
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
                entry = self._owners.get(session)
                if entry is not None:
                    self._owners[session] = (entry[0], time.monotonic())
            # A session of another key -- or one this endpoint never opened -- does not exist for this caller.
            if entry is None or (entry[0] != who.id and not who.admin):
                await error_response(404, "session_not_found", "no such MCP session")(scope, receive, send)
                return
        scope.setdefault("state", {})["principal"] = who

        async def remember(message: Message) -> None:
            if message["type"] == "http.response.start":
                for key, value in message.get("headers") or []:
                    if key.lower() == SESSION_HEADER:
                        with self._lock:
                            self._forget_idle()
                            self._owners.setdefault(value.decode("latin-1"), (who.id, time.monotonic()))
            await send(message)

        await self.manager.handle_request(scope, receive, remember)


    def _forget_idle(self) -> None:
        """Owners of sessions the SDK has closed for idleness (never a live session's: losing
        its owner would let it be refused, never taken over)."""
        if len(self._owners) < PRUNE_AT:
            return
        cutoff = time.monotonic() - IDLE_SECONDS - 60
        for session in [s for s, (_, seen) in self._owners.items() if seen < cutoff]:
            del self._owners[session]


def _header(headers: dict[bytes, bytes], name: bytes) -> str | None:
    value = headers.get(name)
    return value.decode("latin-1") if value is not None else None

