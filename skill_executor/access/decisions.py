"""The decisions: may a caller act on a tenant's resource, for which tenant does a request act,
what needs an admin; and the audit line of every cross-tenant access."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from ..errors import Forbidden, NotFound
from .tenants import Principal, check_tenant

audit_log = logging.getLogger("skill_executor.audit")


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
