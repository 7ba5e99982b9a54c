"""Skills: overview and search, load, docs, doctor (preflight), files, install, delete."""

from __future__ import annotations

import asyncio
from typing import Literal
from urllib.parse import quote

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import PlainTextResponse, StreamingResponse

from ...access import Principal
from ...doctor import DoctorReport, diagnose
from ...errors import Unavailable
from ...outputs.mime import detect
from ...registry.download import file_chunks
from ...skills import (
    Skill,
    docs,
    expand_placeholders,
    find_file,
    inventory,
    match_path,
    open_file,
    read_file,
    render_text,
    render_xml,
    sandbox_dir,
)
from ...skills.files import is_text
from ...skills.model import estimate_tokens
from ...web.auth import admin, principal
from ...web.content import download_headers
from ..schemas import ERRORS, DocEntry, DocList, FileInfo, Finding, Installed, SkillDetail, SkillList, SkillSummary
from . import versions

router = APIRouter(prefix="/v1/skills", tags=["skills"], responses=ERRORS)
#: What a file's type is guessed from.
_SNIFF_BYTES = 8192


def _visible(request: Request) -> str | None:
    base: str | None = getattr(request.app.state.executor.runtime, "visible_skills_dir", None)
    return base


def _location(request: Request, skill: Skill) -> str:
    base = _visible(request)
    return f"{base}/{skill.id}/SKILL.md" if base else skill.location


def _files(items) -> list[FileInfo]:  # type: ignore[no-untyped-def]
    return [FileInfo(path=f.path, size=f.size, kind=f.kind) for f in items]


@router.get(
    "",
    response_model=SkillList,
    summary="Overview of all skills, or a search",
    responses={
        200: {
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/SkillList"}},
                "application/xml": {
                    "schema": {"type": "string"},
                    "example": "<available_skills>...</available_skills>",
                },
                "text/plain": {"schema": {"type": "string"}},
            },
            "description": "json (default), the skills-ref <available_skills> XML, or plain lines",
        }
    },
)
def list_skills(
    request: Request,
    q: str | None = Query(default=None, max_length=500, description="search over names and descriptions"),
    limit: int = Query(default=10, ge=1, le=1000, description="how many search hits"),
    format: Literal["json", "xml", "text"] = Query(default="json"),
    _: Principal = Depends(principal),
) -> SkillList | Response:
    repository = request.app.state.executor.repository
    if q is not None:
        hits = repository.search(q, limit)
        skills, scores = [h.skill for h in hits], [h.score for h in hits]
    else:
        skills, scores = repository.list(), []
    if format == "xml":
        return PlainTextResponse(render_xml(skills, lambda s: _location(request, s)), media_type="application/xml")
    if format == "text":
        return PlainTextResponse(render_text(skills))
    entries = [
        SkillSummary(
            name=s.name,
            id=s.id,
            description=s.description,
            tokens=s.overview_tokens,
            location=_location(request, s),
            score=scores[i] if scores else None,
        )
        for i, s in enumerate(skills)
    ]
    return SkillList(skills=entries, count=len(entries), total_tokens=sum(e.tokens for e in entries))


@router.get(
    "/{name}",
    response_model=SkillDetail,
    summary="Load a skill: body and file inventory",
    description="The body has the skill-folder placeholders (`{baseDir}`, `${CLAUDE_SKILL_DIR}`, "
    "`$CLAUDE_SKILL_DIR`, `<path-to-skill>`) replaced by the folder a run sees; "
    "`files/SKILL.md` is the file as written.",
)
def load_skill(name: str, request: Request, _: Principal = Depends(principal)) -> SkillDetail:
    skill = request.app.state.executor.repository.get(name)
    files = inventory(skill)
    return SkillDetail(
        name=skill.name,
        id=skill.id,
        description=skill.description,
        license=skill.license,
        compatibility=skill.compatibility,
        metadata=skill.metadata,
        allowed_tools=skill.allowed_tools,
        extras=skill.extras,
        body=expand_placeholders(skill.body, sandbox_dir(skill, _visible(request))),
        body_tokens=skill.body_tokens,
        version=skill.version,
        digest=skill.digest,
        docs=_files(docs(files)),
        scripts=_files(f for f in files if f.kind == "script"),
        references=_files(f for f in files if f.kind == "reference"),
        assets=_files(f for f in files if f.kind == "asset"),
        files=_files(files),
        warnings=[Finding(code=d.code, message=d.message) for d in skill.warnings],
    )


