"""A run's statuses."""

from __future__ import annotations

from typing import Literal

Status = Literal["pending_approval", "queued", "running", "completed", "failed", "cancelled"]
#: A run held by the command policy until it is approved (nothing of it exists but its record).
PENDING: Status = "pending_approval"
FINAL: frozenset[str] = frozenset({"completed", "failed", "cancelled"})
