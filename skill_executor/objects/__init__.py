"""The object store: moving bytes to and from a store by key (a local folder or S3).

``open_object_store(settings)`` builds the configured one; :class:`ObjectStore` (base.py)
is what callers use, the content-addressed blobs (``put_blob``, ``open_blob``,
``fetch_blob``) included.
"""

from __future__ import annotations

from ..config import Settings
from ..extras import require
from .base import ByteReader, ObjectStore
from .errors import ObjectCorrupt, ObjectNotFound, ObjectStoreMisconfigured, ObjectStoreUnavailable
from .keys import blob_key, validate_key
from .local import LocalObjectStore

__all__ = [
    "LocalObjectStore",
    "ObjectCorrupt",
    "ObjectNotFound",
    "ObjectStore",
    "ObjectStoreMisconfigured",
    "ObjectStoreUnavailable",
    "ByteReader",
    "blob_key",
    "open_object_store",
    "validate_key",
]


def open_object_store(settings: Settings) -> ObjectStore:
    """The store ``SKILL_EXECUTOR_OBJECT_STORE`` names: S3 (credentials from boto3's standard
    chain, e.g. ``AWS_ACCESS_KEY_ID``) or a local folder (default ``<data_dir>/objects``).
    No request is made here: an unreachable store shows at the first use or :meth:`~ObjectStore.check`."""
    location = settings.object_store_location
    if location.bucket is None:
        return LocalObjectStore(location.path)
    require("s3")
    from .s3 import S3ObjectStore  # boto3 is imported only when S3 is configured

    return S3ObjectStore(
        location.bucket,
        location.prefix,
        settings.s3_endpoint_url,
        spool_dir=settings.data_dir / "spool",
    )
