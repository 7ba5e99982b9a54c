"""Who may touch what: the one place that decides authorization.

Every run, session and artifact belongs to a *tenant*: the stable id of the API key
that made it (a hash prefix, never the secret).  With no keys configured (loopback
development) every caller is the one local tenant.

* A caller sees, stages from, cancels and reuses only what its own tenant owns.
* An admin key may act on any tenant's resources; doing so is *cross-tenant* and is
  written to the audit log by the caller of :func:`authorize`.
* A refusal is indistinguishable from absence (``404``), so a key cannot probe which
  ids or names another key uses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import BadRequest, NotFound

#: The tenant of everything made while no API keys are configured.
LOCAL_TENANT = "local"
_TENANT = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: ``id`` is the tenant (a hash prefix of the key, safe to log)."""

    id: str
    admin: bool


#: The caller when authentication is off: the local tenant, allowed everything.
LOCAL = Principal(LOCAL_TENANT, admin=True)


def check_tenant(tenant: str) -> str:
    """A tenant id is used in paths and records: refuse anything but a plain token."""
    if not _TENANT.match(tenant):
        raise BadRequest(f"invalid owner id {tenant!r}", code="invalid_owner")
    return tenant


def authorize(who: Principal, owner: str | None, *, what: str, code: str) -> bool:
    """Allow ``who`` to act on a resource owned by ``owner``; return True when that
    crosses tenants (an admin acting on another key's resource: audit it).

    Refused access raises :class:`NotFound` with ``what`` (for example ``run 'x'``)
    and ``code``, exactly as if the resource did not exist.
    """
    if owner is None or owner == who.id:
        return False
    if who.admin:
        return True
    raise NotFound(f"no {what}", code=code)


def resolve_tenant(who: Principal, requested: str | None) -> tuple[str, bool]:
    """The tenant a request acts for: the caller's own, or (admins only) ``requested``.

    Returns (tenant, cross_tenant).
    """
    if requested is None or requested == who.id:
        return who.id, False
    check_tenant(requested)
    if not who.admin:
        raise NotFound(f"no owner {requested!r}", code="owner_not_found")
    return requested, True
