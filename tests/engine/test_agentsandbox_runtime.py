"""``runtime: agent-sandbox`` through the whole pipeline: the real SDK claims a pod from
tests/fakekube.py (our in-pod server in a container of the runner image), the skill's view
and the staged inputs go in, the command streams, outputs come back capped and typed, a
session's work/ goes on from pod to pod, the claim is deleted and the pod replaced.  What
the runtime cannot do is refused, cleanly."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from skill_executor.api.metrics import RuntimeCollector
from skill_executor.config import Settings
from skill_executor.core import Executor
from skill_executor.errors import ExecutorError
from skill_executor.runtimes.agentsandbox.runtime import AgentSandboxRuntime

from ..cluster import FAST, Cluster, run_body
from ..helpers import leftover_runs, refused, run
from ..pgserver import PostgresServer


def test_a_skill_runs_in_a_pod_with_its_inputs_and_outputs(executor: Executor) -> None:
    assert executor.runtime.name == "agent-sandbox"
    executor.artifacts.put("data/numbers.txt", b"10 20 30 40\n")
    result = run(
        executor,
        command="python3 scripts/fib.py 10 > out/fib.txt; python3 scripts/stats.py inputs/numbers.txt out/s.json; "
        "cat inputs/sample.csv | head -c 5; echo; pwd; echo $SKILL_DIR; cat - ",
        stdin="from stdin\n",
        inputs=[
            {"from": "artifact://data/numbers.txt"},
            {"from": "skill://csv-report/assets/sample.csv"},
        ],
        outputs={"globs": ["out/*"]},
    )
    assert result.exit_code == 0, result.stderr
    assert result.stdout == (
        "count=4 mean=25\nregio\n/workspace/skills/math-tools\n/workspace/skills/math-tools\nfrom stdin\n"
    )
    by_name = {f.name: f for f in result.output_files}
    assert by_name["out/fib.txt"].content == "0\n1\n1\n2\n3\n5\n8\n13\n21\n34\n"
    assert by_name["out/fib.txt"].mime_type == "text/plain"
    assert by_name["out/s.json"].mime_type == "application/json"
    assert json.loads(str(by_name["out/s.json"].content))["count"] == 4
    assert leftover_runs(executor) == []
    registry = CollectorRegistry()
    registry.register(RuntimeCollector(executor.runtime.stats))
    text = generate_latest(registry).decode()
    assert 'skill_executor_sandbox_claims_total{outcome="ok",tier="document"} 1.0' in text
    assert 'skill_executor_sandbox_claim_seconds_count{tier="document"} 1.0' in text
    assert 'skill_executor_sandbox_claims_waiting{tier="document"} 0.0' in text


def test_the_skill_is_read_only_in_the_pod_only_as_a_private_copy(executor: Executor) -> None:
    """A run may change its copy of the skill; the next run sees the skill as installed."""
    first = run(executor, command="echo changed > SKILL.md; cat SKILL.md")
    assert first.stdout == "changed\n" or first.exit_code != 0
    second = run(executor, command="head -1 SKILL.md")
    assert second.stdout == "---\n"


def test_the_deadline_keeps_partial_output_and_caps_hold(executor: Executor) -> None:
    started = time.monotonic()
    result = run(
        executor, command="echo started; echo partial > out/p.txt; sleep 60", timeout=2, output_files=["out/*"]
    )
    assert result.timed_out and result.stdout == "started\n" and result.exit_code == 137
    assert "timeout" in result.limits_hit and time.monotonic() - started < 20
    assert [f.name for f in result.output_files] == ["out/p.txt"]
    command = "for i in $(seq 1 5); do head -c 1000 /dev/zero | tr '\\0' a > out/f$i.txt; done; yes | head -c 100000"
    capped = run(executor, command=command, outputs={"globs": ["out/*"], "max_total_bytes": 2500})
    assert [len(f.content or "") for f in capped.output_files] == [1000, 1000, 500, 0, 0]
    assert "max_total_bytes" in capped.limits_hit
    assert len(capped.stdout) == 100000


def test_output_links_and_escapes_planted_in_the_pod_stay_there(executor: Executor) -> None:
    result = run(
        executor,
        command="ln -s /etc/passwd out/passwd; ln -s ../../ out/up; mkdir out/d; echo ok > out/d/f.txt",
        outputs={"globs": ["out/**"]},
    )
    names = {f.name for f in result.output_files}
    assert names == {"out/d/f.txt"}, (names, result.warnings)


def test_a_session_goes_on_from_pod_to_pod(executor: Executor) -> None:
    first = run(
        executor,
        session="s1",
        command="echo persisted > work/note.txt; mkdir -p work/d; echo x > work/d/y; echo temp > out/o.txt",
    )
    assert first.exit_code == 0, first.stderr
    second = run(
        executor,
        session="s1",
        command="cat work/note.txt work/d/y; ls out | wc -l; cat inputs/note.txt; rm work/d/y; echo more >> work/note.txt",
        inputs=[{"from": "workspace://work/note.txt"}],
        output_files=["work/note.txt"],
    )
    assert second.stdout == "persisted\nx\n0\npersisted\n", second.stderr
    assert [(f.name, f.content) for f in second.output_files] == [("work/note.txt", "persisted\nmore\n")]
    third = run(executor, session="s1", command="cat work/note.txt; ls work/d | wc -l")
    assert third.stdout == "persisted\nmore\n0\n", third.stderr  # a deletion is kept too
    other = run(executor, session="s2", command="cat work/note.txt 2>/dev/null || echo absent")
    assert other.stdout == "absent\n"
    assert leftover_runs(executor) == []


def test_a_tier_without_a_pool_is_a_start_up_error(tmp_path: object) -> None:
    with pytest.raises(ExecutorError) as info:
        AgentSandboxRuntime(Settings(runtime="agent-sandbox", data_dir=str(tmp_path), agent_sandbox_pools={}))
    assert "SKILL_EXECUTOR_AGENT_SANDBOX_POOLS" in info.value.message
    with pytest.raises(ExecutorError) as info:
        AgentSandboxRuntime(
            Settings(runtime="agent-sandbox", data_dir=str(tmp_path), agent_sandbox_pools={"base": "pool-b"})
        )
    assert "SKILL_EXECUTOR_AGENT_SANDBOX_TIER='document'" in info.value.message


def test_an_exhausted_pool_is_runtime_unavailable_and_leaves_nothing(make_executor) -> None:  # type: ignore[no-untyped-def]
    executor = make_executor(agent_sandbox_pools={"document": "no-such-pool"}, agent_sandbox_claim_timeout_seconds=1.0)
    error = refused(executor, command="true")
    assert error.code == "runtime_unavailable" and error.status == 503
    assert error.details["reason"] in ("pool_missing", "claim_timeout")
    assert leftover_runs(executor) == []


def test_a_workspace_that_cannot_be_made_releases_the_claim_made_beside_it(
    make_executor, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """The worker-side workspace is made while the pod is claimed: when making it fails, the
    claim (already made) is deleted and nothing is left; the run fails with the cause."""
    from skill_executor.runtimes.agentsandbox import runtime as module

    executor = make_executor()
    runtime: AgentSandboxRuntime = executor.runtime

    def broken(*args: object, **kwargs: object) -> list[str]:
        raise ExecutorError("the skill's copy could not be made", code="internal", status=500)

    monkeypatch.setattr(module, "make_view", broken)
    error = refused(executor, command="true")
    assert error.code == "internal" and "could not be made" in error.message
    assert leftover_runs(executor) == []
    names = runtime.claims._client().list_all_sandboxes(runtime.claims.namespace)
    assert names == []  # the claim made beside it is gone
    assert runtime.claims.figures.snapshot()["claim_release_failures"] == 0


def test_a_cluster_worker_on_agent_sandbox_runs_what_a_replica_admits(
    postgres_server: PostgresServer, agent_sandbox_farm: dict[str, object], tmp_path: Path
) -> None:
    """``skill-executor worker`` with ``SKILL_EXECUTOR_RUNTIME=agent-sandbox``, behind an API
    replica, over Postgres: the run goes through the queue to a pod and back."""
    kube = agent_sandbox_farm
    name = postgres_server.create_database()
    env = {
        **FAST,
        "SKILL_EXECUTOR_RUNTIME": "agent-sandbox",
        "SKILL_EXECUTOR_AGENT_SANDBOX_API_URL": str(kube["agent_sandbox_api_url"]),
        "SKILL_EXECUTOR_AGENT_SANDBOX_NAMESPACE": str(kube["agent_sandbox_namespace"]),
        "SKILL_EXECUTOR_AGENT_SANDBOX_POOLS": json.dumps(kube["agent_sandbox_pools"]),
        "SKILL_EXECUTOR_AGENT_SANDBOX_REST_PORT": str(kube["agent_sandbox_rest_port"]),
        "SKILL_EXECUTOR_AGENT_SANDBOX_GRPC_PORT": str(kube["agent_sandbox_grpc_port"]),
    }
    cluster = Cluster(tmp_path / "cluster", postgres_server.url(name), apis=1, workers=1, worker_env=[env])
    try:
        cluster.start()
        done = httpx.post(
            f"{cluster.api(0)}/v1/runs",
            json=run_body("python3 scripts/fib.py 7 > out/fib.txt; echo $WORKSPACE_DIR", output_files=["out/*"]),
            timeout=120,
        )
        assert done.status_code == 200, done.text
        result = done.json()
        assert result["stdout"] == "/workspace\n" and result["exit_code"] == 0, (result, cluster.logs())
        assert [(f["name"], f["content"]) for f in result["output_files"]] == [("out/fib.txt", "0\n1\n1\n2\n3\n5\n8\n")]
        metrics = httpx.get(f"{cluster.workers[0].url}/metrics", timeout=10)
        assert 'skill_executor_sandbox_claims_total{outcome="ok",tier="document"}' in metrics.text, metrics.text[:500]
        for command, said in (("echo kept > work/k.txt; echo one", "one\n"), ("cat work/k.txt", "kept\n")):
            step = httpx.post(f"{cluster.api(0)}/v1/runs", json=run_body(command, session="s1"), timeout=120).json()
            assert step["stdout"] == said, (step, cluster.logs())
    finally:
        cluster.close()
        postgres_server.drop_database(name)


def test_a_pod_lost_while_a_sessions_work_comes_back_leaves_it_as_it_was(tmp_path: Path) -> None:
    from pathlib import PurePosixPath

    from skill_executor.runtimes.agentsandbox.process import SandboxLost
    from skill_executor.runtimes.agentsandbox.runtime import PodBox
    from skill_executor.workspace.layout import WorkspaceManager

    class LostHalfWay:
        root = "/workspace"

        def get(self, top: str, tree: Any, *, limits: Any, owner: Any) -> Any:
            tree.write(PurePosixPath("half.txt"), b"half", owner=None)
            raise SandboxLost("the pod went away")

    work = tmp_path / "session" / "work"
    work.mkdir(parents=True)
    (work / "kept.txt").write_text("before\n")
    manager = WorkspaceManager(tmp_path / "ws", instance="lost")
    workspace = manager.create("lost-1", "math-tools", session_work=work, session="s")
    box = PodBox(workspace, LostHalfWay(), None, release=lambda: None)  # type: ignore[arg-type]
    with pytest.raises(SandboxLost):
        box.get("work", 1 << 20)
    assert sorted(p.name for p in work.iterdir()) == ["inputs", "kept.txt"]
    assert (work / "kept.txt").read_text() == "before\n"
    assert [p.name for p in work.parent.iterdir() if "incoming" in p.name] == []
    manager.discard(workspace.root)
    manager.close()


def test_a_sessions_work_past_its_cap_in_the_pod_is_not_kept_half(tmp_path: Path) -> None:
    from pathlib import PurePosixPath

    from skill_executor.runtimes.agentsandbox.runtime import PodBox
    from skill_executor.runtimes.agentsandbox.transfer import Mirrored
    from skill_executor.workspace.layout import WorkspaceManager

    class PastTheCap:
        root = "/workspace"

        def get(self, top: str, tree: Any, *, limits: Any, owner: Any) -> Mirrored:
            tree.write(PurePosixPath("small.txt"), b"s", owner=None)
            return Mirrored(files=1, bytes=1, warnings=["work/big.bin: 5000 bytes would exceed the output cap"])

    work = tmp_path / "session" / "work"
    work.mkdir(parents=True)
    (work / "kept.txt").write_text("before\n")
    manager = WorkspaceManager(tmp_path / "ws", instance="cap")
    workspace = manager.create("cap-1", "math-tools", session_work=work, session="s")
    box = PodBox(workspace, PastTheCap(), None, release=lambda: None, work_max=1000)  # type: ignore[arg-type]
    with pytest.raises(ExecutorError) as info:
        box.get("work", 1 << 20)
    assert info.value.code == "disk_full" and "big.bin" in info.value.message
    assert sorted(p.name for p in work.iterdir()) == ["inputs", "kept.txt"]
    manager.discard(workspace.root)
    manager.close()
