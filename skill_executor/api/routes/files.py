"""Files by id: upload once, reference by id (a run's ``inputs[].file_id``), fetch outputs by id.

A file is an artifact version (:mod:`.artifacts`): ``POST /v1/files`` saves the upload as the
next version of the artifact named by its file name, and answers with the version's
``id`` (:func:`~skill_executor.artifacts.names.file_id`); every artifact version -- a run's
saved outputs included (``outputs.save``: ``output_files[].file_id``) -- has one.  Ids are
per key: another key's id is 404 ``file_not_found``, as is an unknown one.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

from fastapi import APIRouter, Depends, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field
from starlette.datastructures import UploadFile

from ...access import Principal
from ...artifacts.names import NAME_MAX, validate_name
from ...artifacts.store import ArtifactInfo, LocalArtifactStore
from ...errors import BadRequest
from ...web.auth import principal
from ...web.content import download_headers
from ..schemas import ERRORS
from .artifacts import blob_chunks, check_mime, receive

router = APIRouter(prefix="/v1/files", tags=["files"], responses=ERRORS)

_CHUNK = 256 * 1024
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")


class FileModel(BaseModel):
    id: str = Field(description="the file id: inputs' file_id, GET /v1/files/{id}")
    name: str = Field(description="its name (the artifact it is a version of); staged as work/inputs/<name>")
    version: int = Field(description="the artifact version it is")
    size: int
    mime_type: str
    sha256: str
    created_at: float
    run_id: str | None = Field(default=None, description="the run that saved it, if one did")
    ref: str = Field(description="the same version as an artifact:// reference")


class FileList(BaseModel):
    files: list[FileModel]


def _model(info: ArtifactInfo) -> FileModel:
    return FileModel(
        id=info.file_id,
        name=info.name,
        version=info.version,
        size=info.size,
        mime_type=info.mime_type,
        sha256=info.sha256,
        created_at=info.created_at,
        run_id=info.run_id,
        ref=info.ref,
    )


def _store(request: Request) -> LocalArtifactStore:
    store: LocalArtifactStore = request.app.state.executor.artifacts
    return store


def file_name(raw: str) -> str:
    """An uploaded file's name as an artifact name: its last path segment, characters an
    artifact name cannot hold replaced by ``_`` (``My Report (1).pdf`` -> ``My_Report_1_.pdf``)."""
    base = raw.replace("\\", "/").rsplit("/", 1)[-1].strip()
    name = _UNSAFE.sub("_", base).strip("_") or "file"
    if not re.match(r"^[A-Za-z0-9_]", name):
        name = "_" + name
    if len(name) > NAME_MAX:
        stem, dot, ext = name.rpartition(".")
        name = (stem[: NAME_MAX - len(ext) - 1] + dot + ext) if dot and len(ext) < 16 else name[:NAME_MAX]
    return validate_name(name)


async def _parts(upload: UploadFile) -> AsyncIterator[bytes]:
    while chunk := await upload.read(_CHUNK):
        yield chunk


@router.post(
    "",
    response_model=FileModel,
    status_code=201,
    summary="Upload a file; answers its id",
    description="A multipart form with one file part (its file name names it; a `name` field or `?name=` "
    "overrides), or the raw body with `?name=`. Saved as the next version of the artifact of that "
    "name (characters an artifact name cannot hold become `_`); the part's or the body's "
    "`Content-Type` is kept, else the type is sniffed.",
    openapi_extra={
        "requestBody": {
            "content": {
                "multipart/form-data": {
                    "schema": {"type": "object", "properties": {"file": {"type": "string", "format": "binary"}}}
                },
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
            },
            "required": True,
        }
    },
)
async def upload_file(
    request: Request,
    name: str | None = Query(default=None, max_length=1024, description="the file's name (required for a raw body)"),
    who: Principal = Depends(principal),
) -> FileModel:
    store = _store(request)
    if request.headers.get("content-type", "").startswith("multipart/form-data"):
        form = await request.form(max_files=1, max_fields=10)
        try:
            parts = [v for _, v in form.multi_items() if isinstance(v, UploadFile)]
            if len(parts) != 1:
                raise BadRequest("send exactly one file part", code="invalid_upload")
            field = form.get("name")
            given = name or (field if isinstance(field, str) and field else None) or parts[0].filename
            if not given:
                raise BadRequest("the file part has no file name; add ?name=", code="invalid_upload")
            mime = check_mime((parts[0].content_type or "").split(";")[0].strip())
            mime = "" if mime == "application/octet-stream" else mime
            info = await receive(request, store, file_name(given), mime, who.id, _parts(parts[0]))
        finally:
            await form.close()
        return _model(info)
    if not name:
        raise BadRequest("a raw upload needs ?name=<file name>", code="invalid_upload")
    mime = check_mime(request.headers.get("content-type", "").split(";")[0].strip())
    return _model(await receive(request, store, file_name(name), mime, who.id, request.stream()))


@router.get("", response_model=FileList, summary="The caller's files: the latest version of each name")
def list_files(request: Request, who: Principal = Depends(principal)) -> FileList:
    return FileList(files=[_model(info) for info in _store(request).names(tenant=who.id)])


@router.get("/{file_id}", response_model=FileModel, summary="A file's metadata")
def get_file(file_id: str, request: Request, who: Principal = Depends(principal)) -> FileModel:
    return _model(_store(request).by_file_id(file_id, tenant=who.id))


@router.get(
    "/{file_id}/content",
    summary="A file's content, streamed",
    responses={200: {"content": {"*/*": {"schema": {"type": "string", "format": "binary"}}}}},
)
async def file_content(file_id: str, request: Request, who: Principal = Depends(principal)) -> StreamingResponse:
    store = _store(request)
    info = await run_in_threadpool(store.by_file_id, file_id, tenant=who.id)
    handle = await run_in_threadpool(store.open, info)
    headers = {"ETag": f'"{info.sha256}"', "Content-Length": str(info.size), "X-File-Name": info.name}
    headers |= download_headers(info.name, info.mime_type)  # never active content of this origin
    return StreamingResponse(blob_chunks(handle), media_type=info.mime_type, headers=headers)


@router.delete("/{file_id}", response_model=FileModel, summary="Delete a file (that artifact version)")
def delete_file(file_id: str, request: Request, who: Principal = Depends(principal)) -> FileModel:
    store = _store(request)
    info = store.by_file_id(file_id, tenant=who.id)
    store.delete(info.name, info.version, tenant=who.id)
    return _model(info)
