"""Assemble the library's parts from :class:`~skill_executor.config.Settings`.

The CLI and the HTTP service both build an :class:`Executor`; tests and embedders can
too.  Nothing here is global: two executors with different settings coexist.
"""

from __future__ import annotations

import resource
import time
from dataclasses import dataclass

from .artifacts.store import LocalArtifactStore
from .config import Settings
from .context import Budget, ContextService, ContextStore, counter
from .db import Database, legacy, migrate, upgrade
from .envs import SkillEnvs
from .envs.hosttools import seal_data_dir
from .errors import BadRequest
from .lifecycle import RunManager, RunStore
from .lifecycle.dispatch.local import InProcess
from .lifecycle.figures import RunFigures
from .objects import ObjectStore, open_object_store
from .owners import data_dir_id
from .policy import policy_of
from .processes.manager import ProcessManager
from .registry import PackageLimits, SkillRepository
from .registry.bundles import BundleStore
from .registry.package import refuse_reserved
from .registry.roots import check_layout
from .registry.store import Registry
from .runs.limiter import RunLimiter
from .runs.pipeline import SkillRunner
from .runtimes.base import Runtime
from .workers import Supervisor
from .workspace.sessions import SessionStore
from .workspace.snapshots import SessionSnapshots
from .workspace.staging import Stager

#: Seconds between two sweeps of expired sessions (a supervised background worker).
SESSION_SWEEP_SECONDS = 60.0


def make_runtime(settings: Settings, *, wait_for_engine: bool = False) -> Runtime:
    """The configured runtime; ``wait_for_engine``: start degraded without the Docker
    engine (the service) rather than fail (the CLI)."""
    if settings.runtime == "local":
        from .runtimes.local import LocalRuntime

        return LocalRuntime(settings)
    if settings.runtime == "bwrap":
        from .runtimes.bwrap import BwrapRuntime

        return BwrapRuntime(settings)
    if settings.runtime == "docker":
        from .runtimes.docker import DockerRuntime

        return DockerRuntime(settings, wait_for_engine=wait_for_engine)
    if settings.runtime == "agent-sandbox":
        from .runtimes.agentsandbox.runtime import AgentSandboxRuntime

        return AgentSandboxRuntime(settings)
    raise BadRequest(f"unknown runtime {settings.runtime!r}")


def make_contexts(
    settings: Settings, database: Database, repository: SkillRepository, visible_skills_dir: str | None
) -> ContextService:
    """Agents' contexts in the database, expiring with the sessions' TTL."""
    budget = Budget(
        settings.context_max_tokens,
        settings.context_skill_tokens,
        settings.context_doc_tokens,
        settings.context_high_water,
    )
    return ContextService(
        repository,
        ContextStore(database, settings.session_ttl_seconds),
        budget=budget,
        counter=counter(settings.context_token_counter),
        visible_skills_dir=visible_skills_dir,
    )


def open_database(settings: Settings) -> Database:
    """The configured database, its schema brought to this code's (under a lock: several
    processes may start at once)."""
    database = Database(settings.database)
    try:
        upgrade(database)
        if legacy.pending(settings.data_dir):  # records from before the shared database
            with migrate.exclusive(database):
                legacy.import_files(database, legacy.pending(settings.data_dir))
    except BaseException:
        database.close()
        raise
    return database


