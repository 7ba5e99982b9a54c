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

import hashlib
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .errors import BadRequest, ExecutorError, Forbidden, NotFound

audit_log = logging.getLogger("skill_executor.audit")

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


def key_id(key: str) -> str:
    """A key's id: the tenant of what it makes (a hash prefix, safe to log and to write in a
    policy file)."""
    return hashlib.sha256(key.encode()).hexdigest()[:12]


@dataclass(frozen=True, slots=True)
class KeyEntry:
    """One key of SKILL_EXECUTOR_API_KEYS_FILE: the secret, whether it is an admin's, its name."""

    key: str
    admin: bool = False
    name: str | None = None


_KEY_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")


def read_keys_file(path: Path) -> list[KeyEntry]:
    """The keys of a keys file: one per line, ``KEY [admin] [name=NAME]`` (``#`` starts a
    comment).  A name (a-z, 0-9, ``.``, ``_``, ``-``) is what a command policy's rules may
    call the key besides its id; names are unique."""
    entries: list[KeyEntry] = []
    seen: set[str] = set()
    for number, line in enumerate(path.read_text().splitlines(), 1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        name = None
        for field in fields[1:]:
            if field.startswith("name="):
                name = field.removeprefix("name=")
                if not _KEY_NAME.match(name) or name in seen:
                    problem = "is used twice" if name in seen else "is not a key name (a-z, 0-9, . _ -; at most 64)"
                    raise ExecutorError(
                        f"keys file {path}, line {number}: {name[:80]!r} {problem}",
                        code="invalid_keys_file",
                        status=500,
                    )
                seen.add(name)
        entries.append(KeyEntry(fields[0], "admin" in fields[1:], name))
    return entries


def key_names(keys_file: Path | None) -> dict[str, str]:
    """Key id -> name, of the named keys of a keys file (none: {})."""
    if keys_file is None:
        return {}
    return {key_id(entry.key): entry.name for entry in read_keys_file(keys_file) if entry.name}


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
