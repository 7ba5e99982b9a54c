"""The client core (pure logic over httpx's mock transport): both typed clients send the
same requests, quote path segments, read the answers as models, and map errors the same way."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from skill_executor_client import ApiError, AsyncClient, Client, Health

Seen = list[httpx.Request]


FILES: dict[str, list[object]] = {
    "docs": [],
    "scripts": [],
    "references": [],
    "assets": [],
    "files": [],
    "warnings": [],
}
#: Answers the models accept, by (method, path prefix): the first that matches.
ANSWERS: list[tuple[str, str, dict[str, object]]] = [
    ("DELETE", "/v1/artifacts", {"artifacts": []}),
    ("GET", "/v1/artifacts", {"artifacts": []}),
    (
        "POST",
        "/v1/artifacts/",
        {
            "name": "a",
            "version": 1,
            "size": 1,
            "sha256": "0" * 64,
            "mime_type": "text/plain",
            "created_at": 0.0,
            "owner": "k",
            "ref": "artifact://a@1",
            "file_id": "f",
        },
    ),
    (
        "GET",
        "/v1/runs/",
        {
            "run_id": "r",
            "status": "completed",
            "skill": "s",
            "created_at": 0.0,
            "updated_at": 0.0,
            "request": {},
            "owner": "k",
        },
    ),
    ("POST", "/v1/runs", {"run_id": "r", "skill": "s", "exit_code": 0}),
    ("POST", "/v1/skills", {"id": "s", "name": "s", "path": "/s", "replaced": False, **FILES}),
    ("GET", "/v1/skills/", {"name": "s", "id": "s", "description": "d", "body": "b", "body_tokens": 1, **FILES}),
]
DEGRADED = {"status": "unhealthy", "runtime": "docker", "checks": {"runtime": {"ok": False, "detail": "down"}}}


def handler(seen: Seen):  # type: ignore[no-untyped-def]
    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        path = request.url.path
        if path.endswith("/missing"):
            return httpx.Response(404, json={"error": {"code": "skill_not_found", "message": "no skill"}})
        if path == "/healthz":
            return httpx.Response(503, json=DEGRADED)
        if path.startswith("/v1/artifacts/dl/"):
            sha = hashlib.sha256(CONTENT).hexdigest() if path.endswith("/good") else "0" * 64
            return httpx.Response(
                200,
                content=CONTENT,
                headers={"X-Artifact-SHA256": sha, "X-Artifact-Version": "7", "Content-Type": "text/plain"},
            )
        if "/files/" in path:
            return httpx.Response(200, content=b"print(1)\n")
        body = next(b for method, prefix, b in ANSWERS if request.method == method and path.startswith(prefix))
        return httpx.Response(200, json=body)

    return answer


CONTENT = b"streamed content " * 1000


def calls(client: Client) -> None:
    assert client.load_skill("a/b?c").name == "s"
    assert client.read_file("math-tools", "scripts/my file#1.py") == b"print(1)\n"
    assert client.put_artifact("dir/name with space.txt", b"x").ref == "artifact://a@1"
    assert client.get_run("id/../x").status == "completed"
    assert client.install_skill(b"PK\x03\x04", multipart=False).id == "s"
    assert client.run({"skill": "s", "command": "true"}, idempotency_key="k1").exit_code == 0
    assert client.health() == Health.model_validate(DEGRADED)  # a 503 is an answer, not an error
    client.put_artifact("chunks", iter([b"a", b"b"]))
    assert client.delete_artifact("d/x", 2, owner="k").artifacts == []
    client.artifact_versions("x/versions")


async def acalls(client: AsyncClient) -> None:
    assert (await client.load_skill("a/b?c")).name == "s"
    assert await client.read_file("math-tools", "scripts/my file#1.py") == b"print(1)\n"
    assert (await client.put_artifact("dir/name with space.txt", b"x")).ref == "artifact://a@1"
    assert (await client.get_run("id/../x")).status == "completed"
    assert (await client.install_skill(b"PK\x03\x04", multipart=False)).id == "s"
    assert (await client.run({"skill": "s", "command": "true"}, idempotency_key="k1")).exit_code == 0
    assert await client.health() == Health.model_validate(DEGRADED)

    async def chunks() -> AsyncIterator[bytes]:
        yield b"a"
        yield b"b"

    await client.put_artifact("chunks", chunks())
    await client.delete_artifact("d/x", 2, owner="k")
    await client.artifact_versions("x/versions")


def shape(seen: Seen) -> list[tuple[str, str, str | None, str | None, bytes]]:
    return [
        (r.method, r.url.raw_path.decode(), r.headers.get("content-type"), r.headers.get("idempotency-key"), r.content)
        for r in seen
    ]


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
    # An artifact without a mime_type goes without a Content-Type: the service types it.
    assert shape(sync_seen)[2][2] is None
    assert shape(sync_seen)[5][3] == "k1" and json.loads(shape(sync_seen)[5][4]) == {"skill": "s", "command": "true"}
    # Artifacts: an iterator streams (chunked); delete by version; versions is a listing filter, never a
    # path under the name (which would shadow an artifact named .../versions).
    assert [(r.method, r.url.raw_path.decode()) for r in sync_seen[7:]] == [
        ("POST", "/v1/artifacts/chunks"),
        ("DELETE", "/v1/artifacts/d/x?version=2&owner=k"),
        ("GET", "/v1/artifacts?name=x%2Fversions"),
    ]
    assert sync_seen[7].content == b"ab" and sync_seen[7].headers["transfer-encoding"] == "chunked"


def test_put_artifact_sends_the_mime_type_it_is_given() -> None:
    seen: Seen = []
    with Client("http://test", transport=httpx.MockTransport(handler(seen))) as client:
        client.put_artifact("report.csv", b"a,b\n", mime_type="text/csv")
    assert seen[0].headers["content-type"] == "text/csv"


def test_uploads_stream_from_files_and_downloads_stream_to_files(tmp_path: Path) -> None:
    source = tmp_path / "src.bin"
    source.write_bytes(CONTENT)
    seen: Seen = []
    with Client("http://test", transport=httpx.MockTransport(handler(seen))) as client:
        client.put_artifact("from/path", source)
        with open(source, "rb") as handle:
            handle.read(7)
            client.put_artifact("from/file", handle)  # what is left of it
        target = tmp_path / "out.bin"
        info = client.download_artifact("dl/good", target)
        assert info == {
            "version": 7,
            "sha256": hashlib.sha256(CONTENT).hexdigest(),
            "size": len(CONTENT),
            "mime_type": "text/plain",
        }
        assert target.read_bytes() == CONTENT
        sink = io.BytesIO()
        client.download_artifact("dl/good", sink)
        assert sink.getvalue() == CONTENT
        with pytest.raises(ApiError) as info_:
            client.download_artifact("dl/bad", tmp_path / "bad.bin")
        assert info_.value.code == "checksum_mismatch" and not (tmp_path / "bad.bin").exists()
        with pytest.raises(ApiError):
            client.download_artifact("missing", tmp_path / "missing.bin")
        assert not (tmp_path / "missing.bin").exists()
    assert [(r.content, r.headers.get("content-length")) for r in seen[:2]] == [
        (CONTENT, str(len(CONTENT))),
        (CONTENT[7:], str(len(CONTENT) - 7)),
    ]

    async def main() -> None:
        aseen: Seen = []
        async with AsyncClient("http://test", transport=httpx.MockTransport(handler(aseen))) as client:
            await client.put_artifact("from/path", source)
            with open(source, "rb") as handle:
                await client.put_artifact("from/file", handle)
            assert (await client.download_artifact("dl/good", tmp_path / "a.bin"))["size"] == len(CONTENT)
            with pytest.raises(ApiError):
                await client.download_artifact("dl/bad", tmp_path / "abad.bin")
        assert [r.content for r in aseen[:2]] == [CONTENT, CONTENT]
        assert (tmp_path / "a.bin").read_bytes() == CONTENT and not (tmp_path / "abad.bin").exists()

    asyncio.run(main())


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
