"""The service's health."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class Check(BaseModel):
    ok: bool
    detail: str


class Health(BaseModel):
    status: Literal["ok", "unhealthy"]
    runtime: str
    checks: dict[str, Check]
    #: The checks that fail (empty when healthy).
    failing: list[str] = []