@router.get(
    "/{name}/docs",
    response_model=DocList,
    summary="List a skill's docs, or read selected ones",
    description="A name matches its doc exactly, else the one doc equal to it ignoring case (the entry's "
    "`note` says so); none or several: 404 `doc_not_found` with a suggestion. Contents have "
    "the skill-folder placeholders replaced, like the body.",
)
def skill_docs(
    name: str,
    request: Request,
    names: str | None = Query(default=None, description="comma-separated doc paths to read"),
    _: Principal = Depends(principal),
) -> DocList:
    skill = request.app.state.executor.repository.get(name)
    listed = {e.path: e for e in docs(inventory(skill))}
    if names is None:
        entries = [DocEntry(path=p, size=e.size, tokens=-(-e.size // 4)) for p, e in listed.items()]
        return DocList(skill=skill.id, docs=entries)
    matches = [match_path(skill, n.strip(), list(listed)) for n in names.split(",") if n.strip()]
    out = []
    limit = request.app.state.settings.max_file_read_bytes
    where = sandbox_dir(skill, _visible(request))
    for match in matches:
        content = read_file(skill, match.path, max_bytes=limit)
        text = expand_placeholders(content.text, where) if content.text is not None else None
        out.append(
            DocEntry(
                path=match.path,
                size=content.size,
                tokens=estimate_tokens(text or ""),
                content=text,
                truncated=content.truncated,
                binary=text is None,
                note=match.note,
            )
        )
    return DocList(skill=skill.id, docs=out)


@router.get(
    "/{name}/doctor",
    response_model=DoctorReport,
    summary="Preflight: what a skill needs and what is missing",
    description="The commands, Python imports and Node modules the skill's scripts and docs use (a static "
    "scan), which the runner image plus the skill's environment has (one probe run in the "
    "sandbox), which are missing, and whether the skill needs the network (runs have none). "
    "`ok` is true when nothing required is missing and `network.needed` is not `yes`.",
)
async def doctor(name: str, request: Request, who: Principal = Depends(principal)) -> DoctorReport:
    executor = request.app.state.executor
    # A probe is a run of the caller through the service's run manager (recorded, refused and
    # admitted as any run); it waits on a thread of its own (not the server's pool).
    manager = request.app.state.manager
    report: DoctorReport = await asyncio.to_thread(diagnose, executor, name, principal=who, runs=manager)
    return report


@router.get(
    "/{name}/files/{path:path}",
    summary="Read one file of a skill",
    responses={
        200: {
            "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}},
            "description": "the file as written, typed by content and extension",
        }
    },
    description="A path that does not exist matches the one file equal to it ignoring case "
    "(`X-Resolved-Path` names it, percent-encoded); none or several: 404 `file_not_found` "
    "with a suggestion.",
)
def skill_file(name: str, path: str, request: Request, _: Principal = Depends(principal)) -> Response:
    skill = request.app.state.executor.repository.get(name)
    match = find_file(skill, path)
    limit = request.app.state.settings.max_file_read_bytes
    rel, size, handle = open_file(skill, match.path)
    try:
        head = handle.read(min(_SNIFF_BYTES, limit))
    except BaseException:
        handle.close()
        raise
    length = min(size, limit)
    mime = detect(rel, head, complete=len(head) == size)
    if mime.startswith("text/") and is_text(head, partial=len(head) < length):
        mime += "; charset=utf-8"
    headers = {
        "X-File-Size": str(size),
        "X-Truncated": "true" if size > limit else "false",
        "Content-Length": str(length),
    } | download_headers(rel, mime)  # a skill's file is never active content of this origin
    if match.note:
        headers["X-Resolved-Path"] = quote(match.path, safe="/")  # percent-encoded: headers are latin-1
    # streamed from the open file, never held whole
    return StreamingResponse(file_chunks(handle, length, head), media_type=mime, headers=headers)


@router.post(
    "",
    response_model=Installed,
    status_code=201,
    summary="Install a skill: a new immutable version",
    description="One .zip/.tar.gz (the body, or one multipart file part), or multipart `files[]` parts "
    "named by their paths relative to the skill. Every upload is a version "
    "(see /v1/skills/{name}/versions); content equal to the latest version's returns it.",
    openapi_extra={
        "requestBody": {
            "content": {
                "application/zip": {"schema": {"type": "string", "format": "binary"}},
                "application/gzip": {"schema": {"type": "string", "format": "binary"}},
                "multipart/form-data": {
                    "schema": {
                        "type": "object",
                        "properties": {"files[]": {"type": "array", "items": {"type": "string", "format": "binary"}}},
                    }
                },
            }
        }
    },
)
async def install(
    request: Request,
    strict: bool | None = Query(
        default=None, description="refuse packages that break the spec (default: SKILL_EXECUTOR_SKILL_UPLOAD_STRICT)"
    ),
    no_default: bool = Query(default=False, description="publish without making it the default version"),
    who: Principal = Depends(admin),
) -> Installed:
    return await versions.publish(request, who, strict=strict, set_default=not no_default)


@router.delete(
    "/{name}",
    status_code=204,
    summary="Delete an installed skill",
    description="Only a skill in the install folder; one shipped in a read-only skills root is "
    "refused with 403 `read_only_skill`.",
)
def delete(name: str, request: Request, who: Principal = Depends(admin)) -> Response:
    settings = request.app.state.settings
    try:
        request.app.state.executor.repository.remove(name, actor=who.id)
    except OSError as exc:
        raise Unavailable(
            f"cannot delete from the install folder {settings.install_root}: {exc.strerror}", code="install_failed"
        ) from None
    return Response(status_code=204)
