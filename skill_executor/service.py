"""The service, assembled in one place: every long-running entry point (the HTTP app, the
MCP server over stdio, an API replica, a run worker) starts a :class:`Service` and stops it
the same way.

Roles (:data:`Role`): ``all`` (the embedded service: runs execute in this process),
``api`` (a cluster's API replica on Postgres: runs are queued for workers, nothing executes
here, no Docker engine; lost workers are swept here) and ``worker`` (executes the runs it
claims from the queue: :class:`~skill_executor.lifecycle.dispatch.worker.Worker`).

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
import logging
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

from . import egress, tracing
from .access import audit_log
from .config import Settings
from .core import Executor
from .errors import ExecutorError
from .lifecycle import RunManager, RunStore
from .lifecycle.dispatch import InProcess, QueueDispatch, Worker, sweep
from .lifecycle.figures import EgressFigures, RunFigures
from .owners import data_dir_id
from .policy import policy_of
from .processes.base import Processes
from .processes.cluster import ClusterProcesses
from .runtimes.base import Runtime
from .tools import ToolExecutor, default_budget

log = logging.getLogger(__name__)

#: How often expired artifact versions and contexts are looked for (at most their TTL).
EXPIRY_SECONDS = 60.0

Role = Literal["all", "api", "worker"]


class RoleNeedsPostgres(ExecutorError):
    code = "role_needs_postgres"
    status = 400


class RoleNeedsSharedStore(ExecutorError):
    code = "role_needs_shared_store"
    status = 400


def check_role(settings: Settings, role: Role) -> None:
    """``api`` and ``worker`` share a Postgres database and an object store with their
    cluster: refused on SQLite, and on the default object store (a folder in this process's
    own data dir, which no other process sees).  Every role: a policy file or a secrets file that
    cannot be used (:func:`~skill_executor.policy.policy_of`) refuses the start with its exact problem."""
    policy_of(settings)
    if role == "all":
        return
    if not settings.database.startswith("postgresql"):
        raise RoleNeedsPostgres(
            f"role {role!r} needs a shared Postgres database (SKILL_EXECUTOR_DATABASE_URL=postgresql://...); "
            f"{settings.database.split(':', 1)[0]} is this machine's own: use `skill-executor serve` (role all)"
        )
    if settings.object_store is None:
        raise RoleNeedsSharedStore(
            f"role {role!r} needs the object store its cluster shares (artifacts, skill versions, sessions): "
            "set SKILL_EXECUTOR_OBJECT_STORE to s3://bucket[/prefix] or to a folder every process of the "
            "cluster mounts; the default is this process's own data dir"
        )


def worker_url(settings: Settings) -> str:
    """Where a cluster's replicas reach this worker: ``WORKER_URL``, else its own server's
    address (its host name when it binds every interface)."""
    if settings.worker_url:
        return settings.worker_url.rstrip("/")
    host = socket.gethostname() if settings.host in ("0.0.0.0", "::", "") else settings.host
    return f"http://{f'[{host}]' if ':' in host else host}:{settings.port}"


@dataclass(slots=True)
class Service:
    settings: Settings
    executor: Executor
    manager: RunManager
    tools: ToolExecutor
    role: Role = "all"
    #: A worker's dispatch side (role worker).
    worker: Worker | None = None
    #: The sessions' processes the API and the tools call (None: this runtime has none).
    processes: Processes | None = None
    #: This process's egress gateway (None: no policy rule has ``egress``, or it did not start).
    gateway: egress.Gateway | None = None
    _stopping: list[asyncio.Future[None]] = field(default_factory=list)

    @classmethod
    def start(
        cls,
        settings: Settings,
        runtime: Runtime | None = None,
        *,
        wait_for_engine: bool = False,
        role: Role = "all",
    ) -> Service:
        """Build everything once from ``settings`` for ``role`` (:func:`assemble_embedded`,
        :func:`assemble_replica` or :func:`assemble_worker`) and start the periodic expiry."""
        check_role(settings, role)
        if settings.session_snapshots is None:  # a cluster's sessions follow their runs to any worker
            settings = settings.model_copy(update={"session_snapshots": role != "all"})
        tracing.configure(role)  # on when OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT is set
        assemble = {"all": assemble_embedded, "api": assemble_replica, "worker": assemble_worker}[role]
        return assemble(settings, runtime, wait_for_engine=wait_for_engine)

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

    async def work(self, stop: asyncio.Event) -> int:
        """Role worker: take runs from the queue until ``stop`` is set (0), or until the
        lease is lost or the job loop fails (non-zero: the process must exit)."""
        assert self.worker is not None, "only a worker takes runs from the queue"
        settings = self.settings
        return await self.worker.run(
            stop,
            lease=settings.worker_lease_seconds,
            heartbeat=settings.worker_heartbeat_seconds,
            grace=settings.shutdown_grace_seconds,
            poll=settings.worker_poll_seconds,
        )

    def close(self, timeout: float) -> None:
        """End the manager's workers, then the executor within ``timeout`` seconds."""
        try:
            self.manager.shutdown()
            if self.worker is not None:
                self.worker.close()
            if isinstance(self.processes, ClusterProcesses):
                self.processes.close()
        finally:
            try:
                self.executor.close(timeout=timeout)
            finally:
                try:
                    if self.gateway is not None:  # after the runs: their grants are revoked by now
                        self.gateway.close()
                finally:
                    tracing.shutdown()  # what is buffered is sent


