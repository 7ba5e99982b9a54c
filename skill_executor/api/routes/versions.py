"""The skill registry over HTTP: uploads, versions, the default pointer, deletes, content, audit.

``POST /v1/skills`` (in routes/skills.py) and ``POST /v1/skills/{name}/versions`` share
:func:`publish`.  An upload is one ``.zip``/``.tar.gz`` (the raw body, or the one file
part of a multipart form) or several multipart ``files[]`` parts whose file names are
the files' paths relative to the skill (``my-skill/SKILL.md`` or ``SKILL.md``).
"""

from __future__ import annotations

import contextlib
import io
import zipfile
from collections.abc import Iterator

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from starlette.datastructures import UploadFile

from ...access import Principal
from ...errors import BadRequest, NotFound, TooLarge, Unavailable
from ...registry.download import zip_chunks
from ...registry.package import refuse_reserved
from ...registry.refs import parse_ref
from ...registry.repository import SkillRepository
from ...registry.store import Registry, Version
from ...registry.unpacking import PackageLimits
from ...skills import FileEntry, Skill
from ...skills.rules import split_verdict
from ...web.auth import admin, principal
from ...web.content import download_headers
from ..schemas import (
    ERRORS,
    AuditLog,
    AuditRecord,
    FileInfo,
    Finding,
    Installed,
    SkillUpdate,
    ValidationFinding,
    VersionInfo,
    VersionList,
)

router = APIRouter(prefix="/v1/skills", tags=["skill versions"], responses=ERRORS)

