"""A small client for the skill-executor HTTP API (httpx; sync and async).

    from executor.client import Client
    with Client("http://127.0.0.1:8080", api_key="...") as client:
        print(client.list_skills()["skills"])
        result = client.run({"skill": "math-tools", "command": "python3 scripts/fib.py 10"})

Every non-2xx answer raises :class:`ApiError` with the service's error code.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx

JSON = dict[str, Any]


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, details: Any = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details


def _raise_for(response: httpx.Response) -> None:
    if response.is_success:
        return
    try:
        error = response.json()["error"]
        raise ApiError(response.status_code, error["code"], error["message"], error.get("details"))
    except (ValueError, KeyError, TypeError):
        raise ApiError(response.status_code, "http_error", response.text[:500]) from None


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


class _SSEParser:
    """Feed lines of a Server-Sent Events stream; get (event, data) per finished block."""

    def __init__(self) -> None:
        self._event, self._data = "message", []  # type: tuple[str, list[str]]

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


def _skill_params(q: str | None, limit: int | None) -> JSON:
    params: JSON = {}
    if q is not None:
        params["q"] = q
    if limit is not None:
        params["limit"] = limit
    return params


class Client:
    """Synchronous client."""

    def __init__(self, base_url: str, *, api_key: str | None = None, timeout: float = 900.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        self._http = httpx.Client(base_url=base_url, headers=_headers(api_key), timeout=timeout, transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        response = self._http.request(method, path, **kwargs)
        _raise_for(response)
        return response

    # skills
    def list_skills(self, q: str | None = None, *, limit: int | None = None) -> JSON:
        return self._request("GET", "/v1/skills", params=_skill_params(q, limit)).json()

    def skills_prompt(self, format: str = "xml") -> str:
        return self._request("GET", "/v1/skills", params={"format": format}).text

    def load_skill(self, name: str) -> JSON:
        return self._request("GET", f"/v1/skills/{name}").json()

    def list_docs(self, name: str) -> JSON:
        return self._request("GET", f"/v1/skills/{name}/docs").json()

    def read_docs(self, name: str, docs: list[str]) -> JSON:
        return self._request("GET", f"/v1/skills/{name}/docs", params={"names": ",".join(docs)}).json()

    def read_file(self, name: str, path: str) -> httpx.Response:
        return self._request("GET", f"/v1/skills/{name}/files/{path}")

    def install_skill(self, package: bytes, *, filename: str = "skill.zip", strict: bool = False,
                      multipart: bool = True) -> JSON:
        params = {"strict": "true"} if strict else {}
        if multipart:
            return self._request("POST", "/v1/skills", params=params, files={"file": (filename, package)}).json()
        kind = "application/zip" if package[:2] == b"PK" else "application/gzip"
        return self._request("POST", "/v1/skills", params=params, content=package, headers={"Content-Type": kind}).json()

    def delete_skill(self, name: str) -> None:
        self._request("DELETE", f"/v1/skills/{name}")

    # runs
    def run(self, request: JSON, *, idempotency_key: str | None = None) -> JSON:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return self._request("POST", "/v1/runs", json=request, headers=headers).json()

    def submit(self, request: JSON, *, idempotency_key: str | None = None) -> JSON:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return self._request("POST", "/v1/runs", params={"wait": "false"}, json=request, headers=headers).json()

    def get_run(self, run_id: str) -> JSON:
        return self._request("GET", f"/v1/runs/{run_id}").json()

    def cancel_run(self, run_id: str) -> JSON:
        return self._request("DELETE", f"/v1/runs/{run_id}").json()

    def events(self, run_id: str) -> Iterator[tuple[str, Any]]:
        """Yield (event, data) from the run's Server-Sent Events until the result."""
        with self._http.stream("GET", f"/v1/runs/{run_id}/events") as response:
            if not response.is_success:
                response.read()
                _raise_for(response)
            parser = _SSEParser()
            for line in response.iter_lines():
                if (parsed := parser.feed(line)) is not None:
                    yield parsed

    # artifacts
    def put_artifact(self, name: str, data: bytes, *, mime_type: str = "application/octet-stream") -> JSON:
        return self._request("POST", f"/v1/artifacts/{name}", content=data, headers={"Content-Type": mime_type}).json()

    def get_artifact(self, name: str, version: int | None = None) -> httpx.Response:
        params = {"version": version} if version is not None else {}
        return self._request("GET", f"/v1/artifacts/{name}", params=params)

    def list_artifacts(self) -> JSON:
        return self._request("GET", "/v1/artifacts").json()

    def artifact_versions(self, name: str) -> JSON:
        return self._request("GET", f"/v1/artifacts/{name}/versions").json()

    # tools and system
    def tools(self, format: str = "openai") -> JSON:
        return self._request("GET", "/v1/tools", params={"format": format}).json()

    def call_tool(self, name: str, arguments: JSON | str | None) -> JSON:
        return self._request("POST", "/v1/tools/call", json={"name": name, "arguments": arguments}).json()

    def health(self) -> JSON:
        response = self._http.get("/healthz")
        if response.status_code not in (200, 503):
            _raise_for(response)
        return response.json()

    def metrics(self) -> str:
        return self._request("GET", "/metrics").text


