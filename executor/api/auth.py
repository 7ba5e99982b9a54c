"""Bearer-token authentication from configured keys.

Keys come from ``SKILL_EXECUTOR_API_KEYS`` / ``SKILL_EXECUTOR_ADMIN_KEYS``
(comma-separated) and from a keys file (one key per line, ``KEY`` or ``KEY admin``;
``#`` comments).  Tokens are compared in constant time against every key.  With no
keys configured, authentication is off -- which the service only allows on a
loopback address -- and every caller may do everything.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from fastapi import Request

from ..config import Settings
from ..errors import ExecutorError, Forbidden


class Unauthorized(ExecutorError):
    code = "unauthorized"
    status = 401


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: ``id`` is a hash prefix of the key (safe to log), never the key."""

    id: str
    admin: bool


ANONYMOUS = Principal("anonymous", True)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class KeyRing:
    def __init__(self, keys: list[tuple[str, bool]]) -> None:
        self._keys = [(k.encode(), admin) for k, admin in keys if k]

    @classmethod
    def from_settings(cls, settings: Settings) -> "KeyRing":
        keys = [(k, False) for k in settings.api_keys] + [(k, True) for k in settings.admin_keys]
        if settings.api_keys_file is not None:
            for line in Path(settings.api_keys_file).read_text().splitlines():
                fields = line.split("#", 1)[0].split()
                if fields:
                    keys.append((fields[0], len(fields) > 1 and fields[1] == "admin"))
        return cls(keys)

    @property
    def enabled(self) -> bool:
        return bool(self._keys)

    def authenticate(self, authorization: str | None) -> Principal:
        if not self.enabled:
            return ANONYMOUS
        if not authorization or not authorization.lower().startswith("bearer "):
            raise Unauthorized("missing bearer token (Authorization: Bearer <key>)")
        token = authorization[7:].strip().encode()
        match: Principal | None = None
        for key, admin in self._keys:
            # Compare against every key, always, so timing says nothing about which matched.
            if hmac.compare_digest(token, key) and match is None:
                match = Principal(hashlib.sha256(key).hexdigest()[:12], admin)
        if match is None:
            raise Unauthorized("invalid bearer token")
        return match


def principal(request: Request) -> Principal:
    """FastAPI dependency: the authenticated caller."""
    ring: KeyRing = request.app.state.keyring
    found = ring.authenticate(request.headers.get("authorization"))
    request.state.principal = found
    return found


def admin(request: Request) -> Principal:
    found = principal(request)
    if not found.admin:
        raise Forbidden("this operation needs an admin key", code="admin_required")
    return found
