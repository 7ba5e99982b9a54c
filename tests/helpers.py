"""Small builders shared by the tests."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from skill_executor.core import Executor
from skill_executor.errors import ExecutorError
from skill_executor.runs.models import RunRequest, RunResult

T = TypeVar("T")


def make_skill(
    root: Path,
    dirname: str,
    frontmatter: str,
    body: str = "# Body\n",
    *,
    filename: str = "SKILL.md",
    raw: bytes | None = None,
) -> Path:
    """Write a skill directory; ``frontmatter`` is the YAML between the ``---`` lines."""
    directory = root / dirname
    directory.mkdir(parents=True, exist_ok=True)
    data = raw if raw is not None else f"---\n{frontmatter.strip(chr(10))}\n---\n{body}".encode()
    (directory / filename).write_bytes(data)
    return directory


def eventually(check: Callable[[], T], *, timeout: float = 15.0, interval: float = 0.05) -> T:
    """``check()``'s first truthy value, polled until ``timeout``; then its last value.

    For effects that follow an answer rather than precede it (an access-log line, a
    container's removal, a process's exit): a fixed sleep races them on a loaded machine.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def run(executor: Executor, **fields: object) -> RunResult:
    """Run a request through the library (skill ``math-tools`` unless named)."""
    fields.setdefault("skill", "math-tools")
    return executor.runner.run(RunRequest.model_validate(fields))


def refused(executor: Executor, **fields: object) -> ExecutorError:
    """The refusal a request gets (the test fails if it runs)."""
    with pytest.raises(ExecutorError) as info:
        run(executor, **fields)
    return info.value


def leftover_runs(executor: Executor) -> list[str]:
    """Run workspaces still on disk once removal settled (idle warm containers' folders excluded)."""
    executor.runner.settle()
    pool = getattr(executor.runtime, "pool", None)
    idle: set[str] = set()
    if pool is not None:
        assert pool.wait_ready()
        idle = {root.name for root in pool.idle_roots()}
    return [d for d in os.listdir(executor.runner.workspaces.runs) if d not in idle]
