"""The HTTP side of ``skill-executor worker``: ``/healthz``, ``/metrics``, and its sessions'
processes (``/v1/sessions/{session}/processes``, the API's own routes) for the cluster's API
replicas only: authenticated by the cluster's secret, on behalf of the tenant the replica
names (:func:`~skill_executor.web.auth.internal_principal`).

The lifespan starts the :class:`~skill_executor.service.Service` in role ``worker`` and its
job loop (:meth:`Service.work`). A loop that ends by itself (the lease is lost, the queue
failed) stops the server and leaves its exit code in ``app.state.exit_code``; a SIGTERM
stops taking jobs, lets the runs in flight finish for the grace (the rest are cancelled),
then stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request

from .. import __version__
from ..access import TENANT_HEADER, Principal
from ..config import Settings
from ..owners import DataDirClaim
from ..processes.cluster import internal_secret
from ..service import Service
from ..web import problems
from ..web.auth import KeyRing, Unauthorized, internal_principal, key_principal, principal
from .app import CLOSE_SECONDS
from .metrics import Metrics
from .middleware import ContentSafety, RequestContext
from .routes import processes, system

log = logging.getLogger("skill_executor.worker")


async def _caller(request: Request) -> Principal:
    """The processes routes' caller on a worker: a replica of its cluster (the others': an
    API key's holder, as everywhere)."""
    if not request.url.path.startswith(processes.router.prefix.split("{", 1)[0]):
        return key_principal(request)
    secret: str | None = getattr(request.app.state, "internal_secret", None)
    if secret is None:
        raise Unauthorized("this worker is not started")
    return internal_principal(secret, request.headers.get("authorization"), request.headers.get(TENANT_HEADER))


def create_worker_app(settings: Settings, *, claim: DataDirClaim, on_exit: Callable[[int], None]) -> FastAPI:
    """``on_exit(code)``: the job loop ended by itself; the process must stop with ``code``."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        metrics: Metrics = app.state.metrics
        try:
            service = Service.start(settings, wait_for_engine=True, role="worker")
        except BaseException:
            claim.release()
            raise
        metrics.watch_runtime(service.executor.runtime.stats)
        metrics.watch_runs(service.manager.figures.snapshot)
        metrics.watch_egress(service.manager.egress_figures.snapshot)
        metrics.watch_processes(service.executor.processes.stats)
        app.state.internal_secret = await asyncio.to_thread(internal_secret, service.executor.database, settings)
        app.state.service = service
        app.state.executor = service.executor
        app.state.manager = service.manager
        stop = asyncio.Event()
        work = asyncio.ensure_future(service.work(stop))

        def ended(task: asyncio.Future[int]) -> None:
            code = 1 if task.cancelled() or task.exception() is not None else task.result()
            if task.exception() is not None:
                log.error("the worker's job loop failed", exc_info=task.exception())
            app.state.exit_code = code
            if not stop.is_set():
                on_exit(code)

        work.add_done_callback(ended)

        async def drain() -> None:
            stop.set()  # no more jobs; the runs in flight get the grace (procrastinate waits for them)
            with contextlib.suppress(Exception):
                await work
            await service.drain()

        app.state.drain = drain
        log.info("skill-executor worker ready", extra={"worker": service.worker.worker_id if service.worker else None})
        try:
            yield
        finally:
            try:
                await drain()
                await service.stopped_pool()
            finally:
                try:
                    await asyncio.to_thread(service.close, CLOSE_SECONDS)
                finally:
                    claim.release()

    app = FastAPI(title="skill-executor worker", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.settings = settings
    app.state.keyring = KeyRing.from_settings(settings)
    app.state.metrics = Metrics()
    app.state.exit_code = 0
    problems.install(app)
    app.include_router(system.router)
    app.include_router(processes.router)
    app.dependency_overrides[principal] = _caller
    app.add_middleware(RequestContext)
    app.add_middleware(ContentSafety)
    return app
