"""Tenants: who is calling (:class:`Principal`), the local tenant, and what a tenant id may be."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import BadRequest

#: The tenant of everything made while no API keys are configured.
LOCAL_TENANT = "local"
_TENANT = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: ``id`` is the tenant (a hash prefix of the key, safe to log)."""

    id: str
    admin: bool


#: The header a cluster's API replica names the caller's tenant in, on its calls to a worker.
TENANT_HEADER = "X-Skill-Executor-Tenant"

#: The caller when authentication is off: the local tenant, allowed everything.
LOCAL = Principal(LOCAL_TENANT, admin=True)


def check_tenant(tenant: str) -> str:
    """A tenant id is used in paths and records: refuse anything but a plain token."""
    if not _TENANT.match(tenant):
        raise BadRequest(f"invalid owner id {tenant[:80]!r}", code="invalid_owner")
    return tenant
