"""The service, assembled in one place: every long-running entry point (the HTTP app, the
MCP server over stdio, and next a worker) starts a :class:`Service` and stops it the same
way.

A service is the library's :class:`~skill_executor.core.Executor` plus what a process that
takes runs from others needs on top: the run records and the :class:`RunManager` (runs
in the background, idempotency, cancellation, events), the :class:`ToolExecutor` behind
``skill_run`` tool calls, and the periodic expiry of artifact versions and agents'
contexts (supervised workers: they survive and log any failure).

Stopping is in two steps, so an entry point can answer its clients in between:
:meth:`Service.drain` stops taking runs and lets those in flight finish for the grace
(the rest are cancelled, every waiting client gets its answer), then :meth:`Service.close`
ends the manager and the executor within a budget (what cleanup cannot finish by then
stays under the data dir's lease and is swept at the next start).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from . import tracing
from .config import Settings
from .core import Executor
from .owners import data_dir_id
from .runs.manager import RunManager
from .runs.store import RunRecord, RunStore
from .runtimes.base import Runtime
from .tools import ToolExecutor

#: How often expired artifact versions and contexts are looked for (at most their TTL).
EXPIRY_SECONDS = 60.0


@dataclass(slots=True)
class Service:
    settings: Settings
    executor: Executor
    manager: RunManager
    tools: ToolExecutor
    _stopping: list[asyncio.Future[None]] = field(default_factory=list)

    @classmethod
    def start(
        cls,
        settings: Settings,
        runtime: Runtime | None = None,
        *,
        wait_for_engine: bool = False,
        on_finish: Callable[[RunRecord], None] | None = None,
    ) -> Service:
        """Build everything once from ``settings`` and start the periodic expiry;
        ``on_finish`` sees every run's final record before any waiter gets its answer."""
        tracing.configure("all")  # on when OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT is set
        executor = Executor.from_settings(settings, runtime, wait_for_engine=wait_for_engine)
        try:
            manager = RunManager(
                executor.runner,
                RunStore(executor.database, instance=data_dir_id(settings.data_dir)),
                on_finish=on_finish,
            )
        except BaseException:
            executor.close(timeout=5.0)
            raise
        try:
            # skill_run tool calls go through the manager, never the runner directly.
            tools = ToolExecutor(
                executor.repository, visible_skills_dir=executor.runtime.visible_skills_dir, contexts=executor.contexts
            )
            supervisor = executor.runner.supervisor
            ttl = settings.artifact_ttl_seconds
            supervisor.every(
                "artifact-expiry", min(EXPIRY_SECONDS, ttl) if ttl else EXPIRY_SECONDS, executor.artifacts.expire
            )
            supervisor.every(
                "context-expiry", min(EXPIRY_SECONDS, settings.session_ttl_seconds), executor.contexts.store.expire
            )
        except BaseException:
            try:
                manager.shutdown()
            finally:
                executor.close(timeout=5.0)
            raise
        return cls(settings, executor, manager, tools)

    async def drain(self, grace: float | None = None) -> None:
        """Take no more runs; let those in flight finish for ``grace`` seconds (the
        settings' shutdown grace by default), then cancel the rest.  Idempotent."""
        # No run will take a warm container any more: tear the pool down during the grace
        # rather than after it (a container being started would otherwise hold the close
        # for its start-up).
        pool = getattr(self.executor.runtime, "pool", None)
        if pool is not None and not self._stopping:
            self._stopping.append(asyncio.ensure_future(asyncio.to_thread(pool.close)))
        await self.manager.drain(self.settings.shutdown_grace_seconds if grace is None else grace)

    async def stopped_pool(self) -> None:
        """Wait for the pool's teardown that :meth:`drain` started, if any."""
        if self._stopping:
            await self._stopping[0]

    def close(self, timeout: float) -> None:
        """End the manager's workers, then the executor within ``timeout`` seconds."""
        try:
            self.manager.shutdown()
        finally:
            try:
                self.executor.close(timeout=timeout)
            finally:
                tracing.shutdown()  # what is buffered is sent
