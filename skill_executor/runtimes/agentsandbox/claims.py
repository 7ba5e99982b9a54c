"""One pod per run, claimed from its tier's SandboxWarmPool with the real ``k8s-agent-sandbox`` SDK.

* :meth:`Claims.claim` -- ``SandboxClient.create_sandbox(warmpool=...)`` with the in-cluster
  pod-IP connection and :class:`PinnedIpSandbox` (through the SDK's ``sandbox_class`` hook: the
  SDK re-reads the Sandbox on every REST request, a claimed pod serves one run so its IP is read
  once).  A claim carries the labels ``skill-executor/worker=<id>`` and ``skill-executor/run=<id>``
  and a TTL (``spec.lifecycle``: the run's timeout plus a margin), so the controller deletes a
  claim its worker never released.  Claim ``env`` is never set (it forces a cold start): a run's
  environment goes with its process.
* An exhausted pool is waited for, at most the claim timeout, by at most ``waiters_max`` runs
  at once (one more: 429 ``queue_full``).  Every failure to claim is a 503 ``runtime_unavailable``
  with ``details.reason`` (see :data:`REASONS`), and the claim, if made, is deleted again.
* :meth:`Claims.release` -- ``Sandbox.terminate()`` (which raises, unlike the client's
  ``delete_sandbox``): a failure is counted and logged, never raised (the TTL is the backstop).
* :class:`ClaimFigures` -- what the metrics show: claim seconds by tier (a histogram), runs
  waiting by tier, claims by tier and outcome, failed releases.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any

import urllib3
from k8s_agent_sandbox.exceptions import (
    SandboxClaimFailedError,
    SandboxError,
    SandboxTemplateNotFoundError,
    SandboxWarmPoolNotFoundError,
)
from k8s_agent_sandbox.models import SandboxdInClusterConnectionConfig
from k8s_agent_sandbox.sandbox import Sandbox
from k8s_agent_sandbox.sandbox_client import SandboxClient
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client import ApiException

from ...config import Settings
from ...errors import Busy, ExecutorError, Unavailable
from .figures import ClaimFigures

log = logging.getLogger(__name__)

LABEL_WORKER = "skill-executor/worker"
LABEL_RUN = "skill-executor/run"
#: The Retry-After of a refused claim, in seconds.
RETRY_AFTER_SECONDS = 5
#: ``details.reason`` of a ``runtime_unavailable`` (and the outcome counted for it).
REASONS = (
    "claim_timeout",
    "no_pool",
    "pool_missing",
    "template_missing",
    "claim_failed",
    "api_unauthorized",
    "api_forbidden",
    "api_error",
    "api_unreachable",
    "pod_unreachable",
)
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")


class PinnedIpSandbox(Sandbox):
    """The SDK's ``Sandbox`` with its pod IP read once (a claimed pod serves one run)."""

    _pinned_ip: str | None = None

    def get_pod_ip(self) -> str | None:
        if self._pinned_ip is None:
            self._pinned_ip = super().get_pod_ip()
        return self._pinned_ip


class _PinnedClient(SandboxClient[PinnedIpSandbox]):
    sandbox_class = PinnedIpSandbox


def api_client(url: str | None = None, *, read_timeout: float = 60.0) -> k8s.ApiClient:
    """A Kubernetes API client: the in-cluster service account's (``url`` None) or ``url``'s
    (tests), whose every request gives up after ``read_timeout`` seconds of silence (the SDK
    passes no timeout of its own: an API server that stops answering must not hang a run)."""
    configuration = k8s.Configuration()
    if url is None:
        k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        configuration.host = url
    client = k8s.ApiClient(configuration)
    client.rest_client.pool_manager.connection_pool_kw["timeout"] = urllib3.Timeout(connect=5.0, read=read_timeout)
    return client


def label_value(text: str) -> str:
    """``text`` as a label value (at most 63 of ``A-Za-z0-9-_.``), or a digest of it."""
    if _LABEL_VALUE.fullmatch(text) and text:
        return text
    return "h" + hashlib.sha256(text.encode()).hexdigest()[:40]


@dataclass(slots=True)
class Claim:
    """One claimed pod: its claim's name, the SDK's handle (``sandbox.connector`` reaches the pod)."""

    tier: str
    name: str
    namespace: str
    sandbox: PinnedIpSandbox
    seconds: float
    released: bool = False


def unavailable(reason: str, message: str, **details: Any) -> ExecutorError:
    return Unavailable(
        message, code="runtime_unavailable", details={"reason": reason, **details}, retry_after=RETRY_AFTER_SECONDS
    )


