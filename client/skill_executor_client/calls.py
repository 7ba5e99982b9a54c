"""The core both clients share: each operation once as a :class:`Call` (method, quoted
path, parameters, body, how to read the answer), and one mapping of errors (:func:`raise_for`)."""

from __future__ import annotations

from collections.abc import AsyncIterable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast
from urllib.parse import quote

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
    def push_skill(
        files: list[tuple[str, bytes]], name: str | None, strict: bool | None, set_default: bool
    ) -> Call[JSON]:
        params = {
            k: v
            for k, v in (
                ("strict", None if strict is None else str(strict).lower()),
                ("no_default", None if set_default else "true"),
            )
            if v is not None
        }
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
    def list_runs(filters: dict[str, Any]) -> Call[JSON]:
        params = {k: v for k, v in filters.items() if v is not None}
        return Call("GET", "/v1/runs", as_json, params=params)

    @staticmethod
    def cancel_run(run_id: str) -> Call[JSON]:
        return Call("DELETE", f"/v1/runs/{segment(run_id)}", as_json)

    @staticmethod
    def decide_run(run_id: str, decision: str, reason: str | None) -> Call[JSON]:
        body: JSON = {"decision": decision} if reason is None else {"decision": decision, "reason": reason}
        return Call("POST", f"/v1/runs/{segment(run_id)}/approval", as_json, json=body)

    @staticmethod
    def events(run_id: str) -> Call[None]:
        return Call("GET", f"/v1/runs/{segment(run_id)}/events", as_nothing)

    @staticmethod
    def put_artifact(
        name: str,
        content: bytes | Iterable[bytes] | AsyncIterable[bytes],
        mime_type: str | None,
        owner: str | None = None,
        size: int | None = None,
    ) -> Call[JSON]:
        # No Content-Type: the service types the artifact from its content and name.
        headers = {"Content-Type": mime_type} if mime_type else {}
        if size is not None:
            headers["Content-Length"] = str(size)  # known up front: the service refuses an oversize body at once
        return Call(
            "POST", f"/v1/artifacts/{subpath(name)}", as_json, content=content, headers=headers, params=_owner(owner)
        )

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
    def upload_file(
        name: str, content: bytes | Iterable[bytes] | AsyncIterable[bytes], mime_type: str | None, size: int | None
    ) -> Call[JSON]:
        headers = {"Content-Type": mime_type} if mime_type else {}
        if size is not None:
            headers["Content-Length"] = str(size)
        return Call("POST", "/v1/files", as_json, params={"name": name}, content=content, headers=headers)

    @staticmethod
    def get_file(file_id: str) -> Call[JSON]:
        return Call("GET", f"/v1/files/{segment(file_id)}", as_json)

    @staticmethod
    def file_content(file_id: str) -> Call[httpx.Response]:
        return Call("GET", f"/v1/files/{segment(file_id)}/content", as_response)

    @staticmethod
    def list_files() -> Call[JSON]:
        return Call("GET", "/v1/files", as_json)

    @staticmethod
    def delete_file(file_id: str) -> Call[JSON]:
        return Call("DELETE", f"/v1/files/{segment(file_id)}", as_json)

    @staticmethod
    def tools(format: str, context: bool = False, processes: bool = False) -> Call[JSON]:
        params = {"format": format, **({"context": "true"} if context else {})}
        return Call("GET", "/v1/tools", as_json, params={**params, **({"processes": "true"} if processes else {})})

    @staticmethod
    def call_tool(
        name: str,
        arguments: JSON | str | None,
        format: str | None = None,
        call_id: str | None = None,
        session: str | None = None,
        result_budget: JSON | None = None,
    ) -> Call[JSON]:
        body: dict[str, Any] = {"name": name, "arguments": arguments}
        if result_budget is not None:
            body["result_budget"] = result_budget
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
        return Call(
            "POST",
            f"/v1/sessions/{segment(session)}/context/{op}",
            as_json,
            json={k: v for k, v in body.items() if v is not None},
        )

    @staticmethod
    def context_docs(session: str, skill: str) -> Call[JSON]:
        return Call("GET", f"/v1/sessions/{segment(session)}/context/docs", as_json, params={"skill": skill})

    @staticmethod
    def context_render(session: str, format: str) -> Call[JSON]:
        return Call("GET", f"/v1/sessions/{segment(session)}/context/render", as_json, params={"format": format})

    @staticmethod
    def context_clear(session: str) -> Call[JSON]:
        return Call("DELETE", f"/v1/sessions/{segment(session)}/context", as_json)

    # a session's processes
    @staticmethod
    def process_start(session: str, body: JSON) -> Call[JSON]:
        """``None`` values are left out of the body."""
        return Call(
            "POST",
            f"/v1/sessions/{segment(session)}/processes",
            as_json,
            json={k: v for k, v in body.items() if v is not None},
        )

    @staticmethod
    def processes(session: str) -> Call[JSON]:
        return Call("GET", f"/v1/sessions/{segment(session)}/processes", as_json)

    @staticmethod
    def process(session: str, process_id: str) -> Call[JSON]:
        return Call("GET", f"/v1/sessions/{segment(session)}/processes/{segment(process_id)}", as_json)

    @staticmethod
    def process_write(session: str, process_id: str, data: str, eof: bool) -> Call[JSON]:
        path = f"/v1/sessions/{segment(session)}/processes/{segment(process_id)}/stdin"
        return Call("POST", path, as_json, json={"data": data, "eof": eof})

    @staticmethod
    def process_poll(session: str, process_id: str, after: int, limit: int | None, wait: float) -> Call[JSON]:
        params: dict[str, Any] = {"after": after, "wait": wait}
        if limit is not None:
            params["limit"] = limit
        path = f"/v1/sessions/{segment(session)}/processes/{segment(process_id)}/output"
        return Call("GET", path, as_json, params=params)

    @staticmethod
    def process_signal(session: str, process_id: str, signal: str) -> Call[JSON]:
        path = f"/v1/sessions/{segment(session)}/processes/{segment(process_id)}/signal"
        return Call("POST", path, as_json, json={"signal": signal})

    @staticmethod
    def process_kill(session: str, process_id: str) -> Call[JSON]:
        return Call("DELETE", f"/v1/sessions/{segment(session)}/processes/{segment(process_id)}", as_json)

    @staticmethod
    def session_network_open(session: str, skill: str, allow: list[str] | None) -> Call[JSON]:
        body: JSON = {"skill": skill} if allow is None else {"skill": skill, "allow": allow}
        return Call("PUT", f"/v1/sessions/{segment(session)}/network", as_json, json=body)

    @staticmethod
    def session_network_narrow(session: str, allow: list[str]) -> Call[JSON]:
        return Call("PATCH", f"/v1/sessions/{segment(session)}/network", as_json, json={"allow": allow})

    @staticmethod
    def session_network(session: str) -> Call[JSON]:
        return Call("GET", f"/v1/sessions/{segment(session)}/network", as_json)

    @staticmethod
    def session_end(session: str) -> Call[JSON]:
        return Call("DELETE", f"/v1/sessions/{segment(session)}", as_json)

    @staticmethod
    def health() -> Call[JSON]:
        return Call("GET", "/healthz", as_json, accept=(200, 503))

    @staticmethod
    def metrics() -> Call[str]:
        return Call("GET", "/metrics", as_text)


def auth_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}