# -- the three assemblies, over one core (the :class:`Executor`) --------------------------------


def assemble_embedded(
    settings: Settings,
    runtime: Runtime | None,
    *,
    wait_for_engine: bool,
) -> Service:
    """Role ``all``: one process; runs execute here (:class:`InProcess`)."""
    executor = Executor.from_settings(settings, runtime, wait_for_engine=wait_for_engine)
    with _closing_on_failure(executor) as closers:
        manager = executor.manager(recover=True)
        closers.append(manager.shutdown)
        processes = executor.processes
        tools = _tools(executor, processes if processes.supported else None)
        _expiry(executor)
        gateway = _gateway(executor, closers, manager.egress_figures)
        executor.runner.host_desk = manager.hosts  # held hosts are decided through this process's API
        return Service(settings, executor, manager, tools, "all", None, processes, gateway)


def assemble_replica(
    settings: Settings,
    runtime: Runtime | None,
    *,
    wait_for_engine: bool,
) -> Service:
    """Role ``api``: a cluster's API replica on Postgres; runs are queued for workers
    (:class:`QueueDispatch`), sessions' processes proxied to the worker holding each; nothing
    executes here (its runtime is a :class:`~skill_executor.runtimes.remote.RemoteRuntime`
    stand-in, no Docker engine); lost workers are swept here."""
    from .runtimes.remote import RemoteRuntime

    executor = Executor.from_settings(settings, runtime or RemoteRuntime(settings))
    with _closing_on_failure(executor) as closers:
        store = RunStore(executor.database, instance=data_dir_id(settings.data_dir))
        dispatch = QueueDispatch(
            executor.database,
            store,
            queued_allowance=settings.max_queued_runs,
            moving_sessions=bool(settings.session_snapshots),
            sessions_per_tenant=settings.sessions_per_tenant,
            session_ttl=settings.session_ttl_seconds,
        )
        manager = RunManager(
            executor.runner,
            store,
            dispatch=dispatch,
            figures=RunFigures(),  # runs execute on workers: their figures are the workers'
            recover=False,
            approval_timeout=settings.approval_timeout_seconds,
            max_pending=settings.max_pending_approvals,
        )
        closers.append(manager.shutdown)
        # Runs execute on workers, each with its own egress gateway: a run under a rule with
        # egress is admitted here and refused by the worker whose gateway is down.
        executor.runner.gateway_elsewhere = True
        processes = ClusterProcesses(executor.database, settings, moving_sessions=bool(settings.session_snapshots))
        closers.append(processes.close)
        tools = _tools(executor, processes)
        _expiry(executor)
        database = executor.database
        executor.supervisor.every(
            "worker-sweep",
            settings.worker_sweep_seconds,
            lambda: sweep(
                database,
                moving=bool(settings.session_snapshots),
                queue_timeout=settings.queue_timeout_seconds,
                stuck_after=settings.worker_lease_seconds,
            ),
        )
        return Service(settings, executor, manager, tools, "api", None, processes)


