"""A skill published without a default has none (issue 39, class 6a).

``skill-executor test --server`` publishes a pull request's skill with ``no_default``: had a
skill that did not exist before become the default anyway, the pull request's code would be
listed in every key's overview and run by every unpinned call.  A new skill published that
way has versions but no default: it is in no overview (HTTP, search, tools, MCP), an unpinned
name is a clean 409 ``skill_no_default`` (what to do in the message), a pinned one works, and
it stays so -- on every replica sharing the database -- until someone sets a default.  An
existing skill published with ``no_default`` keeps its default, as before.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from skill_executor.db import Database
from skill_executor.errors import Conflict
from skill_executor.registry.store import Registry

from ..api_server import Server
from ..conftest import REPO
from ..unit.test_registry_shared import _replica
from ..service.test_registry_uploads import as_zip, skill_md

PR = "pr-skill"  # what a pull request adds: never on the service before


def pr_files(data: str = "from the pull request") -> dict[str, bytes]:
    return {f"{PR}/SKILL.md": skill_md(PR, "A PULL-REQUEST skill."), f"{PR}/data.txt": data.encode()}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(tmp_path_factory.mktemp("no-default"))
    srv.start()
    yield srv
    srv.stop()


def listed_everywhere(http: httpx.Client, url: str) -> str:
    """Every listing a key sees, as one text: the overview (json, xml, text), a search, the
    tool definitions in every format (their skill enum)."""
    parts = [http.get(f"{url}/v1/skills", params={"format": f}).text for f in ("json", "xml", "text")]
    parts.append(http.get(f"{url}/v1/skills", params={"q": "pull request"}).text)
    for fmt in ("openai", "anthropic", "mcp", "openai-responses"):
        parts.append(http.get(f"{url}/v1/tools", params={"format": fmt, "context": "true"}).text)
    return "\n".join(parts)


def test_a_new_skill_published_without_a_default_is_used_by_nobody_unpinned(server: Server) -> None:
    url = server.url
    with httpx.Client(timeout=120) as http:
        made = http.post(f"{url}/v1/skills", content=as_zip(pr_files()), params={"no_default": "true"})
        assert made.status_code == 201, made.text
        assert (made.json()["version"], made.json()["is_default"]) == (1, False)

        assert PR not in listed_everywhere(http, url)
        versions = http.get(f"{url}/v1/skills/{PR}/versions").json()  # managed by its plain name
        assert (versions["default_version"], versions["latest_version"]) == (None, 1)

        for refused in (
            http.get(f"{url}/v1/skills/{PR}"),
            http.get(f"{url}/v1/skills/{PR}/docs"),
            http.get(f"{url}/v1/skills/{PR}/files/data.txt"),
            http.post(f"{url}/v1/runs", json={"skill": PR, "command": "cat data.txt"}),
        ):
            assert refused.status_code == 409, refused.text
            error = refused.json()["error"]
            assert error["code"] == "skill_no_default"
            assert f"{PR}@1" in error["message"] and "PATCH /v1/skills/" in error["message"]
        for tool in ("skill_run", "skill_load"):
            arguments: dict[str, Any] = (
                {"skill": PR, "command": "cat data.txt"} if tool == "skill_run" else {"skill": PR}
            )
            called = http.post(f"{url}/v1/tools/call", json={"name": tool, "arguments": arguments}).json()
            assert called["is_error"] and "skill_no_default" in called["content"], called

        pinned = http.post(f"{url}/v1/runs", json={"skill": f"{PR}@1", "command": "cat data.txt"}).json()
        assert (pinned["stdout"], pinned["skill_version"]) == ("from the pull request", 1), pinned
        assert http.get(f"{url}/v1/skills/{PR}@latest").json()["version"] == 1

        # a second pull-request version: still none
        again = http.post(
            f"{url}/v1/skills/{PR}/versions", content=as_zip(pr_files("second")), params={"no_default": "true"}
        )
        assert again.status_code == 201 and (again.json()["version"], again.json()["is_default"]) == (2, False)
        assert PR not in listed_everywhere(http, url)
        assert http.get(f"{url}/v1/skills/{PR}").status_code == 409

        # someone promotes it: from now on it is everyone's
        promoted = http.patch(f"{url}/v1/skills/{PR}", json={"default_version": 1})
        assert promoted.status_code == 200 and promoted.json()["is_default"], promoted.text
        assert f'"id":"{PR}"' in http.get(f"{url}/v1/skills").text.replace(" ", "")
        assert PR in listed_everywhere(http, url)
        run = http.post(f"{url}/v1/runs", json={"skill": PR, "command": "cat data.txt"}).json()
        assert (run["stdout"], run["skill_version"]) == ("from the pull request", 1)


def test_an_existing_skill_published_without_a_default_keeps_its_own(server: Server) -> None:
    url = server.url
    files = {"steady/SKILL.md": skill_md("steady", "A steady skill."), "steady/data.txt": b"one"}
    with httpx.Client(timeout=120) as http:
        assert http.post(f"{url}/v1/skills", content=as_zip(files)).json()["is_default"] is True
        files["steady/data.txt"] = b"two"
        for path in ("/v1/skills", "/v1/skills/steady/versions"):
            pushed = http.post(f"{url}{path}", content=as_zip(files), params={"no_default": "true"})
            assert pushed.status_code == 201 and pushed.json()["is_default"] is False, pushed.text
        assert http.get(f"{url}/v1/skills/steady/versions").json()["default_version"] == 1
        assert "steady" in listed_everywhere(http, url)
        run = http.post(f"{url}/v1/runs", json={"skill": "steady", "command": "cat data.txt"}).json()
        assert (run["stdout"], run["skill_version"]) == ("one", 1)


def test_the_cli_push_no_default_of_a_new_skill_publishes_no_default(server: Server, tmp_path: Path) -> None:
    folder = tmp_path / "cli-pr"
    folder.mkdir()
    (folder / "SKILL.md").write_bytes(skill_md("cli-pr", "A PULL-REQUEST skill from the CLI."))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILL_EXECUTOR_")}
    pushed = subprocess.run(
        [sys.executable, "-m", "skill_executor.cli.main", "skills", "push", str(folder), "--server", server.url]
        + ["--no-default"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert pushed.returncode == 0, pushed.stderr
    assert json.loads(pushed.stdout)["is_default"] is False
    with httpx.Client(timeout=60) as http:
        assert "cli-pr" not in listed_everywhere(http, server.url)
        assert http.get(f"{server.url}/v1/skills/cli-pr").json()["error"]["code"] == "skill_no_default"


def test_mcp_lists_no_skill_without_a_default(server: Server) -> None:
    from ..service.test_mcp import http_client, raw

    with httpx.Client(timeout=60) as http:
        made = http.post(
            f"{server.url}/v1/skills",
            content=as_zip({"mcp-pr/SKILL.md": skill_md("mcp-pr", "PR.")}),
            params={"no_default": "true"},
        )
        assert made.status_code == 201, made.text

    async def main() -> None:
        async with http_client(server) as client:
            skills = await raw(client, "skills/list")
            assert "mcp-pr" not in json.dumps(skills)
            resources = await raw(client, "resources/list")
            assert "mcp-pr" not in json.dumps(resources)
            tools = await raw(client, "tools/list")
            assert "mcp-pr" not in json.dumps(tools)
            called = await raw(client, "tools/call", {"name": "skill_load", "arguments": {"skill": "mcp-pr"}})
            assert called["isError"] and "skill_no_default" in json.dumps(called)
            pinned = await raw(client, "tools/call", {"name": "skill_load", "arguments": {"skill": "mcp-pr@1"}})
            assert not pinned.get("isError"), pinned

    asyncio.run(main())


# -- the registry and the replicas sharing its database (SQLite and Postgres) -------------


def test_the_registry_gives_a_new_upload_without_default_none(tmp_path: Path, database: Database) -> None:
    registry = Registry(tmp_path / "registry", database=database)
    folder = tmp_path / "src" / "new"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_bytes(skill_md("new", "New."))
    version, created = registry.publish("new", folder, actor="ci", set_default=False)
    assert created and not version.is_default and registry.pointers("new") == (None, 1)
    with pytest.raises(Conflict) as caught:
        registry.version("new")
    assert caught.value.code == "skill_no_default" and caught.value.status == 409
    assert registry.version("new", 1).number == 1
    shipped = tmp_path / "src" / "shipped"
    shipped.mkdir()
    (shipped / "SKILL.md").write_bytes(skill_md("shipped", "Shipped."))
    assert registry.observe("shipped", shipped).is_default  # a folder skill always has one


def test_a_replica_neither_lists_nor_resolves_another_replicas_skill_without_default(
    tmp_path: Path, database: Database
) -> None:
    from skill_executor.objects.local import LocalObjectStore

    url = database.url.render_as_string(hide_password=False)
    objects = LocalObjectStore(tmp_path / "objects")
    a, b = _replica(tmp_path, "a", url, objects), _replica(tmp_path, "b", url, objects)
    a.install(as_zip(pr_files()), set_default=False)
    for replica in (a, b):
        replica.reload()
        assert PR not in [s.id for s in replica.list()] and not replica.search("pull request")
        with pytest.raises(Conflict) as caught:
            replica.get(PR)
        assert caught.value.code == "skill_no_default"
        assert replica.get(f"{PR}@1").version == 1
        assert replica.found(PR).id == PR  # its versions can be managed through either
    b.registry.set_default(PR, 1, actor="ops")
    for replica in (a, b):
        replica.reload()
        assert PR in [s.id for s in replica.list()] and replica.get(PR).version == 1
