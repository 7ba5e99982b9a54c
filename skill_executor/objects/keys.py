"""The one place object keys and list prefixes are validated, and the blob key layout.

A key is a ``/``-separated path of segments made of ``A-Z a-z 0-9 . _ -``, none empty, none
starting with ``.`` (so no ``.`` / ``..``, and a store's own temp and probe names, which all
start with ``.``, can never be a key), at most :data:`MAX_KEY_BYTES` long.  A key that
breaks these rules is a bug in the caller (keys are built by the service, never taken from a
request as they are): :class:`ValueError`, never a path outside the store.
"""

from __future__ import annotations

import re

#: The longest key (S3 allows 1024 bytes; a local file name segment 255).
MAX_KEY_BYTES = 512
MAX_SEGMENT_BYTES = 255
_SEGMENT = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")
_SHA256 = re.compile(r"[0-9a-f]{64}")
#: Where content-addressed blobs live: ``sha256/<first two hex digits>/<sha256>``.
BLOB_PREFIX = "sha256/"


def validate_key(key: str) -> str:
    """``key`` unchanged if it is a valid key; else :class:`ValueError`."""
    if not isinstance(key, str):
        raise ValueError(f"an object key must be a string, not {type(key).__name__}")
    if not key or len(key.encode()) > MAX_KEY_BYTES:
        raise ValueError(f"an object key must be 1 to {MAX_KEY_BYTES} bytes: {key[:80]!r}")
    for segment in key.split("/"):
        if len(segment) > MAX_SEGMENT_BYTES or not _SEGMENT.fullmatch(segment):
            raise ValueError(f"invalid object key {key[:80]!r}: segment {segment[:80]!r}")
    return key


def validate_prefix(prefix: str) -> str:
    """A list prefix: ``""`` (everything) or a valid key followed by ``/`` (what is below it)."""
    if prefix == "":
        return prefix
    if not isinstance(prefix, str) or not prefix.endswith("/"):
        raise ValueError(f"a list prefix is empty or ends with '/': {str(prefix)[:80]!r}")
    validate_key(prefix[:-1])
    return prefix


def validate_sha256(sha256: str) -> str:
    if not isinstance(sha256, str) or not _SHA256.fullmatch(sha256):
        raise ValueError(f"not a lowercase hex SHA-256: {str(sha256)[:80]!r}")
    return sha256


def blob_key(sha256: str, namespace: str = "") -> str:
    """The key of the blob with this SHA-256: ``sha256/ab/abcdef...``, or below ``namespace``
    (``<namespace>/sha256/ab/abcdef...``: a user that deletes its blobs keeps them apart from the
    blobs others reference)."""
    validate_sha256(sha256)
    key = f"{BLOB_PREFIX}{sha256[:2]}/{sha256}"
    return f"{validate_key(namespace)}/{key}" if namespace else key
