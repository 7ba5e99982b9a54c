"""The synchronous client: sends :class:`~.calls.Call` s over an ``httpx.Client``."""

from __future__ import annotations

import contextlib
import os
import pathlib
from collections.abc import Iterator
from typing import Any, BinaryIO

import httpx
from skill_executor_client.calls import JSON, Call, Calls, T, auth_headers, raise_for
from skill_executor_client.transfer import (
    CHUNK,
    Body,
    Bundle,
    Download,
    SSEParser,
    extract_version,
    file_name_of,
    folder_files,
    upload_body,
    with_bundle,
)


class Client:
    """Synchronous client."""

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
    def list_skills(self, q: str | None = None, *, limit: int | None = None) -> JSON:
        return self.send(Calls.list_skills(q, limit))

    def skills_prompt(self, format: str = "xml") -> str:
        return self.send(Calls.skills_prompt(format))

    def load_skill(self, name: str) -> JSON:
        return self.send(Calls.load_skill(name))

    def list_docs(self, name: str) -> JSON:
        return self.send(Calls.list_docs(name))

    def read_docs(self, name: str, docs: list[str]) -> JSON:
        return self.send(Calls.read_docs(name, docs))

    def read_file(self, name: str, path: str) -> httpx.Response:
        return self.send(Calls.read_file(name, path))

    def skill_doctor(self, name: str) -> JSON:
        """Preflight: what the skill needs, what the image has, what is missing (one probe run)."""
        return self.send(Calls.skill_doctor(name))

    def install_skill(
        self, package: bytes, *, filename: str = "skill.zip", strict: bool = False, multipart: bool = True
    ) -> JSON:
        return self.send(Calls.install_skill(package, filename, strict, multipart))

    def delete_skill(self, name: str) -> None:
        self.send(Calls.delete_skill(name))

    def push_skill(
        self,
        directory: str | os.PathLike[str],
        *,
        name: str | None = None,
        strict: bool | None = None,
        set_default: bool = True,
    ) -> JSON:
        """Upload a skill folder as a new version (``name``: of that existing skill, which it must be)."""
        return self.send(Calls.push_skill(folder_files(directory), name, strict, set_default))

    def skill_versions(self, name: str) -> JSON:
        return self.send(Calls.skill_versions(name))

    def skill_version(self, name: str, version: int | str) -> JSON:
        return self.send(Calls.skill_version(name, version))

    def set_default_version(self, name: str, version: int | str) -> JSON:
        return self.send(Calls.set_default_version(name, version))

    def delete_skill_version(self, name: str, version: int | str) -> JSON:
        return self.send(Calls.delete_skill_version(name, version))

    def skill_audit(self, name: str) -> JSON:
        return self.send(Calls.skill_audit(name))

    def pull_skill(self, name: str, directory: str | os.PathLike[str], version: int | str = "default") -> JSON:
        """Download a version into ``directory`` (created; must be empty); returns its version and digest."""
        response = self.send(Calls.skill_version_content(name, version))
        return extract_version(response, directory)

    # runs
    def run(self, request: JSON, *, idempotency_key: str | None = None, bundle: Bundle | None = None) -> JSON:
        """Run and wait for the result.  ``bundle``: run a skill sent with the request instead of
        an installed one -- an archive's bytes, or the path of an archive or a skill folder (zipped
        here); ``request`` then needs no ``skill``.  Its result's ``skill_digest`` names it for a
        later ``request["bundle"] = {"digest": ...}``, which sends nothing again."""
        return self.send(Calls.run(with_bundle(request, bundle), idempotency_key, wait=True))

    def submit(self, request: JSON, *, idempotency_key: str | None = None, bundle: Bundle | None = None) -> JSON:
        """Start a run without waiting (202 with its id); ``bundle`` as for :meth:`run`."""
        return self.send(Calls.run(with_bundle(request, bundle), idempotency_key, wait=False))

    def get_run(self, run_id: str) -> JSON:
        return self.send(Calls.get_run(run_id))

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
    ) -> JSON:
        """One page of your runs, newest first: ``{"runs": [...], "next_cursor": ...}``."""
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
        return self.send(Calls.list_runs(filters))

    def cancel_run(self, run_id: str) -> JSON:
        return self.send(Calls.cancel_run(run_id))

    def decide_run(self, run_id: str, decision: str, reason: str | None = None) -> JSON:
        """Approve or reject a run held for approval (``decision``: approve or reject)."""
        return self.send(Calls.decide_run(run_id, decision, reason))

    def events(self, run_id: str) -> Iterator[tuple[str, Any]]:
        """Yield (event, data) from the run's Server-Sent Events until the result."""
        call = Calls.events(run_id)
        with self._http.stream(call.method, call.path) as response:
            if not response.is_success:
                response.read()
                raise_for(response)
            parser = SSEParser()
            for line in response.iter_lines():
                if (parsed := parser.feed(line)) is not None:
                    yield parsed

    # artifacts
    def put_artifact(self, name: str, data: Body, *, mime_type: str | None = None, owner: str | None = None) -> JSON:
        """Save a new version; ``data`` is bytes, a path, a binary file or an iterable of
        chunks -- all but bytes are streamed, never read into memory.  Without
        ``mime_type`` the service types it from its content and name (as run outputs)."""
        content, size = upload_body(data)
        return self.send(Calls.put_artifact(name, content, mime_type, owner, size))

    def get_artifact(self, name: str, version: int | None = None, *, owner: str | None = None) -> httpx.Response:
        """The whole content in memory (``.content``); big artifacts: :meth:`download_artifact`."""
        return self.send(Calls.get_artifact(name, version, owner))

    def download_artifact(
        self,
        name: str,
        target: str | os.PathLike[str] | BinaryIO,
        version: int | None = None,
        *,
        owner: str | None = None,
    ) -> JSON:
        """Stream an artifact into ``target`` (a path, written anew, or a binary file),
        checking its SHA-256; returns its version, sha256, size and mime_type.  A
        failed download to a path leaves no file."""
        call = Calls.get_artifact(name, version, owner)
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

    def delete_artifact(self, name: str, version: int | None = None, *, owner: str | None = None) -> JSON:
        """Delete every version (or ``version``); returns ``{"artifacts": [what was deleted]}``."""
        return self.send(Calls.delete_artifact(name, version, owner))

    def list_artifacts(self, *, owner: str | None = None) -> JSON:
        return self.send(Calls.list_artifacts(owner))

    def artifact_versions(self, name: str, *, owner: str | None = None) -> JSON:
        return self.send(Calls.artifact_versions(name, owner))

    # files by id (artifact versions)
    def upload_file(self, data: Body | str, *, name: str | None = None, mime_type: str | None = None) -> JSON:
        """Upload a file once: ``{id, name, version, size, mime_type, sha256, ...}``; use ``id`` as
        a run input (``{"file_id": id}``).  ``data``: bytes, a path (a ``str`` too; its name by default), a
        binary file or chunks -- all but bytes streamed."""
        data = pathlib.Path(data) if isinstance(data, str) else data
        content, size = upload_body(data)
        return self.send(Calls.upload_file(file_name_of(data, name), content, mime_type, size))

    def get_file(self, file_id: str) -> JSON:
        return self.send(Calls.get_file(file_id))

    def file_content(self, file_id: str) -> bytes:
        """A file's content (a run's saved output by its ``file_id`` too), in memory."""
        return self.send(Calls.file_content(file_id)).content

    def list_files(self) -> JSON:
        return self.send(Calls.list_files())

    def delete_file(self, file_id: str) -> JSON:
        return self.send(Calls.delete_file(file_id))

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
    ) -> JSON:
        """Start a long-lived process in the session's sandbox; its state (``id``: the process id)."""
        body = {
            "command": command,
            "env": env,
            "cwd": cwd,
            "pty": pty,
            "timeout": timeout,
            "idle_timeout": idle_timeout,
        }
        return self.send(Calls.process_start(session, body))

    def processes(self, session: str) -> JSON:
        return self.send(Calls.processes(session))

    def process(self, session: str, process_id: str) -> JSON:
        return self.send(Calls.process(session, process_id))

    def process_write(self, session: str, process_id: str, data: str = "", *, eof: bool = False) -> JSON:
        """Write to the process's stdin (``eof``: then close it)."""
        return self.send(Calls.process_write(session, process_id, data, eof))

    def process_poll(
        self, session: str, process_id: str, after: int = 0, *, limit: int | None = None, wait: float = 0.0
    ) -> JSON:
        """Output past byte offset ``after`` (poll next from the answer's ``next``), waiting up to ``wait`` s."""
        return self.send(Calls.process_poll(session, process_id, after, limit, wait))

    def process_signal(self, session: str, process_id: str, signal: str) -> JSON:
        return self.send(Calls.process_signal(session, process_id, signal))

    def process_kill(self, session: str, process_id: str) -> JSON:
        """Kill the process and everything it started; its final state."""
        return self.send(Calls.process_kill(session, process_id))

    # agent context (per session, of this key)
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
        return self.send(
            Calls.context_op(session, "load", {"skill": skill, "evict": evict, "messages": messages, "budget": budget})
        )

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
        return self.send(
            Calls.context_op(
                session,
                "select-docs",
                {
                    "skill": skill,
                    "docs": docs,
                    "all": all,
                    "mode": mode,
                    "evict": evict,
                    "messages": messages,
                    "budget": budget,
                },
            )
        )

    def context_docs(self, session: str, skill: str) -> JSON:
        return self.send(Calls.context_docs(session, skill))

    def context_touch(self, session: str, skill: str) -> JSON:
        return self.send(Calls.context_op(session, "touch", {"skill": skill}))

    def context_render(self, session: str, format: str = "text") -> JSON:
        """``content`` (a string; a structure for json), ``tokens`` and ``counter``."""
        return self.send(Calls.context_render(session, format))

    def context_clear(self, session: str) -> JSON:
        return self.send(Calls.context_clear(session))

    # tools and system
    def tools(self, format: str = "openai", *, context: bool = False, processes: bool = False) -> JSON:
        """The tool definitions (``context``: with the context_* tools; ``processes``: the process_* tools)."""
        return self.send(Calls.tools(format, context, processes))

    def call_tool(
        self,
        name: str,
        arguments: JSON | str | None,
        *,
        format: str | None = None,
        call_id: str | None = None,
        session: str | None = None,
        result_budget: JSON | None = None,
    ) -> JSON:
        """Execute a tool call; with ``format`` (and the call's id) the answer's ``message``
        is the tool-result message to append to the conversation; ``session``: the
        ``context_*`` tools' session when the arguments name none; ``result_budget``:
        overrides of the tool-result budget (``max_chars``, ``inline_bytes``, ``image_bytes``)."""
        return self.send(Calls.call_tool(name, arguments, format, call_id, session, result_budget))

    def health(self) -> JSON:
        return self.send(Calls.health())

    def metrics(self) -> str:
        return self.send(Calls.metrics())
