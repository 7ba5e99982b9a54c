"""The object store's errors: each a subclass of the service's hierarchy with its own code."""

from __future__ import annotations

from ..errors import ExecutorError, NotFound, Unavailable

#: The Retry-After hint (seconds) of an unavailable store.
RETRY_AFTER_SECONDS = 5


class ObjectStoreUnavailable(Unavailable):
    """The store cannot be reached, timed out, or answered with a server error (503, Retry-After)."""

    code = "object_store_unavailable"
    status = 503
    retry_after = RETRY_AFTER_SECONDS


class ObjectStoreMisconfigured(ExecutorError):
    """Access denied, unknown credentials or no such bucket: the operator's to fix."""

    code = "object_store_misconfigured"
    status = 503


class ObjectNotFound(NotFound):
    code = "object_not_found"
    status = 404


class ObjectCorrupt(ExecutorError):
    """What the store returned does not hash to the SHA-256 it was asked for."""

    code = "object_corrupt"
    status = 500