def assemble_worker(
    settings: Settings,
    runtime: Runtime | None,
    *,
    wait_for_engine: bool,
) -> Service:
    """Role ``worker``: executes the runs it claims from the queue (:class:`Worker` over an
    :class:`InProcess` dispatch) and serves its sessions' processes to the replicas."""
    executor = Executor.from_settings(settings, runtime, wait_for_engine=wait_for_engine)
    with _closing_on_failure(executor) as closers:
        manager = executor.manager(recover=False)
        closers.append(manager.shutdown)
        limiter = executor.runner.limiter
        assert isinstance(manager.dispatch, InProcess)
        taker = Worker(
            manager.dispatch,
            executor.database,
            capacity=settings.worker_capacity or limiter.slots,
            lease=settings.worker_lease_seconds,
            heartbeat=settings.worker_heartbeat_seconds,
            worker_id=f"{socket.gethostname()[:40]}-{data_dir_id(settings.data_dir)[:12]}",
            moving_sessions=bool(settings.session_snapshots),
            url=worker_url(settings),
        )
        closers.append(taker.close)
        processes = executor.processes
        processes.before_start = taker.claim_session  # a process start takes its session's lease
        tools = _tools(executor, processes if processes.supported else None)
        _expiry(executor)
        # no host desk: a worker's held hosts could not be decided through the replicas' API (not yet),
        # so a request to a host outside the allow-list is refused even when the rule asks
        gateway = _gateway(executor, closers, manager.egress_figures)
        return Service(settings, executor, manager, tools, "worker", taker, processes, gateway)


@contextmanager
def _closing_on_failure(executor: Executor) -> Iterator[list[Callable[[], None]]]:
    """What an assembly started is stopped (newest first), then the executor, if it fails."""
    closers: list[Callable[[], None]] = []
    try:
        yield closers
    except BaseException:
        try:
            for close in reversed(closers):
                close()
        finally:
            executor.close(timeout=5.0)
        raise


def _gateway(
    executor: Executor, closers: list[Callable[[], None]], figures: EgressFigures | None = None
) -> egress.Gateway | None:
    """This process's egress gateway, when a policy rule has ``egress`` (its runs reach the
    network through it only).  One that cannot start leaves the service up, and such runs are
    refused (``egress_unavailable``, naming why); the error is logged."""
    runner = executor.runner
    policy = runner.policy
    if policy is None or not any(rule.egress is not None for rule in policy.rules):
        return None
    try:

        def on_event(event: egress.EgressEvent) -> None:
            _audit_egress(event)
            if figures is not None:
                figures.count(event)

        gateway = egress.start(executor.settings, on_event=on_event)
    except ExecutorError as exc:
        log.error("the egress gateway did not start: %s; runs under a rule with egress are refused", exc.message)
        runner.gateway_problem = exc.message
        return None
    closers.append(gateway.close)
    runner.gateway = gateway
    return gateway


def _audit_egress(event: egress.EgressEvent) -> None:
    """Every request through the egress gateway is a line of the audit log."""
    audit_log.warning(
        "egress %s %s %s%s: %s %s",
        event.run_id,
        event.method,
        event.host,
        event.path,
        event.decision,
        event.status,
        extra={
            "audit": True,
            "egress": True,
            "run_id": event.run_id,
            "rule": event.rule,
            "host": event.host,
            "method": event.method,
            "path": event.path[:300],
            "status": event.status,
            "bytes": event.bytes,
            "decision": event.decision,
            "reason": event.reason,
            "limit": event.limit,
        },
    )


def _tools(executor: Executor, processes: Processes | None) -> ToolExecutor:
    """The tools' executor; ``skill_run`` tool calls go through the manager, never the runner."""
    return ToolExecutor(
        executor.repository,
        visible_skills_dir=executor.runtime.visible_skills_dir,
        contexts=executor.contexts,
        artifacts=executor.artifacts,
        budget=default_budget(executor.settings),
        processes=processes,
    )


def _expiry(executor: Executor) -> None:
    """The periodic expiry of artifact versions and agents' contexts."""
    settings = executor.settings
    supervisor = executor.supervisor
    ttl = settings.artifact_ttl_seconds
    supervisor.every("artifact-expiry", min(EXPIRY_SECONDS, ttl) if ttl else EXPIRY_SECONDS, executor.artifacts.expire)
    supervisor.every(
        "context-expiry", min(EXPIRY_SECONDS, settings.session_ttl_seconds), executor.contexts.store.expire
    )
