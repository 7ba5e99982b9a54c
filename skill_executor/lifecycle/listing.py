"""How runs are listed: the filters, a run as a listing shows it, and the opaque cursor of
the next page (keyset pages by (created_at, run_id): :meth:`~skill_executor.lifecycle.
records.RunStore.listing`)."""

from __future__ import annotations

import base64
import binascii
import json
import math
from dataclasses import dataclass
from typing import Any

from ..errors import BadRequest
from .status import Status


@dataclass(frozen=True, slots=True)
class RunFilter:
    """Which runs a listing shows (every one given must hold)."""

    #: The skill's name (any case; runs of a pinned ``name@ref`` too).
    skill: str | None = None
    #: Any of these statuses (empty: any).
    statuses: tuple[str, ...] = ()
    session: str | None = None
    #: Made at or after / before this time (seconds since the epoch).
    created_after: float | None = None
    created_before: float | None = None


@dataclass(frozen=True, slots=True)
class RunListing:
    """A run as a listing shows it: no request, no result (``GET /v1/runs/{id}`` has them)."""

    run_id: str
    status: Status
    skill: str
    session: str | None
    created_at: float
    updated_at: float
    owner: str
    trace_id: str | None
    error: dict[str, Any] | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "status": self.status,
            "skill": self.skill,
            "session": self.session,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "owner": self.owner,
            "trace_id": self.trace_id,
            "error": self.error,
        }


def encode_cursor(listing: RunListing) -> str:
    """The opaque cursor of the page after ``listing`` (its position, nothing else)."""
    raw = json.dumps([listing.created_at, listing.run_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, str]:
    """A cursor's position; 400 ``invalid_cursor`` for anything :func:`encode_cursor` did not make."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created_at, run_id = json.loads(raw)
        if isinstance(created_at, bool) or not isinstance(created_at, (int, float)) or not isinstance(run_id, str):
            raise ValueError
        if not math.isfinite(created_at) or len(run_id) > 128:
            raise ValueError
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise BadRequest(
            "invalid cursor: pass next_cursor of the previous page as it is", code="invalid_cursor"
        ) from None
    return float(created_at), run_id
