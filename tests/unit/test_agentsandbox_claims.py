"""Claiming pods with the real k8s-agent-sandbox SDK against tests/fakekube.py (no pods dialled
here: a claim resolves its pod's IP, it does not connect; tests/engine/test_agentsandbox_wire.py does).

What a worker must never get wrong: the claim it sends (warm pool, labels, a TTL backstop, no
``env``), one read of the Sandbox per claim, every failure a clean 503 ``runtime_unavailable``
with the reason (or 429 ``queue_full``) and no claim left behind, a bounded wait for an
exhausted pool, release failures counted, and the start-up sweep limited to its own claims."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from skill_executor.config import Settings
from skill_executor.errors import ExecutorError
from skill_executor.runtimes.agentsandbox.claims import LABEL_RUN, LABEL_WORKER, Claims, api_client

from ..fakekube import FakeKube, Pool


def ips(n: int, base: int = 1) -> deque[str]:
    return deque(f"127.0.9.{base + i}" for i in range(n))


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    fake = FakeKube({"pool-a": Pool(ready=ips(3), make=lambda: "127.0.9.99")})
    with fake.serving():
        yield fake


def claims_for(kube: FakeKube, **overrides: object) -> Claims:
    options: dict[str, object] = {"pools": {"base": "pool-a"}, "namespace": "ns", "worker_id": "worker-1"}
    options.update(overrides)
    return Claims(api_client(kube.url, read_timeout=10), **options)  # type: ignore[arg-type]


def refused(call: object) -> ExecutorError:
    with pytest.raises(ExecutorError) as caught:
        call()  # type: ignore[operator]
    return caught.value


def test_a_claim_is_what_the_crd_defines_with_labels_and_a_ttl_and_never_env(kube: FakeKube) -> None:
    claims = claims_for(kube)
    claim = claims.claim("base", "0190a-run", run_timeout=60)
    sent = kube.created[-1]
    assert sent["spec"]["warmPoolRef"] == {"name": "pool-a"}
    assert "env" not in sent["spec"]  # a claim env forces a cold start
    labels = sent["metadata"]["labels"]
    assert labels[LABEL_WORKER] == "worker-1" and labels[LABEL_RUN] == "0190a-run"
    lifecycle = sent["spec"]["lifecycle"]
    assert lifecycle["shutdownPolicy"] == "Delete"
    ttl = datetime.fromisoformat(lifecycle["shutdownTime"].replace("Z", "+00:00")) - datetime.now(UTC)
    assert 170 < ttl.total_seconds() <= 181  # the run's timeout + the 120 s margin
    # the pod IP is pinned: one read of the Sandbox, however often the SDK connects
    for _ in range(5):
        claim.sandbox.connector.connect()
    assert claim.sandbox.get_pod_ip() == "127.0.9.1"
    assert kube.calls["get sandboxes"] == 1
    assert claims.release(claim) and claims.release(claim)  # idempotent
    assert kube.calls["delete sandboxclaims"] == 1 and not kube.claims
    assert claims.figures.snapshot()["claims"] == {"base": {"ok": 1}}


def test_a_hostile_run_id_or_worker_id_becomes_a_valid_label(kube: FakeKube) -> None:
    claims = claims_for(kube, worker_id="w/../" + "x" * 100)
    claim = claims.claim("base", "run id with spaces\n", run_timeout=1)
    labels = kube.created[-1]["metadata"]["labels"]
    assert all(len(v) <= 63 and v.isalnum() for k, v in labels.items() if k.startswith("skill-executor/"))
    claims.release(claim)


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        ({"tier": "gpu"}, "no_pool"),
        ({"pools": {"base": "no-such-pool"}}, "pool_missing"),
        ({"missing_template": True}, "template_missing"),
        ({"fault": ("create", 401)}, "api_unauthorized"),
        ({"fault": ("create", 403)}, "api_forbidden"),
        ({"fault": ("create", 500)}, "api_error"),
        ({"fault": ("watch", 503)}, "api_error"),
        ({"fault": ("get-sandbox", 403)}, "pod_unreachable"),
    ],
)
def test_a_failed_claim_is_a_clean_503_with_its_reason_and_leaves_no_claim(
    setup: dict[str, object], reason: str
) -> None:
    kube = FakeKube(
        {"pool-a": Pool(ready=ips(2))},
        missing_templates=frozenset({"pool-a"}) if setup.get("missing_template") else frozenset(),
    )
    with kube.serving():
        if "fault" in setup:
            verb, status = setup["fault"]  # type: ignore[misc]
            kube.fail(verb, status)
        claims = claims_for(kube, **({"pools": setup["pools"]} if "pools" in setup else {}))
        started = time.monotonic()
        error = refused(lambda: claims.claim(str(setup.get("tier", "base")), "r", run_timeout=10))
        assert time.monotonic() - started < 10  # fails fast, not at the claim timeout
        assert (error.code, error.status, error.details["reason"]) == ("runtime_unavailable", 503, reason)
        assert error.retry_after is not None and error.retry_after > 0
        if setup.get("fault") and reason.startswith("api_"):
            assert error.details["status"] == setup["fault"][1]  # type: ignore[index]
        assert not kube.claims  # rolled back
        assert claims.figures.snapshot()["claims_waiting"].get("base", 0) == 0


def test_an_unreachable_api_is_refused_without_hanging() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed once the block ends: nothing listens there
    claims = Claims(
        api_client(f"http://127.0.0.1:{port}", read_timeout=5), pools={"base": "p"}, namespace="ns", worker_id="w"
    )
    error = refused(lambda: claims.claim("base", "r", run_timeout=1))
    assert error.details["reason"] == "api_unreachable"


def test_an_exhausted_pool_is_waited_for_then_refused_and_the_claim_deleted() -> None:
    kube = FakeKube({"pool-a": Pool(ready=deque())})
    with kube.serving():
        claims = claims_for(kube, timeout=1.0)
        started = time.monotonic()
        error = refused(lambda: claims.claim("base", "r", run_timeout=10))
        waited = time.monotonic() - started
        assert 0.9 < waited < 15
        assert error.details["reason"] == "claim_timeout" and error.status == 503
        assert not kube.claims and not kube.pools["pool-a"].waiting
        figures = claims.figures.snapshot()
        assert figures["claims"]["base"] == {"claim_timeout": 1}
        assert figures["claim_seconds"]["base"]["sum"] >= 0.9


def test_a_waiting_claim_gets_the_pod_the_pool_makes_and_the_gauge_shows_it() -> None:
    kube = FakeKube({"pool-a": Pool(ready=deque())})
    with kube.serving():
        claims = claims_for(kube, timeout=20.0)
        got: list[object] = []
        thread = threading.Thread(target=lambda: got.append(claims.claim("base", "r", run_timeout=10)))
        thread.start()
        deadline = time.monotonic() + 10
        while claims.figures.snapshot()["claims_waiting"].get("base") != 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert claims.figures.snapshot()["claims_waiting"]["base"] == 1
        time.sleep(0.3)
        assert thread.is_alive()  # still waiting: the pool is empty
        kube.pools["pool-a"].ready.append("127.0.9.50")  # the controller made a pod
        kube.bind_now("ns", "pool-a")
        thread.join(20)
        assert got and claims.figures.snapshot()["claims_waiting"]["base"] == 0
        claims.release(got[0])  # type: ignore[arg-type]


def test_waiters_past_the_limit_are_refused_queue_full_at_once() -> None:
    kube = FakeKube({"pool-a": Pool(ready=deque())})
    with kube.serving():
        claims = claims_for(kube, timeout=3.0, waiters_max=1)
        first = threading.Thread(target=lambda: pytest.raises(ExecutorError, claims.claim, "base", "a", run_timeout=1))
        first.start()
        while claims.figures.snapshot()["claims_waiting"].get("base") != 1:
            time.sleep(0.02)
        started = time.monotonic()
        error = refused(lambda: claims.claim("base", "b", run_timeout=1))
        assert time.monotonic() - started < 1
        assert (error.code, error.status) == ("queue_full", 429) and error.retry_after
        first.join(20)
        assert claims.figures.snapshot()["claims"]["base"]["queue_full"] == 1


def test_a_release_that_fails_is_counted_and_not_raised(kube: FakeKube) -> None:
    claims = claims_for(kube)
    claim = claims.claim("base", "r", run_timeout=10)
    kube.fail("delete", 500)
    assert claims.release(claim) is False
    assert claims.figures.snapshot()["claim_release_failures"] == 1
    assert claim.name in {name for _, name in kube.claims}  # left for its TTL


def test_the_sweep_deletes_this_workers_claims_only(kube: FakeKube) -> None:
    mine, other = claims_for(kube), claims_for(kube, worker_id="worker-2")
    mine.claim("base", "a", run_timeout=10)
    kept = other.claim("base", "b", run_timeout=10)
    assert claims_for(kube).sweep() == 1
    assert [name for _, name in kube.claims] == [kept.name]


def test_pools_setting_is_json_and_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKILL_EXECUTOR_AGENT_SANDBOX_POOLS", '{"base": "skill-executor-base"}')
    assert Settings().agent_sandbox_pools == {"base": "skill-executor-base"}
    monkeypatch.setenv("SKILL_EXECUTOR_AGENT_SANDBOX_POOLS", '{"base": "../Bad_Pool"}')
    with pytest.raises(ValueError, match="DNS-1123"):
        Settings()
