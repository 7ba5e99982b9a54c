"""Who may touch what: the one place that decides authorization.

Every run, session and artifact belongs to a *tenant*: the stable id of the API key
that made it (a hash prefix, never the secret).  With no keys configured (loopback
development) every caller is the one local tenant.

* A caller sees, stages from, cancels and reuses only what its own tenant owns.
* An admin key may act on any tenant's resources; doing so is *cross-tenant* and is
  written to the audit log by the caller of :func:`authorize`.
* A refusal is indistinguishable from absence (``404``), so a key cannot probe which
  ids or names another key uses.
* What needs an admin key (installing skills, ``host://`` inputs) is decided here too
  (:func:`require_admin`, :func:`authorize_inputs`): every front end (``POST /v1/runs``,
  ``POST /v1/tools/call``, MCP) asks the same functions.

:func:`permit` and :func:`resolve_tenant_audited` write the audit line (logger
``skill_executor.audit``: ``cross_tenant: true``, who, whose, what) whenever an admin crosses
tenants, so callers cannot forget it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass

from .errors import BadRequest, Forbidden, NotFound

audit_log = logging.getLogger("skill_executor.audit")

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
        raise BadRequest(f"invalid owner id {tenant[:80]!r}", code="invalid_owner")
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


def audit(who: Principal, owner: str, *, action: str, target: str) -> None:
    """The audit line of a cross-tenant access (an admin acting on ``owner``'s resource)."""
    audit_log.warning(
        "cross-tenant access",
        extra={
            "audit": True,
            "cross_tenant": True,
            "principal": who.id,
            "owner": owner,
            "action": action,
            "target": target[:300],
        },
    )


def permit(who: Principal, owner: str | None, *, action: str, target: str, what: str, code: str) -> bool:
    """:func:`authorize`, and the audit line when it crosses tenants; returns cross_tenant."""
    cross = authorize(who, owner, what=what, code=code)
    if cross and owner is not None:
        audit(who, owner, action=action, target=target)
    return cross


def resolve_tenant_audited(who: Principal, requested: str | None, *, action: str, target: str) -> str:
    """:func:`resolve_tenant`, and the audit line when an admin addresses another tenant."""
    tenant, cross = resolve_tenant(who, requested)
    if cross:
        audit(who, tenant, action=action, target=target)
    return tenant


def require_admin(who: Principal, message: str = "this operation needs an admin key") -> None:
    """Operations that are not per tenant (installing skills, reading the host) need an admin."""
    if not who.admin:
        raise Forbidden(message, code="admin_required")


def authorize_inputs(who: Principal, sources: Iterable[str]) -> None:
    """The sources of a run's inputs: ``host://`` reads the service's host, so admins only.

    (Whether the path is inside the allowed host roots is the stager's check, for
    everyone; ``artifact://`` and sessions are per tenant by construction.)
    """
    if any(source.startswith("host://") for source in sources):
        require_admin(who, "host:// inputs need an admin key")
