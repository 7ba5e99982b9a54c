"""One error shape for every failure: ``{"error": {"code", "message", "details"?}}``.

FastAPI's default bodies (``{"detail": ...}``) are replaced, validation errors included,
and an unexpected exception becomes a 500 that names the request id, never a trace.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import ExecutorError

log = logging.getLogger("skill_executor.api")

_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    413: "too_large",
    415: "unsupported_media_type",
    421: "misdirected_request",
    422: "invalid_request",
    429: "busy",
    503: "unavailable",
}


def error_response(
    status: int, code: str, message: str, details: Any = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    body: dict[str, Any] = {"code": code, "message": message}
    if details:
        body["details"] = details
    return JSONResponse({"error": body}, status_code=status, headers=headers)


def _location(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body",)]
    return ".".join(parts) or "body"


def install(app: FastAPI) -> None:
    @app.exception_handler(ExecutorError)
    async def executor_error(request: Request, exc: ExecutorError) -> JSONResponse:
        metrics = getattr(request.app.state, "metrics", None)
        if metrics is not None:
            metrics.refusals.labels(reason=exc.code).inc()
        retry = exc.retry_after if exc.retry_after is not None else 1 if exc.status == 429 else None
        headers = {"Retry-After": str(retry)} if retry is not None else None
        return error_response(exc.status, exc.code, exc.message, exc.details or None, headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        if any(e.get("type") == "json_invalid" for e in errors):
            return error_response(400, "malformed_json", "the request body is not valid JSON")
        details = [{"field": _location(tuple(e.get("loc", ()))), "problem": e.get("msg", "")} for e in errors]
        summary = "; ".join(f"{d['field']}: {d['problem']}" for d in details[:5])
        return error_response(422, "invalid_request", f"invalid request: {summary}", details)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(exc.status_code, "error")
        message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
        return error_response(exc.status_code, code, message, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        request_id = getattr(request.state, "request_id", "-")
        log.exception("unhandled error", extra={"request_id": request_id})
        return error_response(500, "internal", f"internal error (request id {request_id})")
