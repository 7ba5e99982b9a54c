"""``runtime: agent-sandbox``: every run in a pod of its own, claimed from a SandboxWarmPool.

:class:`AgentSandboxRuntime` claims one pod per run (:mod:`.claims`, the real SDK) and gives
the pipeline a :class:`PodBox` over it: the run's workspace is a folder on the worker (the
skill's private copy and the staged inputs are made there, as for every runtime), ``put``
sends it to the pod's ``/workspace`` (:mod:`.client`: a few PUTs or one tar), the command is
one streamed ``Start`` (:mod:`.process`), what collection reads comes back (the driver's
fetch: ``list`` and ``read``), and ``release`` deletes the claim (a pod never serves two
runs) and the folder, off the run's path.  Everything else (deadline, cancel, caps, partial
output, collection) is :class:`~skill_executor.runs.sandbox.RunSandbox`'s, as for every box
(``shared`` is False).

A session's ``work/`` (the session's own folder on this worker, held by the run) goes into
the pod with the rest and comes back whole after the run (``get``: into place only once all
of it is here, bounded by the session's disk cap); with session snapshots it moves between
workers as on Docker.  Refused with a clear error (never half done): skills with resolved
dependency environments (they live on the worker's disk).  The pod's disk and memory are the
kubelet's to cap (the template's ``emptyDir`` size limit and memory limit): a run past its
memory is SIGKILLed in its pod, one past its disk evicts it (``sandbox_lost``).
"""

from __future__ import annotations

import contextvars
import logging
import os
import socket
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...config import Settings
from ...errors import BadRequest, ExecutorError, Unavailable
from ...image.inputs import DEFAULT_TIER, PythonTier
from ...owners import data_dir_id
from ...policy import unenforceable
from ...registry.installdir import exchange
from ...workspace.fs import Tree
from ...workspace.layout import Workspace
from ...workspace.remove import remove_tree
from .. import egress
from ..base import BoxEntry, BoxVerdict, Process, ProcessSpec, SandboxPlan
from ..housekeeping import Housekeeping
from ..skillcopy import make_view
from .claims import Claim, Claims, api_client
from .client import PodClient
from .transfer import MirrorLimits

log = logging.getLogger(__name__)

#: Where a run's workspace is in its pod (sandboxd's files API is confined to it).
POD_WORKSPACE = "/workspace"
#: Threads making worker-side workspaces beside the claims (each a few milliseconds of disk work).
PREPARE_WORKERS = 4
#: Where a run with an egress grant finds the gateway CA's certificate in its pod (in its
#: workspace, the one place sandboxd's files API writes; the public certificate only).
POD_EGRESS_CA = ".egress-ca.pem"


@dataclass(frozen=True, slots=True)
class PodEgress:
    """A run's way to its worker's egress gateway from a pod: no socket, no bridge; the
    gateway's TCP listener at ``address`` (this worker's, ``SKILL_EXECUTOR_EGRESS_ADVERTISE``),
    which the sandboxes' NetworkPolicy lets pods reach and nothing else."""

    path: egress.EgressPath
    address: str
    ca_pem: bytes

    def environment(self, root: str) -> dict[str, str]:
        return self.path.environment(address=self.address, ca=f"{root}/{POD_EGRESS_CA}")


def pod_egress(settings: Settings, path: egress.EgressPath | None) -> PodEgress | None:
    """The pod side of a plan's egress (None: none); ``egress_unsupported`` when this worker's
    gateway is not reachable from pods (no ``SKILL_EXECUTOR_EGRESS_ADVERTISE``)."""
    if path is None:
        return None
    if not settings.egress_advertise or not settings.egress_listen:
        raise egress.EgressUnsupported(
            "the agent-sandbox runtime reaches the egress gateway over the pod network: set "
            "SKILL_EXECUTOR_EGRESS_LISTEN (0.0.0.0:3128) and SKILL_EXECUTOR_EGRESS_ADVERTISE (this worker's "
            "pod IP and that port) on the worker, and let the sandbox pods reach it (docs/guides/egress.md)"
        )
    try:
        pem = path.ca_cert.read_bytes()
    except OSError as exc:
        raise egress.EgressUnsupported(f"the egress CA certificate cannot be read: {exc}") from None
    if b"PRIVATE KEY" in pem or b"BEGIN CERTIFICATE" not in pem:
        raise egress.EgressUnsupported(f"the egress CA certificate {path.ca_cert} is not a certificate alone")
    return PodEgress(path, settings.egress_advertise, pem)


def folder_limits(max_bytes: int) -> MirrorLimits:
    """What a whole folder brought back may hold (a session's ``work/``: many files)."""
    return MirrorLimits(max_bytes=max_bytes, max_files=100_000, max_depth=64, max_entries=200_000)


