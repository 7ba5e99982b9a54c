"""A process's output ring and the text a poll answers (pure logic); the process tools' refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from skill_executor.config import Settings
from skill_executor.core import Executor
from skill_executor.errors import ExecutorError
from skill_executor.runs.processes import OutputRing, _text
from skill_executor.tools import ToolExecutor

from .conftest import REPO


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
    assert _text(data[:2], cut=True) == ("a", 1)
    assert _text(data, cut=True) == ("aé", 3)
    assert _text(data[:2], cut=False) == ("a\ufffd", 2)


def test_the_process_tools_refuse_as_error_results(tmp_path: Path) -> None:
    """Where no runtime has processes (the local one) and for malformed arguments: error results."""
    executor = Executor.from_settings(
        Settings(runtime="local", data_dir=tmp_path / "data", skills_dirs=[REPO / "skills"], skills_refresh_seconds=0)
    )
    try:
        unavailable = ToolExecutor(executor.repository)
        result = unavailable.call("process_start", {"session": "s", "command": "true"})
        assert result.is_error and "tool_unavailable" in result.content
        tools = ToolExecutor(executor.repository, processes=executor.runner.processes)
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
            executor.runner.processes.start("tenant-a", "s", "python3 -i")
        assert denied.value.code == "command_denied" and denied.value.status == 403
        assert denied.value.details["rule"] == "no-curl"
        with pytest.raises(ExecutorError) as other:
            executor.runner.processes.start("tenant-b", "s", "python3 -i")
        assert other.value.code == "processes_unsupported"  # no rule for this key: on to the runtime
    finally:
        executor.close()
