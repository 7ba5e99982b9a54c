"""Objects in an S3 bucket (AWS, or any S3 API: SeaweedFS, MinIO, Ceph) through boto3.

Keys live under an optional prefix (``s3://bucket/prefix`` -> ``prefix/<key>``).  Uploads
go through boto3's managed transfers from a file on disk (multipart above
``multipart_threshold``, parts read from the file as they are sent); a stream is first
spooled to a local temp file (see :mod:`.base`).  Reads stream the response body.

Every botocore/boto3 failure goes through :func:`map_error`, the one mapping: the store
unreachable, timing out, throttling or failing (5xx) -> :class:`ObjectStoreUnavailable`
(503 with a Retry-After hint); a missing key -> :class:`ObjectNotFound`; access denied,
unknown credentials or no such bucket -> :class:`ObjectStoreMisconfigured`, naming bucket and
endpoint (never a credential).  Anything else is unexpected and raised as it is.

Timeouts and retries are bounded (:data:`CONNECT_TIMEOUT`, :data:`READ_TIMEOUT`,
:data:`MAX_ATTEMPTS`): a dead endpoint fails within seconds, and nothing is cached between
calls, so the store works again as soon as the endpoint answers.
"""

from __future__ import annotations

import io
import re
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urlsplit

import boto3
import boto3.exceptions
import botocore.exceptions
import s3transfer.exceptions
import urllib3.exceptions
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

from ..errors import ExecutorError
from .base import CHUNK_BYTES, TEMP_PREFIX, ObjectStore, spool_file
from .errors import ObjectNotFound, ObjectStoreMisconfigured, ObjectStoreUnavailable
from .keys import validate_key

MiB = 1024 * 1024
#: Seconds to open a connection, and to wait for a response's next bytes.
CONNECT_TIMEOUT = 3.0
READ_TIMEOUT = 10.0
#: Tries of one request (the first included), with botocore's standard backoff between them.
MAX_ATTEMPTS = 2
#: Objects this large or larger are uploaded and downloaded in parts of ``MULTIPART_CHUNK`` bytes.
MULTIPART_THRESHOLD = 8 * MiB
MULTIPART_CHUNK = 8 * MiB
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_NOT_FOUND = {"NoSuchKey", "NotFound", "404"}
_DENIED = {
    "AccessDenied",
    "403",
    "Forbidden",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "InvalidToken",
    "ExpiredToken",
    "AllAccessDisabled",
    "AccountProblem",
    "InvalidBucketName",
    "NoSuchBucket",
    "PermanentRedirect",
    "AuthorizationHeaderMalformed",
}
_BUSY = {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "ServiceUnavailable", "InternalError"}


def valid_bucket(bucket: str) -> str:
    if not _BUCKET.fullmatch(bucket) or ".." in bucket:
        raise ValueError(f"invalid S3 bucket name {bucket[:80]!r} (3 to 63 of a-z 0-9 . -)")
    return bucket


def shown_endpoint(endpoint_url: str | None) -> str:
    """The endpoint for messages: scheme, host and port only (never user info)."""
    if endpoint_url is None:
        return "AWS S3"
    parts = urlsplit(endpoint_url)
    host = parts.hostname or "?"
    return f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")


