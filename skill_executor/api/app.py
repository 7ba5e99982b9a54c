"""The FastAPI application: ``create_app(settings)``.

Everything the routes need lives on ``app.state`` (built in the lifespan), so several
apps with different settings can coexist in one process (tests do exactly that).

Shutdown: ``app.state.drain()`` stops accepting runs, lets the runs in flight finish for
``SHUTDOWN_GRACE_SECONDS`` and cancels the rest, so every waiting client gets its answer
(the result, or 503 ``shutting_down``).  ``serve`` calls it as soon as the server stops
listening (:class:`~skill_executor.api.protocol.DrainingServer`), before waiting for open
requests; the lifespan's end calls it too (a no-op then), then closes the runtime.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, nullcontext
from typing import TYPE_CHECKING

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from .. import __version__
from ..config import Settings
from ..errors import ExecutorError
from ..extras import mcp_problem
from ..lifecycle.dispatch.postgres import QueueDispatch
from ..lifecycle.dispatch.view import status as cluster_status
from ..owners import DataDirClaim
from ..runtimes.base import Runtime
from ..service import Role, Service
from ..web import problems
from ..web.auth import KeyRing, bind_problem
from .docs import install_docs
from .metrics import Metrics
from .middleware import BodyLimit, BrowserGuard, ContentSafety, RequestContext, normalize_origin
from .routes import artifacts, context, egress, files, processes, runs, sessions, skills, system, tools, versions

if TYPE_CHECKING:
    from ..mcp.http import McpHttp

log = logging.getLogger("skill_executor.api")

#: The most closing the executor may take after the drain (the grace).
CLOSE_SECONDS = 1.5

DESCRIPTION = """Run Agent Skills safely: a cheap overview of every skill (`/v1/skills`),
instructions on demand (`/v1/skills/{name}`), and `skill_run` (`/v1/runs`), which runs a
command of a skill in a fresh, network-less, read-only container and returns its output
and files. Errors always have the shape `{"error": {"code", "message", "details"?}}`."""


def create_app(
    settings: Settings | None = None,
    *,
    runtime: Runtime | None = None,
    claim: DataDirClaim | None = None,
    role: Role = "all",
) -> FastAPI:
    """The service; its lifespan first claims the data dir (:class:`DataDirClaim`: one
    service per data dir, refused before any record is touched) unless ``claim`` is given,
    then starts the :class:`~skill_executor.service.Service`, degraded when the Docker engine is not there yet."""
    settings = settings or Settings()
    keyring = KeyRing.from_settings(settings)
    problem = bind_problem(
        settings, keyring, runtime.name if runtime is not None else ("remote" if role == "api" else None)
    )
    if problem is not None:
        raise ExecutorError(problem, code="unsafe_bind")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        held = claim or DataDirClaim(settings.data_dir)
        metrics: Metrics = app.state.metrics
        try:
            service = Service.start(settings, runtime, wait_for_engine=True, role=role)
        except BaseException:
            held.release()
            raise
        executor = service.executor
        metrics.watch_runtime(executor.runtime.stats)
        metrics.watch_runs(service.manager.figures.snapshot)
        metrics.watch_egress(service.manager.egress_figures.snapshot)
        metrics.watch_processes(executor.processes.stats)
        if isinstance(service.manager.dispatch, QueueDispatch):  # an API replica
            database = service.manager.dispatch.database
            metrics.watch_cluster(lambda: cluster_status(database), settings.worker_lease_seconds)
        app.state.service = service
        app.state.executor = executor
        app.state.manager = service.manager
        app.state.tools = service.tools
        app.state.drain = service.drain
        log.info("skill-executor ready", extra={"runtime": executor.runtime.name, "auth": keyring.enabled})
        try:
            async with mcp_http.running(app) if mcp_http else nullcontext():  # the MCP SDK's sessions, at /mcp
                yield
        finally:
            started = time.monotonic()

            def close() -> None:
                try:
                    # What cleanup cannot finish in this budget stays under the lease and
                    # is swept at the next start: the process must end within docker stop's 10 s.
                    service.close(timeout=CLOSE_SECONDS)
                finally:
                    held.release()

            try:
                await service.drain()
                started = time.monotonic()
                await service.stopped_pool()
            finally:  # a drain or a pool teardown that failed is raised once all is closed
                await asyncio.to_thread(close)
            log.info("shut down", extra={"close_seconds": round(time.monotonic() - started, 3)})

    app = FastAPI(
        title="skill-executor",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    install_docs(app)
    app.state.settings = settings
    app.state.keyring = keyring
    app.state.metrics = Metrics()
    problems.install(app)
    for module in (versions, skills, runs, egress, artifacts, files, tools, context, processes, sessions, system):
        app.include_router(module.router)
    mcp_http = _mount_mcp(app)
    # Outermost last: ContentSafety -> RequestContext -> BrowserGuard -> CORS (allowed origins only)
    # -> BodyLimit -> routes (ContentSafety sees every answer, the guard's refusals included).
    app.add_middleware(BodyLimit, limit=settings.max_request_bytes)
    if settings.allowed_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=[normalize_origin(o) for o in settings.allowed_origins],
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["Authorization", "Content-Type", "Idempotency-Key", "X-Request-ID"],
            expose_headers=[
                "X-Request-ID",
                "Location",
                "Idempotent-Replayed",
                "X-Artifact-Version",
                "X-Artifact-SHA256",
                "X-File-Size",
                "X-Truncated",
            ],
        )
    local = role == "all" and (runtime.name if runtime is not None else settings.runtime) == "local"
    app.add_middleware(
        BrowserGuard,
        auth_enabled=keyring.enabled,
        local_runtime=local,
        allowed_origins=settings.allowed_origins,
        host=settings.host,
        port=settings.port,
    )
    app.add_middleware(RequestContext)
    app.add_middleware(ContentSafety)
    return app


def _mount_mcp(app: FastAPI) -> McpHttp | None:
    """``/mcp``: the MCP server when the mcp extra is installed; else an answer saying so
    (501 ``mcp_unavailable``) while the REST API works as ever."""
    problem = mcp_problem()
    if problem is None:
        from ..mcp.http import McpHttp

        return McpHttp(app)
    log.warning("MCP over HTTP (/mcp) is off: %s", problem)

    @app.api_route("/mcp", methods=["GET", "POST", "DELETE"], include_in_schema=False)
    async def mcp_unavailable() -> None:
        raise ExecutorError(problem, code="mcp_unavailable")

    return None
