"""The object store's pure parts (skill_executor/objects): the one key validator, the blob
layout, SKILL_EXECUTOR_OBJECT_STORE parsing, the S3 error mapping (botocore's own exception
types, no server), the HTTP answer of an unavailable store, and a local store that refuses
hostile keys and planted links.  The real-S3 tests are in test_objects.py."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest
from boto3.exceptions import S3UploadFailedError
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import ValidationError

from skill_executor.config import Settings
from skill_executor.errors import Busy
from skill_executor.objects import LocalObjectStore, ObjectNotFound, blob_key, open_object_store, validate_key
from skill_executor.objects.errors import ObjectStoreMisconfigured, ObjectStoreUnavailable
from skill_executor.objects.keys import MAX_KEY_BYTES, validate_prefix
from skill_executor.objects.s3 import S3ObjectStore, map_error, shown_endpoint
from skill_executor.web import problems

from ..service.test_objects import HOSTILE_KEYS

STORE = "s3://bucket at http://127.0.0.1:9"


@pytest.mark.parametrize(
    "key", ["a", "sha256/ab/" + "ab" * 32, "runs/r-1/out_2.txt", "A.b-c_d", "x" * 255 + "/" + "y" * 255]
)
def test_valid_keys(key: str) -> None:
    assert validate_key(key) == key


@pytest.mark.parametrize("key", [*HOSTILE_KEYS, None, b"bytes", "a/..", "..", ".", "a/." + "b"])
def test_hostile_keys_are_value_errors(key: Any) -> None:
    with pytest.raises(ValueError):
        validate_key(key)
    assert len(validate_key("a/" * (MAX_KEY_BYTES // 2 - 1) + "bb")) == MAX_KEY_BYTES
    with pytest.raises(ValueError):
        validate_key("a/" * (MAX_KEY_BYTES // 2) + "b")


@pytest.mark.parametrize("prefix", ["a", "/", "../", "a//", "/a/", ".tmp-x/", "a/../", "a\x00/"])
def test_hostile_prefixes_are_value_errors(prefix: str) -> None:
    with pytest.raises(ValueError):
        validate_prefix(prefix)
    assert validate_prefix("") == "" and validate_prefix("a/b/") == "a/b/"


def test_blob_keys() -> None:
    sha = "0123456789abcdef" * 4
    assert blob_key(sha) == f"sha256/01/{sha}"
    for bad in ("0" * 63, "0" * 65, sha.upper(), "../" + sha[3:], "g" * 64):
        with pytest.raises(ValueError):
            blob_key(bad)


def test_a_local_store_never_leaves_its_root(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "root")
    outside = tmp_path / "secret"
    outside.write_bytes(b"secret")
    for key in HOSTILE_KEYS:
        with pytest.raises(ValueError):
            store.put_stream(key, io.BytesIO(b"overwrite"))
        with pytest.raises(ValueError):
            store.open(key)
    assert outside.read_bytes() == b"secret" and not (tmp_path / "root").exists()
    # A link planted inside the root (the root is private; this is defence in depth): not followed.
    store.put_stream("real", io.BytesIO(b"real"))
    os.symlink(outside, tmp_path / "root" / "planted")
    with pytest.raises(ObjectNotFound):
        store.open("planted")
    with pytest.raises(ObjectNotFound):
        store.size("planted")
    assert not store.exists("planted") and list(store.list()) == ["real"]


def test_the_object_store_setting() -> None:
    assert Settings().object_store_location.path == Path("data/objects")
    assert Settings(object_store="/srv/objects").object_store_location.path == Path("/srv/objects")
    location = Settings(object_store="s3://my-bucket/some/prefix/").object_store_location
    assert (location.bucket, location.prefix) == ("my-bucket", "some/prefix")
    assert Settings(object_store="s3://my-bucket").object_store_location.prefix == ""
    for bad in ("", " ", "gs://bucket", "http://host/x", "s3://", "s3://ab", "s3://Bad_Bucket", "s3://a..b/x"):
        with pytest.raises(ValidationError):
            Settings(object_store=bad)
    for bad in ("ftp://host", "http://user:secret@host", "host:9000", "http://host/path"):
        with pytest.raises(ValidationError):
            Settings(s3_endpoint_url=bad)
    assert Settings(s3_endpoint_url="http://127.0.0.1:8333").s3_endpoint_url == "http://127.0.0.1:8333"


def test_a_hostile_prefix_in_the_setting_is_refused_where_the_store_opens() -> None:
    for prefix in ("../x", "a/../b", ".tmp-x", "a b"):
        with pytest.raises(ValueError):
            open_object_store(Settings(object_store=f"s3://bucket/{prefix}"))
    store = open_object_store(Settings(object_store="s3://bucket/ok/p", s3_endpoint_url="http://127.0.0.1:9"))
    assert isinstance(store, S3ObjectStore) and store.describe() == "s3://bucket/ok/p at http://127.0.0.1:9"


def client_error(code: str, status: int, op: str = "GetObject") -> botocore.exceptions.ClientError:
    return botocore.exceptions.ClientError(
        {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}, op
    )


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (botocore.exceptions.EndpointConnectionError(endpoint_url="http://127.0.0.1:9"), ObjectStoreUnavailable),
        (botocore.exceptions.ConnectTimeoutError(endpoint_url="http://127.0.0.1:9"), ObjectStoreUnavailable),
        (botocore.exceptions.ReadTimeoutError(endpoint_url="http://127.0.0.1:9"), ObjectStoreUnavailable),
        (botocore.exceptions.ConnectionClosedError(endpoint_url="http://127.0.0.1:9"), ObjectStoreUnavailable),
        (botocore.exceptions.ResponseStreamingError(error="reset"), ObjectStoreUnavailable),
        (client_error("SlowDown", 503), ObjectStoreUnavailable),
        (client_error("InternalError", 500), ObjectStoreUnavailable),
        (client_error("", 502), ObjectStoreUnavailable),
        (client_error("TooManyRequests", 429), ObjectStoreUnavailable),
        (client_error("NoSuchKey", 404), ObjectNotFound),
        (client_error("404", 404, "HeadObject"), ObjectNotFound),
        (client_error("NoSuchBucket", 404), ObjectStoreMisconfigured),
        (client_error("AccessDenied", 403), ObjectStoreMisconfigured),
        (client_error("InvalidAccessKeyId", 403), ObjectStoreMisconfigured),
        (client_error("SignatureDoesNotMatch", 403), ObjectStoreMisconfigured),
        (botocore.exceptions.NoCredentialsError(), ObjectStoreMisconfigured),
        (client_error("InvalidArgument", 400), None),  # unexpected: raised as it is (a 500 with an id)
        (RuntimeError("ours"), None),
    ],
)
def test_the_s3_error_mapping(error: BaseException, expected: type | None) -> None:
    mapped = map_error(error, store=STORE, what="k")
    assert (type(mapped) if mapped is not None else None) is expected
    if isinstance(mapped, ObjectStoreUnavailable):
        assert (mapped.status, mapped.retry_after) == (503, 5)


def test_boto3_wrappers_are_unwrapped() -> None:
    """upload_file re-raises a ClientError as S3UploadFailedError (the original as its context)."""
    try:
        try:
            raise client_error("SlowDown", 503, "UploadPart")
        except botocore.exceptions.ClientError as inner:
            raise S3UploadFailedError(f"Failed to upload: {inner}")  # noqa: B904 - boto3's own shape
    except S3UploadFailedError as wrapped:
        assert isinstance(map_error(wrapped, store=STORE, what="k"), ObjectStoreUnavailable)


def test_endpoints_are_shown_without_user_info() -> None:
    assert shown_endpoint("http://user:secret@127.0.0.1:9000/") == "http://127.0.0.1:9000"
    assert shown_endpoint(None) == "AWS S3"


def test_retry_after_reaches_the_http_answer() -> None:
    app = FastAPI()
    problems.install(app)

    @app.get("/down")
    def down() -> None:
        raise ObjectStoreUnavailable("the object store is not reachable")

    @app.get("/busy")
    def busy() -> None:
        raise Busy("full")

    @app.get("/config")
    def config() -> None:
        raise ObjectStoreMisconfigured("refused")

    with TestClient(app) as client:
        down_answer = client.get("/down")
        assert (down_answer.status_code, down_answer.headers["Retry-After"]) == (503, "5")
        assert down_answer.json() == {
            "error": {"code": "object_store_unavailable", "message": "the object store is not reachable"}
        }
        assert client.get("/busy").headers["Retry-After"] == "1"  # 429s keep theirs
        assert "Retry-After" not in client.get("/config").headers  # retrying will not fix a configuration
