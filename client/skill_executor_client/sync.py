"""The synchronous typed client: sends :class:`~.typed.Typed` calls over an ``httpx.Client``."""

from __future__ import annotations

import contextlib
import os
import pathlib
from collections.abc import Iterator, Mapping
from typing import Any, BinaryIO, Literal

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
    Body,
    Bundle,
    Download,
    SSEParser,
    extract_version,
    file_name_of,
    folder_files,
    upload_body,
)
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

    def install_skill(
        self, package: bytes, *, filename: str = "skill.zip", strict: bool = False, multipart: bool = True
    ) -> Installed:
        return self.send(Typed.install_skill(package, filename, strict, multipart))

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

    def push_skill(
        self,
        directory: str | os.PathLike[str],
        *,
        name: str | None = None,
        strict: bool | None = None,
        set_default: bool = True,
    ) -> Installed:
        """Upload a skill folder as a new version (``name``: of that existing skill, which it must be)."""
        return self.send(Typed.push_skill(folder_files(directory), name, strict, set_default))

    def pull_skill(self, name: str, directory: str | os.PathLike[str], version: int | str = "default") -> JSON:
        """Download a version into ``directory`` (created; must be empty): its version, digest and path."""
        return extract_version(self.send(Typed.skill_version_content(name, version)), directory)

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

    def list_runs(
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
        return self.send(Typed.list_runs(filters))

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

    def download_artifact(
        self,
        name: str,
        target: str | os.PathLike[str] | BinaryIO,
        version: int | None = None,
        *,
        owner: str | None = None,
    ) -> JSON:
        """Stream an artifact into ``target`` (a path, written anew, or a binary file), checking
        its SHA-256; its version, sha256, size and mime_type.  A failed download to a path
        leaves no file."""
        call = Typed.get_artifact(name, version, owner)
        with self._http.stream(call.method, call.path, params=call.params) as response:
            if not response.is_success:
                response.read()
                raise_for(response)
            download = Download(response)
            if isinstance(target, str | os.PathLike):
                try:
                    with open(target, "wb") as out:
                        for chunk in response.iter_bytes(CHUNK):
                            download.update(chunk)
                            out.write(chunk)
                    return download.done()
                except BaseException:
                    with contextlib.suppress(OSError):
                        os.unlink(target)
                    raise
            for chunk in response.iter_bytes(CHUNK):
                download.update(chunk)
                target.write(chunk)
            return download.done()

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

    # a session's processes (in its sandbox, of this key)
    def process_start(
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
        return self.send(Typed.process_start(session, body))

    def processes(self, session: str) -> ProcessList:
        return self.send(Typed.processes(session))

    def process(self, session: str, process_id: str) -> ProcessInfo:
        return self.send(Typed.process(session, process_id))

    def process_write(self, session: str, process_id: str, data: str = "", *, eof: bool = False) -> ProcessInfo:
        """Write to the process's stdin (``eof``: then close it)."""
        return self.send(Typed.process_write(session, process_id, data, eof))

    def process_poll(
        self, session: str, process_id: str, after: int = 0, *, limit: int | None = None, wait: float = 0.0
    ) -> ProcessOutput:
        """Output past byte offset ``after`` (poll next from the answer's ``next``), waiting up to ``wait`` s."""
        return self.send(Typed.process_poll(session, process_id, after, limit, wait))

    def process_signal(self, session: str, process_id: str, signal: str) -> ProcessInfo:
        return self.send(Typed.process_signal(session, process_id, signal))

    def process_kill(self, session: str, process_id: str) -> ProcessInfo:
        """Kill the process and everything it started; its final state."""
        return self.send(Typed.process_kill(session, process_id))

    # a session's network ("install, then lock") and its end
    def session_network_open(self, session: str, skill: str, allow: list[str] | None = None) -> SessionNetworkState:
        """Open the session's network: the egress of the policy rule of this key and ``skill``,
        narrowed to ``allow`` when given; its processes and runs share it."""
        return self.send(Typed.session_network_open(session, skill, allow))

    def session_network_narrow(self, session: str, allow: list[str]) -> SessionNetworkState:
        """Narrow the session's network to ``allow`` (never wider than it is: 422 network_not_allowed)."""
        return self.send(Typed.session_network_narrow(session, allow))

    def session_network(self, session: str) -> SessionNetworkState:
        """The session's network: its rule, what it may reach now, its requests."""
        return self.send(Typed.session_network(session))

    def session_end(self, session: str) -> SessionEnded:
        """End the session: its processes are killed, its network revoked, its work/ deleted."""
        return self.send(Typed.session_end(session))

    # agent context (per session, of this key; the API gives these answers no schema: JSON)
    def context(self, session: str) -> JSON:
        """The context's state: loaded skills, their docs, token counts, budget."""
        return self.send(Calls.context(session))

    def context_load(
        self,
        session: str,
        skill: str,
        *,
        evict: str | None = None,
        messages: list[str] | None = None,
        budget: JSON | None = None,
    ) -> JSON:
        body = {"skill": skill, "evict": evict, "messages": messages, "budget": budget}
        return self.send(Calls.context_op(session, "load", body))

    def context_unload(self, session: str, skill: str) -> JSON:
        return self.send(Calls.context_op(session, "unload", {"skill": skill}))

    def context_select_docs(
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
        return self.send(Calls.context_op(session, "select-docs", body))

    def context_docs(self, session: str, skill: str) -> JSON:
        return self.send(Calls.context_docs(session, skill))

    def context_touch(self, session: str, skill: str) -> JSON:
        return self.send(Calls.context_op(session, "touch", {"skill": skill}))

    def context_render(self, session: str, format: str = "text") -> JSON:
        """``content`` (a string; a structure for json), ``tokens`` and ``counter``."""
        return self.send(Calls.context_render(session, format))

    def context_clear(self, session: str) -> JSON:
        return self.send(Calls.context_clear(session))

    # tools for a model
    def tools(self, format: ToolFormat = "openai", *, context: bool = False, processes: bool = False) -> ToolList:
        """The tool definitions (``context``: with the context_* tools; ``processes``: the process_* tools)."""
        return self.send(Typed.tools(format, context, processes))

    def call_tool(
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
        return self.send(Typed.call_tool(name, arguments, format, call_id, session, result_budget))

    def health(self) -> Health:
        return self.send(Typed.health())

    def metrics(self) -> str:
        """The Prometheus text exposition."""
        return self.send(Typed.metrics())
