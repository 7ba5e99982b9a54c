"""Artifacts: the versioned store."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.concurrency import run_in_threadpool

from ...artifacts.store import ArtifactInfo
from ..auth import Principal, principal
from ..schemas import ERRORS, ArtifactList, ArtifactModel

router = APIRouter(prefix="/v1/artifacts", tags=["artifacts"], responses=ERRORS)


def _model(info: ArtifactInfo) -> ArtifactModel:
    return ArtifactModel.model_validate(info.to_dict())


@router.get("", response_model=ArtifactList, summary="Every artifact, latest version")
def list_artifacts(request: Request, _: Principal = Depends(principal)) -> ArtifactList:
    return ArtifactList(artifacts=[_model(i) for i in request.app.state.executor.artifacts.names()])


@router.get("/{name:path}/versions", response_model=ArtifactList, summary="All versions of an artifact")
def versions(name: str, request: Request, _: Principal = Depends(principal)) -> ArtifactList:
    return ArtifactList(artifacts=[_model(i) for i in request.app.state.executor.artifacts.versions(name)])


@router.post("/{name:path}", response_model=ArtifactModel, status_code=201, summary="Save a new version",
             openapi_extra={"requestBody": {"content": {"application/octet-stream": {
                 "schema": {"type": "string", "format": "binary"}}}, "required": True}})
async def put_artifact(name: str, request: Request, _: Principal = Depends(principal)) -> ArtifactModel:
    data = await request.body()
    mime = request.headers.get("content-type", "application/octet-stream").split(";")[0].strip() or "application/octet-stream"
    info = await run_in_threadpool(request.app.state.executor.artifacts.put, name, data, mime_type=mime)
    return _model(info)


@router.get("/{name:path}", summary="An artifact's content (latest, or ?version=N)",
            responses={200: {"content": {"*/*": {"schema": {"type": "string", "format": "binary"}}},
                             "description": "the content, with the MIME type it was saved with"}})
def get_artifact(
    name: str,
    request: Request,
    version: int | None = Query(default=None, ge=1),
    _: Principal = Depends(principal),
) -> Response:
    store = request.app.state.executor.artifacts
    info = store.info(name, version)
    with store.open(info) as handle:
        data = handle.read()
    return Response(content=data, media_type=info.mime_type, headers={
        "X-Artifact-Version": str(info.version), "X-Artifact-SHA256": info.sha256, "ETag": f'"{info.sha256}"'})
