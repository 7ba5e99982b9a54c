"""Artifacts: the versioned store, per tenant.

Every call acts on the caller's own artifacts; an admin may address another key's with
``?owner=<key id>`` (audited).  Bodies stream both ways with bounded memory: an upload
is read chunk by chunk into a temp blob (hashed and capped as it arrives), a download
is read from the blob chunk by chunk.  Store work (SQLite, blobs) never runs on the
event loop: the plain ``def`` routes run in the thread pool; an upload is received on
the loop and written about 256 KiB at a time in a worker thread, and a download's
chunks are each read in one -- so no thread is held waiting on a slow client.

Every artifact name is addressable: ``/v1/artifacts/{name}`` is the only route under
the prefix (the versions of a name are ``GET /v1/artifacts?name=...``), so no name --
not even one ending in ``/versions`` -- is shadowed by another route.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from typing import Any, BinaryIO

import anyio
import anyio.to_thread
from fastapi import APIRouter, Depends, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from starlette.requests import ClientDisconnect

from ...access import Principal, resolve_tenant_audited
from ...artifacts.blobs import TempBlob
from ...artifacts.names import validate_name
from ...artifacts.store import ArtifactInfo, LocalArtifactStore
from ...errors import BadRequest
from ...outputs.mime import detect
from ...web.auth import principal
from ...web.content import download_headers
from ..schemas import ERRORS, ArtifactList, ArtifactModel

log = logging.getLogger("skill_executor.artifacts")
router = APIRouter(prefix="/v1/artifacts", tags=["artifacts"], responses=ERRORS)

_CHUNK = 256 * 1024
#: How much of an upload without a Content-Type is looked at to type it (as outputs are).
_SNIFF = 8192
#: The largest version a SQLite INTEGER holds (a bigger one is a 422, not a 500).
_MAX_VERSION = 2**63 - 1
#: ``type/subtype`` (RFC 6838 names), as kept with an artifact and sent back as its Content-Type.
_MIME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}$")


#: The longest pause between two expiry passes (a shorter TTL runs them as often as it is long).
def _owner_param() -> Any:
    return Query(default=None, max_length=64, description="admins: act on this key id's artifacts (audited)")


def _version_param(what: str) -> Any:
    return Query(default=None, ge=1, le=_MAX_VERSION, description=what)


def _model(info: ArtifactInfo) -> ArtifactModel:
    return ArtifactModel.model_validate(info.to_dict())


def _tenant(who: Principal, owner: str | None, action: str, target: str) -> str:
    return resolve_tenant_audited(who, owner, action=action, target=target)


def _store(request: Request) -> LocalArtifactStore:
    store: LocalArtifactStore = request.app.state.executor.artifacts
    return store


@router.get(
    "",
    response_model=ArtifactList,
    summary="The caller's (or ?owner='s) artifacts, latest version each; or every version of ?name=",
)
def list_artifacts(
    request: Request,
    name: str | None = Query(default=None, description="list every version of this artifact (404 when it has none)"),
    owner: str | None = _owner_param(),
    who: Principal = Depends(principal),
) -> ArtifactList:
    store = _store(request)
    if name is not None:
        tenant = _tenant(who, owner, "artifact.versions", name)
        return ArtifactList(artifacts=[_model(i) for i in store.versions(name, tenant=tenant)])
    tenant = _tenant(who, owner, "artifact.list", "*")
    return ArtifactList(artifacts=[_model(i) for i in store.names(tenant=tenant)])


@router.post(
    "/{name:path}",
    response_model=ArtifactModel,
    status_code=201,
    summary="Save a new version (streamed)",
    description="The `Content-Type` (a `type/subtype`) is kept as the artifact's MIME type; without "
    "one, the type is sniffed from the content and the name, as run outputs are typed.",
    openapi_extra={
        "requestBody": {
            "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
            "required": True,
        }
    },
)
async def put_artifact(
    name: str, request: Request, owner: str | None = _owner_param(), who: Principal = Depends(principal)
) -> ArtifactModel:
    tenant = _tenant(who, owner, "artifact.put", name)
    validate_name(name)
    mime = check_mime(request.headers.get("content-type", "").split(";")[0].strip())
    info = await receive(request, _store(request), name, mime, tenant, request.stream())
    return _model(info)


async def receive(
    request: Request, store: LocalArtifactStore, name: str, mime: str, tenant: str, body: AsyncIterator[bytes]
) -> ArtifactInfo:
    """Save ``body`` as the next version of ``name``: received on the event loop and written in
    a worker thread about _CHUNK at a time (no thread waits on a slow client, no more than that
    is held); capped at SKILL_EXECUTOR_MAX_REQUEST_BYTES; typed by content and name when
    ``mime`` is empty, as run outputs are."""
    blob = await run_in_threadpool(store.new_blob, request.app.state.settings.max_request_bytes)
    try:
        pending: list[bytes] = []
        size = total = 0
        head = b""
        async for chunk in body:
            if not mime and len(head) < _SNIFF:
                head += chunk[: _SNIFF - len(head)]
            pending.append(chunk)
            size += len(chunk)
            total += len(chunk)
            if size >= _CHUNK:
                await run_in_threadpool(_write, blob, pending)
                pending, size = [], 0
        await run_in_threadpool(_write, blob, pending)
        if not mime:  # no Content-Type: typed by content and name, as run outputs are
            mime = await run_in_threadpool(detect, name, head, complete=total <= _SNIFF)
        return await run_in_threadpool(store.commit, blob, name, mime_type=mime.lower(), tenant=tenant)
    except ClientDisconnect:
        raise BadRequest("the client disconnected before the whole body arrived", code="client_disconnected") from None
    finally:
        with anyio.CancelScope(shield=True):  # even when cancelled: no temp blob left behind
            await run_in_threadpool(blob.close)


def check_mime(mime: str) -> str:
    """A ``type/subtype`` to keep as a MIME type (or empty: to be sniffed)."""
    if mime and not _MIME.match(mime):
        raise BadRequest(f"invalid Content-Type {mime[:80]!r}: use type/subtype", code="invalid_mime_type")
    return mime


def _write(blob: TempBlob, chunks: list[bytes]) -> None:
    for chunk in chunks:
        blob.write(chunk)


async def blob_chunks(handle: BinaryIO) -> AsyncIterator[bytes]:
    """The blob, one chunk at a time, each read in a worker thread; closed at the end
    (or when the client goes away)."""
    try:
        while chunk := await anyio.to_thread.run_sync(handle.read, _CHUNK):
            yield chunk
    finally:
        handle.close()


@router.get(
    "/{name:path}",
    summary="An artifact's content (latest, or ?version=N), streamed",
    responses={
        200: {
            "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}},
            "description": "the content, with the MIME type it was saved with",
        }
    },
)
def get_artifact(
    name: str,
    request: Request,
    version: int | None = _version_param("this version (default: the latest)"),
    owner: str | None = _owner_param(),
    who: Principal = Depends(principal),
) -> StreamingResponse:
    tenant = _tenant(who, owner, "artifact.read", name)
    store = _store(request)
    info = store.info(name, version, tenant=tenant)
    # Opened here, in the thread pool: the open blob stays readable even if the version
    # is deleted while it streams (blobs are content-addressed and never change).
    handle = store.open(info)
    headers = {
        "X-Artifact-Version": str(info.version),
        "X-Artifact-SHA256": info.sha256,
        "ETag": f'"{info.sha256}"',
        "Content-Length": str(info.size),
    } | download_headers(info.name, info.mime_type)  # never active content of this origin
    return StreamingResponse(blob_chunks(handle), media_type=info.mime_type, headers=headers)


@router.delete(
    "/{name:path}",
    response_model=ArtifactList,
    summary="Delete an artifact: every version, or ?version=N; answers what was deleted",
)
def delete_artifact(
    name: str,
    request: Request,
    version: int | None = _version_param("delete only this version"),
    owner: str | None = _owner_param(),
    who: Principal = Depends(principal),
) -> ArtifactList:
    tenant = _tenant(who, owner, "artifact.delete", name if version is None else f"{name}@{version}")
    return ArtifactList(artifacts=[_model(i) for i in _store(request).delete(name, version, tenant=tenant)])
