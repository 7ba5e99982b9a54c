"""``skill-executor mcp``: the MCP server over stdio, with its own executor and run manager.

Every request is the local tenant (:data:`executor.access.LOCAL`): whoever can start
the process can run skills.  The catalog is watched: when skills are installed, updated
or removed, connected clients get ``notifications/resources/list_changed``.
"""

from __future__ import annotations

import logging
import sys

import anyio
from mcp.server.stdio import stdio_server

from ..access import LOCAL
from ..config import Settings
from ..core import Executor
from ..errors import ExecutorError
from ..owners import DataDirClaim
from ..runs.manager import RunManager
from ..runs.store import RunStore
from ..tools import ToolExecutor
from .server import Backend, SkillServer
from .watch import watch_catalog

log = logging.getLogger("executor.mcp")


async def serve_stdio(settings: Settings) -> None:
    executor = await anyio.to_thread.run_sync(lambda: Executor.from_settings(settings))
    manager = RunManager(executor.runner, RunStore(settings.data_dir / "runs.db"))
    tools = ToolExecutor(executor.repository, visible_skills_dir=executor.runtime.visible_skills_dir,
                         contexts=executor.contexts)
    backend = Backend(
        repository=lambda: executor.repository,
        manager=lambda: manager,
        tools=lambda: tools,
        artifacts=lambda: executor.artifacts,
        visible_skills_dir=lambda: executor.runtime.visible_skills_dir,
        principal=lambda ctx: LOCAL,
    )
    skills = SkillServer(backend)
    try:
        async with stdio_server() as (read, write), anyio.create_task_group() as group:
            group.start_soon(watch_catalog, executor.repository, skills)
            await skills.server.run(read, write, skills.options())
            group.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await manager.drain(settings.shutdown_grace_seconds)

            def close() -> None:
                manager.shutdown()
                executor.close(timeout=5.0)

            await anyio.to_thread.run_sync(close)


def run(settings: Settings) -> int:
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)  # stdout is the protocol's
    try:
        claim = DataDirClaim(settings.data_dir)  # one service per data dir, as for serve
    except (ExecutorError, OSError) as exc:
        print(f"skill-executor: {getattr(exc, 'message', exc)}", file=sys.stderr)
        return 1
    try:
        anyio.run(serve_stdio, settings)
    except KeyboardInterrupt:
        pass
    finally:
        claim.release()
    return 0


