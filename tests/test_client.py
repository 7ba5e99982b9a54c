"""The client core (pure logic over httpx's mock transport): both clients send the same
requests, quote path segments, and map errors the same way."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from executor.client import ApiError, AsyncClient, Client

Seen = list[httpx.Request]


def handler(seen: Seen):  # type: ignore[no-untyped-def]
    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path.endswith("/missing"):
            return httpx.Response(404, json={"error": {"code": "skill_not_found", "message": "no skill"}})
        if request.url.path == "/healthz":
            return httpx.Response(503, json={"status": "degraded"})
        return httpx.Response(200, json={"ok": True})

    return answer


def calls(client: Client) -> None:
    client.load_skill("a/b?c")
    client.read_file("math-tools", "scripts/my file#1.py")
    client.put_artifact("dir/name with space.txt", b"x")
    client.get_run("id/../x")
    client.install_skill(b"PK\x03\x04", multipart=False)
    client.run({"skill": "s", "command": "true"}, idempotency_key="k1")
    assert client.health() == {"status": "degraded"}


async def acalls(client: AsyncClient) -> None:
    await client.load_skill("a/b?c")
    await client.read_file("math-tools", "scripts/my file#1.py")
    await client.put_artifact("dir/name with space.txt", b"x")
    await client.get_run("id/../x")
    await client.install_skill(b"PK\x03\x04", multipart=False)
    await client.run({"skill": "s", "command": "true"}, idempotency_key="k1")
    assert await client.health() == {"status": "degraded"}


def shape(seen: Seen) -> list[tuple[str, str, str | None, str | None, bytes]]:
    return [(r.method, r.url.raw_path.decode(), r.headers.get("content-type"), r.headers.get("idempotency-key"),
             r.content) for r in seen]


def test_both_clients_send_the_same_quoted_requests() -> None:
    sync_seen: Seen = []
    async_seen: Seen = []
    with Client("http://test", transport=httpx.MockTransport(handler(sync_seen))) as client:
        calls(client)

    async def main() -> None:
        async with AsyncClient("http://test", transport=httpx.MockTransport(handler(async_seen))) as client:
            await acalls(client)

    asyncio.run(main())
    assert shape(sync_seen) == shape(async_seen)
    paths = [p for _, p, _, _, _ in shape(sync_seen)]
    assert paths[:4] == [
        "/v1/skills/a%2Fb%3Fc",
        "/v1/skills/math-tools/files/scripts/my%20file%231.py",
        "/v1/artifacts/dir/name%20with%20space.txt",
        "/v1/runs/id%2F..%2Fx",
    ]
    assert shape(sync_seen)[4][2] == "application/zip"
    assert shape(sync_seen)[5][3] == "k1" and json.loads(shape(sync_seen)[5][4]) == {"skill": "s", "command": "true"}


def test_errors_map_to_api_error_in_both_clients() -> None:
    seen: Seen = []
    with Client("http://test", transport=httpx.MockTransport(handler(seen))) as client:
        with pytest.raises(ApiError) as info:
            client.load_skill("missing")
    assert (info.value.status, info.value.code) == (404, "skill_not_found")

    async def main() -> ApiError:
        async with AsyncClient("http://test", transport=httpx.MockTransport(handler(seen))) as client:
            with pytest.raises(ApiError) as ainfo:
                await client.load_skill("missing")
            return ainfo.value

    error = asyncio.run(main())
    assert (error.status, error.code, error.message) == (404, "skill_not_found", "no skill")