def worker_name(settings: Settings) -> str:
    """This worker's name in its claims' labels (its data dir's id: stable across restarts)."""
    return f"{socket.gethostname()[:40]}-{data_dir_id(settings.data_dir)[:12]}"


class AgentSandboxRuntime(Housekeeping):
    name = "agent-sandbox"
    #: Files the service writes in the worker-side workspace are the service's own.
    owner: tuple[int, int] | None = None
    visible_skills_dir: str | None = f"{POD_WORKSPACE}/skills"
    #: Dependency environments are not on pods (such skills are refused: :meth:`claim`).
    visible_envs_dir: str | None = None
    skill_envs = False
    #: The kubelet's (the template's emptyDir sizeLimit), not polled here.
    disk_cap = "none"
    #: sandboxd starts commands without the launcher's exec supervisor: a run under a rule
    #: with allow/deny is refused (policy_unenforceable).
    exec_policy = False

    def __init__(self, settings: Settings, *, claims: Claims | None = None) -> None:
        if claims is None and not settings.agent_sandbox_pools:
            raise BadRequest(
                "SKILL_EXECUTOR_RUNTIME=agent-sandbox needs SKILL_EXECUTOR_AGENT_SANDBOX_POOLS "
                '(image tier -> SandboxWarmPool, as JSON: {"base": "skill-executor-base"})'
            )
        if settings.agent_sandbox_tier not in settings.agent_sandbox_pools and claims is None:
            raise BadRequest(
                f"SKILL_EXECUTOR_AGENT_SANDBOX_TIER={settings.agent_sandbox_tier!r} is not a tier of "
                f"SKILL_EXECUTOR_AGENT_SANDBOX_POOLS ({', '.join(sorted(settings.agent_sandbox_pools))})"
            )
        super().__init__(settings, "agent-sandbox")
        self.settings = settings
        self.tier = settings.agent_sandbox_tier
        if claims is None:
            api = api_client(settings.agent_sandbox_api_url)
            claims = Claims.from_settings(settings, api, worker_name(settings))
        self.claims = claims
        #: Makes runs' worker-side workspaces while their pods are claimed (local, quick work).
        self._preparing = ThreadPoolExecutor(max_workers=PREPARE_WORKERS, thread_name_prefix="pod-prepare")
        try:
            left = self.claims.sweep()
            if left:
                log.warning("agent-sandbox: deleted %d claim(s) left by this worker's previous process", left)
        except Exception as exc:  # the API away at start: the claims' TTL ends them
            log.warning("agent-sandbox: could not look for claims left by a previous process: %s", exc)

    def pool_tier(self, python: PythonTier) -> str:
        """The tier (a key of AGENT_SANDBOX_POOLS) a run's pod is claimed from: the configured
        one, or ``python<version>`` for a skill on another Python tier."""
        if python == DEFAULT_TIER:
            return self.tier
        tier = f"python{python.name}"
        if tier not in self.claims.pools:
            raise Unavailable(
                f"the skill needs Python {python.name} (its requires-python); SKILL_EXECUTOR_AGENT_SANDBOX_POOLS "
                f"has no {tier!r} pool (of the python{python.name} runner image)",
                code="python_tier_unavailable",
            )
        return tier

    def claim(self, plan: SandboxPlan) -> PodBox:
        if plan.exec_rule is not None:
            raise unenforceable(plan.exec_rule, self.name)
        # A pod reaches its worker's gateway over the pod network (a NetworkPolicy allows that port only).
        way_out = pod_egress(self.settings, plan.egress)
        tier = self.pool_tier(plan.python)
        # The worker-side workspace is made while the pod is claimed (both are on the run's path).
        prepared = self._preparing.submit(contextvars.copy_context().run, self._prepare, plan)
        try:
            claim = self.claims.claim(tier, plan.run_id, run_timeout=self.settings.max_timeout)
        except BaseException:
            self._discard_prepared(prepared)  # waits for it (milliseconds): nothing is left behind
            raise
        try:
            workspace, warnings = prepared.result()
        except BaseException:

            def drop() -> None:
                self.claims.release(claim)

            self.janitor.submit(drop)
            raise
        try:
            client = PodClient(
                claim.sandbox.connector, root=POD_WORKSPACE, kill_grace=self.settings.agent_sandbox_kill_grace_seconds
            )
        except BaseException:
            self._releaser(claim, workspace)()
            raise
        work_max = plan.session_disk_max or self.settings.session_disk_bytes
        box = PodBox(
            workspace, client, claim, release=self._releaser(claim, workspace), work_max=work_max, egress=way_out
        )
        box.warnings += warnings
        return box

    def _prepare(self, plan: SandboxPlan) -> tuple[Workspace, list[str]]:
        workspace = self.workspaces.create(
            plan.run_id, plan.skill.id, session_work=plan.session_work, session=plan.session, tenant=plan.tenant
        )
        try:
            return workspace, make_view(workspace, plan.skill.path, None)
        except BaseException:
            self.janitor.submit(lambda: self.workspaces.discard(workspace.root))
            raise

    def _discard_prepared(self, prepared: Future[tuple[Workspace, list[str]]]) -> None:
        try:
            workspace, _ = prepared.result()
        except BaseException:  # it failed, and discarded what it had made
            return
        self.janitor.submit(lambda: self.workspaces.discard(workspace.root))

    def _releaser(self, claim: Claim, workspace: Workspace) -> Callable[[], None]:
        keep = self.settings.keep_workspaces

        def release() -> None:
            def discard() -> None:
                try:
                    self.claims.release(claim)
                finally:
                    if not keep:
                        self.workspaces.discard(workspace.root)

            self.janitor.submit(discard)

        return release

    def close(self, timeout: float = 300.0) -> None:
        self._preparing.shutdown(wait=True)
        super().close(timeout)

    def health(self) -> dict[str, tuple[bool, str]]:
        pools = ", ".join(f"{tier}={pool}" for tier, pool in sorted(self.claims.pools.items()))
        return {"runtime": (True, f"agent-sandbox pods ({pools}; runs use {self.tier})")}

    def stats(self) -> dict[str, Any]:
        return {**super().stats(), "sandbox_claims": self.claims.figures.snapshot()}


