"""The asynchronous typed client: the same calls as :mod:`.sync`, over an ``httpx.AsyncClient``."""

from __future__ import annotations

import contextlib
import os
import pathlib
from collections.abc import AsyncIterator, Mapping
from typing import Any, BinaryIO, Literal

import anyio.to_thread
import httpx

from .calls import JSON, Call, Calls, T, auth_headers, raise_for
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
from .transfer import (
    CHUNK,
    AsyncBody,
    Bundle,
    Download,
    SSEParser,
    aupload_body,
    extract_version,
    file_name_of,
    folder_files,
)
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

    async def install_skill(
        self, package: bytes, *, filename: str = "skill.zip", strict: bool = False, multipart: bool = True
    ) -> Installed:
        return await self.send(Typed.install_skill(package, filename, strict, multipart))

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

    async def push_skill(
        self,
        directory: str | os.PathLike[str],
        *,
        name: str | None = None,
        strict: bool | None = None,
        set_default: bool = True,
    ) -> Installed:
        """Upload a skill folder as a new version (``name``: of that existing skill, which it must be)."""
        return await self.send(Typed.push_skill(folder_files(directory), name, strict, set_default))

    async def pull_skill(self, name: str, directory: str | os.PathLike[str], version: int | str = "default") -> JSON:
        """Download a version into ``directory`` (created; must be empty): its version, digest and path."""
        return extract_version(await self.send(Typed.skill_version_content(name, version)), directory)

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

    async def list_runs(
        self,
        *,
        skill: str | None = None,
        status: str | list[str] | None = None,
        session: str | None = None,
        created_after: float | None = None,
        created_before: float | None = None,
        limit: int | None = None,
        cursor: str | None = None,
        owner: str | None = None,
    ) -> RunList:
        """One page of your runs, newest first (``next_cursor`` for the next)."""
        filters = {
            "skill": skill,
            "status": status,
            "session": session,
            "created_after": created_after,
            "created_before": created_before,
            "limit": limit,
            "cursor": cursor,
            "owner": owner,
        }
        return await self.send(Typed.list_runs(filters))

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

    async def download_artifact(
        self,
        name: str,
        target: str | os.PathLike[str] | BinaryIO,
        version: int | None = None,
        *,
        owner: str | None = None,
    ) -> JSON:
        """:meth:`Client.download_artifact`; file writes run in a thread."""
        call = Typed.get_artifact(name, version, owner)
        async with self._http.stream(call.method, call.path, params=call.params) as response:
            if not response.is_success:
                await response.aread()
                raise_for(response)
            download = Download(response)
            if not isinstance(target, str | os.PathLike):
                async for chunk in response.aiter_bytes(CHUNK):
                    download.update(chunk)
                    await anyio.to_thread.run_sync(target.write, chunk)
                return download.done()
            out = await anyio.to_thread.run_sync(open, target, "wb")
            try:
                try:
                    async for chunk in response.aiter_bytes(CHUNK):
                        download.update(chunk)
                        await anyio.to_thread.run_sync(out.write, chunk)
                finally:
                    await anyio.to_thread.run_sync(out.close)
                return download.done()
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(target)
                raise

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

    # a session's processes (in its sandbox, of this key)
    async def process_start(
        self,
        session: str,
        command: str | list[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        pty: bool = False,
        timeout: float | None = None,
        idle_timeout: float | None = None,
    ) -> ProcessInfo:
        """Start a long-lived process in the session's sandbox; its state (``id``: the process id)."""
        body = {
            "command": command,
            "env": env,
            "cwd": cwd,
            "pty": pty,
            "timeout": timeout,
            "idle_timeout": idle_timeout,
        }
        return await self.send(Typed.process_start(session, body))

    async def processes(self, session: str) -> ProcessList:
        return await self.send(Typed.processes(session))

    async def process(self, session: str, process_id: str) -> ProcessInfo:
        return await self.send(Typed.process(session, process_id))

    async def process_write(self, session: str, process_id: str, data: str = "", *, eof: bool = False) -> ProcessInfo:
        """Write to the process's stdin (``eof``: then close it)."""
        return await self.send(Typed.process_write(session, process_id, data, eof))

    async def process_poll(
        self, session: str, process_id: str, after: int = 0, *, limit: int | None = None, wait: float = 0.0
    ) -> ProcessOutput:
        """Output past byte offset ``after`` (poll next from the answer's ``next``), waiting up to ``wait`` s."""
        return await self.send(Typed.process_poll(session, process_id, after, limit, wait))

    async def process_signal(self, session: str, process_id: str, signal: str) -> ProcessInfo:
        return await self.send(Typed.process_signal(session, process_id, signal))

    async def process_kill(self, session: str, process_id: str) -> ProcessInfo:
        """Kill the process and everything it started; its final state."""
        return await self.send(Typed.process_kill(session, process_id))

    # a session's network ("install, then lock") and its end
    async def session_network_open(
        self, session: str, skill: str, allow: list[str] | None = None
    ) -> SessionNetworkState:
        """Open the session's network: the egress of the policy rule of this key and ``skill``,
        narrowed to ``allow`` when given; its processes and runs share it."""
        return await self.send(Typed.session_network_open(session, skill, allow))

    async def session_network_narrow(self, session: str, allow: list[str]) -> SessionNetworkState:
        """Narrow the session's network to ``allow`` (never wider than it is: 422 network_not_allowed)."""
        return await self.send(Typed.session_network_narrow(session, allow))

    async def session_network(self, session: str) -> SessionNetworkState:
        """The session's network: its rule, what it may reach now, its requests."""
        return await self.send(Typed.session_network(session))

    async def session_end(self, session: str) -> SessionEnded:
        """End the session: its processes are killed, its network revoked, its work/ deleted."""
        return await self.send(Typed.session_end(session))

    # agent context (per session, of this key; the API gives these answers no schema: JSON)
    async def context(self, session: str) -> JSON:
        """The context's state: loaded skills, their docs, token counts, budget."""
        return await self.send(Calls.context(session))

    async def context_load(
        self,
        session: str,
        skill: str,
        *,
        evict: str | None = None,
        messages: list[str] | None = None,
        budget: JSON | None = None,
    ) -> JSON:
        body = {"skill": skill, "evict": evict, "messages": messages, "budget": budget}
        return await self.send(Calls.context_op(session, "load", body))

    async def context_unload(self, session: str, skill: str) -> JSON:
        return await self.send(Calls.context_op(session, "unload", {"skill": skill}))

    async def context_select_docs(
        self,
        session: str,
        skill: str,
        docs: list[str] | None = None,
        *,
        all: bool | None = None,
        mode: str = "add",
        evict: str | None = None,
        messages: list[str] | None = None,
        budget: JSON | None = None,
    ) -> JSON:
        body = {
            "skill": skill,
            "docs": docs,
            "all": all,
            "mode": mode,
            "evict": evict,
            "messages": messages,
            "budget": budget,
        }
        return await self.send(Calls.context_op(session, "select-docs", body))

    async def context_docs(self, session: str, skill: str) -> JSON:
        return await self.send(Calls.context_docs(session, skill))

    async def context_touch(self, session: str, skill: str) -> JSON:
        return await self.send(Calls.context_op(session, "touch", {"skill": skill}))

    async def context_render(self, session: str, format: str = "text") -> JSON:
        """``content`` (a string; a structure for json), ``tokens`` and ``counter``."""
        return await self.send(Calls.context_render(session, format))

    async def context_clear(self, session: str) -> JSON:
        return await self.send(Calls.context_clear(session))

    # tools for a model
    async def tools(self, format: ToolFormat = "openai", *, context: bool = False, processes: bool = False) -> ToolList:
        """The tool definitions (``context``: with the context_* tools; ``processes``: the process_* tools)."""
        return await self.send(Typed.tools(format, context, processes))

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | str | None = None,
        *,
        format: ToolFormat | None = None,
        call_id: str | None = None,
        session: str | None = None,
        result_budget: Mapping[str, Any] | None = None,
    ) -> ToolCallResult:
        """Execute a tool call; with ``format`` (and the call's id) the answer's ``message`` is the
        tool-result message to append; ``session``: the ``context_*`` tools' session when the
        arguments name none; ``result_budget``: overrides of the tool-result budget."""
        return await self.send(Typed.call_tool(name, arguments, format, call_id, session, result_budget))

    async def health(self) -> Health:
        return await self.send(Typed.health())

    async def metrics(self) -> str:
        """The Prometheus text exposition."""
        return await self.send(Typed.metrics())
