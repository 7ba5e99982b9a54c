"""Artifacts: a version and a listing."""

from __future__ import annotations

from pydantic import BaseModel, Field


class ArtifactModel(BaseModel):
    name: str
    version: int
    size: int
    sha256: str
    mime_type: str
    created_at: float
    run_id: str | None = None
    owner: str = Field(description="the key id (tenant) the artifact belongs to")
    ref: str
    file_id: str = Field(description="this version's file id (GET /v1/files/{id}, inputs' file_id)")


class ArtifactList(BaseModel):
    artifacts: list[ArtifactModel]