class PodBox:
    """One run's pod (see the module docstring); single use."""

    shared = False

    def __init__(
        self,
        workspace: Workspace,
        client: PodClient,
        claim: Claim,
        *,
        release: Callable[[], None],
        work_max: int = 1 << 30,
        egress: PodEgress | None = None,
    ) -> None:
        self.workspace = workspace
        self.egress = egress
        self.work_max = work_max
        self.root = client.root
        self.warnings: list[str] = []
        self.client = client
        self.claim = claim
        self._release = release
        self._started = False
        self._released = False

    def put(self, tops: Sequence[str]) -> None:
        root, roots = self.workspace.root, self.workspace.roots()  # a session's work/ is its own folder
        packed = self.client.put({top: roots.get(top, root / top) for top in tops}, root=root, folders=["out"])
        self.warnings += packed.warnings

    def list(self, top: str) -> list[BoxEntry]:
        return [
            BoxEntry(e.name, e.size if e.type == "file" else 0, "directory" if e.type == "directory" else "file")
            for e in self.client.entries(top)
        ]

    def read(self, path: str, limit: int) -> bytes:
        return self.client.read(path, limit)

    def get(self, top: str, limit: int) -> int:
        """The pod's ``top`` in place of the worker's, once all of it is here (a pod lost half
        way, or a folder past ``limit`` or the mirror's bounds, leaves the worker's as it was
        and raises: a session's ``work/`` is never half replaced)."""
        target = self.workspace.roots()[top]
        if top == "work":
            limit = min(limit, self.work_max)
        incoming = Path(tempfile.mkdtemp(prefix=f".{top}-incoming-", dir=target.parent))
        try:
            with Tree(incoming) as tree:
                got = self.client.get(top, tree, limits=folder_limits(limit), owner=None)
            if got.warnings:  # not all of it: the worker's stays as it was
                raise ExecutorError(
                    f"the run's {top}/ could not be brought back whole from its pod, so it is not kept "
                    f"({len(got.warnings)} problem(s); the first: {got.warnings[0]})",
                    code="disk_full",
                    details={"problems": got.warnings[:20]},
                )
            os.chmod(incoming, target.stat().st_mode & 0o7777)
            exchange(incoming, target)  # one step: never half of each
        finally:
            remove_tree(incoming)
        self.warnings += got.warnings
        return got.bytes

    def start(self, spec: ProcessSpec) -> Process:
        if self._started or self._released:
            raise ExecutorError("a box starts one process only (single use)", code="internal", status=500)
        self._started = True
        env = spec.env
        if self.egress is not None:  # the certificate in, and the path's variables over the run's own
            self.client.put_file(POD_EGRESS_CA, self.egress.ca_pem, 0o444)
            env = {**spec.env, **self.egress.environment(self.root)}
        return self.client.start(spec.argv, cwd=spec.cwd, env=env, stdin=spec.stdin, timeout=spec.timeout)

    def verdict(self) -> BoxVerdict:
        return BoxVerdict()

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        self._release()
