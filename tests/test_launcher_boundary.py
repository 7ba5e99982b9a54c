"""The warm launcher and everything it tells the service are untrusted: the command
cannot reach the launcher, cannot open vsock sockets (either path), and a launcher that
breaks its protocol or dies gives a normal, honest result with nothing left running."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from executor.core import Executor
from executor.runtimes.docker.launcher import EXIT_FRAME_MAX, LauncherFrames
from executor.runtimes.streams import ProtocolError

from .conftest import HARDENING_RUNTIMES, make_settings, require_runtime
from .helpers import run


def frame(kind: bytes, payload: bytes, declared: int | None = None) -> memoryview:
    size = len(payload) if declared is None else declared
    return memoryview(kind + size.to_bytes(4, "big") + payload)


def test_output_frames_stream_into_bounded_buffers() -> None:
    frames = LauncherFrames(10, 10, None)
    frames.feed(frame(b"O", b"", declared=4 * 1024**3 - 1))  # a frame declaring 4 GiB of stdout
    for _ in range(64):
        frames.feed(memoryview(b"x" * 65536))
    assert frames.out.data == b"x" * 10 and frames.out.truncated and frames.out.total == 64 * 65536


@pytest.mark.parametrize(
    "data, problem",
    [
        (frame(b"Z", b"hello"), "unknown frame kind"),
        (frame(b"X", b"", declared=EXIT_FRAME_MAX + 1), "control frame"),
        (frame(b"X", b"not json"), "not JSON"),
        (frame(b"X", b'{"exit_code": 256}'), "exit code"),
        (frame(b"X", b'{"exit_code": "0"}'), "exit code"),
        (frame(b"X", b'{"exit_code": 0, "extra": 1}'), "exit code"),
        (frame(b"X", b"[0]"), "exit code"),
        (memoryview(bytes(frame(b"X", b'{"exit_code": 0}')) * 2), "second exit frame"),
    ],
)
def test_protocol_violations_are_refused(data: memoryview, problem: str) -> None:
    frames = LauncherFrames(10, 10, None)
    with pytest.raises(ProtocolError, match=problem):
        frames.feed(data)


def test_a_valid_exit_frame_is_read() -> None:
    frames = LauncherFrames(10, 10, None)
    frames.feed(memoryview(bytes(frame(b"O", b"hi")) + bytes(frame(b"X", b'{"exit_code": 3}'))))
    assert frames.exited and frames.exit_code == 3 and frames.out.data == b"hi"


PTRACE = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
names = {p: open(f"/proc/{p}/cmdline", "rb").read().split(b"\0")[0].decode(errors="replace") for p in pids}
launcher = [p for p, n in names.items() if n.endswith("launcher")]
print("launchers", len(launcher))
for pid in launcher:
    print("attach", libc.ptrace(16, pid, 0, 0), ctypes.get_errno())
    try:
        open(f"/proc/{pid}/mem", "rb").read(1)
        print("mem readable")
    except OSError as exc:
        print("mem", exc.errno)
"""

VSOCK = "import socket\ntry:\n socket.socket(40, socket.SOCK_STREAM)\n print('vsock open')\nexcept OSError as e:\n print('vsock', e.errno)"


@pytest.fixture(params=HARDENING_RUNTIMES)
def docker_executor(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Executor]:
    require_runtime(request.param)
    executor = Executor.from_settings(make_settings(tmp_path, request.param))
    pool = getattr(executor.runtime, "pool", None)
    if pool is not None:
        assert pool.wait_ready()
    yield executor
    executor.close()
    assert os.listdir(executor.runner.workspaces.runs) == [], "workspaces left behind"
    runtime = executor.runtime
    left = runtime.client.api.containers(all=True, filters={"label": f"io.skill-executor.owner={runtime.token}"})  # type: ignore[attr-defined]
    assert left == [], "containers left behind"


def test_the_command_cannot_trace_or_read_the_launcher(docker_executor: Executor) -> None:
    result = run(docker_executor, command=f"python3 - <<'EOF'\n{PTRACE}\nEOF")
    lines = result.stdout.splitlines()
    assert result.exit_code == 0, result.stderr
    if docker_executor.runtime.pool is not None:  # type: ignore[attr-defined]
        assert lines[0] == "launchers 1"
        assert lines[1] == "attach -1 1" and lines[2] in ("mem 13", "mem 1"), lines
    for line in lines:
        assert not line.startswith("attach 0") and line != "mem readable", lines


def test_vsock_sockets_are_refused_on_both_paths(docker_executor: Executor) -> None:
    result = run(docker_executor, command=f"python3 -c \"{VSOCK}\"")
    assert result.stdout.strip() == "vsock 1", (result.stdout, result.stderr)


def test_a_killed_launcher_gives_an_honest_result_and_leaves_nothing(docker_executor: Executor) -> None:
    command = "for p in /proc/[0-9]*; do grep -qa launcher $p/cmdline 2>/dev/null && kill -9 ${p#/proc/}; done; sleep 5; echo survived"
    result = run(docker_executor, command=command, timeout=20)
    assert "survived" not in result.stdout
    if docker_executor.runtime.pool is not None:  # type: ignore[attr-defined]
        assert result.exit_code is None and any("launcher" in w for w in result.warnings), result
