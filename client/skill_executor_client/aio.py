"""The asynchronous typed client: the same calls as :mod:`.sync`, over an ``httpx.AsyncClient``."""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator, Mapping
from typing import Any, Literal

import httpx

from .calls import Call, T, auth_headers, raise_for
from .models import (
    ArtifactList,
    ArtifactModel,
    AuditLog,
    DocList,
    DoctorReport,
    FileList,
    FileModel,
    Health,
    Installed,
    RunAccepted,
    RunRecordModel,
    RunRequest,
    RunResult,
    SkillDetail,
    SkillList,
    ToolCallResult,
    ToolList,
    VersionInfo,
    VersionList,
)
from .transfer import AsyncBody, Bundle, SSEParser, aupload_body, file_name_of
from .typed import RunEvent, ToolFormat, Typed


class AsyncClient:
    """The skill-executor HTTP API, answers as models (``async with AsyncClient(url) as client: ...``)."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout: float = 900.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._http = httpx.AsyncClient(
            base_url=base_url, headers=auth_headers(api_key), timeout=timeout, transport=transport
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def send(self, call: Call[T]) -> T:
        return call.read(await self._http.request(call.method, call.path, **call.send_kwargs()))

    # skills
    async def list_skills(self, q: str | None = None, *, limit: int | None = None) -> SkillList:
        return await self.send(Typed.list_skills(q, limit))

    async def skills_prompt(self, format: str = "xml") -> str:
        return await self.send(Typed.skills_prompt(format))

    async def load_skill(self, name: str) -> SkillDetail:
        return await self.send(Typed.load_skill(name))

    async def list_docs(self, name: str) -> DocList:
        return await self.send(Typed.list_docs(name))

    async def read_docs(self, name: str, docs: list[str]) -> DocList:
        return await self.send(Typed.read_docs(name, docs))

    async def read_file(self, name: str, path: str) -> bytes:
        return await self.send(Typed.read_file(name, path))

    async def skill_doctor(self, name: str) -> DoctorReport:
        return await self.send(Typed.skill_doctor(name))

    async def install_skill(self, package: bytes, *, filename: str = "skill.zip", strict: bool = False) -> Installed:
        return await self.send(Typed.install_skill(package, filename, strict))

    async def delete_skill(self, name: str) -> None:
        await self.send(Typed.delete_skill(name))

    async def skill_versions(self, name: str) -> VersionList:
        return await self.send(Typed.skill_versions(name))

    async def skill_version(self, name: str, version: int | str) -> VersionInfo:
        return await self.send(Typed.skill_version(name, version))

    async def set_default_version(self, name: str, version: int | str) -> VersionInfo:
        return await self.send(Typed.set_default_version(name, version))

    async def delete_skill_version(self, name: str, version: int | str) -> VersionInfo:
        return await self.send(Typed.delete_skill_version(name, version))

    async def skill_audit(self, name: str) -> AuditLog:
        return await self.send(Typed.skill_audit(name))

    # runs
    async def run(
        self,
        request: RunRequest | Mapping[str, Any],
        *,
        idempotency_key: str | None = None,
        bundle: Bundle | None = None,
    ) -> RunResult:
        """Run and wait for the result (a non-zero exit or a timeout is a result, not an error).
        ``bundle``: run a skill sent with the request -- an archive's bytes, or the path of an
        archive or a skill folder (zipped here); ``request`` then needs no ``skill``."""
        return await self.send(Typed.run(request, idempotency_key, bundle))

    async def submit(
        self,
        request: RunRequest | Mapping[str, Any],
        *,
        idempotency_key: str | None = None,
        bundle: Bundle | None = None,
    ) -> RunAccepted:
        """Queue a run and return at once; follow it with :meth:`events` or :meth:`get_run`."""
        return await self.send(Typed.submit(request, idempotency_key, bundle))

    async def get_run(self, run_id: str) -> RunRecordModel:
        return await self.send(Typed.get_run(run_id))

    async def cancel_run(self, run_id: str) -> RunAccepted:
        return await self.send(Typed.cancel_run(run_id))

    async def decide_run(
        self, run_id: str, decision: Literal["approve", "reject"], reason: str | None = None
    ) -> RunAccepted:
        """Approve or reject a run held for approval (pending_approval)."""
        return await self.send(Typed.decide_run(run_id, decision, reason))

    async def events(self, run_id: str) -> AsyncIterator[RunEvent]:
        """The run's Server-Sent Events until its result."""
        call = Typed.events(run_id)
        async with self._http.stream(call.method, call.path) as response:
            if not response.is_success:
                await response.aread()
                raise_for(response)
            parser = SSEParser()
            async for line in response.aiter_lines():
                if (parsed := parser.feed(line)) is not None:
                    yield RunEvent(event=parsed[0], data=parsed[1])

    # artifacts
    async def put_artifact(
        self, name: str, data: AsyncBody, *, mime_type: str | None = None, owner: str | None = None
    ) -> ArtifactModel:
        """A new version; ``data``: bytes, a path, a binary file or chunks (all but bytes streamed)."""
        content, size = await aupload_body(data)
        return await self.send(Typed.put_artifact(name, content, mime_type, owner, size))

    async def get_artifact(self, name: str, version: int | None = None, *, owner: str | None = None) -> bytes:
        return await self.send(Typed.get_artifact(name, version, owner))

    async def delete_artifact(self, name: str, version: int | None = None, *, owner: str | None = None) -> ArtifactList:
        return await self.send(Typed.delete_artifact(name, version, owner))

    async def list_artifacts(self, *, owner: str | None = None) -> ArtifactList:
        return await self.send(Typed.list_artifacts(owner))

    async def artifact_versions(self, name: str, *, owner: str | None = None) -> ArtifactList:
        return await self.send(Typed.artifact_versions(name, owner))

    # files by id (artifact versions)
    async def upload_file(
        self, data: AsyncBody | str, *, name: str | None = None, mime_type: str | None = None
    ) -> FileModel:
        """Upload a file once; its ``id`` is a run input (``{"file_id": id}``).  ``data``: bytes
        (with ``name``), a path (its name by default), a binary file or chunks."""
        data = pathlib.Path(data) if isinstance(data, str) else data
        content, size = await aupload_body(data)
        return await self.send(Typed.upload_file(file_name_of(data, name), content, mime_type, size))

    async def get_file(self, file_id: str) -> FileModel:
        return await self.send(Typed.get_file(file_id))

    async def file_content(self, file_id: str) -> bytes:
        """A file's content (a run's saved output by its ``file_id`` too)."""
        return await self.send(Typed.file_content(file_id))

    async def list_files(self) -> FileList:
        return await self.send(Typed.list_files())

    async def delete_file(self, file_id: str) -> FileModel:
        return await self.send(Typed.delete_file(file_id))

    # tools for a model
    async def tools(self, format: ToolFormat = "openai", *, context: bool = False) -> ToolList:
        return await self.send(Typed.tools(format, context))

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | str | None = None,
        *,
        format: ToolFormat | None = None,
        call_id: str | None = None,
        session: str | None = None,
    ) -> ToolCallResult:
        return await self.send(Typed.call_tool(name, arguments, format, call_id, session))

    async def health(self) -> Health:
        return await self.send(Typed.health())
