"""The ``skill_run`` pipeline, runtime-agnostic.

check -> open a sandbox -> stage inputs -> execute -> collect outputs -> save
artifacts -> result -> close the sandbox.  Refusals (bad request, unknown skill,
refused input) raise :class:`~skill_executor.errors.ExecutorError` before anything runs and
leave nothing behind; a command that fails or times out is a normal
:class:`RunResult`.  The pipeline claims a box from its runtime and drives it only
through :class:`~skill_executor.runs.sandbox.RunSandbox` (:mod:`skill_executor.runtimes.base`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

from .. import tracing
from ..access import LOCAL_TENANT
from ..artifacts.store import ArtifactStore
from ..config import Settings
from ..egress import Gateway
from ..errors import BadRequest, ExecutorError
from ..image.inputs import DEFAULT_TIER, PythonTier
from ..policy import Policy, egress_unavailable, network_plan, unenforceable
from ..policy import check as check_policy
from ..registry import SkillRepository
from ..registry.bundles import BundleStore, refuse_unprovided
from ..runtimes.base import Command, OutputListener, Runtime, SandboxPlan
from ..runtimes.skillcopy import add_node_modules, add_sibling
from ..workspace.layout import WorkspaceManager, environment
from ..workspace.sessions import SessionStore
from ..workspace.staging import Stager
from .egress import EgressListener, HostAsk, HostDesk, RunEgress, granted
from .limiter import RunLimiter
from .models import RunRequest, RunResult
from .plan import RunPlan, check_request, resolve_cwd
from .results import build_result
from .sandbox import RunSandbox
from .sessionnet import SessionNetworks

log = logging.getLogger(__name__)


def new_run_id() -> str:
    """Time-ordered, unguessable: ``<ms since epoch, hex>-<96 random bits>``."""
    return f"{int(time.time() * 1000):011x}-{secrets.token_hex(12)}"


class SkillRunner:
    """Runs ``skill_run`` requests on one runtime. Thread-safe."""

    def __init__(
        self,
        settings: Settings,
        repository: SkillRepository,
        artifacts: ArtifactStore,
        runtime: Runtime,
        *,
        sessions: SessionStore,
        stager: Stager,
        limiter: RunLimiter,
        network_of: Callable[[str, str], str | None],
        bundles: BundleStore,
        policy: Policy | None,
    ) -> None:
        """Every part is given (:meth:`skill_executor.core.Executor.from_settings` builds
        them): ``sessions``, the sessions' work/ its runs use; ``stager``, what puts a run's
        inputs in place; ``limiter``, the places runs of this process take (the in-process
        dispatch's); ``network_of``, the sandbox whose loopback a run of a session joins (its
        interactive processes', None: its own;
        :meth:`skill_executor.processes.manager.ProcessManager.network_of`); ``bundles``, the
        skills sent with run requests, per key; ``policy``, the command policy (None: none)."""
        self.settings = settings
        self.repository = repository
        self.artifacts = artifacts
        self.runtime = runtime
        self.sessions = sessions
        self.stager = stager
        self.limiter = limiter
        self.network_of = network_of
        self.bundles = bundles
        self.policy = policy
        #: The egress gateway of this process (:mod:`skill_executor.egress`; the service starts it
        #: when a policy rule has ``egress``), and why it is not there when it did not start.
        self.gateway: Gateway | None = None
        self.gateway_problem: str | None = None
        #: An API replica's: its runs execute on workers, which run their own gateways.
        self.gateway_elsewhere = False
        #: The sessions' grants at the gateway (:mod:`.sessionnet`), which their runs and processes share.
        self.networks = SessionNetworks(
            lambda: (self.gateway, self.gateway_problem), policy.secrets if policy is not None else None
        )
        #: Where runs' requests to hosts outside their allow-list wait for approval when their
        #: rule asks (the lifecycle's; None: such requests are refused, as on a cluster worker).
        self.host_desk: HostDesk | None = None

    @property
    def egress_available(self) -> bool:
        """Whether runs its policy rule gives network can run here (without: refused with
        ``egress_unavailable``, never run without their network)."""
        return self.gateway_elsewhere or (self.gateway is not None and self.gateway.available)

    @property
    def workspaces(self) -> WorkspaceManager:
        return self.runtime.workspaces

    def validate(self, request: RunRequest, *, tenant: str = LOCAL_TENANT) -> RunPlan:
        """Everything that can be refused before a workspace exists (``tenant``: whose bundles
        a request's ``bundle`` may name), the command policy's refusal (``command_denied``) included,
        then the network's (422 ``network_not_allowed``, a request's ``env`` naming a secret's
        variable), the runtime's (``policy_unenforceable``) and a rule with ``egress`` without a
        gateway (``egress_unavailable``): the plan carries the policy's decision (whether the run
        waits for approval) and the run's network."""
        plan = check_request(request, self.settings, self.repository, bundles=self.bundles, tenant=tenant)
        decision = check_policy(request.command, tenant, plan.skill.id, self.policy, request.env, bundled=plan.bundled)
        if not decision.allowed:
            raise decision.error()
        requested = request.network.allow if request.network is not None else None
        network = network_plan(self.policy, tenant, plan.skill.id, requested, bundled=plan.bundled)
        if network is not None:
            for name in network.secret_names:
                if name in request.env:
                    raise BadRequest(
                        f"environment variable {name} is set by the service: policy rule {network.rule!r} "
                        f"gives the run the placeholder of the secret {name!r} in it",
                        code="env_refused",
                    )
        if decision.exec_rule is not None and not self.runtime.exec_policy:
            raise unenforceable(decision.exec_rule, self.runtime.name)
        if network is not None and not self.egress_available:
            raise egress_unavailable(network.rule, self.gateway_problem)
        return replace(plan, decision=decision, network=network)

    def run(
        self,
        request: RunRequest,
        *,
        run_id: str | None = None,
        listener: OutputListener | None = None,
        cancel: threading.Event | None = None,
        tenant: str = LOCAL_TENANT,
    ) -> RunResult:
        """Plan and execute one request for ``tenant`` on this runner alone, holding a place
        with its limiter: the single run, for tests and benchmarks of this layer. It is not a
        door: nothing is recorded, and a run the policy would hold is refused (no one can
        approve it here). Services, the CLI and every front end go through
        :class:`~skill_executor.lifecycle.manager.RunManager`."""
        plan = self.validate(request, tenant=tenant)
        if plan.decision.approval != "never":
            raise plan.decision.held_locally()
        with self.limiter.reserve():
            return self.execute(plan, request, run_id=run_id, listener=listener, cancel=cancel, tenant=tenant)

    def execute(
        self,
        plan: RunPlan,
        request: RunRequest,
        *,
        run_id: str | None = None,
        listener: OutputListener | None = None,
        cancel: threading.Event | None = None,
        tenant: str = LOCAL_TENANT,
        egress_listener: EgressListener | None = None,
    ) -> RunResult:
        """Execute a request :meth:`validate` planned, for ``tenant`` (the API key it belongs
        to: its session and artifacts are that key's); the caller holds its place (the
        dispatch's).

        Runs of one session never overlap: a second one waits for the session at most
        its own timeout, then is refused with ``session_busy``.

        A run with network (``plan.network``) has its grant at the egress gateway from before
        its sandbox is claimed until after it is closed; ``egress_listener`` gets each of its
        requests as it happens, and the result keeps them (``egress``, ``limits_hit``).
        """
        run_id = run_id or new_run_id()
        with tracing.span("run", run_id=run_id, skill=plan.skill.id, session=request.session, tenant=tenant):
            return self._held(request, plan, run_id, listener, cancel, tenant, egress_listener)

    def _held(
        self,
        request: RunRequest,
        plan: RunPlan,
        run_id: str,
        listener: OutputListener | None,
        cancel: threading.Event | None,
        tenant: str,
        egress_listener: EgressListener | None = None,
    ) -> RunResult:
        """The run holding its skill version and (if any) its session."""
        registry = self.repository.registry
        # the run's version cannot be deleted while the run holds it (409 version_in_use)
        lease = registry.lease(plan.skill) if registry is not None else contextlib.nullcontext()
        with self.runtime.activity.running(), lease:
            if request.session:
                with self.sessions.use(request.session, tenant, wait=plan.timeout) as work:
                    network_of = self.network_of(tenant, request.session)
                    with self._egress(plan, run_id, tenant, egress_listener, (request.session, network_of)) as egress:
                        sandbox_plan = SandboxPlan(
                            run_id,
                            plan.skill,
                            request.session,
                            work,
                            tenant,
                            self.settings.session_disk_bytes,
                            network_of=network_of,
                            exec_rule=plan.decision.exec_rule,
                            egress=egress.path if egress is not None else None,
                        )
                        try:
                            result = self._run(request, plan, sandbox_plan, listener, cancel)
                        finally:  # whatever the run changed in work/ is kept (also when it was refused half way)
                            kept = self.sessions.keep(request.session, tenant, work)
                    if egress is not None:
                        egress.into(result)
                    result.warnings[:0] = self.sessions.notes(work)
                    if kept is not None:
                        result.warnings.append(kept)
                    return result
            with self._egress(plan, run_id, tenant, egress_listener) as egress:
                sandbox_plan = SandboxPlan(
                    run_id,
                    plan.skill,
                    tenant=tenant,
                    exec_rule=plan.decision.exec_rule,
                    egress=egress.path if egress is not None else None,
                )
                result = self._run(request, plan, sandbox_plan, listener, cancel)
            return egress.into(result) if egress is not None else result

    @contextlib.contextmanager
    def _egress(
        self,
        plan: RunPlan,
        run_id: str,
        tenant: str,
        listener: EgressListener | None,
        session: tuple[str, str | None] | None = None,
    ) -> Iterator[RunEgress | None]:
        """The run's grant at the egress gateway while the block runs (None: no network).  A run
        of a session (``session``: the session, the processes' sandbox it joins) uses its
        session's grant (:mod:`.sessionnet`), opened for it when the session has none (a
        session's network asks no approval: hosts outside its list are refused)."""
        if plan.network is None:
            if session is not None:
                self.networks.check_without(tenant, session[0], joins_processes=session[1] is not None)
            yield None
            return
        if session is not None:
            name, joins = session
            with self.networks.run(
                tenant, name, plan.network, run_id, listener, joins_processes=joins is not None
            ) as run:
                yield run
            return
        secrets = self.policy.secrets if self.policy is not None else None
        found = self.policy.rule(tenant, plan.skill.id, plan.bundled) if self.policy is not None else None
        rule = found[1] if found is not None else None
        asking = HostAsk(
            run_id=run_id,
            owner=tenant,
            skill=f"bundle:{plan.skill.id}" if plan.bundled else plan.skill.id,
            rule=plan.network.rule,
            host="",
            method="",
            approver=rule.approver if rule is not None else "caller",
            remember=not plan.bundled,
        )
        with granted(
            self.gateway,
            plan.network,
            run_id,
            secrets,
            listener,
            problem=self.gateway_problem,
            desk=self.host_desk,
            asking=asking,
        ) as egress:
            yield egress

    def _run(
        self,
        request: RunRequest,
        plan: RunPlan,
        sandbox_plan: SandboxPlan,
        listener: OutputListener | None,
        cancel: threading.Event | None,
    ) -> RunResult:
        skill = plan.skill
        skill_env, python = self._skill_env(plan)
        if python != sandbox_plan.python:
            sandbox_plan = dataclasses.replace(sandbox_plan, python=python)
        with tracing.span("sandbox", runtime=self.settings.runtime):
            sandbox = RunSandbox(self.runtime.claim(sandbox_plan))
        try:
            warnings = list(sandbox.warnings)
            for sibling in plan.siblings:  # read-only, beside the run's own copy
                warnings += add_sibling(sandbox.workspace, sibling.id, sibling.path, self.runtime.owner)
            if skill_env is not None:  # ESM `import` finds the env's npm modules (NODE_PATH is require's only)
                add_node_modules(sandbox.workspace, f"{skill_env}/node/node_modules")
            with tracing.span("stage", inputs=len(request.inputs)):
                warnings += sandbox.stage(self.stager, request.inputs).warnings
            cwd = resolve_cwd(request.cwd, sandbox.workspace, skill, sandbox.root)
            command = Command(
                command=request.command,
                cwd=cwd,
                env={**environment(sandbox.root, skill.id, skill_env), **request.env, "PWD": cwd},
                stdin=request.stdin.encode() if request.stdin is not None else None,
                timeout=plan.timeout,
                stdout_max=self.settings.stdout_max_bytes,
                stderr_max=self.settings.stderr_max_bytes,
                listener=listener,
                cancel=cancel,
            )
            with tracing.span("execute") as step:
                executed = sandbox.execute(command)
                tracing.end_attributes(step, exit_code=executed.exit_code, timed_out=executed.timed_out)
            failed = executed.timed_out or executed.cancelled or executed.exit_code != 0
            with tracing.span("collect"):
                collection = sandbox.collect(
                    plan.outputs.globs, plan.outputs.limits, failed=failed, skill_source=skill.path
                )
                return build_result(
                    self.artifacts,
                    request,
                    skill,
                    sandbox_plan.run_id,
                    executed,
                    collection,
                    plan.outputs,
                    warnings,
                    sandbox_plan.tenant,
                )
        finally:
            with tracing.span("cleanup"):
                sandbox.close()

    def _skill_env(self, plan: RunPlan) -> tuple[str | None, PythonTier]:
        """Where the run sees its skill's dependency environment (resolved on first use),
        or None, and the Python tier it runs on; ``skill_dependencies_unmet`` when its needs
        cannot be met."""
        envs = self.repository.deps
        if envs is None:
            return None, DEFAULT_TIER
        if plan.bundled and self.settings.bundle_deps == "image":
            tier = refuse_unprovided(envs, plan.skill)  # a bundle unpacked before the setting changed
            return None, tier
        planned = envs.run_env(plan.skill.path, plan.skill.digest)
        key = planned.key
        if key is None:
            return None, planned.tier
        if not self.runtime.skill_envs:
            raise ExecutorError(
                f"the skill {plan.skill.id!r} has a dependency environment, which the {self.runtime.name} "
                "runtime cannot give its runs (it is on the worker's disk)",
                code="unsupported_on_runtime",
                status=400,
                details={"runtime": self.runtime.name, "feature": "skill_dependencies"},
            )
        return f"{self.runtime.visible_envs_dir or envs.root}/{key}", planned.tier

    # -- housekeeping --------------------------------------------------------------------

    def settle(self) -> None:
        """Wait until every finished run's workspace is removed."""
        self.runtime.settle()
