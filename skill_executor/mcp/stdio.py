"""``skill-executor mcp``: the MCP server over stdio, on a :class:`~skill_executor.service.Service` of its own
(the same one ``serve`` starts: run records, expiry of artifacts and contexts, the drain).

Every request is the local tenant (:data:`skill_executor.access.LOCAL`): whoever can start
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
from ..errors import ExecutorError
from ..owners import DataDirClaim
from ..policy import policy_of
from ..service import Service
from .backend import McpBackend
from .server import SkillServer
from .watch import watch_catalog

log = logging.getLogger("skill_executor.mcp")

#: The most closing the service may take after the drain.
CLOSE_SECONDS = 5.0


async def serve_stdio(settings: Settings) -> None:
    service = await anyio.to_thread.run_sync(lambda: Service.start(settings))
    executor = service.executor
    backend = McpBackend(
        repository=lambda: executor.repository,
        manager=lambda: service.manager,
        tools=lambda: service.tools,
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
            try:
                await service.drain()
                await service.stopped_pool()
            finally:  # a drain or a pool teardown that failed is raised once all is closed
                await anyio.to_thread.run_sync(lambda: service.close(timeout=CLOSE_SECONDS))


def run(settings: Settings) -> int:
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)  # stdout is the protocol's
    try:
        # a policy file that cannot be used: no start
        policy_of(settings)
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