def _raise_descriptor_limit(most: int = 65536) -> None:
    """Walks of run trees hold a descriptor per folder level: allow what the hard limit does."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = most if hard == resource.RLIM_INFINITY else min(hard, most)
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


@dataclass(slots=True)
class Executor:
    settings: Settings
    #: every store's records (SKILL_EXECUTOR_DATABASE_URL)
    database: Database
    #: contents shared by every process of a cluster (SKILL_EXECUTOR_OBJECT_STORE)
    objects: ObjectStore
    repository: SkillRepository
    artifacts: LocalArtifactStore
    runtime: Runtime
    runner: SkillRunner
    #: the sessions' interactive processes (in each one's sandbox; the session's runs share its loopback)
    processes: ProcessManager
    #: agents' contexts per session (what they loaded), shared by the library, REST, MCP and tools
    contexts: ContextService
    #: the periodic housekeeping of this process (session expiry; the service adds its own)
    supervisor: Supervisor
    #: the run manager of in-process callers (:meth:`runs`), made on first use
    _runs: RunManager | None = None

    @classmethod
    def from_settings(
        cls, settings: Settings, runtime: Runtime | None = None, *, wait_for_engine: bool = False
    ) -> Executor:
        # before anything is created: nothing may be written into a read-only skills root
        check_layout(
            settings.skills_dirs, settings.install_root, [settings.registry_dir, settings.data_dir, settings.workspaces]
        )
        # a policy that cannot be used stops the start here
        policy = policy_of(settings)
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        _raise_descriptor_limit()
        database = open_database(settings)
        objects = open_object_store(settings)  # no request yet: an unreachable store shows at its first use
        repository = SkillRepository(
            settings.skills_dirs,
            install_root=settings.install_root,
            refresh_interval=settings.skills_refresh_seconds,
            deps=SkillEnvs.from_settings(settings, objects),
            registry=Registry(settings.registry_dir, database=database, objects=objects),
            service_dirs=[settings.data_dir, settings.workspaces],
        )
        artifacts = LocalArtifactStore.from_settings(settings, database=database, objects=objects)
        runtime = runtime or make_runtime(settings, wait_for_engine=wait_for_engine)
        contexts = make_contexts(settings, database, repository, runtime.visible_skills_dir)
        # pip and npm run as HOST_TOOLS_USER: nothing stored here is theirs to read.
        seal_data_dir(settings.data_dir, shared=[settings.envs_dir])
        snapshots = SessionSnapshots(objects, settings.session_ttl_seconds) if settings.session_snapshots else None
        bundles = BundleStore(
            settings.data_dir / "bundles",
            objects=objects,
            deps=repository.deps,
            resolve_deps=settings.bundle_deps == "install",
            limits=PackageLimits(max_entries=settings.skill_upload_max_files),
            strict=settings.skill_upload_strict,
            check=refuse_reserved if settings.skill_refuse_reserved_names else None,
        )
        sessions = SessionStore(
            settings.workspaces,
            settings.session_ttl_seconds,
            volume_bytes=settings.session_disk_bytes if runtime.disk_cap == "hard" else None,
            per_tenant=settings.sessions_per_tenant,
            snapshots=snapshots,
            owner=runtime.owner,
        )
        processes = ProcessManager(settings, runtime, sessions, policy=policy)
        stager = Stager(
            repository,
            artifacts,
            sessions,
            allowed_host_roots=settings.allowed_host_roots,
            max_bytes=settings.max_staged_bytes,
            owner=runtime.owner,
        )
        runner = SkillRunner(
            settings,
            repository,
            artifacts,
            runtime,
            sessions=sessions,
            stager=stager,
            limiter=RunLimiter(settings.max_concurrent_runs, settings.max_queued_runs),
            network_of=processes.network_of,
            bundles=bundles,
            policy=policy,
        )
        processes.networks = runner.networks
        sessions.on_end.append(runner.networks.end)  # after the processes' own hook: they end first
        sessions.on_expired.append(runner.networks.end)
        supervisor = Supervisor("executor")
        supervisor.every("session-expiry", SESSION_SWEEP_SECONDS, sessions.sweep, initial_delay=SESSION_SWEEP_SECONDS)
        return cls(settings, database, objects, repository, artifacts, runtime, runner, processes, contexts, supervisor)

    def runs(self) -> RunManager:
        """The front door of in-process callers (``skill-executor run``, the doctor's probe from
        the CLI, the skill-test local backend): a :class:`RunManager` over this data dir's run
        store on this process's threads, so their runs are refused, recorded, idempotent and
        audited as the service's are (a service on the same data dir lists them).  It never
        marks other runs interrupted: a service may be running on the same data dir."""
        if self._runs is None:
            self._runs = self.manager(recover=False)
        return self._runs

    def manager(self, *, recover: bool) -> RunManager:
        """A front door whose runs execute in this process (:class:`InProcess`), over this
        data dir's run store; ``recover``: mark runs a previous process of this data dir left
        unfinished failed (a service; never the CLI, which may run beside one)."""
        store = RunStore(self.database, instance=data_dir_id(self.settings.data_dir))
        figures = RunFigures()
        dispatch = InProcess(self.runner, store, limiter=self.runner.limiter, figures=figures)
        return RunManager(
            self.runner,
            store,
            dispatch=dispatch,
            figures=figures,
            recover=recover,
            approval_timeout=self.settings.approval_timeout_seconds,
            max_pending=self.settings.max_pending_approvals,
        )

    def close(self, timeout: float = 300.0, *, runtime: bool = True) -> None:
        """Stop the runner's workers, then close the runtime within ``timeout`` (a bound for a
        pathological cleanup, e.g. a run that left 50,000 folders): what its
        cleanup cannot finish by then is swept by the next start.  ``runtime=False``: a
        runtime shared with another executor is left to its owner."""
        deadline = time.monotonic() + timeout
        if self._runs is not None:
            self._runs.shutdown(timeout=max(0.5, deadline - time.monotonic()))
        self.supervisor.close(timeout=1.0)
        self.processes.close()
        self.runner.networks.close()  # the sessions' grants (their processes are gone)
        try:
            if runtime:
                self.runtime.close(timeout=max(0.5, deadline - time.monotonic()))
        finally:
            self.database.close()
