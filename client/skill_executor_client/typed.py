"""The typed core both clients share: each operation once, as a :class:`Call` whose
answer is a model of :mod:`.models` (the untyped :class:`Calls` with the answer parsed).

:mod:`.calls` describes each request once (method, quoted path, parameters, body) and maps
errors; :mod:`.transfer` holds uploads, downloads, bundles and the Server-Sent Events parser.
Answers the API gives no schema for (an agent context's, the metrics) stay JSON.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterable, Callable, Iterable, Mapping
from typing import Any, Literal, TypeVar, cast

import httpx
from pydantic import BaseModel

from .calls import JSON, Call, Calls
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
    ProcessInfo,
    ProcessList,
    ProcessOutput,
    RunAccepted,
    RunList,
    RunRecordModel,
    RunRequest,
    RunResult,
    SessionEnded,
    SessionNetworkState,
    SkillDetail,
    SkillList,
    ToolCallResult,
    ToolList,
    VersionInfo,
    VersionList,
)
from .transfer import Bundle, with_bundle

M = TypeVar("M", bound=BaseModel)
R = TypeVar("R")
ToolFormat = Literal["openai", "anthropic", "mcp"]


class RunEvent(BaseModel):
    """One Server-Sent Event of a run: ``status``, ``stdout``/``stderr`` chunks, then
    ``result`` (its data a :class:`RunResult`) or ``error``."""

    event: str
    data: Any = None

    @property
    def result(self) -> RunResult | None:
        return RunResult.model_validate(self.data) if self.event == "result" else None


def reading(call: Call[Any], answer: Callable[[httpx.Response], R]) -> Call[R]:
    """The call, its answer read by ``answer``."""
    return cast("Call[R]", dataclasses.replace(call, answer=answer))


def typed(call: Call[Any], model: type[M]) -> Call[M]:
    """The call, its answer parsed into ``model``."""
    read = call.answer
    return reading(call, lambda response: model.model_validate(read(response)))


def as_bytes(response: httpx.Response) -> bytes:
    return response.content


def request_body(request: RunRequest | Mapping[str, Any]) -> dict[str, Any]:
    """A run request as JSON: a model as the caller set it (unset fields: the service's defaults)."""
    if isinstance(request, BaseModel):
        return request.model_dump(mode="json", by_alias=True, exclude_unset=True)
    return dict(request)


class Typed:
    """Every typed operation, as a :class:`Call` (shared by both clients)."""

    @staticmethod
    def list_skills(q: str | None, limit: int | None) -> Call[SkillList]:
        return typed(Calls.list_skills(q, limit), SkillList)

    @staticmethod
    def skills_prompt(format: str) -> Call[str]:
        return Calls.skills_prompt(format)

    @staticmethod
    def load_skill(name: str) -> Call[SkillDetail]:
        return typed(Calls.load_skill(name), SkillDetail)

    @staticmethod
    def list_docs(name: str) -> Call[DocList]:
        return typed(Calls.list_docs(name), DocList)

    @staticmethod
    def read_docs(name: str, docs: list[str]) -> Call[DocList]:
        return typed(Calls.read_docs(name, docs), DocList)

    @staticmethod
    def read_file(name: str, path: str) -> Call[bytes]:
        return reading(Calls.read_file(name, path), as_bytes)

    @staticmethod
    def skill_doctor(name: str) -> Call[DoctorReport]:
        return typed(Calls.skill_doctor(name), DoctorReport)

    @staticmethod
    def install_skill(package: bytes, filename: str, strict: bool, multipart: bool = True) -> Call[Installed]:
        return typed(Calls.install_skill(package, filename, strict, multipart), Installed)

    @staticmethod
    def push_skill(
        files: list[tuple[str, bytes]], name: str | None, strict: bool | None, set_default: bool
    ) -> Call[Installed]:
        return typed(Calls.push_skill(files, name, strict, set_default), Installed)

    @staticmethod
    def skill_version_content(name: str, version: int | str) -> Call[httpx.Response]:
        return Calls.skill_version_content(name, version)

    @staticmethod
    def delete_skill(name: str) -> Call[None]:
        return Calls.delete_skill(name)

    @staticmethod
    def skill_versions(name: str) -> Call[VersionList]:
        return typed(Calls.skill_versions(name), VersionList)

    @staticmethod
    def skill_version(name: str, version: int | str) -> Call[VersionInfo]:
        return typed(Calls.skill_version(name, version), VersionInfo)

    @staticmethod
    def set_default_version(name: str, version: int | str) -> Call[VersionInfo]:
        return typed(Calls.set_default_version(name, version), VersionInfo)

    @staticmethod
    def delete_skill_version(name: str, version: int | str) -> Call[VersionInfo]:
        return typed(Calls.delete_skill_version(name, version), VersionInfo)

    @staticmethod
    def skill_audit(name: str) -> Call[AuditLog]:
        return typed(Calls.skill_audit(name), AuditLog)

    @staticmethod
    def run(
        request: RunRequest | Mapping[str, Any], idempotency_key: str | None, bundle: Bundle | None = None
    ) -> Call[RunResult]:
        return typed(Calls.run(with_bundle(request_body(request), bundle), idempotency_key, True), RunResult)

    @staticmethod
    def submit(
        request: RunRequest | Mapping[str, Any], idempotency_key: str | None, bundle: Bundle | None = None
    ) -> Call[RunAccepted]:
        return typed(Calls.run(with_bundle(request_body(request), bundle), idempotency_key, False), RunAccepted)

    @staticmethod
    def get_run(run_id: str) -> Call[RunRecordModel]:
        return typed(Calls.get_run(run_id), RunRecordModel)

    @staticmethod
    def list_runs(filters: dict[str, Any]) -> Call[RunList]:
        return typed(Calls.list_runs(filters), RunList)

    @staticmethod
    def cancel_run(run_id: str) -> Call[RunAccepted]:
        return typed(Calls.cancel_run(run_id), RunAccepted)

    @staticmethod
    def decide_run(run_id: str, decision: Literal["approve", "reject"], reason: str | None) -> Call[RunAccepted]:
        return typed(Calls.decide_run(run_id, decision, reason), RunAccepted)

    @staticmethod
    def events(run_id: str) -> Call[None]:
        return Calls.events(run_id)

    @staticmethod
    def put_artifact(
        name: str,
        content: bytes | Iterable[bytes] | AsyncIterable[bytes],
        mime_type: str | None,
        owner: str | None,
        size: int | None,
    ) -> Call[ArtifactModel]:
        return typed(Calls.put_artifact(name, content, mime_type, owner, size), ArtifactModel)

    @staticmethod
    def get_artifact(name: str, version: int | None, owner: str | None) -> Call[bytes]:
        return reading(Calls.get_artifact(name, version, owner), as_bytes)

    @staticmethod
    def delete_artifact(name: str, version: int | None, owner: str | None) -> Call[ArtifactList]:
        return typed(Calls.delete_artifact(name, version, owner), ArtifactList)

    @staticmethod
    def list_artifacts(owner: str | None) -> Call[ArtifactList]:
        return typed(Calls.list_artifacts(owner), ArtifactList)

    @staticmethod
    def artifact_versions(name: str, owner: str | None) -> Call[ArtifactList]:
        return typed(Calls.artifact_versions(name, owner), ArtifactList)

    @staticmethod
    def upload_file(
        name: str, content: bytes | Iterable[bytes] | AsyncIterable[bytes], mime_type: str | None, size: int | None
    ) -> Call[FileModel]:
        return typed(Calls.upload_file(name, content, mime_type, size), FileModel)

    @staticmethod
    def get_file(file_id: str) -> Call[FileModel]:
        return typed(Calls.get_file(file_id), FileModel)

    @staticmethod
    def file_content(file_id: str) -> Call[bytes]:
        return reading(Calls.file_content(file_id), as_bytes)

    @staticmethod
    def list_files() -> Call[FileList]:
        return typed(Calls.list_files(), FileList)

    @staticmethod
    def delete_file(file_id: str) -> Call[FileModel]:
        return typed(Calls.delete_file(file_id), FileModel)

    @staticmethod
    def tools(format: ToolFormat, context: bool, processes: bool = False) -> Call[ToolList]:
        return typed(Calls.tools(format, context, processes), ToolList)

    @staticmethod
    def call_tool(
        name: str,
        arguments: Mapping[str, Any] | str | None,
        format: ToolFormat | None,
        call_id: str | None,
        session: str | None,
        result_budget: Mapping[str, Any] | None = None,
    ) -> Call[ToolCallResult]:
        body = dict(arguments) if isinstance(arguments, Mapping) else arguments
        budget = dict(result_budget) if result_budget is not None else None
        return typed(Calls.call_tool(name, body, format, call_id, session, budget), ToolCallResult)

    # a session's processes
    @staticmethod
    def process_start(session: str, body: JSON) -> Call[ProcessInfo]:
        return typed(Calls.process_start(session, body), ProcessInfo)

    @staticmethod
    def processes(session: str) -> Call[ProcessList]:
        return typed(Calls.processes(session), ProcessList)

    @staticmethod
    def process(session: str, process_id: str) -> Call[ProcessInfo]:
        return typed(Calls.process(session, process_id), ProcessInfo)

    @staticmethod
    def process_write(session: str, process_id: str, data: str, eof: bool) -> Call[ProcessInfo]:
        return typed(Calls.process_write(session, process_id, data, eof), ProcessInfo)

    @staticmethod
    def process_poll(session: str, process_id: str, after: int, limit: int | None, wait: float) -> Call[ProcessOutput]:
        return typed(Calls.process_poll(session, process_id, after, limit, wait), ProcessOutput)

    # a session's network and its end
    @staticmethod
    def session_network_open(session: str, skill: str, allow: list[str] | None) -> Call[SessionNetworkState]:
        return typed(Calls.session_network_open(session, skill, allow), SessionNetworkState)

    @staticmethod
    def session_network_narrow(session: str, allow: list[str]) -> Call[SessionNetworkState]:
        return typed(Calls.session_network_narrow(session, allow), SessionNetworkState)

    @staticmethod
    def session_network(session: str) -> Call[SessionNetworkState]:
        return typed(Calls.session_network(session), SessionNetworkState)

    @staticmethod
    def session_end(session: str) -> Call[SessionEnded]:
        return typed(Calls.session_end(session), SessionEnded)

    @staticmethod
    def process_signal(session: str, process_id: str, signal: str) -> Call[ProcessInfo]:
        return typed(Calls.process_signal(session, process_id, signal), ProcessInfo)

    @staticmethod
    def process_kill(session: str, process_id: str) -> Call[ProcessInfo]:
        return typed(Calls.process_kill(session, process_id), ProcessInfo)

    @staticmethod
    def health() -> Call[Health]:
        return typed(Calls.health(), Health)

    @staticmethod
    def metrics() -> Call[str]:
        return Calls.metrics()
