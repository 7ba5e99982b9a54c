"""skill-executor-client (client/): the typed HTTP client as a distribution of its own.

Its wheel is built from a clean copy of this tree and installed into a virtualenv that
holds only httpx, pydantic and their locked dependencies (no skill_executor, no service
dependency: ``pip check`` proves the client needs nothing more); there, a script drives a
real service with :class:`Client` and :class:`AsyncClient` and checks the answers are
the models.  ``models.py`` must be what client/generate.py makes of the service's OpenAPI.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..api_server import Server
from ..conftest import REPO
from ..wheels import LOCK, build_wheel, clean_copy, install_wheel, locked_venv, only, venv_env

CLIENT = REPO / "client"
#: What the client installs with: httpx, pydantic and their dependencies.
CLOSURE = {
    "httpx",
    "httpcore",
    "h11",
    "certifi",
    "idna",
    "anyio",
    "pydantic",
    "pydantic-core",
    "annotated-types",
    "typing-extensions",
    "typing-inspection",
}


def generator() -> object:
    spec = importlib.util.spec_from_file_location("client_generate", CLIENT / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_models_are_the_services_openapi() -> None:
    gen = generator()
    text = gen.render(gen.openapi())  # type: ignore[attr-defined]
    assert text == (CLIENT / "skill_executor_client" / "models.py").read_text(), (
        "client/skill_executor_client/models.py is stale: run python client/generate.py"
    )


def test_the_service_package_holds_no_http_client_of_its_own() -> None:
    """One client: calls.py and transfer.py live in the client's package only (the service's
    wheel ships that package; test_packaging checks the copy), and the service's package
    keeps no second client beside it."""
    for name in ("calls.py", "transfer.py"):
        module = CLIENT / "skill_executor_client" / name
        assert module.is_file() and not module.is_symlink()
    assert not (REPO / "skill_executor" / "client").exists()
    assert importlib.util.find_spec("skill_executor.client") is None


@pytest.fixture(scope="module")
def client_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("client-wheel")
    source = clean_copy(base / "source")
    wheel = build_wheel(source / "client", base / "dist", "skill_executor_client-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        for module in ("calls.py", "transfer.py"):  # the one HTTP core
            shipped = archive.read(f"skill_executor_client/{module}")
            assert shipped == (CLIENT / "skill_executor_client" / module).read_bytes()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    requires = sorted(
        line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")
    )
    assert requires == ["httpx>=0.27", "pydantic>=2.6"], requires
    assert not any(name.startswith("skill_executor/") for name in names)
    root = locked_venv("client", only(LOCK.read_text(), CLOSURE))
    install_wheel(root, wheel)
    check = subprocess.run(
        [str(root / "bin" / "python"), "-m", "pip", "check"], capture_output=True, text=True, env=venv_env()
    )
    assert check.returncode == 0, check.stdout + check.stderr
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(tmp_path_factory.mktemp("client-server")).start()
    yield srv
    srv.stop()


SCRIPT = textwrap.dedent(
    """
    import asyncio, importlib.util, json, sys
    from skill_executor_client import (
        ApiError, ArtifactModel, AsyncClient, Client, Health, RunAccepted, RunEvent, RunRequest, RunResult,
        SkillDetail, SkillList, ToolCallResult, ToolList,
    )
    from skill_executor_client.models import OutputSpec, RunRecordModel

    url = sys.argv[1]
    seen = {"service_package": importlib.util.find_spec("skill_executor") is not None}
    with Client(url) as client:
        skills = client.list_skills()
        assert isinstance(skills, SkillList), type(skills)
        seen["skills"] = sorted(s.name for s in skills.skills)
        detail = client.load_skill("math-tools")
        assert isinstance(detail, SkillDetail) and detail.name == "math-tools"
        result = client.run(RunRequest(
            skill="math-tools",
            command="python3 scripts/fib.py 10 > out/fib.txt && tail -1 out/fib.txt",
            outputs=OutputSpec(globs=["out/*.txt"]),
        ))
        assert isinstance(result, RunResult), type(result)
        seen["run"] = [result.exit_code, result.stdout, [(f.name, f.content) for f in result.output_files]]
        failed = client.run({"skill": "math-tools", "command": "exit 3"})  # a mapping works too
        seen["failed"] = failed.exit_code
        accepted = client.submit({"skill": "math-tools", "command": "echo streamed"})
        assert isinstance(accepted, RunAccepted)
        events = list(client.events(accepted.run_id))
        assert all(isinstance(e, RunEvent) for e in events)
        seen["events"] = [events[-1].event, events[-1].result.stdout if events[-1].result else None]
        record = client.get_run(accepted.run_id)
        assert isinstance(record, RunRecordModel) and isinstance(record.result, RunResult)
        seen["record"] = [record.status, record.result.stdout]
        saved = client.put_artifact("notes/a.txt", b"hello")
        assert isinstance(saved, ArtifactModel)
        seen["artifact"] = [saved.name, saved.version, client.get_artifact("notes/a.txt").decode()]
        tools = client.tools("anthropic")
        assert isinstance(tools, ToolList)
        call = client.call_tool("skill_run", {"skill": "math-tools", "command": "echo via tool"})
        assert isinstance(call, ToolCallResult)
        seen["tool"] = [call.is_error, call.data["stdout"]]
        assert isinstance(client.health(), Health)
        try:
            client.load_skill("nope")
        except ApiError as exc:
            seen["error"] = [exc.status, exc.code]

    async def main():
        async with AsyncClient(url) as client:
            result = await client.run(RunRequest(skill="math-tools", command="echo async"))
            assert isinstance(result, RunResult)
            accepted = await client.submit({"skill": "math-tools", "command": "true"})
            events = [e async for e in client.events(accepted.run_id)]
            return [result.stdout, events[-1].event, len((await client.list_skills()).skills)]

    seen["async"] = asyncio.run(main())
    print(json.dumps(seen))
    """
)


def test_the_client_installs_alone_and_answers_models(client_env: Path, server: Server, tmp_path: Path) -> None:
    proc = subprocess.run(
        [str(client_env / "bin" / "python"), "-c", SCRIPT, server.url],
        cwd=tmp_path,  # nothing of this checkout on the path
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:] + server.log()
    seen = json.loads(proc.stdout)
    assert seen["service_package"] is False
    assert seen["skills"] == ["csv-report", "file-bundle", "math-tools"]
    assert seen["run"] == [0, "34\n", [["out/fib.txt", "0\n1\n1\n2\n3\n5\n8\n13\n21\n34\n"]]]
    assert seen["failed"] == 3
    assert seen["events"] == ["result", "streamed\n"]
    assert seen["record"] == ["completed", "streamed\n"]
    assert seen["artifact"] == ["notes/a.txt", 1, "hello"]
    assert seen["tool"] == [False, "via tool\n"]
    assert seen["error"] == [404, "skill_not_found"]
    assert seen["async"] == ["async\n", "result", 3]


def test_the_generator_checks(tmp_path: Path) -> None:
    """``generate.py --check`` is what CI can run: 0 when models.py is current."""
    proc = subprocess.run(
        [sys.executable, str(CLIENT / "generate.py"), "--check"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
