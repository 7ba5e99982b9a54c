"""The asynchronous client: the same calls over an ``httpx.AsyncClient``."""

from __future__ import annotations

import contextlib
import os
import pathlib
from collections.abc import AsyncIterator
from typing import Any, BinaryIO

import anyio.to_thread
import httpx
from skill_executor_client.calls import JSON, Call, Calls, T, auth_headers, raise_for
from skill_executor_client.transfer import (
    CHUNK,
    AsyncBody,
    Bundle,
    Download,
    SSEParser,
    aupload_body,
    extract_version,
    file_name_of,
    folder_files,
    with_bundle,
)


class AsyncClient:
    """Asynchronous client with the same methods as :class:`Client`."""

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
    async def list_skills(self, q: str | None = None, *, limit: int | None = None) -> JSON:
        return await self.send(Calls.list_skills(q, limit))

    async def skills_prompt(self, format: str = "xml") -> str:
        return await self.send(Calls.skills_prompt(format))

    async def load_skill(self, name: str) -> JSON:
        return await self.send(Calls.load_skill(name))

    async def list_docs(self, name: str) -> JSON:
        return await self.send(Calls.list_docs(name))

    async def read_docs(self, name: str, docs: list[str]) -> JSON:
        return await self.send(Calls.read_docs(name, docs))

    async def read_file(self, name: str, path: str) -> httpx.Response:
        return await self.send(Calls.read_file(name, path))

    async def skill_doctor(self, name: str) -> JSON:
        """Preflight: what the skill needs, what the image has, what is missing (one probe run)."""
        return await self.send(Calls.skill_doctor(name))

    async def install_skill(
        self, package: bytes, *, filename: str = "skill.zip", strict: bool = False, multipart: bool = True
    ) -> JSON:
        return await self.send(Calls.install_skill(package, filename, strict, multipart))

    async def delete_skill(self, name: str) -> None:
        await self.send(Calls.delete_skill(name))

    async def push_skill(
        self,
        directory: str | os.PathLike[str],
        *,
        name: str | None = None,
        strict: bool | None = None,
        set_default: bool = True,
    ) -> JSON:
        return await self.send(Calls.push_skill(folder_files(directory), name, strict, set_default))

    async def skill_versions(self, name: str) -> JSON:
        return await self.send(Calls.skill_versions(name))

    async def skill_version(self, name: str, version: int | str) -> JSON:
        return await self.send(Calls.skill_version(name, version))

    async def set_default_version(self, name: str, version: int | str) -> JSON:
        return await self.send(Calls.set_default_version(name, version))

    async def delete_skill_version(self, name: str, version: int | str) -> JSON:
        return await self.send(Calls.delete_skill_version(name, version))

    async def skill_audit(self, name: str) -> JSON:
        return await self.send(Calls.skill_audit(name))

    async def pull_skill(self, name: str, directory: str | os.PathLike[str], version: int | str = "default") -> JSON:
        response = await self.send(Calls.skill_version_content(name, version))
        return extract_version(response, directory)

    # runs
    async def run(self, request: JSON, *, idempotency_key: str | None = None, bundle: Bundle | None = None) -> JSON:
        """Run and wait for the result.  ``bundle``: run a skill sent with the request instead of
        an installed one -- an archive's bytes, or the path of an archive or a skill folder (zipped
        here); ``request`` then needs no ``skill``.  Its result's ``skill_digest`` names it for a
        later ``request["bundle"] = {"digest": ...}``, which sends nothing again."""
        return await self.send(Calls.run(with_bundle(request, bundle), idempotency_key, wait=True))

    async def submit(self, request: JSON, *, idempotency_key: str | None = None, bundle: Bundle | None = None) -> JSON:
        """Start a run without waiting (202 with its id); ``bundle`` as for :meth:`run`."""
        return await self.send(Calls.run(with_bundle(request, bundle), idempotency_key, wait=False))

    async def get_run(self, run_id: str) -> JSON:
        return await self.send(Calls.get_run(run_id))

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
        return await self.send(Calls.list_runs(filters))

    async def cancel_run(self, run_id: str) -> JSON:
        return await self.send(Calls.cancel_run(run_id))

    async def decide_run(self, run_id: str, decision: str, reason: str | None = None) -> JSON:
        """Approve or reject a run held for approval (``decision``: approve or reject)."""
        return await self.send(Calls.decide_run(run_id, decision, reason))

    async def events(self, run_id: str) -> AsyncIterator[tuple[str, Any]]:
        """Yield (event, data) from the run's Server-Sent Events until the result."""
        call = Calls.events(run_id)
        async with self._http.stream(call.method, call.path) as response:
            if not response.is_success:
                await response.aread()
                raise_for(response)
            parser = SSEParser()
            async for line in response.aiter_lines():
                if (parsed := parser.feed(line)) is not None:
                    yield parsed

    # artifacts
    async def put_artifact(
        self, name: str, data: AsyncBody, *, mime_type: str | None = None, owner: str | None = None
    ) -> JSON:
        """Save a new version; ``data`` is bytes, a path, a binary file (read in a
        thread) or an async iterable of chunks -- all but bytes are streamed.  Without
        ``mime_type`` the service types it from its content and name."""
        content, size = await aupload_body(data)
        return await self.send(Calls.put_artifact(name, content, mime_type, owner, size))

    async def get_artifact(self, name: str, version: int | None = None, *, owner: str | None = None) -> httpx.Response:
        return await self.send(Calls.get_artifact(name, version, owner))

    async def download_artifact(
        self,
        name: str,
        target: str | os.PathLike[str] | BinaryIO,
        version: int | None = None,
        *,
        owner: str | None = None,
    ) -> JSON:
        """:meth:`Client.download_artifact`; file writes run in a thread."""
        call = Calls.get_artifact(name, version, owner)
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
                    await anyio.to_thread.run_sync(os.unlink, target)
                raise

    async def delete_artifact(self, name: str, version: int | None = None, *, owner: str | None = None) -> JSON:
        return await self.send(Calls.delete_artifact(name, version, owner))

    async def list_artifacts(self, *, owner: str | None = None) -> JSON:
        return await self.send(Calls.list_artifacts(owner))

    async def artifact_versions(self, name: str, *, owner: str | None = None) -> JSON:
        return await self.send(Calls.artifact_versions(name, owner))

    # files by id (artifact versions)
    async def upload_file(
        self, data: AsyncBody | str, *, name: str | None = None, mime_type: str | None = None
    ) -> JSON:
        """Upload a file once: ``{id, name, version, size, mime_type, sha256, ...}``; use ``id`` as
        a run input (``{"file_id": id}``).  ``data``: bytes, a path (a ``str`` too; its name by default), a
        binary file or an async iterable of chunks -- all but bytes streamed."""
        data = pathlib.Path(data) if isinstance(data, str) else data
        content, size = await aupload_body(data)
        return await self.send(Calls.upload_file(file_name_of(data, name), content, mime_type, size))

    async def get_file(self, file_id: str) -> JSON:
        return await self.send(Calls.get_file(file_id))

    async def file_content(self, file_id: str) -> bytes:
        """A file's content (a run's saved output by its ``file_id`` too), in memory."""
        return (await self.send(Calls.file_content(file_id))).content

    async def list_files(self) -> JSON:
        return await self.send(Calls.list_files())

    async def delete_file(self, file_id: str) -> JSON:
        return await self.send(Calls.delete_file(file_id))

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
        return await self.send(Calls.process_start(session, body))

    async def processes(self, session: str) -> JSON:
        return await self.send(Calls.processes(session))

    async def process(self, session: str, process_id: str) -> JSON:
        return await self.send(Calls.process(session, process_id))

    async def process_write(self, session: str, process_id: str, data: str = "", *, eof: bool = False) -> JSON:
        """Write to the process's stdin (``eof``: then close it)."""
        return await self.send(Calls.process_write(session, process_id, data, eof))

    async def process_poll(
        self, session: str, process_id: str, after: int = 0, *, limit: int | None = None, wait: float = 0.0
    ) -> JSON:
        """Output past byte offset ``after`` (poll next from the answer's ``next``), waiting up to ``wait`` s."""
        return await self.send(Calls.process_poll(session, process_id, after, limit, wait))

    async def process_signal(self, session: str, process_id: str, signal: str) -> JSON:
        return await self.send(Calls.process_signal(session, process_id, signal))

    async def process_kill(self, session: str, process_id: str) -> JSON:
        """Kill the process and everything it started; its final state."""
        return await self.send(Calls.process_kill(session, process_id))

    # agent context (per session, of this key)
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
        return await self.send(
            Calls.context_op(session, "load", {"skill": skill, "evict": evict, "messages": messages, "budget": budget})
        )

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
        return await self.send(
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

    async def context_docs(self, session: str, skill: str) -> JSON:
        return await self.send(Calls.context_docs(session, skill))

    async def context_touch(self, session: str, skill: str) -> JSON:
        return await self.send(Calls.context_op(session, "touch", {"skill": skill}))

    async def context_render(self, session: str, format: str = "text") -> JSON:
        """``content`` (a string; a structure for json), ``tokens`` and ``counter``."""
        return await self.send(Calls.context_render(session, format))

    async def context_clear(self, session: str) -> JSON:
        return await self.send(Calls.context_clear(session))

    # tools and system
    async def tools(self, format: str = "openai", *, context: bool = False, processes: bool = False) -> JSON:
        """The tool definitions (``context``: with the context_* tools; ``processes``: the process_* tools)."""
        return await self.send(Calls.tools(format, context, processes))

    async def call_tool(
        self,
        name: str,
        arguments: JSON | str | None,
        *,
        format: str | None = None,
        call_id: str | None = None,
        session: str | None = None,
        result_budget: JSON | None = None,
    ) -> JSON:
        return await self.send(Calls.call_tool(name, arguments, format, call_id, session, result_budget))

    async def health(self) -> JSON:
        return await self.send(Calls.health())

    async def metrics(self) -> str:
        return await self.send(Calls.metrics())
