"""A small client for the skill-executor HTTP API (httpx; sync and async).

    from executor.client import Client
    with Client("http://127.0.0.1:8080", api_key="...") as client:
        print(client.list_skills()["skills"])
        result = client.run({"skill": "math-tools", "command": "python3 scripts/fib.py 10"})

Every non-2xx answer raises :class:`ApiError` with the service's error code.

Both clients share one core: each operation is described once as a :class:`Call`
(method, quoted path, parameters, body, how to read the answer) by :class:`Calls`;
:class:`Client` and :class:`AsyncClient` only send calls and map errors, in the same
way (:func:`raise_for`), and parse Server-Sent Events with the same parser.  (The
module is long only because each client lists every operation once, as httpx does.)
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import zipfile
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from stat import S_ISREG
from typing import Any, BinaryIO, Generic, TypeVar, cast
from urllib.parse import quote

import anyio.to_thread
import httpx

JSON = dict[str, Any]
T = TypeVar("T")


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, details: Any = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details


def raise_for(response: httpx.Response) -> None:
    """Raise :class:`ApiError` for a non-2xx answer (the service's error shape, or the text)."""
    if response.is_success:
        return
    try:
        error = response.json()["error"]
        raise ApiError(response.status_code, error["code"], error["message"], error.get("details"))
    except (ValueError, KeyError, TypeError):
        raise ApiError(response.status_code, "http_error", response.text[:500]) from None


def segment(value: str) -> str:
    """One path segment, quoted (a ``/`` in it stays inside the segment)."""
    return quote(value, safe="")


def subpath(value: str) -> str:
    """A ``/``-separated path (an artifact name, a file of a skill), each segment quoted."""
    return "/".join(quote(part, safe="") for part in value.split("/"))


def as_json(response: httpx.Response) -> JSON:
    return cast(JSON, response.json())


def as_text(response: httpx.Response) -> str:
    return response.text


def as_response(response: httpx.Response) -> httpx.Response:
    return response


def as_nothing(response: httpx.Response) -> None:
    return None


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request and how to read its answer."""

    method: str
    path: str
    answer: Callable[[httpx.Response], T]
    params: dict[str, Any] = field(default_factory=dict)
    json: Any = None
    #: The body: bytes, or chunks (an iterable for Client, an async iterable for AsyncClient).
    content: bytes | Iterable[bytes] | AsyncIterable[bytes] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    files: dict[str, tuple[str, bytes]] | list[tuple[str, tuple[str, bytes]]] | None = None
    #: Statuses returned as answers rather than raised (health: 503 is an answer).
    accept: tuple[int, ...] = ()

    def send_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"params": self.params or None, "headers": self.headers or None}
        if self.json is not None:
            kwargs["json"] = self.json
        if self.content is not None:
            kwargs["content"] = self.content
        if self.files is not None:
            kwargs["files"] = self.files
        return kwargs

    def read(self, response: httpx.Response) -> T:
        if response.status_code not in self.accept:
            raise_for(response)
        return self.answer(response)


def _idempotency(key: str | None) -> dict[str, str]:
    return {"Idempotency-Key": key} if key else {}


def _owner(owner: str | None) -> dict[str, str]:
    """Admins: act on another key's artifacts (``owner`` is its key id, as in the logs)."""
    return {"owner": owner} if owner else {}


class Calls:
    """Every operation of the API, as a :class:`Call` (shared by both clients)."""

    @staticmethod
    def list_skills(q: str | None, limit: int | None) -> Call[JSON]:
        params = {k: v for k, v in (("q", q), ("limit", limit)) if v is not None}
        return Call("GET", "/v1/skills", as_json, params=params)

    @staticmethod
    def skills_prompt(format: str) -> Call[str]:
        return Call("GET", "/v1/skills", as_text, params={"format": format})

    @staticmethod
    def load_skill(name: str) -> Call[JSON]:
        return Call("GET", f"/v1/skills/{segment(name)}", as_json)

    @staticmethod
    def list_docs(name: str) -> Call[JSON]:
        return Call("GET", f"/v1/skills/{segment(name)}/docs", as_json)

    @staticmethod
    def read_docs(name: str, docs: list[str]) -> Call[JSON]:
        return Call("GET", f"/v1/skills/{segment(name)}/docs", as_json, params={"names": ",".join(docs)})

    @staticmethod
    def read_file(name: str, path: str) -> Call[httpx.Response]:
        return Call("GET", f"/v1/skills/{segment(name)}/files/{subpath(path)}", as_response)

    @staticmethod
    def skill_doctor(name: str) -> Call[JSON]:
        return Call("GET", f"/v1/skills/{segment(name)}/doctor", as_json)

    @staticmethod
    def install_skill(package: bytes, filename: str, strict: bool, multipart: bool) -> Call[JSON]:
        params = {"strict": "true"} if strict else {}
        if multipart:
            return Call("POST", "/v1/skills", as_json, params=params, files={"file": (filename, package)})
        kind = "application/zip" if package[:2] == b"PK" else "application/gzip"
        return Call("POST", "/v1/skills", as_json, params=params, content=package, headers={"Content-Type": kind})

    @staticmethod
    def delete_skill(name: str) -> Call[None]:
        return Call("DELETE", f"/v1/skills/{segment(name)}", as_nothing)

    @staticmethod
    def push_skill(files: list[tuple[str, bytes]], name: str | None, strict: bool | None,
                   set_default: bool) -> Call[JSON]:
        params = {k: v for k, v in (("strict", None if strict is None else str(strict).lower()),
                                    ("no_default", None if set_default else "true")) if v is not None}
        path = f"/v1/skills/{segment(name)}/versions" if name else "/v1/skills"
        return Call("POST", path, as_json, params=params, files=[("files[]", (p, c)) for p, c in files])

    @staticmethod
    def skill_versions(name: str) -> Call[JSON]:
        return Call("GET", f"/v1/skills/{segment(name)}/versions", as_json)

    @staticmethod
    def skill_version(name: str, version: int | str) -> Call[JSON]:
        return Call("GET", f"/v1/skills/{segment(name)}/versions/{segment(str(version))}", as_json)

    @staticmethod
    def skill_version_content(name: str, version: int | str) -> Call[httpx.Response]:
        return Call("GET", f"/v1/skills/{segment(name)}/versions/{segment(str(version))}/content", as_response)

    @staticmethod
    def set_default_version(name: str, version: int | str) -> Call[JSON]:
        return Call("PATCH", f"/v1/skills/{segment(name)}", as_json, json={"default_version": version})

    @staticmethod
    def delete_skill_version(name: str, version: int | str) -> Call[JSON]:
        return Call("DELETE", f"/v1/skills/{segment(name)}/versions/{segment(str(version))}", as_json)

    @staticmethod
    def skill_audit(name: str) -> Call[JSON]:
        return Call("GET", f"/v1/skills/{segment(name)}/audit", as_json)

    @staticmethod
    def run(request: JSON, idempotency_key: str | None, wait: bool) -> Call[JSON]:
        params = {} if wait else {"wait": "false"}
        return Call("POST", "/v1/runs", as_json, params=params, json=request, headers=_idempotency(idempotency_key))

    @staticmethod
    def get_run(run_id: str) -> Call[JSON]:
        return Call("GET", f"/v1/runs/{segment(run_id)}", as_json)

    @staticmethod
    def cancel_run(run_id: str) -> Call[JSON]:
        return Call("DELETE", f"/v1/runs/{segment(run_id)}", as_json)

    @staticmethod
    def events(run_id: str) -> Call[None]:
        return Call("GET", f"/v1/runs/{segment(run_id)}/events", as_nothing)

    @staticmethod
    def put_artifact(name: str, content: bytes | Iterable[bytes] | AsyncIterable[bytes], mime_type: str | None,
                     owner: str | None = None, size: int | None = None) -> Call[JSON]:
        # No Content-Type: the service types the artifact from its content and name.
        headers = {"Content-Type": mime_type} if mime_type else {}
        if size is not None:
            headers["Content-Length"] = str(size)  # known up front: the service refuses an oversize body at once
        return Call("POST", f"/v1/artifacts/{subpath(name)}", as_json, content=content, headers=headers,
                    params=_owner(owner))

    @staticmethod
    def get_artifact(name: str, version: int | None, owner: str | None = None) -> Call[httpx.Response]:
        params: dict[str, Any] = {"version": version} if version is not None else {}
        return Call("GET", f"/v1/artifacts/{subpath(name)}", as_response, params={**params, **_owner(owner)})

    @staticmethod
    def delete_artifact(name: str, version: int | None, owner: str | None = None) -> Call[JSON]:
        params: dict[str, Any] = {"version": version} if version is not None else {}
        return Call("DELETE", f"/v1/artifacts/{subpath(name)}", as_json, params={**params, **_owner(owner)})

    @staticmethod
    def list_artifacts(owner: str | None = None) -> Call[JSON]:
        return Call("GET", "/v1/artifacts", as_json, params=_owner(owner))

    @staticmethod
    def artifact_versions(name: str, owner: str | None = None) -> Call[JSON]:
        return Call("GET", "/v1/artifacts", as_json, params={"name": name, **_owner(owner)})

    @staticmethod
    def tools(format: str, context: bool = False) -> Call[JSON]:
        return Call("GET", "/v1/tools", as_json, params={"format": format, **({"context": "true"} if context else {})})

    @staticmethod
    def call_tool(name: str, arguments: JSON | str | None, format: str | None = None,
                  call_id: str | None = None, session: str | None = None) -> Call[JSON]:
        body: dict[str, Any] = {"name": name, "arguments": arguments}
        if format is not None:
            body["format"] = format
        if call_id is not None:
            body["id"] = call_id
        if session is not None:
            body["session"] = session
        return Call("POST", "/v1/tools/call", as_json, json=body)

    # agent context
    @staticmethod
    def context(session: str) -> Call[JSON]:
        return Call("GET", f"/v1/sessions/{segment(session)}/context", as_json)

    @staticmethod
    def context_op(session: str, op: str, body: JSON) -> Call[JSON]:
        """``op``: load, unload, select-docs or touch; ``None`` values are left out of the body."""
        return Call("POST", f"/v1/sessions/{segment(session)}/context/{op}", as_json,
                    json={k: v for k, v in body.items() if v is not None})

    @staticmethod
    def context_docs(session: str, skill: str) -> Call[JSON]:
        return Call("GET", f"/v1/sessions/{segment(session)}/context/docs", as_json, params={"skill": skill})

    @staticmethod
    def context_render(session: str, format: str) -> Call[JSON]:
        return Call("GET", f"/v1/sessions/{segment(session)}/context/render", as_json, params={"format": format})

    @staticmethod
    def context_clear(session: str) -> Call[JSON]:
        return Call("DELETE", f"/v1/sessions/{segment(session)}/context", as_json)

    @staticmethod
    def health() -> Call[JSON]:
        return Call("GET", "/healthz", as_json, accept=(200, 503))

    @staticmethod
    def metrics() -> Call[str]:
        return Call("GET", "/metrics", as_text)


#: Folders a push leaves out (the registry does not version them either).
PUSH_SKIP = frozenset({".git", "__pycache__"})


def folder_files(directory: str | os.PathLike[str]) -> list[tuple[str, bytes]]:
    """A skill folder's files as (path relative to the folder, content); links are not followed."""
    root = os.fspath(directory)
    if not os.path.isdir(root):
        raise FileNotFoundError(f"no such folder: {root}")
    out: list[tuple[str, bytes]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in PUSH_SKIP)
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            if os.path.islink(full) or not os.path.isfile(full):
                continue
            with open(full, "rb") as handle:
                out.append((os.path.relpath(full, root).replace(os.sep, "/"), handle.read()))
    return out


def extract_version(response: httpx.Response, directory: str | os.PathLike[str]) -> JSON:
    """Unpack a version's zip (one top folder) into ``directory``, which must be empty or absent."""
    target = os.fspath(directory)
    os.makedirs(target, exist_ok=True)
    if os.listdir(target):
        raise FileExistsError(f"{target} is not empty")
    real = os.path.realpath(target)
    with zipfile.ZipFile(io.BytesIO(response.content)) as archive:
        for info in archive.infolist():
            parts = info.filename.split("/")[1:]  # drop the skill's folder name
            if info.is_dir() or not parts or any(p in ("", ".", "..") for p in parts):
                continue
            dest = os.path.join(real, *parts)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with open(dest, "wb") as handle:
                handle.write(archive.read(info))
            os.chmod(dest, 0o755 if (info.external_attr >> 16) & 0o111 else 0o644)
    return {"version": int(response.headers.get("x-skill-version", "0")) or None,
            "digest": response.headers.get("x-skill-digest"), "path": target}


class SSEParser:
    """Feed lines of a Server-Sent Events stream; get (event, data) per finished block."""

    def __init__(self) -> None:
        self._event = "message"
        self._data: list[str] = []

    def feed(self, line: str) -> tuple[str, Any] | None:
        if line.startswith("event:"):
            self._event = line[6:].strip()
        elif line.startswith("data:"):
            self._data.append(line[5:].strip())
        elif not line and self._data:
            parsed = (self._event, json.loads("\n".join(self._data)))
            self._event, self._data = "message", []
            return parsed
        return None


#: Upload and download chunk size.
CHUNK = 256 * 1024
#: What an artifact upload reads: bytes, a file path, a binary file or chunks.
Body = bytes | os.PathLike[str] | BinaryIO | Iterable[bytes]
AsyncBody = bytes | os.PathLike[str] | BinaryIO | AsyncIterable[bytes]


def _file_size(handle: BinaryIO) -> int | None:
    """What is left to read of a regular file (None for pipes and the like)."""
    try:
        stat = os.fstat(handle.fileno())
        return stat.st_size - handle.tell() if S_ISREG(stat.st_mode) else None
    except (OSError, ValueError, AttributeError):
        return None


def _read_chunks(handle: BinaryIO) -> Iterator[bytes]:
    while chunk := handle.read(CHUNK):
        yield chunk


def _path_chunks(path: os.PathLike[str]) -> Iterator[bytes]:
    with open(path, "rb") as handle:
        yield from _read_chunks(handle)


async def _aread_chunks(handle: BinaryIO) -> AsyncIterator[bytes]:
    while chunk := await anyio.to_thread.run_sync(handle.read, CHUNK):
        yield chunk


async def _apath_chunks(path: os.PathLike[str]) -> AsyncIterator[bytes]:
    handle = await anyio.to_thread.run_sync(open, path, "rb")
    try:
        async for chunk in _aread_chunks(handle):
            yield chunk
    finally:
        await anyio.to_thread.run_sync(handle.close)


def upload_body(data: Body) -> tuple[bytes | Iterable[bytes], int | None]:
    """(what httpx sends, its size when known) for :meth:`Client.put_artifact`."""
    if isinstance(data, bytes):
        return data, len(data)
    if isinstance(data, os.PathLike):
        return _path_chunks(data), os.stat(data).st_size
    if hasattr(data, "read"):
        handle = cast(BinaryIO, data)
        return _read_chunks(handle), _file_size(handle)
    return data, None


async def aupload_body(data: AsyncBody) -> tuple[bytes | AsyncIterable[bytes], int | None]:
    """(what httpx sends, its size when known) for :meth:`AsyncClient.put_artifact`."""
    if isinstance(data, bytes):
        return data, len(data)
    if isinstance(data, os.PathLike):
        return _apath_chunks(data), (await anyio.to_thread.run_sync(os.stat, data)).st_size
    if hasattr(data, "read"):
        handle = cast(BinaryIO, data)
        return _aread_chunks(handle), _file_size(handle)
    return data, None


class Download:
    """Checks a streamed artifact while it is written: its SHA-256 against the
    service's ``X-Artifact-SHA256``; ``done()`` returns its metadata."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.digest = hashlib.sha256()
        self.size = 0

    def update(self, chunk: bytes) -> None:
        self.digest.update(chunk)
        self.size += len(chunk)

    def done(self) -> JSON:
        headers = self.response.headers
        expected = headers.get("x-artifact-sha256")
        if expected is not None and expected != self.digest.hexdigest():
            raise ApiError(self.response.status_code, "checksum_mismatch",
                           f"the download's SHA-256 {self.digest.hexdigest()} is not the artifact's {expected}")
        return {"version": int(headers.get("x-artifact-version", "0")), "sha256": self.digest.hexdigest(),
                "size": self.size, "mime_type": headers.get("content-type", "").split(";")[0]}


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


class Client:
    """Synchronous client."""

    def __init__(self, base_url: str, *, api_key: str | None = None, timeout: float = 900.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        self._http = httpx.Client(base_url=base_url, headers=_headers(api_key), timeout=timeout, transport=transport)

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

    def install_skill(self, package: bytes, *, filename: str = "skill.zip", strict: bool = False,
                      multipart: bool = True) -> JSON:
        return self.send(Calls.install_skill(package, filename, strict, multipart))

    def delete_skill(self, name: str) -> None:
        self.send(Calls.delete_skill(name))

    def push_skill(self, directory: str | os.PathLike[str], *, name: str | None = None, strict: bool | None = None,
                   set_default: bool = True) -> JSON:
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
    def run(self, request: JSON, *, idempotency_key: str | None = None) -> JSON:
        return self.send(Calls.run(request, idempotency_key, wait=True))

    def submit(self, request: JSON, *, idempotency_key: str | None = None) -> JSON:
        return self.send(Calls.run(request, idempotency_key, wait=False))

    def get_run(self, run_id: str) -> JSON:
        return self.send(Calls.get_run(run_id))

    def cancel_run(self, run_id: str) -> JSON:
        return self.send(Calls.cancel_run(run_id))

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
    def put_artifact(self, name: str, data: Body, *, mime_type: str | None = None,
                     owner: str | None = None) -> JSON:
        """Save a new version; ``data`` is bytes, a path, a binary file or an iterable of
        chunks -- all but bytes are streamed, never read into memory.  Without
        ``mime_type`` the service types it from its content and name (as run outputs)."""
        content, size = upload_body(data)
        return self.send(Calls.put_artifact(name, content, mime_type, owner, size))

    def get_artifact(self, name: str, version: int | None = None, *, owner: str | None = None) -> httpx.Response:
        """The whole content in memory (``.content``); big artifacts: :meth:`download_artifact`."""
        return self.send(Calls.get_artifact(name, version, owner))

    def download_artifact(self, name: str, target: str | os.PathLike[str] | BinaryIO, version: int | None = None,
                          *, owner: str | None = None) -> JSON:
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

    # agent context (per session, of this key)
    def context(self, session: str) -> JSON:
        """The context's state: loaded skills, their docs, token counts, budget."""
        return self.send(Calls.context(session))

    def context_load(self, session: str, skill: str, *, evict: str | None = None,
                     messages: list[str] | None = None, budget: JSON | None = None) -> JSON:
        return self.send(Calls.context_op(session, "load", {"skill": skill, "evict": evict, "messages": messages,
                                                              "budget": budget}))

    def context_unload(self, session: str, skill: str) -> JSON:
        return self.send(Calls.context_op(session, "unload", {"skill": skill}))

    def context_select_docs(self, session: str, skill: str, docs: list[str] | None = None, *,
                            all: bool | None = None, mode: str = "add", evict: str | None = None,
                            messages: list[str] | None = None,
                            budget: JSON | None = None) -> JSON:
        return self.send(Calls.context_op(session, "select-docs", {
            "skill": skill, "docs": docs, "all": all, "mode": mode, "evict": evict, "messages": messages,
            "budget": budget}))

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
    def tools(self, format: str = "openai", *, context: bool = False) -> JSON:
        return self.send(Calls.tools(format, context))

    def call_tool(self, name: str, arguments: JSON | str | None, *, format: str | None = None,
                  call_id: str | None = None, session: str | None = None) -> JSON:
        """Execute a tool call; with ``format`` (and the call's id) the answer's ``message``
        is the tool-result message to append to the conversation; ``session``: the
        ``context_*`` tools' session when the arguments name none."""
        return self.send(Calls.call_tool(name, arguments, format, call_id, session))

    def health(self) -> JSON:
        return self.send(Calls.health())

    def metrics(self) -> str:
        return self.send(Calls.metrics())


class AsyncClient:
    """Asynchronous client with the same methods as :class:`Client`."""

    def __init__(self, base_url: str, *, api_key: str | None = None, timeout: float = 900.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._http = httpx.AsyncClient(
            base_url=base_url, headers=_headers(api_key), timeout=timeout, transport=transport
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

    async def install_skill(self, package: bytes, *, filename: str = "skill.zip", strict: bool = False,
                            multipart: bool = True) -> JSON:
        return await self.send(Calls.install_skill(package, filename, strict, multipart))

    async def delete_skill(self, name: str) -> None:
        await self.send(Calls.delete_skill(name))

    async def push_skill(self, directory: str | os.PathLike[str], *, name: str | None = None,
                         strict: bool | None = None, set_default: bool = True) -> JSON:
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

    async def pull_skill(self, name: str, directory: str | os.PathLike[str],
                         version: int | str = "default") -> JSON:
        response = await self.send(Calls.skill_version_content(name, version))
        return extract_version(response, directory)

    # runs
    async def run(self, request: JSON, *, idempotency_key: str | None = None) -> JSON:
        return await self.send(Calls.run(request, idempotency_key, wait=True))

    async def submit(self, request: JSON, *, idempotency_key: str | None = None) -> JSON:
        return await self.send(Calls.run(request, idempotency_key, wait=False))

    async def get_run(self, run_id: str) -> JSON:
        return await self.send(Calls.get_run(run_id))

    async def cancel_run(self, run_id: str) -> JSON:
        return await self.send(Calls.cancel_run(run_id))

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
    async def put_artifact(self, name: str, data: AsyncBody, *, mime_type: str | None = None,
                           owner: str | None = None) -> JSON:
        """Save a new version; ``data`` is bytes, a path, a binary file (read in a
        thread) or an async iterable of chunks -- all but bytes are streamed.  Without
        ``mime_type`` the service types it from its content and name."""
        content, size = await aupload_body(data)
        return await self.send(Calls.put_artifact(name, content, mime_type, owner, size))

    async def get_artifact(self, name: str, version: int | None = None, *, owner: str | None = None) -> httpx.Response:
        return await self.send(Calls.get_artifact(name, version, owner))

    async def download_artifact(self, name: str, target: str | os.PathLike[str] | BinaryIO,
                                version: int | None = None, *, owner: str | None = None) -> JSON:
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

    # agent context (per session, of this key)
    async def context(self, session: str) -> JSON:
        """The context's state: loaded skills, their docs, token counts, budget."""
        return await self.send(Calls.context(session))

    async def context_load(self, session: str, skill: str, *, evict: str | None = None,
                           messages: list[str] | None = None, budget: JSON | None = None) -> JSON:
        return await self.send(Calls.context_op(session, "load", {"skill": skill, "evict": evict,
                                                                    "messages": messages, "budget": budget}))

    async def context_unload(self, session: str, skill: str) -> JSON:
        return await self.send(Calls.context_op(session, "unload", {"skill": skill}))

    async def context_select_docs(self, session: str, skill: str, docs: list[str] | None = None, *,
                                  all: bool | None = None, mode: str = "add", evict: str | None = None,
                                  messages: list[str] | None = None, budget: JSON | None = None) -> JSON:
        return await self.send(Calls.context_op(session, "select-docs", {
            "skill": skill, "docs": docs, "all": all, "mode": mode, "evict": evict, "messages": messages,
            "budget": budget}))

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
    async def tools(self, format: str = "openai", *, context: bool = False) -> JSON:
        return await self.send(Calls.tools(format, context))

    async def call_tool(self, name: str, arguments: JSON | str | None, *, format: str | None = None,
                        call_id: str | None = None, session: str | None = None) -> JSON:
        return await self.send(Calls.call_tool(name, arguments, format, call_id, session))

    async def health(self) -> JSON:
        return await self.send(Calls.health())

    async def metrics(self) -> str:
        return await self.send(Calls.metrics())
