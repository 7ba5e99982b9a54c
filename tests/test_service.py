"""The composition root: every long-running entry point starts the same service."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

from skill_executor.artifacts.store import LocalArtifactStore
from skill_executor.service import Service

from .conftest import REPO, make_settings
from .databases import open_database
from .helpers import eventually
from .test_artifacts import blob_files
from .test_mcp import _env, _skills


def test_a_service_starts_the_expiry_and_stops_in_two_steps(tmp_path: Path) -> None:
    service = Service.start(make_settings(tmp_path, "local", artifact_ttl_seconds=1.0))
    try:
        workers = service.executor.runner.supervisor.stats()
        assert {"artifact-expiry", "context-expiry"} <= set(workers)
        anyio.run(service.drain, 0.0)
        assert service.manager.closing
    finally:
        service.close(timeout=5.0)


def test_the_stdio_mcp_server_expires_artifacts_as_serve_does(tmp_path: Path) -> None:
    """``skill-executor mcp`` once built its own executor and manager and never expired
    artifact versions or contexts; it now starts the same service as ``serve``."""
    data = tmp_path / "data"
    database = open_database("sqlite", data)  # the embedded database of that data dir
    try:
        saved = LocalArtifactStore(data / "artifacts", database=database).put(
            "old.txt", b"saved before the server started"
        )
    finally:
        database.close()
    assert saved.sha256 in blob_files(data / "artifacts")
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
                lambda: eventually(lambda: saved.sha256 not in blob_files(data / "artifacts"), timeout=30)
            )
            assert gone

    anyio.run(main)
