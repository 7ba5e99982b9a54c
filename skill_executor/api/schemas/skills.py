"""Skills: the catalog, a skill's detail and docs, installs, versions and their audit log."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, StrictInt, StrictStr


class Finding(BaseModel):
    code: str
    message: str


class SkillSummary(BaseModel):
    name: str
    id: str
    description: str
    tokens: int = Field(description="estimated tokens of this overview entry (4 characters per token)")
    location: str = Field(description="path of SKILL.md as a run sees it")
    score: float | None = None


class SkillList(BaseModel):
    skills: list[SkillSummary]
    count: int
    total_tokens: int
    token_estimate: str = "ceil(characters / 4)"


class FileInfo(BaseModel):
    path: str
    size: int
    kind: str


class SkillDetail(BaseModel):
    name: str
    id: str
    description: str
    license: str | None = None
    compatibility: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    allowed_tools: list[str] = Field(default_factory=list)
    extras: dict[str, Any] = Field(default_factory=dict)
    body: str
    body_tokens: int
    version: int | None = Field(default=None, description="the registry version loaded")
    digest: str | None = Field(default=None, description="its digest, sha256:<hex>")
    docs: list[FileInfo]
    scripts: list[FileInfo]
    references: list[FileInfo]
    assets: list[FileInfo]
    files: list[FileInfo]
    warnings: list[Finding]


class DocEntry(BaseModel):
    path: str
    size: int
    tokens: int
    content: str | None = None
    truncated: bool = False
    binary: bool = False
    note: str | None = Field(default=None, description="how the requested name matched this doc, when not exactly")


class DocList(BaseModel):
    skill: str
    docs: list[DocEntry]


class ValidationFinding(BaseModel):
    code: str
    message: str
    severity: str


class Installed(BaseModel):
    id: str
    name: str
    path: str
    replaced: bool
    files: list[FileInfo]
    warnings: list[Finding]
    version: int | None = Field(default=None, description="the registry version published (or returned)")
    digest: str | None = Field(default=None, description="its digest, sha256:<hex>")
    created: bool = Field(default=True, description="false: identical to the latest version, which is returned")
    is_default: bool = False
    strict: bool = False
    findings: list[ValidationFinding] = Field(default_factory=list, description="every validation finding")


class VersionFile(BaseModel):
    path: str
    sha256: str = Field(description="of the content; of the target for a link")
    size: int
    executable: bool
    link: str | None = Field(default=None, description="a symbolic link's target (kept as a link)")


class VersionInfo(BaseModel):
    skill: str
    version: int
    digest: str
    created_at: float
    source: Literal["upload", "folder"] | str
    created_by: str
    file_count: int
    size: int
    is_default: bool
    is_latest: bool
    files: list[VersionFile] | None = None


class VersionList(BaseModel):
    skill: str
    default_version: int | None
    latest_version: int | None
    default_held: bool = Field(
        default=False,
        description="the default was set explicitly (not to `latest`): "
        "a changed folder of a folder-root skill does not move it",
    )
    versions: list[VersionInfo]


class SkillUpdate(BaseModel):
    model_config = {"extra": "forbid"}

    # strict: a JSON true is not version 1; the text goes to the one parser (skill_executor/registry/refs.py)
    default_version: StrictInt | StrictStr = Field(
        description="a version number, `latest` (the default then follows the latest version), `default`, "
        "or sha256:<hex>"
    )


class AuditRecord(BaseModel):
    id: int
    at: float
    actor: str
    action: str
    skill: str
    version: int | None
    digest: str | None
    detail: str | None


class AuditLog(BaseModel):
    entries: list[AuditRecord]
