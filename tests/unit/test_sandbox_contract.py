"""The Sandbox seam's contract, written once and run against every runtime.

A new runtime (bubblewrap, a remote engine, Kubernetes Jobs) is done when these pass
for it: the pipeline's sandbox over ``Runtime.claim(plan)`` stages, executes within its
limits, collects, and leaves nothing behind once closed (the box itself:
tests/unit/test_runtime_contract.py).
"""

from __future__ import annotations

import threading
import time

import pytest

from skill_executor.core import Executor
from skill_executor.outputs.collect import CollectLimits
from skill_executor.runs.sandbox import RunSandbox
from skill_executor.runtimes.base import Command, Sandbox, SandboxPlan
from skill_executor.workspace.layout import environment
from skill_executor.workspace.schema import InputSpec

from ..helpers import leftover_runs

LIMITS = CollectLimits(max_files=10, max_file_bytes=1024, max_total_bytes=4096)


def plan(executor: Executor, run_id: str) -> SandboxPlan:
    return SandboxPlan(run_id, executor.repository.get("math-tools"))


def open_sandbox(executor: Executor, sandbox_plan: SandboxPlan) -> RunSandbox:
    """What the pipeline does: the sandbox over a box claimed from the runtime."""
    return RunSandbox(executor.runtime.claim(sandbox_plan))


def command(sandbox: Sandbox, text: str, **fields: object) -> Command:
    cwd = f"{sandbox.root.rstrip('/')}/skills/math-tools"
    values: dict[str, object] = {
        "command": text,
        "cwd": cwd,
        "env": {**environment(sandbox.root, "math-tools"), "PWD": cwd},
        "stdin": None,
        "timeout": 20.0,
        "stdout_max": 1024,
        "stderr_max": 1024,
    }
    values.update(fields)
    return Command(**values)  # type: ignore[arg-type]


def test_a_sandbox_stages_executes_collects_and_leaves_nothing(executor: Executor) -> None:
    with open_sandbox(executor, plan(executor, "contract-1")) as sandbox:
        assert sandbox.workspace.root.is_dir() and sandbox.root
        report = sandbox.stage(
            executor.runner.stager, [InputSpec.model_validate({"from": "skill://math-tools/SKILL.md"})]
        )
        assert [s.target for s in report.staged] == ["work/inputs/SKILL.md"]
        result = sandbox.execute(
            command(sandbox, "head -1 inputs/SKILL.md > out/first.txt; cat; echo $SKILL_NAME", stdin=b"fed\n")
        )
        assert result.exit_code == 0 and result.stdout == b"fed\nmath-tools\n" and result.duration_ms >= 0
        collection = sandbox.collect(["out/*"], LIMITS, failed=False)
        assert [(f.name, f.data) for f in collection.files] == [("out/first.txt", b"---\n")]
    assert leftover_runs(executor) == []


def test_execute_holds_the_command_to_its_limits(executor: Executor) -> None:
    with open_sandbox(executor, plan(executor, "contract-2")) as sandbox:
        flood = sandbox.execute(command(sandbox, "head -c 100000 /dev/zero; echo err >&2", stdout_max=10))
        assert flood.stdout == b"\0" * 10 and flood.stdout_truncated and flood.stderr == b"err\n"
    with open_sandbox(executor, plan(executor, "contract-3")) as sandbox:
        started = time.monotonic()
        late = sandbox.execute(command(sandbox, "sleep 30", timeout=1.0))
        assert late.timed_out and late.exit_code == 137 and late.signal == "SIGKILL"
        assert time.monotonic() - started < 15
    with open_sandbox(executor, plan(executor, "contract-4")) as sandbox:
        cancel = threading.Event()
        threading.Timer(0.5, cancel.set).start()
        stopped = sandbox.execute(command(sandbox, "sleep 30", cancel=cancel))
        assert stopped.cancelled and not stopped.timed_out
    assert leftover_runs(executor) == []


def test_closing_is_idempotent_and_happens_on_errors(executor: Executor) -> None:
    sandbox = open_sandbox(executor, plan(executor, "contract-5"))
    sandbox.close()
    sandbox.close()
    with pytest.raises(RuntimeError):
        with open_sandbox(executor, plan(executor, "contract-6")):
            raise RuntimeError("the caller failed")
    assert leftover_runs(executor) == []


def test_health_names_its_parts(executor: Executor) -> None:
    checks = executor.runtime.health()
    assert checks and all(isinstance(ok, bool) and isinstance(text, str) for ok, text in checks.values())
    assert all(ok for ok, _ in checks.values())
