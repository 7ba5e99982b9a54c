"""Artifacts: the versioned store, per tenant.

Every call acts on the caller's own artifacts; an admin may address another key's with
``?owner=<key id>`` (audited).  Store work (SQLite, blobs) never runs on the event
loop, and downloads are streamed from the blob.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, BinaryIO

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from ...access import Principal, resolve_tenant_audited
from ...artifacts.store import ArtifactInfo
from ...errors import BadRequest
from ..auth import principal
from ..schemas import ERRORS, ArtifactList, ArtifactModel

router = APIRouter(prefix="/v1/artifacts", tags=["artifacts"], responses=ERRORS)

_CHUNK = 256 * 1024
#: The largest version a SQLite INTEGER holds (a bigger one is a 422, not a 500).
_MAX_VERSION = 2**63 - 1
#: ``type/subtype`` (RFC 6838 names), as kept with an artifact and sent back as its Content-Type.
_MIME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}$")


def _owner_param() -> Any:
    return Query(default=None, max_length=64, description="admins: act on this key id's artifacts (audited)")


def _model(info: ArtifactInfo) -> ArtifactModel:
    return ArtifactModel.model_validate(info.to_dict())


def _tenant(who: Principal, owner: str | None, action: str, target: str) -> str:
    return resolve_tenant_audited(who, owner, action=action, target=target)


@router.get("", response_model=ArtifactList, summary="Every artifact of the caller (or ?owner=), latest version")
def list_artifacts(
    request: Request, owner: str | None = _owner_param(), who: Principal = Depends(principal)
) -> ArtifactList:
    tenant = _tenant(who, owner, "artifact.list", "*")
    return ArtifactList(artifacts=[_model(i) for i in request.app.state.executor.artifacts.names(tenant=tenant)])


@router.get("/{name:path}/versions", response_model=ArtifactList, summary="All versions of an artifact")
def versions(
    name: str, request: Request, owner: str | None = _owner_param(), who: Principal = Depends(principal)
) -> ArtifactList:
    tenant = _tenant(who, owner, "artifact.versions", name)
    store = request.app.state.executor.artifacts
    return ArtifactList(artifacts=[_model(i) for i in store.versions(name, tenant=tenant)])


@router.post("/{name:path}", response_model=ArtifactModel, status_code=201, summary="Save a new version",
             openapi_extra={"requestBody": {"content": {"application/octet-stream": {
                 "schema": {"type": "string", "format": "binary"}}}, "required": True}})
async def put_artifact(
    name: str, request: Request, owner: str | None = _owner_param(), who: Principal = Depends(principal)
) -> ArtifactModel:
    tenant = _tenant(who, owner, "artifact.put", name)
    mime = request.headers.get("content-type", "").split(";")[0].strip() or "application/octet-stream"
    if not _MIME.match(mime):
        raise BadRequest(f"invalid Content-Type {mime[:80]!r}: use type/subtype", code="invalid_mime_type")
    data = await request.body()
    store = request.app.state.executor.artifacts
    info = await run_in_threadpool(store.put, name, data, mime_type=mime.lower(), tenant=tenant)
    return _model(info)


def _chunks(handle: BinaryIO) -> Iterator[bytes]:
    with handle:
        while chunk := handle.read(_CHUNK):
            yield chunk


@router.get("/{name:path}", summary="An artifact's content (latest, or ?version=N)",
            responses={200: {"content": {"*/*": {"schema": {"type": "string", "format": "binary"}}},
                             "description": "the content, with the MIME type it was saved with"}})
def get_artifact(
    name: str,
    request: Request,
    version: int | None = Query(default=None, ge=1, le=_MAX_VERSION),
    owner: str | None = _owner_param(),
    who: Principal = Depends(principal),
) -> Response:
    tenant = _tenant(who, owner, "artifact.read", name)
    store = request.app.state.executor.artifacts
    info = store.info(name, version, tenant=tenant)
    headers = {"X-Artifact-Version": str(info.version), "X-Artifact-SHA256": info.sha256, "ETag": f'"{info.sha256}"',
               "Content-Length": str(info.size)}
    # A sync iterator: Starlette reads it in the thread pool, one chunk at a time.
    return StreamingResponse(_chunks(store.open(info)), media_type=info.mime_type, headers=headers)
