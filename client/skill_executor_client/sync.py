"""The synchronous typed client: sends :class:`~.typed.Typed` calls over an ``httpx.Client``."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator, Mapping
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
from .transfer import Body, Bundle, SSEParser, file_name_of, upload_body
from .typed import RunEvent, ToolFormat, Typed


class Client:
    """The skill-executor HTTP API, answers as models (``with Client(url) as client: ...``)."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout: float = 900.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._http = httpx.Client(
            base_url=base_url, headers=auth_headers(api_key), timeout=timeout, transport=transport
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, call: Call[T]) -> T:
        return call.read(self._http.request(call.method, call.path, **call.send_kwargs()))

    # skills
    def list_skills(self, q: str | None = None, *, limit: int | None = None) -> SkillList:
        return self.send(Typed.list_skills(q, limit))

    def skills_prompt(self, format: str = "xml") -> str:
        return self.send(Typed.skills_prompt(format))

    def load_skill(self, name: str) -> SkillDetail:
        return self.send(Typed.load_skill(name))

    def list_docs(self, name: str) -> DocList:
        return self.send(Typed.list_docs(name))

    def read_docs(self, name: str, docs: list[str]) -> DocList:
        return self.send(Typed.read_docs(name, docs))

    def read_file(self, name: str, path: str) -> bytes:
        return self.send(Typed.read_file(name, path))

    def skill_doctor(self, name: str) -> DoctorReport:
        return self.send(Typed.skill_doctor(name))

    def install_skill(self, package: bytes, *, filename: str = "skill.zip", strict: bool = False) -> Installed:
        return self.send(Typed.install_skill(package, filename, strict))

    def delete_skill(self, name: str) -> None:
        self.send(Typed.delete_skill(name))

    def skill_versions(self, name: str) -> VersionList:
        return self.send(Typed.skill_versions(name))

    def skill_version(self, name: str, version: int | str) -> VersionInfo:
        return self.send(Typed.skill_version(name, version))

    def set_default_version(self, name: str, version: int | str) -> VersionInfo:
        return self.send(Typed.set_default_version(name, version))

    def delete_skill_version(self, name: str, version: int | str) -> VersionInfo:
        return self.send(Typed.delete_skill_version(name, version))

    def skill_audit(self, name: str) -> AuditLog:
        return self.send(Typed.skill_audit(name))

    # runs
    def run(
        self,
        request: RunRequest | Mapping[str, Any],
        *,
        idempotency_key: str | None = None,
        bundle: Bundle | None = None,
    ) -> RunResult:
        """Run and wait for the result (a non-zero exit or a timeout is a result, not an error).
        ``bundle``: run a skill sent with the request -- an archive's bytes, or the path of an
        archive or a skill folder (zipped here); ``request`` then needs no ``skill``."""
        return self.send(Typed.run(request, idempotency_key, bundle))

    def submit(
        self,
        request: RunRequest | Mapping[str, Any],
        *,
        idempotency_key: str | None = None,
        bundle: Bundle | None = None,
    ) -> RunAccepted:
        """Queue a run and return at once; follow it with :meth:`events` or :meth:`get_run`."""
        return self.send(Typed.submit(request, idempotency_key, bundle))

    def get_run(self, run_id: str) -> RunRecordModel:
        return self.send(Typed.get_run(run_id))

    def cancel_run(self, run_id: str) -> RunAccepted:
        return self.send(Typed.cancel_run(run_id))

    def decide_run(self, run_id: str, decision: Literal["approve", "reject"], reason: str | None = None) -> RunAccepted:
        """Approve or reject a run held for approval (pending_approval)."""
        return self.send(Typed.decide_run(run_id, decision, reason))

    def events(self, run_id: str) -> Iterator[RunEvent]:
        """The run's Server-Sent Events until its result."""
        call = Typed.events(run_id)
        with self._http.stream(call.method, call.path) as response:
            if not response.is_success:
                response.read()
                raise_for(response)
            parser = SSEParser()
            for line in response.iter_lines():
                if (parsed := parser.feed(line)) is not None:
                    yield RunEvent(event=parsed[0], data=parsed[1])

    # artifacts
    def put_artifact(
        self, name: str, data: Body, *, mime_type: str | None = None, owner: str | None = None
    ) -> ArtifactModel:
        """A new version; ``data``: bytes, a path, a binary file or chunks (all but bytes streamed)."""
        content, size = upload_body(data)
        return self.send(Typed.put_artifact(name, content, mime_type, owner, size))

    def get_artifact(self, name: str, version: int | None = None, *, owner: str | None = None) -> bytes:
        return self.send(Typed.get_artifact(name, version, owner))

    def delete_artifact(self, name: str, version: int | None = None, *, owner: str | None = None) -> ArtifactList:
        return self.send(Typed.delete_artifact(name, version, owner))

    def list_artifacts(self, *, owner: str | None = None) -> ArtifactList:
        return self.send(Typed.list_artifacts(owner))

    def artifact_versions(self, name: str, *, owner: str | None = None) -> ArtifactList:
        return self.send(Typed.artifact_versions(name, owner))

    # files by id (artifact versions)
    def upload_file(self, data: Body | str, *, name: str | None = None, mime_type: str | None = None) -> FileModel:
        """Upload a file once; its ``id`` is a run input (``{"file_id": id}``).  ``data``: bytes
        (with ``name``), a path (its name by default), a binary file or chunks."""
        data = pathlib.Path(data) if isinstance(data, str) else data
        content, size = upload_body(data)
        return self.send(Typed.upload_file(file_name_of(data, name), content, mime_type, size))

    def get_file(self, file_id: str) -> FileModel:
        return self.send(Typed.get_file(file_id))

    def file_content(self, file_id: str) -> bytes:
        """A file's content (a run's saved output by its ``file_id`` too)."""
        return self.send(Typed.file_content(file_id))

    def list_files(self) -> FileList:
        return self.send(Typed.list_files())

    def delete_file(self, file_id: str) -> FileModel:
        return self.send(Typed.delete_file(file_id))

    # tools for a model
    def tools(self, format: ToolFormat = "openai", *, context: bool = False) -> ToolList:
        return self.send(Typed.tools(format, context))

    def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | str | None = None,
        *,
        format: ToolFormat | None = None,
        call_id: str | None = None,
        session: str | None = None,
    ) -> ToolCallResult:
        return self.send(Typed.call_tool(name, arguments, format, call_id, session))

    def health(self) -> Health:
        return self.send(Typed.health())
