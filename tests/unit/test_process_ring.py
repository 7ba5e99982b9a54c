"""A process's output ring and the text a poll answers (pure logic); the process tools' refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from skill_executor.config import Settings
from skill_executor.core import Executor
from skill_executor.errors import ExecutorError
from skill_executor.processes.output import OutputRing, as_text
from skill_executor.tools import ToolExecutor

from ..conftest import REPO


def test_the_ring_keeps_the_newest_bytes_and_counts_them_all() -> None:
    ring = OutputRing(8)
    ring.write(b"abcdef")
    assert ring.read(0, 100) == (0, b"abcdef", 0)
    ring.write(b"ghijkl")
    assert ring.total == 12 and ring.start == 4
    assert ring.read(0, 100) == (4, b"efghijkl", 4)  # 4 bytes past `after` were dropped
    assert ring.read(6, 3) == (6, b"ghi", 0)
    assert ring.read(12, 100) == (12, b"", 0)
    assert ring.read(99, 100) == (12, b"", 0)  # past the end: the end


def test_a_poll_cut_short_leaves_a_split_character_for_the_next() -> None:
    data = "aé".encode()  # b"a\xc3\xa9"
    assert as_text(data[:2], cut=True) == ("a", 1)
    assert as_text(data, cut=True) == ("aé", 3)
    assert as_text(data[:2], cut=False) == ("a\ufffd", 2)


def test_the_process_tools_refuse_as_error_results(tmp_path: Path) -> None:
    """Where no runtime has processes (the local one) and for malformed arguments: error results."""
    executor = Executor.from_settings(
        Settings(runtime="local", data_dir=tmp_path / "data", skills_dirs=[REPO / "skills"], skills_refresh_seconds=0)
    )
    try:
        unavailable = ToolExecutor(executor.repository)
        result = unavailable.call("process_start", {"session": "s", "command": "true"})
        assert result.is_error and "tool_unavailable" in result.content
        tools = ToolExecutor(executor.repository, processes=executor.processes)
        result = tools.call("process_start", {"session": "s", "command": "true"})
        assert result.is_error and "processes_unsupported" in result.content
        result = tools.call("process_poll", {"session": "s", "process": "p-1", "after": -1})
        assert result.is_error and "invalid_arguments" in result.content
        result = tools.call("process_write", {"session": "s", "process": "p-1", "data": "x", "sudo": True})
        assert result.is_error and "unknown argument(s) for process_write: sudo" in result.content
        result = tools.call("process_kill", {"process": "p-1"}, session="bound")
        assert result.is_error and "process_not_found" in result.content  # the framework's session binds
        result = tools.call("process_kill", {"session": "other", "process": "p-1"}, session="bound")
        assert result.is_error and "session_mismatch" in result.content
    finally:
        executor.close()


def test_a_key_under_a_command_policy_starts_no_process(tmp_path: Path) -> None:
    """What a process's stdin starts, the policy cannot judge: a key a judging rule (or one
    asking for approval) applies to is refused before anything starts; other keys are not."""
    policy = tmp_path / "policy.yaml"
    policy.write_text("rules:\n  - name: no-curl\n    key: tenant-a\n    deny: [curl]\n")
    settings = Settings(
        runtime="local",
        data_dir=tmp_path / "data",
        skills_dirs=[REPO / "skills"],
        skills_refresh_seconds=0,
        policy_file=policy,
    )
    executor = Executor.from_settings(settings)
    try:
        with pytest.raises(ExecutorError) as denied:
            executor.processes.start("tenant-a", "s", "python3 -i")
        assert denied.value.code == "command_denied" and denied.value.status == 403
        assert denied.value.details["rule"] == "no-curl"
        with pytest.raises(ExecutorError) as other:
            executor.processes.start("tenant-b", "s", "python3 -i")
        assert other.value.code == "processes_unsupported"  # no rule for this key: on to the runtime
    finally:
        executor.close()


def test_a_cluster_replica_maps_a_workers_answers() -> None:
    """A replica's proxy (processes/cluster.py): a worker's refusal comes back with its own
    status and code; a worker refusing the cluster's secret is the cluster's fault (503), never
    the caller's 401; a worker that does not answer is ``worker_unreachable``."""
    import httpx

    from skill_executor.processes.cluster import ClusterProcesses

    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path.endswith("/stdin"):
            body = {"error": {"code": "process_ended", "message": "ended", "details": {"process": "p-1"}}}
            return httpx.Response(409, json=body)
        if request.url.path.endswith("/signal"):
            return httpx.Response(401, json={"error": {"code": "unauthorized", "message": "no"}})
        raise httpx.ConnectError("refused", request=request)

    settings = Settings(cluster_secret="s3cret")
    proxy = ClusterProcesses(None, settings, moving_sessions=True)  # type: ignore[arg-type]
    proxy.client = httpx.Client(transport=httpx.MockTransport(answer))
    with pytest.raises(ExecutorError) as ended:
        proxy._call("POST", "http://w", "tenant-a", "s", "/p-1/stdin", body={"data": "x"})
    assert (ended.value.status, ended.value.code, ended.value.details) == (409, "process_ended", {"process": "p-1"})
    assert (
        seen[0].headers["authorization"] == "Bearer s3cret" and seen[0].headers["x-skill-executor-tenant"] == "tenant-a"
    )
    for path in ("/p-1/signal", "/p-1"):
        with pytest.raises(ExecutorError) as refused:
            proxy._call("GET", "http://w", "tenant-a", "s", path)
        assert (refused.value.status, refused.value.code) == (503, "worker_unreachable")


def test_only_a_runtime_with_the_capability_has_processes() -> None:
    """Interactive processes are an optional capability of the runtime seam
    (runtimes/base.py's SupportsProcesses): Docker has it, the others refuse processes."""
    from skill_executor.runtimes.agentsandbox.runtime import AgentSandboxRuntime
    from skill_executor.runtimes.base import SupportsProcesses
    from skill_executor.runtimes.bwrap import BwrapRuntime
    from skill_executor.runtimes.docker import DockerRuntime
    from skill_executor.runtimes.local import LocalRuntime
    from skill_executor.runtimes.remote import RemoteRuntime

    assert issubclass(DockerRuntime, SupportsProcesses)
    without = (LocalRuntime, BwrapRuntime, AgentSandboxRuntime, RemoteRuntime)
    assert [r.__name__ for r in without if issubclass(r, SupportsProcesses)] == []
