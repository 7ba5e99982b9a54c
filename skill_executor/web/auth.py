"""Bearer-token authentication from configured keys.

Keys come from ``SKILL_EXECUTOR_API_KEYS`` / ``SKILL_EXECUTOR_ADMIN_KEYS``
(comma-separated) and from a keys file (one key per line, ``KEY`` or ``KEY admin``;
``#`` comments).  Tokens are compared in constant time against every key.  With no
keys configured, authentication is off -- which the service only allows on a
loopback address -- and every caller is :data:`skill_executor.access.LOCAL`.

This module only says *who* is calling; what they may do is :mod:`skill_executor.access`.
"""

from __future__ import annotations

import hmac
import ipaddress
from pathlib import Path

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ..access import LOCAL, Principal, check_tenant, key_id, read_keys_file, require_admin
from ..config import Settings
from ..errors import ExecutorError


class Unauthorized(ExecutorError):
    code = "unauthorized"
    status = 401


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind_problem(settings: Settings, keyring: KeyRing, runtime: str | None = None) -> str | None:
    """Why the service must not serve on ``settings.host`` as configured (None: it may)."""
    if is_loopback(settings.host):
        return None
    if (runtime or settings.runtime) == "local":
        return (
            f"refusing to serve on {settings.host} with the local runtime: it runs commands as this "
            "service's user with its network and files (no isolation); bind to 127.0.0.1 or use --runtime docker"
        )
    if not keyring.enabled:
        return (
            f"refusing to serve on {settings.host} without API keys; set SKILL_EXECUTOR_API_KEYS "
            "(or SKILL_EXECUTOR_API_KEYS_FILE), or bind to 127.0.0.1"
        )
    return None


class KeyRing:
    def __init__(self, keys: list[tuple[str, bool]]) -> None:
        self._keys = [(k.encode(), admin) for k, admin in keys if k]

    @classmethod
    def from_settings(cls, settings: Settings) -> KeyRing:
        keys = [(k, False) for k in settings.api_keys] + [(k, True) for k in settings.admin_keys]
        if settings.api_keys_file is not None:
            keys += [(entry.key, entry.admin) for entry in read_keys_file(Path(settings.api_keys_file))]
        return cls(keys)

    @property
    def enabled(self) -> bool:
        return bool(self._keys)

    def authenticate(self, authorization: str | None) -> Principal:
        if not self.enabled:
            return LOCAL
        if not authorization or not authorization.lower().startswith("bearer "):
            raise Unauthorized("missing bearer token (Authorization: Bearer <key>)")
        token = authorization[7:].strip().encode()
        match: Principal | None = None
        for key, admin in self._keys:
            # Compare against every key, always, so timing says nothing about which matched.
            if hmac.compare_digest(token, key) and match is None:
                match = Principal(key_id(key.decode()), admin)
        if match is None:
            raise Unauthorized("invalid bearer token")
        return match


def _authenticate(request: Request) -> Principal:
    ring: KeyRing = request.app.state.keyring
    found = ring.authenticate(request.headers.get("authorization"))
    request.state.principal = found
    return found


#: The OpenAPI security scheme of every route that depends on :func:`principal` or
#: :func:`admin` (``components.securitySchemes.bearer``): /docs can authorize with it and
#: generated clients learn the key.  It only declares; checking is :class:`KeyRing`'s (and
#: its 401s are ours), so ``auto_error`` is off.
BEARER = HTTPBearer(
    scheme_name="bearer",
    description="An API key: `Authorization: Bearer <key>` (SKILL_EXECUTOR_API_KEYS, or an admin key for "
    "the admin routes). A service without keys (loopback development) needs none.",
    auto_error=False,
)


# The dependencies are coroutines on purpose: authentication is a few constant-time
# comparisons, and a plain function would cost every request a hop through the web
# server's thread pool.
async def principal(request: Request, _: HTTPAuthorizationCredentials | None = Depends(BEARER)) -> Principal:
    """FastAPI dependency: the authenticated caller."""
    return _authenticate(request)


async def admin(request: Request, _: HTTPAuthorizationCredentials | None = Depends(BEARER)) -> Principal:
    """FastAPI dependency: the authenticated caller, who must hold an admin key."""
    found = _authenticate(request)
    require_admin(found)
    return found


def key_principal(request: Request) -> Principal:
    """The caller by its API key (what :func:`principal` depends on)."""
    return _authenticate(request)


def internal_principal(secret: str, authorization: str | None, tenant: str | None) -> Principal:
    """A call from a cluster's API replica to a worker: authenticated by the cluster's secret,
    on behalf of the tenant the replica resolved (never an admin: the replica resolved any
    ``?owner=`` and audited it)."""
    token = authorization[7:].strip() if authorization and authorization.lower().startswith("bearer ") else ""
    if not hmac.compare_digest(token.encode(), secret.encode()):
        raise Unauthorized("invalid or missing cluster secret (a worker answers only its cluster's replicas)")
    return Principal(check_tenant(tenant or ""), admin=False)