class Claims:
    """Claims and releases pods for one worker (thread-safe)."""

    def __init__(
        self,
        api: k8s.ApiClient,
        *,
        pools: dict[str, str],
        namespace: str,
        worker_id: str,
        timeout: float = 30.0,
        waiters_max: int = 64,
        ttl_margin: float = 120.0,
        rest_port: int = 8080,
        grpc_port: int = 9090,
        figures: ClaimFigures | None = None,
    ) -> None:
        self.api = api
        self.pools = dict(pools)
        self.namespace = namespace
        self.worker = label_value(worker_id)
        self.timeout = timeout
        self.waiters_max = waiters_max
        self.ttl_margin = ttl_margin
        self.connection = SandboxdInClusterConnectionConfig(
            mode="in-cluster-pod-ip", rest_port=rest_port, grpc_port=grpc_port
        )
        self.figures = figures or ClaimFigures()
        self._lock = threading.Lock()
        self._waiting = 0

    @classmethod
    def from_settings(cls, settings: Settings, api: k8s.ApiClient, worker_id: str) -> Claims:
        return cls(
            api,
            pools=settings.agent_sandbox_pools,
            namespace=settings.agent_sandbox_namespace,
            worker_id=worker_id,
            timeout=settings.agent_sandbox_claim_timeout_seconds,
            waiters_max=settings.agent_sandbox_claim_waiters_max,
            ttl_margin=settings.agent_sandbox_claim_ttl_margin_seconds,
            rest_port=settings.agent_sandbox_rest_port,
            grpc_port=settings.agent_sandbox_grpc_port,
        )

    def _client(self) -> _PinnedClient:
        # One SDK client per claim: it tracks the sandboxes it made, and is dropped with the claim.
        return _PinnedClient(connection_config=self.connection, api_client=self.api)

    def claim(self, tier: str, run_id: str, *, run_timeout: float) -> Claim:
        """A Ready pod of ``tier``'s pool, connected to; raises ``runtime_unavailable`` or ``queue_full``."""
        pool = self.pools.get(tier)
        if pool is None:
            self.figures.observe(tier, "no_pool", 0.0)
            raise unavailable("no_pool", f"this worker has no sandbox pool for the tier {tier!r}", tier=tier)
        with self._lock:
            if self._waiting >= self.waiters_max:
                self.figures.observe(tier, "queue_full", 0.0)
                raise Busy(
                    f"{self._waiting} runs already wait for a sandbox pod (limit {self.waiters_max}); retry later",
                    code="queue_full",
                    details={"tier": tier, "pool": pool},
                    retry_after=RETRY_AFTER_SECONDS,
                )
            self._waiting += 1
        self.figures.wait(tier, 1)
        name = f"skill-run-{secrets.token_hex(8)}"
        started = time.monotonic()
        try:
            sandbox = self._client().create_sandbox(
                warmpool=pool,
                namespace=self.namespace,
                sandbox_ready_timeout=max(1, math.ceil(self.timeout)),
                labels={LABEL_WORKER: self.worker, LABEL_RUN: label_value(run_id)},
                claim_name=name,
                shutdown_after_seconds=max(1, math.ceil(run_timeout + self.ttl_margin)),
            )
            try:
                sandbox.connector.connect()  # resolves (and pins) the pod IP: one GET of the Sandbox
            except Exception as exc:
                raise _PodUnreachable(f"{type(exc).__name__}: {exc}") from exc
        except Exception as exc:
            seconds = time.monotonic() - started
            refusal = self._refusal(exc, tier, pool)
            self.figures.observe(tier, str(refusal.details["reason"]), seconds)
            self._delete(name)  # an explicitly named claim is ours to roll back
            log.warning("agent-sandbox: claim for run %s failed (%s): %s", run_id, refusal.details, exc)
            raise refusal from None
        finally:
            with self._lock:
                self._waiting -= 1
            self.figures.wait(tier, -1)
        seconds = time.monotonic() - started
        self.figures.observe(tier, "ok", seconds)
        return Claim(tier, name, self.namespace, sandbox, seconds)

    def _refusal(self, exc: BaseException, tier: str, pool: str) -> ExecutorError:
        where = {"tier": tier, "pool": pool, "namespace": self.namespace}
        text = str(exc)[:300]
        if isinstance(exc, TimeoutError):
            return unavailable(
                "claim_timeout", f"no pod of the pool {pool!r} became ready within {self.timeout:g} s", **where
            )
        if isinstance(exc, SandboxWarmPoolNotFoundError):
            return unavailable("pool_missing", f"the SandboxWarmPool {pool!r} does not exist: {text}", **where)
        if isinstance(exc, SandboxTemplateNotFoundError):
            return unavailable("template_missing", f"the pool's SandboxTemplate does not exist: {text}", **where)
        if isinstance(exc, _PodUnreachable):
            return unavailable("pod_unreachable", f"the claimed pod cannot be reached: {text}", **where)
        if isinstance(exc, ApiException):
            status = int(exc.status or 0)
            reason = {401: "api_unauthorized", 403: "api_forbidden"}.get(status)
            if reason is None:
                reason = "api_error" if status >= 500 or status == 0 else "claim_failed"
            return unavailable(reason, f"the Kubernetes API answered {status} {exc.reason}", status=status, **where)
        if isinstance(exc, urllib3.exceptions.HTTPError | OSError):
            return unavailable("api_unreachable", f"the Kubernetes API cannot be reached: {text}", **where)
        if isinstance(exc, SandboxClaimFailedError | SandboxError):
            return unavailable("claim_failed", f"the claim failed: {text}", **where)
        raise exc  # a bug of ours (or the SDK's): not a refusal

    def _delete(self, name: str) -> bool:
        """Delete the claim ``name`` (a missing one is fine); a failure is counted and logged."""
        try:
            self._client().k8s_helper.delete_sandbox_claim(name, self.namespace)
            return True
        except Exception as exc:
            self.figures.release_failed()
            log.error("agent-sandbox: deleting the claim %s failed (its TTL deletes it): %s", name, exc)
            return False

    def release(self, claim: Claim) -> bool:
        """Delete the claim (idempotent): True when it is gone; a failure is counted and logged."""
        if claim.released:
            return True
        claim.released = True
        try:
            claim.sandbox.terminate()  # raises on a failure other than 404
            return True
        except Exception as exc:
            self.figures.release_failed()
            log.error("agent-sandbox: releasing the claim %s failed (its TTL deletes it): %s", claim.name, exc)
            return False

    def sweep(self) -> int:
        """Delete this worker's claims left from before a restart (by label); the number deleted."""
        names = self._client().list_all_sandboxes(self.namespace, label_selector=f"{LABEL_WORKER}={self.worker}")
        return sum(1 for name in names if self._delete(name))


class _PodUnreachable(Exception):
    pass