class AsyncClient:
    """Asynchronous client with the same methods as :class:`Client`."""

    def __init__(self, base_url: str, *, api_key: str | None = None, timeout: float = 900.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._http = httpx.AsyncClient(base_url=base_url, headers=_headers(api_key), timeout=timeout, transport=transport)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        response = await self._http.request(method, path, **kwargs)
        _raise_for(response)
        return response

    async def list_skills(self, q: str | None = None, *, limit: int | None = None) -> JSON:
        return (await self._request("GET", "/v1/skills", params=_skill_params(q, limit))).json()

    async def skills_prompt(self, format: str = "xml") -> str:
        return (await self._request("GET", "/v1/skills", params={"format": format})).text

    async def load_skill(self, name: str) -> JSON:
        return (await self._request("GET", f"/v1/skills/{name}")).json()

    async def list_docs(self, name: str) -> JSON:
        return (await self._request("GET", f"/v1/skills/{name}/docs")).json()

    async def read_docs(self, name: str, docs: list[str]) -> JSON:
        return (await self._request("GET", f"/v1/skills/{name}/docs", params={"names": ",".join(docs)})).json()

    async def read_file(self, name: str, path: str) -> httpx.Response:
        return await self._request("GET", f"/v1/skills/{name}/files/{path}")

    async def install_skill(self, package: bytes, *, filename: str = "skill.zip", strict: bool = False) -> JSON:
        params = {"strict": "true"} if strict else {}
        return (await self._request("POST", "/v1/skills", params=params, files={"file": (filename, package)})).json()

    async def delete_skill(self, name: str) -> None:
        await self._request("DELETE", f"/v1/skills/{name}")

    async def run(self, request: JSON, *, idempotency_key: str | None = None) -> JSON:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return (await self._request("POST", "/v1/runs", json=request, headers=headers)).json()

    async def submit(self, request: JSON, *, idempotency_key: str | None = None) -> JSON:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return (await self._request("POST", "/v1/runs", params={"wait": "false"}, json=request, headers=headers)).json()

    async def get_run(self, run_id: str) -> JSON:
        return (await self._request("GET", f"/v1/runs/{run_id}")).json()

    async def cancel_run(self, run_id: str) -> JSON:
        return (await self._request("DELETE", f"/v1/runs/{run_id}")).json()

    async def events(self, run_id: str) -> AsyncIterator[tuple[str, Any]]:
        async with self._http.stream("GET", f"/v1/runs/{run_id}/events") as response:
            if not response.is_success:
                await response.aread()
                _raise_for(response)
            parser = _SSEParser()
            async for line in response.aiter_lines():
                if (parsed := parser.feed(line)) is not None:
                    yield parsed

    async def put_artifact(self, name: str, data: bytes, *, mime_type: str = "application/octet-stream") -> JSON:
        return (await self._request("POST", f"/v1/artifacts/{name}", content=data,
                                    headers={"Content-Type": mime_type})).json()

    async def get_artifact(self, name: str, version: int | None = None) -> httpx.Response:
        params = {"version": version} if version is not None else {}
        return await self._request("GET", f"/v1/artifacts/{name}", params=params)

    async def list_artifacts(self) -> JSON:
        return (await self._request("GET", "/v1/artifacts")).json()

    async def artifact_versions(self, name: str) -> JSON:
        return (await self._request("GET", f"/v1/artifacts/{name}/versions")).json()

    async def tools(self, format: str = "openai") -> JSON:
        return (await self._request("GET", "/v1/tools", params={"format": format})).json()

    async def call_tool(self, name: str, arguments: JSON | str | None) -> JSON:
        return (await self._request("POST", "/v1/tools/call", json={"name": name, "arguments": arguments})).json()

    async def health(self) -> JSON:
        response = await self._http.get("/healthz")
        if response.status_code not in (200, 503):
            _raise_for(response)
        return response.json()

    async def metrics(self) -> str:
        return (await self._request("GET", "/metrics")).text