class S3ObjectStore(ObjectStore):
    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        endpoint_url: str | None = None,
        *,
        session: boto3.session.Session | None = None,
        spool_dir: Path | None = None,
        multipart_threshold: int = MULTIPART_THRESHOLD,
        connect_timeout: float = CONNECT_TIMEOUT,
        read_timeout: float = READ_TIMEOUT,
    ) -> None:
        self.bucket = valid_bucket(bucket)
        self.prefix = prefix.strip("/")
        if self.prefix:
            validate_key(self.prefix)
        self.endpoint_url = endpoint_url
        self.spool_dir = spool_dir
        config = Config(
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            retries={"max_attempts": MAX_ATTEMPTS, "mode": "standard"},
            s3={"addressing_style": "path"} if endpoint_url else {},
            max_pool_connections=16,
        )
        self._client: Any = (session or boto3.session.Session()).client("s3", endpoint_url=endpoint_url, config=config)
        self._transfer = TransferConfig(
            multipart_threshold=multipart_threshold,
            multipart_chunksize=MULTIPART_CHUNK,
            max_concurrency=4,
            max_io_queue=8,
            num_download_attempts=MAX_ATTEMPTS,
            preferred_transfer_client="classic",
        )
        self._bucket_seen = False

    def describe(self) -> str:
        where = f"s3://{self.bucket}" + (f"/{self.prefix}" if self.prefix else "")
        return f"{where} at {shown_endpoint(self.endpoint_url)}"

    def check(self) -> None:
        probe = self._full(f"{TEMP_PREFIX}check-{uuid.uuid4().hex}")
        with self._errors("the health probe"):
            self._client.put_object(Bucket=self.bucket, Key=probe, Body=b"ok")
            self._client.delete_object(Bucket=self.bucket, Key=probe)
        self._bucket_seen = True

    # -- hooks ------------------------------------------------------------------------------

    def _spool_folder(self) -> Path | None:
        return self.spool_dir

    def _spool(self) -> AbstractContextManager[tuple[BinaryIO, Path]]:
        folder = self.spool_dir or Path(tempfile.gettempdir())
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise ObjectStoreUnavailable(f"the object store's spool folder {folder}: {exc.strerror}") from None
        return spool_file(folder)

    def _publish(self, key: str, path: Path) -> None:
        self._put_file(key, path)

    def _put_file(self, key: str, path: Path) -> None:
        with self._errors(key):
            self._client.upload_file(str(path), self.bucket, self._full(key), Config=self._transfer)

    def _open(self, key: str) -> BinaryIO:
        with self._errors(key):
            body = self._client.get_object(Bucket=self.bucket, Key=self._full(key))["Body"]
        return io.BufferedReader(_Body(body, self, key), CHUNK_BYTES)

    def _download_into(self, key: str, file: BinaryIO) -> None:
        with self._errors(key, head=True):
            self._client.download_fileobj(self.bucket, self._full(key), file, Config=self._transfer)

    def _exists(self, key: str) -> bool:
        try:
            self._head(key)
        except ObjectNotFound:
            return False
        return True

    def _size(self, key: str) -> int:
        return int(self._head(key)["ContentLength"])

    def _delete(self, key: str) -> None:
        with self._errors(key):
            self._client.delete_object(Bucket=self.bucket, Key=self._full(key))

    def _list(self, prefix: str) -> Iterator[str]:
        root = f"{self.prefix}/" if self.prefix else ""
        pages = self._client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=root + prefix)
        with self._errors(prefix or "the listing"):
            for page in pages:
                for item in page.get("Contents", ()):
                    key = item["Key"][len(root) :]
                    try:
                        yield validate_key(key)
                    except ValueError:
                        continue  # not written through this seam (a probe, a foreign object)

    # -- helpers ----------------------------------------------------------------------------

    def _full(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _head(self, key: str) -> dict[str, Any]:
        with self._errors(key, head=True):
            return dict(self._client.head_object(Bucket=self.bucket, Key=self._full(key)))

    @contextmanager
    def _errors(self, what: str, *, head: bool = False) -> Iterator[None]:
        try:
            yield
        except ExecutorError:
            raise
        except Exception as exc:
            mapped = map_error(exc, store=self.describe(), what=what)
            if mapped is None:
                raise
            if head and isinstance(mapped, ObjectNotFound):
                self._bucket_exists()  # a HEAD's 404 has no body: is it the key or the bucket?
            raise mapped from exc

    def _bucket_exists(self) -> None:
        """Raise the configuration error if the bucket is missing (once seen, not asked again)."""
        if self._bucket_seen:
            return
        try:
            self._client.head_bucket(Bucket=self.bucket)
        except Exception as exc:
            mapped = map_error(exc, store=self.describe(), what="the bucket")
            if isinstance(mapped, ObjectNotFound):
                mapped = ObjectStoreMisconfigured(f"the object store {self.describe()}: the bucket does not exist")
            raise (mapped or exc) from exc
        self._bucket_seen = True


class _Body(io.RawIOBase):
    """A response body read in pieces; a connection lost mid-read maps like any other failure."""

    def __init__(self, body: Any, store: S3ObjectStore, key: str) -> None:
        self._body = body
        self._store = store
        self._key = key

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        with self._store._errors(self._key):
            data: bytes = self._body.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        try:
            self._body.close()
        finally:
            super().close()


def _unwrap(exc: BaseException) -> BaseException:
    """The error under boto3's and s3transfer's wrappers (they keep it as the cause or context)."""
    wrappers = (
        boto3.exceptions.S3UploadFailedError,
        boto3.exceptions.RetriesExceededError,
        s3transfer.exceptions.RetriesExceededError,
        s3transfer.exceptions.S3UploadFailedError,
        s3transfer.exceptions.S3DownloadFailedError,
    )
    seen = 0
    while isinstance(exc, wrappers) and seen < 5:
        inner = getattr(exc, "last_exception", None) or exc.__cause__ or exc.__context__
        if inner is None:
            break
        exc, seen = inner, seen + 1
    return exc


def map_error(exc: BaseException, *, store: str, what: str) -> ExecutorError | None:
    """The one mapping of S3 failures to the service's errors (None: unexpected, raise as is)."""
    exc = _unwrap(exc)
    if isinstance(exc, (botocore.exceptions.NoCredentialsError, botocore.exceptions.PartialCredentialsError)):
        return ObjectStoreMisconfigured(f"the object store {store}: no usable AWS credentials ({type(exc).__name__})")
    if isinstance(exc, botocore.exceptions.ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        if code in _NOT_FOUND:
            return ObjectNotFound(f"no object {what} in the object store")
        if code in _DENIED or status in (401, 403):
            return ObjectStoreMisconfigured(f"the object store {store} refused {what}: {code or status}")
        if code in _BUSY or status == 429 or status >= 500:
            return ObjectStoreUnavailable(f"the object store {store} failed on {what}: {code or status}")
        return None
    if isinstance(
        exc,
        (
            botocore.exceptions.HTTPClientError,  # read timeouts, closed connections, broken streams
            botocore.exceptions.ConnectionError,  # refused, connect timeouts, DNS, TLS
            botocore.exceptions.IncompleteReadError,
            urllib3.exceptions.HTTPError,
            ConnectionError,
            TimeoutError,
        ),
    ):
        return ObjectStoreUnavailable(f"the object store {store} is not reachable ({type(exc).__name__})")
    return None
