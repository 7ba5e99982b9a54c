"""Streamable HTTP at ``/mcp`` in the service.

Same rules as the REST API: the bearer token of every request says who is calling
(:class:`~skill_executor.web.auth.KeyRing`; 401 without a valid one when keys are configured),
runs and artifacts are that key's tenant's, and the app's ``BrowserGuard`` checks
``Host``/``Origin`` before anything here runs.

Sessions (:mod:`.sessions`): a request names at most one session, in exactly one
``mcp-session-id`` header (else 400), and the SDK sees only that header.  A session
belongs to the key that opened it, for every method: any other key -- an admin's too --
is answered 404 ``session_not_found``, as for a session that does not exist.  A key has at
most ``mcp_sessions_per_key`` open sessions (429 ``mcp_session_limit``); one idle for
``mcp_session_idle_seconds`` is closed.  The SDK's session manager runs inside the app's
lifespan (:meth:`McpHttp.running`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from fastapi import FastAPI
from mcp.server.context import ServerRequestContext
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from ..access import Principal
from ..config import Settings
from ..errors import ExecutorError
from ..web.auth import KeyRing
from ..web.problems import error_response
from .backend import McpBackend
from .server import SkillServer
from .sessions import McpSessionLimit, Sessions, bind_caller, session_header, single_header
from .watch import watch_catalog

PATH = "/mcp"
log = logging.getLogger("skill_executor.mcp")
#: The longest a session's DELETE waits for the notifications already answered on it.
DELETE_WAIT_SECONDS = 2.0


def _principal(ctx: ServerRequestContext[Any, Any]) -> Principal:
    request = ctx.request
    state = getattr(request, "scope", {}).get("state", {}) if request is not None else {}
    found = state.get("principal")
    if isinstance(found, Principal):
        return found
    raise ExecutorError("an MCP request without a caller", code="internal")


class McpHttp:
    """The ``/mcp`` endpoint: authentication, the session header and its owner, then the SDK."""

    def __init__(self, app: FastAPI) -> None:
        state = app.state
        settings: Settings = state.settings
        backend = McpBackend(
            repository=lambda: state.executor.repository,
            manager=lambda: state.manager,
            tools=lambda: state.tools,
            artifacts=lambda: state.executor.artifacts,
            visible_skills_dir=lambda: state.executor.runtime.visible_skills_dir,
            principal=_principal,
        )
        self.keyring: KeyRing = state.keyring
        #: Per session: the POSTs answered 202 (a notification, say ``notifications/cancelled``)
        #: whose message the SDK has not handed to the session yet.
        self._accepted: dict[str, set[anyio.Event]] = {}
        self.skills = SkillServer(backend)
        self.manager = Sessions(
            self.skills.server,
            idle_seconds=settings.mcp_session_idle_seconds,
            per_key=settings.mcp_sessions_per_key,
            on_close=self.skills.forget,
        )
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
        try:
            authorization = single_header(scope, b"authorization", "ambiguous_authorization")
            who = self.keyring.authenticate(authorization.decode("latin-1") if authorization is not None else None)
        except ExecutorError as exc:
            response = error_response(exc.status, exc.code, exc.message)
            if exc.status == 401:
                response.headers["WWW-Authenticate"] = "Bearer"
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})["principal"] = who  # also for the access log of a refusal below
        try:
            session = session_header(scope)
        except ExecutorError as exc:
            await error_response(exc.status, exc.code, exc.message)(scope, receive, send)
            return
        # A session of another key (an admin's too) -- or one that is not open -- does not exist for this caller.
        if session is not None and (owner := self.manager.owner(session)) != who.id:
            if owner is not None:
                log.warning(
                    "MCP session of another key refused",
                    extra={"principal": who.id, "owner": owner, "method": scope.get("method")},
                )
            await error_response(404, "session_not_found", "no such MCP session")(scope, receive, send)
            return
        bind_caller(scope, who)
        done: anyio.Event | None = None
        if session is not None and scope.get("method") == "DELETE":
            await self._settle(session)
        elif session is not None and scope.get("method") == "POST":
            done = anyio.Event()
            send = self._noting_accepted(session, send, done)
        try:
            await self.manager.handle_request(scope, receive, send)
        except McpSessionLimit as exc:  # raised before the SDK admitted a session or answered anything
            await error_response(exc.status, exc.code, exc.message)(scope, receive, send)
        finally:
            if session is not None and done is not None:
                self._handed_over(session, done)

    # The SDK answers a notification 202 *before* it hands the message to the session, so a
    # client that cancels a call and then closes its session at once (as the SDK's client
    # does) has its DELETE end the session while the notification is still on its way; the
    # SDK then logs that request as an error and answers it a second time, with a 500.  A
    # DELETE therefore waits (briefly) for the notifications already answered on its session.

    def _noting_accepted(self, session: str, send: Send, done: anyio.Event) -> Send:
        async def noting(message: Any) -> None:
            if message["type"] == "http.response.start" and message.get("status") == 202:
                self._accepted.setdefault(session, set()).add(done)  # before the client can see it
            await send(message)

        return noting

    def _handed_over(self, session: str, done: anyio.Event) -> None:
        done.set()
        waiting = self._accepted.get(session)
        if waiting is not None:
            waiting.discard(done)
            if not waiting:
                del self._accepted[session]

    async def _settle(self, session: str) -> None:
        with anyio.move_on_after(DELETE_WAIT_SECONDS):
            for done in list(self._accepted.get(session, ())):
                await done.wait()
