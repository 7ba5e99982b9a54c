"""Sessions continued on another worker: with SKILL_EXECUTOR_SESSION_SNAPSHOTS two executors
that share only the object store (as two workers of a cluster do) run one session in turns,
each seeing what the other's runs left in work/ (on the local runtime and in containers)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from skill_executor.core import Executor
from skill_executor.runs.models import RunRequest

from ..conftest import make_settings
from ..helpers import run


@pytest.fixture
def workers(tmp_path: Path, runtime_name: str) -> Iterator[tuple[Executor, Executor]]:
    shared = tmp_path / "objects"
    for name in ("worker-a", "worker-b"):
        (tmp_path / name).mkdir()
    made = [
        Executor.from_settings(
            make_settings(tmp_path / name, runtime_name, session_snapshots=True, object_store=str(shared), pool_size=0)
        )
        for name in ("worker-a", "worker-b")
    ]
    try:
        yield made[0], made[1]
    finally:
        for executor in made:
            executor.close(timeout=30)


def test_a_session_moves_between_workers_and_back(workers: tuple[Executor, Executor]) -> None:
    a, b = workers
    first = run(
        a, session="chat", command="cd work && mkdir -p notes && echo one > notes/f && ln -s notes/f link && echo ok"
    )
    assert first.stdout == "ok\n" and not first.warnings, first
    second = run(b, session="chat", command="cd work && cat link; echo two >> notes/f; ls -l link | cut -c1")
    assert second.stdout == "one\nl\n" and not second.warnings, second
    # Back on the first worker, whose own copy is now behind: the newest one is used.
    third = run(a, session="chat", command="cd work && cat notes/f; id -u; stat -c %u notes/f")
    lines = third.stdout.split()
    assert lines[:2] == ["one", "two"], third
    assert lines[2] == lines[3], "restored files belong to the runs' user"
    # Another tenant's session of the same name on the other worker starts empty.
    request = RunRequest.model_validate(
        {"skill": "math-tools", "session": "chat", "command": "ls work/notes 2>&1 || true"}
    )
    other = b.runner.run(request, tenant="key-b")
    assert "No such file" in other.stdout, other


def test_an_ended_session_is_not_restored_elsewhere(workers: tuple[Executor, Executor]) -> None:
    a, b = workers
    run(a, session="gone", command="echo x > work/f")
    assert a.runner.sessions.end("gone", "local")
    assert run(b, session="gone", command="test -e work/f && echo present || echo absent").stdout == "absent\n"
    assert not os.path.exists(b.settings.workspaces / "sessions" / "local" / "gone" / "work" / "f")


def test_a_snapshot_that_fails_is_a_warning_not_a_lost_result(
    workers: tuple[Executor, Executor], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, _ = workers
    snapshots = a.runner.sessions.snapshots
    assert snapshots is not None

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr(snapshots, "take", broken)
    result = run(a, session="warned", command="echo ran")
    assert result.stdout == "ran\n" and result.exit_code == 0
    assert any("could not be kept" in w and "disk on fire" in w for w in result.warnings), result.warnings
