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

The package, by job: :mod:`.tenants` (who is calling), :mod:`.keys` (API keys and their file),
:mod:`.decisions` (authorization and its audit).
"""

from .decisions import (
    audit,
    audit_log,
    authorize,
    authorize_inputs,
    permit,
    require_admin,
    resolve_tenant,
    resolve_tenant_audited,
)
from .keys import KeyEntry, key_id, key_names, read_keys_file
from .tenants import LOCAL, LOCAL_TENANT, TENANT_HEADER, Principal, check_tenant

__all__ = [
    "LOCAL",
    "LOCAL_TENANT",
    "TENANT_HEADER",
    "KeyEntry",
    "Principal",
    "audit",
    "audit_log",
    "authorize",
    "authorize_inputs",
    "check_tenant",
    "key_id",
    "key_names",
    "permit",
    "read_keys_file",
    "require_admin",
    "resolve_tenant",
    "resolve_tenant_audited",
]
