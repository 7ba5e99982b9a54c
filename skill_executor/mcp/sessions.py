"""MCP sessions over streamable HTTP: one session id per request, each session bound to
the key that opened it, a cap per key, and idle expiry.

The SDK's session manager keeps the sessions; :class:`Sessions` only hooks its two doors,
``_admit_session`` (a session is created: called under the SDK's creation lock, before
anything is served) and ``_discard_session`` (every way a session ends: DELETE, the idle
timeout, a crash, an opening request that failed, SDK 2.3).  So the owner map holds
exactly the sessions the SDK serves: never one it closed, never without one it serves.

:func:`session_header` leaves a request's scope holding exactly one ``mcp-session-id``
header, lower-case, with the value it returns: what the SDK reads (Starlette's
``Headers.get``, the first header whose raw name is exactly ``mcp-session-id``) is then
byte for byte what was checked.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, AuthorizationContext
from mcp.server.auth.provider import AccessToken
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http import SESSION_ID_PATTERN, StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.types import Scope

from ..access import Principal
from ..errors import BadRequest, Busy, ExecutorError

SESSION_HEADER = b"mcp-session-id"
#: The longest session id looked at (the SDK's are 32 hex digits).
MAX_SESSION_ID = 128


class McpSessionLimit(Busy):
    code = "mcp_session_limit"


def single_header(scope: Scope, name: bytes, code: str) -> bytes | None:
    """The value of the one header ``name`` (any case); two or more are refused with ``code``."""
    found = [value for key, value in scope.get("headers") or [] if key.lower() == name]
    if len(found) > 1:
        raise BadRequest(f"more than one {name.decode()} header", code=code)
    return found[0] if found else None


def session_header(scope: Scope) -> str | None:
    """The request's session id, if it names one; the scope then carries exactly that header.

    Refused (400): two or more ``mcp-session-id`` headers or a comma-separated list
    (``ambiguous_session_id``); a value that is not 1-128 visible ASCII characters
    (``invalid_session_id``).
    """
    value = single_header(scope, SESSION_HEADER, "ambiguous_session_id")
    if value is None:
        return None
    if b"," in value:
        raise BadRequest("more than one MCP session id", code="ambiguous_session_id")
    text = value.decode("latin-1")  # as Starlette decodes it
    if len(value) > MAX_SESSION_ID or not SESSION_ID_PATTERN.fullmatch(text):
        raise BadRequest("malformed mcp-session-id header", code="invalid_session_id")
    scope["headers"] = [(k, v) for k, v in scope["headers"] if k.lower() != SESSION_HEADER]
    scope["headers"].append((SESSION_HEADER, value))
    return text


def bind_caller(scope: Scope, who: Principal) -> None:
    """Tell the SDK who is calling: it binds a session to this identity too (its own check)."""
    scope["user"] = AuthenticatedUser(AccessToken(token="", client_id=who.id, scopes=[]))


class Sessions(StreamableHTTPSessionManager):
    """The SDK's session manager, with an owner per session and at most ``per_key`` per key."""

    def __init__(
        self, server: Server[Any], *, idle_seconds: float, per_key: int, on_close: Callable[[str], None]
    ) -> None:
        super().__init__(server, session_idle_timeout=idle_seconds)
        self.per_key = per_key
        self._on_close = on_close
        self._owners: dict[str, str] = {}
        self._open: Counter[str] = Counter()

    def owner(self, session: str) -> str | None:
        """The key id that opened the live session ``session`` (None: no such session)."""
        return self._owners.get(session)

    def open_count(self, key: str) -> int:
        return self._open[key]

    def _admit_session(self, requestor: AuthorizationContext | None) -> StreamableHTTPServerTransport | None:
        if requestor is None:
            raise ExecutorError("an MCP session without a caller", code="internal", status=500)
        key = requestor["client_id"]
        if self._open[key] >= self.per_key:
            raise McpSessionLimit(
                f"this key has {self.per_key} open MCP sessions: end one (DELETE) or wait for an idle one to expire"
            )
        transport = super()._admit_session(requestor)
        if transport is not None and transport.mcp_session_id is not None:
            self._owners[transport.mcp_session_id] = key
            self._open[key] += 1
        return transport

    async def _discard_session(self, session_id: str, transport: StreamableHTTPServerTransport) -> None:
        key = self._owners.pop(session_id, None)  # called again for a session already gone: a no-op
        if key is not None:
            self._open[key] -= 1
            if self._open[key] <= 0:
                del self._open[key]
            self._on_close(session_id)
        await super()._discard_session(session_id, transport)
