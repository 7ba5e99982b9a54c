"""The composition root: every long-running entry point starts the same service."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import anyio
import pytest
from fastapi.testclient import TestClient
from mcp import Client, StdioServerParameters

from skill_executor import service as service_module
from skill_executor.api.app import create_app
from skill_executor.owners import DataDirClaim
from skill_executor.service import Service
from skill_executor.workers import Supervisor

from ..conftest import REPO, make_settings
from ..databases import open_database
from ..helpers import eventually
from ..unit.test_artifacts import blob_files, open_store
from ..service.test_mcp import _env, _skills


def test_a_service_starts_the_expiry_and_stops_in_two_steps(tmp_path: Path) -> None:
    service = Service.start(make_settings(tmp_path, "local", artifact_ttl_seconds=1.0))
    try:
        workers = service.executor.supervisor.stats()
        assert {"artifact-expiry", "context-expiry"} <= set(workers)
        anyio.run(service.drain, 0.0)
        assert service.manager.closing
    finally:
        service.close(timeout=5.0)


@pytest.mark.parametrize("failing", ["tools", "expiry"])
def test_a_service_that_fails_to_start_stops_what_it_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    """A start that fails after the executor and the manager exist (the tool executor, or
    the second periodic worker) closes them: no worker thread of it runs on."""
    before = set(threading.enumerate())

    def refuse(*args: object, **kwargs: object) -> None:
        raise RuntimeError("refused by the test")

    if failing == "tools":
        monkeypatch.setattr(service_module, "ToolExecutor", refuse)
    else:
        real_every = Supervisor.every

        def every(self: Supervisor, name: str, *args: object, **kwargs: object) -> None:
            if name == "context-expiry":
                refuse()
            real_every(self, name, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(Supervisor, "every", every)
    with pytest.raises(RuntimeError, match="refused by the test"):
        Service.start(make_settings(tmp_path, "local"))
    left = eventually(lambda: [t.name for t in threading.enumerate() if t not in before] == [], timeout=10)
    assert left, [t.name for t in threading.enumerate() if t not in before]


class FailingPool:
    def close(self) -> None:
        raise RuntimeError("the pool's teardown failed")


def test_a_failing_pool_teardown_still_closes_the_service_and_frees_the_data_dir(tmp_path: Path) -> None:
    """The HTTP app's shutdown: a warm pool whose close raises does not skip closing the
    executor and releasing the data dir (another service may take it); the failure is
    still raised."""
    settings = make_settings(tmp_path, "local")
    before = set(threading.enumerate())
    client = TestClient(create_app(settings), base_url="http://127.0.0.1", client=("127.0.0.1", 50000))
    with pytest.raises(RuntimeError, match="the pool's teardown failed"), client:
        assert client.get("/v1/skills").status_code == 200
        client.app.state.executor.runtime.pool = FailingPool()  # type: ignore[attr-defined]
    DataDirClaim(settings.data_dir).release()  # free: no data_dir_in_use
    left = eventually(lambda: [t.name for t in threading.enumerate() if t not in before] == [], timeout=10)
    assert left, [t.name for t in threading.enumerate() if t not in before]


def test_the_stdio_mcp_server_expires_artifacts_as_serve_does(tmp_path: Path) -> None:
    """``skill-executor mcp`` once built its own executor and manager and never expired
    artifact versions or contexts; it now starts the same service as ``serve``."""
    data = tmp_path / "data"
    database = open_database("sqlite", data)  # the embedded database of that data dir
    try:
        saved = open_store(data, database).put("old.txt", b"saved before the server started")
    finally:
        database.close()
    assert saved.sha256 in blob_files(data)
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "skill_executor.cli.main",
            "mcp",
            "--runtime",
            "local",
            "--skills-dir",
            str(_skills(tmp_path)),
            "--data-dir",
            str(data),
        ],
        env=_env(SKILL_EXECUTOR_ARTIFACT_TTL_SECONDS="1"),
        cwd=REPO,
    )

    async def main() -> None:
        async with Client(params, mode="legacy", read_timeout_seconds=60) as client:
            await client.list_tools()
            gone = await anyio.to_thread.run_sync(
                lambda: eventually(lambda: saved.sha256 not in blob_files(data), timeout=30)
            )
            assert gone

    anyio.run(main)
