"""One error type for every refusal the service makes.

A refusal (bad request, unknown skill, refused input) is not a failed run: a run whose
command exits non-zero is a normal result.  Refusals carry a stable machine-readable
``code``, a human message and the HTTP status the API maps them to, so the library,
the CLI and the HTTP layer all report them the same way.  Every code is listed in
:mod:`skill_executor.errorcodes` (the catalogue), which also gives its status: a raise that
names a catalogued code and no explicit ``status`` answers with the catalogue's.
"""

from __future__ import annotations

from typing import Any

from .errorcodes import CATALOGUE


class ExecutorError(Exception):
    """A refusal with a stable code; ``status`` is the HTTP status it maps to."""

    code: str = "error"
    status: int = 400
    #: Seconds a client should wait before it retries (the HTTP ``Retry-After``), if it should.
    retry_after: int | None = None

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int | None = None,
        details: dict[str, Any] | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        if retry_after is not None:
            self.retry_after = retry_after
        self.message = message
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        elif (entry := CATALOGUE.get(self.code)) is not None:
            self.status = entry.status
        self.details = details or {}

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            body["details"] = self.details
        return {"error": body}


class BadRequest(ExecutorError):
    code = "bad_request"
    status = 400


class NotFound(ExecutorError):
    code = "not_found"
    status = 404


class Forbidden(ExecutorError):
    code = "forbidden"
    status = 403


class Conflict(ExecutorError):
    code = "conflict"
    status = 409


class TooLarge(ExecutorError):
    code = "too_large"
    status = 413


class Busy(ExecutorError):
    code = "busy"
    status = 429


class Unavailable(ExecutorError):
    code = "unavailable"
    status = 503
