"""ASGI middleware: request ids, structured access logs, the browser guard (Host and
Origin checks), a request body cap, and the content-safety headers of every answer."""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import re
import time
import uuid
from collections.abc import Iterable
from typing import Any

import anyio
from starlette.requests import ClientDisconnect

from .. import tracing
from ..web.auth import is_loopback
from ..web.content import NOSNIFF, SANDBOX_CSP, base_type, disposition, is_passive

log = logging.getLogger("skill_executor.access")
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
#: The id of the request being served (log lines written while serving it carry it).
REQUEST_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)
#: The most of a request path written to a log line.
LOG_PATH_MAX = 1024
#: The status logged for a request whose client left before any answer (nginx's).
CLIENT_CLOSED_REQUEST = 499
#: What the app may raise writing to or reading from a client that has left.
CLIENT_GONE_ERRORS: tuple[type[BaseException], ...] = (
    anyio.ClosedResourceError,
    anyio.BrokenResourceError,
    ClientDisconnect,
    ConnectionError,
)
SHUTTING_DOWN = "shutting_down"
SHUTDOWN_MESSAGE = "the service is shutting down; retry the request elsewhere or after it restarts"


class RequestContext:
    """Assigns ``X-Request-ID`` (a caller's, if sane) and logs one line per request.

    A request still open when the server's graceful-shutdown timeout cancels it (the
    drain answers every run's waiting client before that, so this is a backstop) is
    answered 503 ``shutting_down`` in the API's error shape, or, if it is an event
    stream already under way, ended with an ``error`` event -- never uvicorn's plain-text
    500 or a cut connection.

    A request its client abandoned (the connection closed before the answer was complete:
    an MCP client that cancelled a call by closing its stream, a timeout, a crash) is
    logged with ``client_gone: true``, and with status 499 (nginx's "client closed
    request") when no answer had started: the server did not fail, nobody was left to
    answer.  Only such a request's own transport errors are swallowed.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        incoming = headers.get(b"x-request-id", b"").decode("latin-1")
        request_id = incoming if _REQUEST_ID.match(incoming) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id
        token = REQUEST_ID.set(request_id)
        started = time.monotonic()
        status = 500
        started_response = stream = complete = gone = False

        async def receive_watched() -> Any:
            nonlocal gone
            message = await receive()
            if message.get("type") == "http.disconnect" and not complete:
                gone = True
            return message

        async def send_with_id(message: dict[str, Any]) -> None:
            nonlocal status, started_response, stream, complete
            if message["type"] == "http.response.start":
                status = message["status"]
                started_response = True
                message.setdefault("headers", []).append((b"x-request-id", request_id.encode()))
                stream = any(
                    name.lower() == b"content-type" and value.startswith(b"text/event-stream")
                    for name, value in message.get("headers") or []
                )
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                complete = True
            await send(message)

        try:
            await self.app(scope, receive_watched, send_with_id)
        except CLIENT_GONE_ERRORS:
            if not gone:
                raise
        except asyncio.CancelledError:
            # Only the server cancels a request: its graceful-shutdown timeout ran out.
            if not started_response:
                await send_error(send_with_id, 503, SHUTTING_DOWN, SHUTDOWN_MESSAGE)
            elif stream and not complete:
                event = json.dumps({"code": SHUTTING_DOWN, "message": SHUTDOWN_MESSAGE})
                await send({"type": "http.response.body", "body": f"event: error\ndata: {event}\n\n".encode()})
                await send({"type": "http.response.body", "body": b""})
            else:
                raise
        finally:
            state = scope.get("state", {})
            principal = state.get("principal")
            path = scope.get("path") or ""
            extra = {
                "request_id": request_id,
                "method": scope.get("method"),
                "path": path if len(path) <= LOG_PATH_MAX else path[:LOG_PATH_MAX] + "...",
                "status": status if started_response or not gone else CLIENT_CLOSED_REQUEST,
                "duration_ms": round((time.monotonic() - started) * 1000, 2),
                "principal": getattr(principal, "id", None),
            }
            if gone:
                extra["client_gone"] = True
            log.info("request", extra=extra)
            REQUEST_ID.reset(token)


class BrowserGuard:
    """Refuses what a web page could make a browser send to this service.

    * With authentication off (no keys: loopback development) the ``Host`` header must
      name this server -- the bound address, ``localhost``, ``127.0.0.1`` or ``[::1]``,
      with the bound port -- or the request is refused with 421 ``host_not_allowed``:
      a page on ``evil.example`` whose name was rebound to 127.0.0.1 (DNS rebinding)
      cannot reach the API.
    * With authentication off, or with the local runtime (no isolation), a connection
      to a non-loopback address is refused (403 ``loopback_only``) even if the service
      was somehow bound to one (``serve`` refuses to, but an embedder might).
    * Always: a cross-origin browser request -- an ``Origin`` that is neither this
      host nor listed in ``allowed_origins``, or ``Sec-Fetch-Site: cross-site`` /
      ``same-site`` without such an Origin -- is refused with 403 ``cross_origin_refused``.
    """

    def __init__(
        self,
        app: Any,
        *,
        auth_enabled: bool,
        local_runtime: bool = False,
        allowed_origins: Iterable[str] = (),
        host: str = "127.0.0.1",
        port: int = 8080,
    ) -> None:
        self.app = app
        self.auth_enabled = auth_enabled
        self.loopback_only = local_runtime or not auth_enabled
        self.allowed_origins = frozenset(normalize_origin(o) for o in allowed_origins)
        self.host = host
        self.port = port

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self.check(scope)
        if refusal is not None:
            status, code, message = refusal
            app = scope.get("app")
            metrics = getattr(getattr(app, "state", None), "metrics", None)
            if metrics is not None:
                metrics.refusals.labels(reason=code).inc()
            await send_error(send, status, code, message)
            return
        await self.app(scope, receive, send)

    def check(self, scope: dict[str, Any]) -> tuple[int, str, str] | None:
        headers: dict[bytes, bytes] = {}
        for name, value in scope.get("headers") or []:
            headers.setdefault(name.lower(), value)
        host = headers.get(b"host", b"").decode("latin-1").strip().lower()
        server = scope.get("server") or (self.host, self.port)
        bound_host, bound_port = server[0], server[1]
        if self.loopback_only and bound_port is not None and not is_loopback(str(bound_host)):
            why = "authentication is off" if not self.auth_enabled else "the local runtime isolates nothing"
            return 403, "loopback_only", f"{why}: only connections to a loopback address are served"
        if not self.auth_enabled and host and not self._host_allowed(host, str(bound_host), bound_port or self.port):
            return (
                421,
                "host_not_allowed",
                (
                    f"the Host header {host[:100]!r} does not name this server; without API keys only "
                    "localhost, 127.0.0.1 and [::1] (with the service's port) are served"
                ),
            )
        origin = headers.get(b"origin")
        if origin is not None:
            text = normalize_origin(origin.decode("latin-1"))
            if text in self.allowed_origins or (host and text.partition("://")[2] == host and "://" in text):
                return None
            return (
                403,
                "cross_origin_refused",
                (
                    f"cross-origin request from {text[:100]!r} refused; "
                    "list the origin in SKILL_EXECUTOR_ALLOWED_ORIGINS to allow it"
                ),
            )
        site = headers.get(b"sec-fetch-site", b"").decode("latin-1").strip().lower()
        if site in ("cross-site", "same-site"):
            return 403, "cross_origin_refused", f"cross-origin browser request refused (Sec-Fetch-Site: {site})"
        return None

    @staticmethod
    def _host_allowed(host: str, bound_host: str, bound_port: int) -> bool:
        name, port = _split_host(host)
        port_ok = bound_port == 80 if port is None else port.isdigit() and len(port) <= 5 and int(port) == bound_port
        bound = f"[{bound_host}]" if ":" in bound_host else bound_host
        return port_ok and name in {"localhost", "127.0.0.1", "[::1]", bound.lower()}


def _split_host(host: str) -> tuple[str, str | None]:
    """``name[:port]`` (``[v6][:port]``) -> (name, port or None); a malformed port is ``"?"``."""
    if host.startswith("["):
        name, bracket, rest = host.partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            return host, "?"
        return name + "]", rest[1:] if rest else None
    name, sep, port = host.rpartition(":")
    return (name, port) if sep else (host, None)


def normalize_origin(value: str) -> str:
    """An origin as browsers send it: lower case, no trailing slash."""
    return value.strip().rstrip("/").lower()


#: The service's own pages, which run their own script (the API docs and their assets): they
#: get ``nosniff`` only, never the sandbox policy.
OWN_PAGES = ("/docs", "/redoc")
#: The API's own structured answers: shown as they are, never made attachments.
_API_TYPES = frozenset({"application/json", "application/problem+json", "text/event-stream"})


class ContentSafety:
    """Every answer of the service is never sniffable and never active content of its origin.

    * every response (JSON, errors, event streams, bytes) gets ``X-Content-Type-Options:
      nosniff``;
    * every response but the service's own pages (:data:`OWN_PAGES`) gets
      ``Content-Security-Policy: sandbox; default-src 'none'`` unless its route set one;
    * a response whose type is neither the API's own (JSON, event stream) nor passive
      (:data:`~skill_executor.web.content.PASSIVE_INLINE`) and that has no
      ``Content-Disposition`` gets ``attachment``.

    The routes that answer written bytes set these headers themselves with their file's name
    (:func:`~skill_executor.web.content.download_headers`); this is the backstop that holds
    for any route, HEAD and ranges included, and for answers written by other middleware.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path") or ""
        own = any(path == p or path.startswith(p + "/") for p in OWN_PAGES)

        async def secured(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = secure_headers(list(message.get("headers") or []), own_page=own)
            await send(message)

        await self.app(scope, receive, secured)


def secure_headers(headers: list[tuple[bytes, bytes]], *, own_page: bool = False) -> list[tuple[bytes, bytes]]:
    """``headers`` (ASGI pairs) with what :class:`ContentSafety` adds."""
    names = {name.lower() for name, _ in headers}
    if b"x-content-type-options" not in names:
        headers.append((b"x-content-type-options", NOSNIFF.encode()))
    if own_page:
        return headers
    if b"content-security-policy" not in names:
        headers.append((b"content-security-policy", SANDBOX_CSP.encode()))
    kind = next((value.decode("latin-1") for name, value in headers if name.lower() == b"content-type"), "")
    if kind and b"content-disposition" not in names and base_type(kind) not in _API_TYPES and not is_passive(kind):
        headers.append((b"content-disposition", disposition(None, kind).encode()))
    return headers


class BodyLimit:
    """Refuses request bodies over ``limit`` bytes with 413, declared or streamed."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await _too_large(send, self.limit)
            return
        received = 0
        refused = False

        async def limited() -> dict[str, Any]:
            nonlocal received, refused
            message: dict[str, Any] = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    refused = True
                    raise _BodyTooLarge()
            return message

        started = False

        async def track(message: dict[str, Any]) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited, track)
        except _BodyTooLarge:
            if not started:
                await _too_large(send, self.limit)
        except Exception:
            if refused and not started:
                await _too_large(send, self.limit)
            else:
                raise


class _BodyTooLarge(Exception):
    pass


async def _too_large(send: Any, limit: int) -> None:
    await send_error(send, 413, "too_large", f"the request body is larger than {limit} bytes")


async def send_error(send: Any, status: int, code: str, message: str) -> None:
    """A refusal in the API's error shape, from a middleware."""
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


class JsonFormatter(logging.Formatter):
    """One JSON object per line; ``extra`` fields included, secrets never passed in."""

    _SKIP = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime", "color_message"}

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in self._SKIP and not key.startswith("_"):
                data[key] = value
        if "request_id" not in data and (request_id := REQUEST_ID.get()) is not None:
            data["request_id"] = request_id
        for key, value in tracing.log_fields().items():
            data.setdefault(key, value)
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)


def configure_logging(json_logs: bool = True, level: int = logging.INFO) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if json_logs else logging.Formatter("%(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = name != "uvicorn.access"