_ARCHIVE_MAGIC = (b"PK\x03\x04", b"PK\x05\x06", b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00")
_ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")


def _repository(request: Request) -> SkillRepository:
    repository: SkillRepository = request.app.state.executor.repository
    return repository


def _registry(request: Request) -> Registry:
    registry = _repository(request).registry
    if registry is None:
        raise Unavailable("this service keeps no skill versions (no registry)", code="registry_disabled")
    return registry


def _is_archive(filename: str, data: bytes) -> bool:
    return data.startswith(_ARCHIVE_MAGIC) or filename.lower().endswith(_ARCHIVE_SUFFIXES)


async def read_upload(request: Request) -> bytes:
    """The upload as one archive: the body, a form's one archive, or its ``files[]`` zipped."""
    settings = request.app.state.settings
    most_bytes, most_files = settings.skill_upload_max_bytes, settings.skill_upload_max_files
    too_large = TooLarge(f"an upload may hold at most {most_bytes} bytes", code="upload_too_large")
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():  # refused at the first byte past the cap, never held whole
            size += len(chunk)
            if size > most_bytes:
                raise too_large
            chunks.append(chunk)
        data = b"".join(chunks)
    else:
        form = await request.form(max_files=most_files + 1, max_fields=most_files + 100)
        parts = [(v.filename or "", v) for _, v in form.multi_items() if isinstance(v, UploadFile)]
        if not parts:
            raise BadRequest("the multipart body has no file part", code="invalid_package")
        if len(parts) > most_files:
            raise TooLarge(f"an upload may hold at most {most_files} files", code="upload_too_many_files")
        if sum(part.size or 0 for _, part in parts) > most_bytes:  # the parts are spooled: sized before read
            raise too_large
        contents = [(name, await part.read()) for name, part in parts]
        if sum(len(c) for _, c in contents) > most_bytes:
            raise too_large
        single = len(contents) == 1 and _is_archive(*contents[0])
        data = contents[0][1] if single else _zip_parts(contents)
    if not data:
        raise BadRequest("the request body is empty; send a .zip or .tar.gz, or files[] parts", code="invalid_package")
    if len(data) > most_bytes:
        raise too_large
    return data


def _zip_parts(parts: list[tuple[str, bytes]]) -> bytes:
    """``files[]`` parts as one zip (the archive checks then apply to their paths as to any archive's)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        seen: set[str] = set()
        for name, content in parts:
            path = name.replace("\\", "/")
            if not path or path.endswith("/"):
                raise BadRequest(
                    "every files[] part needs a file name: its path relative to the skill", code="invalid_package"
                )
            if path in seen:
                raise BadRequest(f"the path {path!r} is uploaded twice", code="invalid_package")
            seen.add(path)
            archive.writestr(path, content)
    return buffer.getvalue()


def _files(items: list[FileEntry]) -> list[FileInfo]:
    return [FileInfo(path=f.path, size=f.size, kind=f.kind) for f in items]


async def publish(
    request: Request, who: Principal, *, strict: bool | None, set_default: bool, expect: str | None = None
) -> Installed:
    """Install an upload as a new version; ``expect``: the skill id the upload must have."""
    settings = request.app.state.settings
    repository = _repository(request)
    data = await read_upload(request)
    strict = settings.skill_upload_strict if strict is None else strict

    def check(skill: Skill) -> None:
        if expect is not None and skill.id != expect:
            raise BadRequest(
                f"the upload is the skill {skill.id!r}, not {expect!r}; a new version must keep the skill's name",
                code="name_mismatch",
            )
        if settings.skill_refuse_reserved_names:
            refuse_reserved(skill)

    limits = PackageLimits(max_entries=settings.skill_upload_max_files)
    try:
        result = await run_in_threadpool(
            repository.install, data, strict=strict, limits=limits, actor=who.id, set_default=set_default, check=check
        )
    except OSError as exc:
        raise Unavailable(
            f"cannot write to the install folder {settings.install_root}: {exc.strerror}", code="install_failed"
        ) from None
    skill, version = result.skill, result.version
    errors, warnings = split_verdict(skill.diagnostics, strict=strict)
    return Installed(
        id=skill.id,
        name=skill.name,
        path=str(skill.path),
        replaced=result.replaced,
        files=_files(result.files),
        warnings=[Finding(code=d.code, message=d.message) for d in skill.warnings],
        version=version.number if version else None,
        digest=version.digest if version else None,
        created=result.created,
        is_default=bool(version and _registry(request).pointers(skill.id)[0] == version.number),
        strict=strict,
        findings=[ValidationFinding(code=d.code, message=d.message, severity=d.severity) for d in skill.diagnostics],
    )


def _info(version: Version, *, files: bool = False) -> VersionInfo:
    return VersionInfo.model_validate(version.to_dict() if files else version.summary())


def _skill_id(request: Request, name: str) -> str:
    """The skill's id (a folder-root skill's current content is versioned on the way); a
    version in ``name`` is 400 ``invalid_version``.  Its latest version is what is resolved:
    a skill without a default (published with ``no_default``) is managed here too."""
    repository = _repository(request)
    return repository.get(f"{repository.found(name).id}@latest").id


@router.post(
    "/{name}/versions",
    response_model=Installed,
    status_code=201,
    summary="Publish a new version of an existing skill",
    description="The upload (as for `POST /v1/skills`) must be the skill `name`: another name is 400 "
    "`name_mismatch`. Content equal to the latest version's returns that version "
    "(`created: false`).",
)
async def create_version(
    name: str,
    request: Request,
    strict: bool | None = Query(default=None, description="refuse spec violations (default: the server setting)"),
    no_default: bool = Query(default=False, description="publish without making it the default"),
    who: Principal = Depends(admin),
) -> Installed:
    skill = _repository(request).found(name)
    return await publish(request, who, strict=strict, set_default=not no_default, expect=skill.id)


@router.get("/{name}/versions", response_model=VersionList, summary="A skill's versions, oldest first")
def list_versions(name: str, request: Request, _: Principal = Depends(principal)) -> VersionList:
    skill_id = _skill_id(request, name)
    registry = _registry(request)
    default, latest = registry.pointers(skill_id)
    return VersionList(
        skill=skill_id,
        default_version=default,
        latest_version=latest,
        default_held=registry.default_held(skill_id),
        versions=[_info(v) for v in registry.versions(skill_id)],
    )


@router.get(
    "/{name}/versions/{version}",
    response_model=VersionInfo,
    summary="One version: its manifest (path, sha256, size per file) and digest",
    description="`version`: a number, `latest`, `default` or `sha256:<hex>`.",
)
def get_version(name: str, version: str, request: Request, _: Principal = Depends(principal)) -> VersionInfo:
    return _info(_registry(request).version(_skill_id(request, name), version), files=True)


@router.get(
    "/{name}/versions/{version}/content",
    summary="One version as a zip",
    responses={200: {"content": {"application/zip": {"schema": {"type": "string", "format": "binary"}}}}},
)
def version_content(name: str, version: str, request: Request, _: Principal = Depends(principal)) -> Response:
    registry = _registry(request)
    found = registry.version(_skill_id(request, name), version)
    held = contextlib.ExitStack()
    held.enter_context(registry.hold(found.skill, found.number))  # not deleted while it streams

    def body() -> Iterator[bytes]:
        with held:
            yield from zip_chunks(registry.folder(found), found.dirname, found.files)

    filename = f"{found.skill}-{found.number}.zip"
    return StreamingResponse(
        body(),
        media_type="application/zip",
        headers={
            "X-Skill-Version": str(found.number),
            "X-Skill-Digest": found.digest,
        }
        | download_headers(filename, "application/zip"),
    )


@router.patch("/{name}", response_model=VersionInfo, summary="Set the default version (rollback, promotion)")
def update_skill(name: str, body: SkillUpdate, request: Request, who: Principal = Depends(admin)) -> VersionInfo:
    registry = _registry(request)
    changed = registry.set_default(_skill_id(request, name), body.default_version, actor=who.id)
    _repository(request).reload()  # a skill that had no default is in the overview from now on
    return _info(changed)


@router.delete(
    "/{name}/versions/{version}",
    response_model=VersionInfo,
    summary="Delete one version",
    description="The default version is refused (409 `version_is_default`); a version a run is using "
    "is refused (409 `version_in_use`). Version numbers are never reused.",
)
def delete_version(name: str, version: str, request: Request, who: Principal = Depends(admin)) -> VersionInfo:
    return _info(_registry(request).delete_version(_skill_id(request, name), version, actor=who.id))


@router.get("/{name}/audit", response_model=AuditLog, summary="The registry's audit log for a skill, newest first")
def audit(
    name: str, request: Request, limit: int = Query(default=100, ge=1, le=10000), _: Principal = Depends(admin)
) -> AuditLog:
    ref = parse_ref(name, versioned=False)
    registry = _registry(request)
    try:
        skill_id = _repository(request).found(ref.name).id
    except NotFound:
        skill_id = ref.key  # a deleted skill's history stays readable
    return AuditLog(entries=[AuditRecord.model_validate(e.to_dict()) for e in registry.audit(skill_id, limit=limit)])
