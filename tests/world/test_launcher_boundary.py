"""The warm launcher and everything it tells the service are untrusted.

* The command cannot reach the launcher (no ptrace, no ``/proc/<pid>/mem``), cannot
  open vsock sockets or io_uring rings, on either path (the launcher's seccomp filter
  guards the per-run container's command too).
* Every frame is bounded and validated (pure logic below).
* A launcher that breaks its protocol, lies about the exit, floods, or dies gives a
  normal, honest result: no exception, bounded memory, nothing left running -- checked
  with a rogue launcher in a real pool container.

Every Docker test here runs on runc and on gVisor (``runsc``), per-run and warm.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import skill_executor.runtimes.docker.runtime as docker_runtime
from skill_executor.config import Settings
from skill_executor.core import Executor
from skill_executor.runs.sandbox import RunSandbox
from skill_executor.runtimes.base import Command, ExecResult, SandboxPlan
from skill_executor.runtimes.docker import DockerRuntime
from skill_executor.runtimes.docker.launcher import EXIT_FRAME_MAX, LauncherFrames
from skill_executor.runtimes.docker.sandboxes import WarmBox
from skill_executor.runtimes.streams import ProtocolError
from skill_executor.workspace.layout import environment

from ..engine import test_docker
from ..conftest import HARDENING_RUNTIMES, make_settings, require_runtime
from ..helpers import run

#: The fixture of test_docker: per-run containers and a warm pool, on runc and on gVisor.
make_docker = test_docker.make_docker
MakeDocker = Callable[..., Executor]

# -- the frame reader (pure logic) -------------------------------------------------------------


def frame(kind: bytes, payload: bytes, declared: int | None = None) -> memoryview:
    size = len(payload) if declared is None else declared
    return memoryview(kind + size.to_bytes(4, "big") + payload)


def test_output_frames_stream_into_bounded_buffers() -> None:
    frames = LauncherFrames(10, 10, None)
    frames.feed(frame(b"O", b"", declared=4 * 1024**3 - 1))  # a frame declaring 4 GiB of stdout
    for _ in range(64):
        frames.feed(memoryview(b"x" * 65536))
    assert frames.out.data == b"x" * 10 and frames.out.truncated and frames.out.total == 64 * 65536
    assert len(frames._demux._frame) == 0  # nothing of it held beyond the cap


@pytest.mark.parametrize(
    "data, problem",
    [
        (frame(b"Z", b"hello"), "unknown frame kind"),
        (frame(b"X", b"", declared=EXIT_FRAME_MAX + 1), "control frame"),
        (frame(b"X", b"", declared=4 * 1024**3 - 1), "control frame"),
        (frame(b"X", b"not json"), "not JSON"),
        (frame(b"X", b"\xff\xfe"), "not JSON"),
        (frame(b"X", b'{"exit_code": 256}'), "exit code"),
        (frame(b"X", b'{"exit_code": -1}'), "exit code"),
        (frame(b"X", b'{"exit_code": "0"}'), "exit code"),
        (frame(b"X", b'{"exit_code": true}'), "exit code"),
        (frame(b"X", b'{"exit_code": 0.0}'), "exit code"),
        (frame(b"X", b'{"exit_code": 1e400}'), "exit code"),
        (frame(b"X", b'{"exit_code": null}'), "exit code"),
        (frame(b"X", b'{"exit_code": 0, "extra": 1}'), "exit code"),
        (frame(b"X", b"{}"), "exit code"),
        (frame(b"X", b"[0]"), "exit code"),
        (frame(b"X", b"0"), "exit code"),
        (memoryview(bytes(frame(b"X", b'{"exit_code": 0}')) * 2), "second exit frame"),
    ],
)
def test_protocol_violations_are_refused(data: memoryview, problem: str) -> None:
    frames = LauncherFrames(10, 10, None)
    with pytest.raises(ProtocolError, match=problem):
        frames.feed(data)


def test_an_oversized_control_frame_is_refused_at_its_header() -> None:
    """Before a single byte of its payload is buffered."""
    frames = LauncherFrames(10, 10, None)
    with pytest.raises(ProtocolError, match=f"at most {EXIT_FRAME_MAX}"):
        frames.feed(memoryview(b"X" + (EXIT_FRAME_MAX + 1).to_bytes(4, "big")))
    assert len(frames._demux._frame) == 0


def test_nothing_is_read_after_the_exit_frame() -> None:
    frames = LauncherFrames(10, 10, None)
    frames.feed(frame(b"X", b'{"exit_code": 0}'))
    with pytest.raises(ProtocolError, match="after the exit frame"):
        frames.feed(frame(b"O", b"late"))


def test_a_valid_exit_frame_is_read() -> None:
    frames = LauncherFrames(10, 10, None)
    frames.feed(memoryview(bytes(frame(b"O", b"hi")) + bytes(frame(b"X", b'{"exit_code": 3}'))))
    assert frames.exited and frames.exit_code == 3 and frames.out.data == b"hi"


# -- what the command can do, on both paths (real engine) ---------------------------------------

PROBE = r"""
import ctypes, os, socket, subprocess
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

def call(result):
    return f"{result} {ctypes.get_errno() if result < 0 else 0}"

child = subprocess.Popen(["sleep", "30"])
print("attach-child", call(libc.ptrace(16, child.pid, None, None)))
print("vm-read-child", call(libc.process_vm_readv(child.pid, None, 0, None, 0, 0)))
child.kill()
params = ctypes.create_string_buffer(120)
print("io_uring", call(libc.syscall(425, 4, params)))
for name, make in (("vsock", lambda: socket.socket(40, socket.SOCK_STREAM)),
                   ("vsock-pair", lambda: socket.socketpair(40, socket.SOCK_STREAM))):
    try:
        make()
        print(name, "open")
    except OSError as exc:
        print(name, exc.errno)
launchers = []
for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
    try:
        if open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[0].endswith(b"/launcher"):
            launchers.append(pid)
    except OSError:
        pass
print("launchers", len(launchers))
for pid in launchers:
    print("attach-launcher", call(libc.ptrace(16, pid, None, None)))
    for what in ("mem", "environ"):
        try:
            open(f"/proc/{pid}/{what}", "rb").read(1)
            print(what, "readable")
        except OSError as exc:
            print(what, exc.errno)
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
        print("fd listable")
    except OSError as exc:
        fds = []
        print("fd", exc.errno)
    sockets = 0
    for fd in fds:  # the connection to the service, reopened through /proc?
        try:
            if not os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                continue
        except OSError:
            continue
        sockets += 1
        try:
            os.open(f"/proc/{pid}/fd/{fd}", os.O_RDWR)
            print("socket opened")
        except OSError as exc:
            print("socket-open", exc.errno)
    print("sockets", sockets)
"""


def probe(executor: Executor) -> dict[str, str]:
    result = run(executor, command=f"python3 - <<'EOF'\n{PROBE}\nEOF")
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return dict(line.split(" ", 1) for line in result.stdout.splitlines())


def is_warm(executor: Executor) -> bool:
    runtime = executor.runtime
    assert isinstance(runtime, DockerRuntime)
    return runtime.pool is not None


def gvisor(executor: Executor) -> bool:
    runtime = executor.runtime
    assert isinstance(runtime, DockerRuntime)
    return runtime.engine.gvisor


def test_the_command_cannot_trace_read_or_leave_through_vsock(make_docker: MakeDocker) -> None:
    executor = make_docker()
    seen = probe(executor)
    # The seccomp filter, on both paths: even the command's own child is out of reach.
    assert seen["attach-child"] == "-1 1" and seen["vm-read-child"] == "-1 1", seen
    assert seen["io_uring"] == "-1 1", seen  # IORING_OP_SOCKET would make sockets past the filter
    assert seen["vsock"] == "1" and seen["vsock-pair"] == "1", seen
    if is_warm(executor):
        # The launcher: not traceable, its memory not readable, its connection not reachable.
        assert seen["launchers"] == "1", seen
        assert seen["attach-launcher"] == "-1 1" and seen["mem"] in ("1", "13"), seen
        assert "socket" not in seen, seen
        if gvisor(executor):
            # gVisor honours non-dumpable for ptrace and mem only: the launcher's environment
            # (the image's, nothing of the run's) and descriptor list are readable, but its
            # socket to the service cannot be reopened through /proc (ENXIO).
            assert seen["sockets"] == "1" and seen["socket-open"] == "6", seen
        else:
            assert seen["environ"] in ("1", "13") and seen["fd"] in ("1", "13"), seen
    else:
        assert seen["launchers"] == "0", seen  # exec mode: the launcher became the command


def test_vsock_can_be_allowed_by_a_setting(make_docker: MakeDocker) -> None:
    seen = probe(make_docker(docker_allow_vsock=True))
    assert seen["attach-child"] == "-1 1" and seen["io_uring"] == "-1 1", seen  # the rest stays refused
    if seen["vsock"] == "97":
        pytest.skip("this kernel (or gVisor) has no vsock: socket(AF_VSOCK) gives EAFNOSUPPORT even when allowed")
    assert seen["vsock"] == "open", seen


def test_a_killed_launcher_gives_an_honest_result_and_leaves_nothing(make_docker: MakeDocker) -> None:
    """The command may signal the launcher (same uid): that ends only its own run."""
    executor = make_docker()
    command = (
        "for p in /proc/[0-9]*; do"
        ' a0=$(tr "\\0" "\\n" < $p/cmdline 2>/dev/null | head -1);'
        ' case "$a0" in */launcher) echo killing; kill -9 ${p#/proc/};; esac;'
        " done; sleep 3; echo survived"
    )
    started = time.monotonic()
    result = run(executor, command=command, timeout=20)
    if is_warm(executor):
        assert "survived" not in result.stdout, result  # ("killing" may die with the launcher, unforwarded)
        assert time.monotonic() - started < 3
        assert result.exit_code is None and any("launcher" in w for w in result.warnings), result
    else:
        # Exec mode left no launcher process: the command is the container's main process.
        assert result.stdout == "survived\n" and result.exit_code == 0, result
    # make_docker checks at the end that no container and no workspace is left.


def test_the_largest_environment_the_service_accepts_runs_the_same_on_both_paths(make_docker: MakeDocker) -> None:
    """What the pipeline accepted, the launcher (request fields, execve) runs: never a 5xx on one path only."""
    executor = make_docker()
    entry = 128 * 1024 - 1  # the most one NAME=value may take
    env = {f"BIG{i}": str(i) * (entry - len(f"BIG{i}=")) for i in range(7)}  # 7 such: just under 1 MiB in all
    result = run(executor, command="echo ${#BIG0} ${#BIG6}; cat", env=env, stdin="fed")
    width = entry - len("BIG0=")
    assert result.exit_code == 0 and result.stdout == f"{width} {width}\nfed", (result.stdout, result.stderr[-300:])


# -- a rogue launcher: the service's side of the protocol (real engine, warm pool) --------------

ROGUE = r"""
import os, socket, struct, subprocess, sys, time
path = sys.argv[-1]
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(path + ".tmp")
server.listen(1)
try:
    os.rename(path + ".tmp", path)
except PermissionError:  # gVisor cannot rename a host socket: publish it as the launcher does
    os.symlink(os.path.basename(path) + ".tmp", path)
conn, _ = server.accept()

def exact(n):
    data = b""
    while len(data) < n:
        more = conn.recv(n - len(data))
        if not more:
            sys.exit(0)
        data += more
    return data

def u32():
    return struct.unpack(">I", exact(4))[0]

fields = [exact(u32()) for _ in range(u32())]
mode = fields[0].decode()

def send(kind, payload=b"", size=None):
    conn.sendall(kind + struct.pack(">I", len(payload) if size is None else size) + payload)

def flood():
    chunk = b"x" * 65536
    while True:
        conn.sendall(chunk)

if mode == "fake-exit":
    subprocess.Popen(["sleep", "600"])  # the run's processes "live on"
    send(b"O", b"done\n")
    send(b"X", b'{"exit_code": 0}')
elif mode == "unknown-kind":
    send(b"Z", b"hello")
elif mode == "bad-exit":
    send(b"O", b"partial\n")
    send(b"X", b'{"exit_code": 300}')
elif mode == "malformed-exit":
    send(b"X", b"\x00garbage")
elif mode == "huge-control":
    send(b"X", size=0xFFFFFFFF)
    flood()
elif mode == "huge-output":
    send(b"O", size=0xFFFFFFFF)
    for _ in range(4096):  # 256 MiB of a frame declaring 4 GiB, then nothing until the deadline
        conn.sendall(b"x" * 65536)
elif mode == "cut":
    conn.sendall(b"O\x00\x00")
    conn.close()
time.sleep(600)
"""


@pytest.fixture(params=[name for name in HARDENING_RUNTIMES if name.startswith("docker-pool")])
def rogue(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Executor]:
    """A warm pool whose containers run ROGUE in place of the launcher (same hardening)."""
    require_runtime(request.param)

    def argv(settings: Settings, mode: str) -> list[str]:
        return ["python3", "-c", ROGUE, mode]

    monkeypatch.setattr(docker_runtime, "launcher_argv", argv)
    executor = Executor.from_settings(make_settings(tmp_path, request.param, pool_size=1))
    runtime = executor.runtime
    assert isinstance(runtime, DockerRuntime) and runtime.pool is not None
    assert runtime.pool.wait_ready()
    yield executor
    executor.close()
    left = runtime.client.containers.list(all=True, filters={"label": f"io.skill-executor.owner={runtime.token}"})
    assert left == [], "containers left behind"
    assert list(executor.runner.workspaces.runs.iterdir()) == [], "workspaces left behind"


def rogue_command(sandbox: RunSandbox, mode: str, timeout: float = 20.0) -> Command:
    cwd = f"{sandbox.root.rstrip('/')}/skills/math-tools"
    return Command(
        command=mode,
        cwd=cwd,
        env={**environment(sandbox.root, "math-tools"), "PWD": cwd},
        stdin=None,
        timeout=timeout,
        stdout_max=1024,
        stderr_max=1024,
    )


def processes_of(container_id: str) -> list[int]:
    """The processes in the container's cgroup, read from the host (none once it is gone).

    Not the engine's ``State.Running``: the engine learns of a death a moment later.
    """
    candidates = [
        Path(f"/sys/fs/cgroup/pids/docker/{container_id}/cgroup.procs"),  # v1, cgroupfs driver
        Path(f"/sys/fs/cgroup/docker/{container_id}/cgroup.procs"),  # v2, cgroupfs driver
        Path(f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/cgroup.procs"),  # v2, systemd
    ]
    for path in candidates:
        try:
            return [int(line) for line in path.read_text().split()]
        except FileNotFoundError:
            continue
        except OSError as exc:  # ENODEV: the cgroup is being removed, its processes are gone
            if exc.errno == errno.ENODEV:
                return []
            raise
    return []


PF_EXITING = 0x4
SIGKILL_BIT = 1 << (9 - 1)


def pid_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def alive(pids: list[int], namespace: str) -> list[str]:
    """Of ``pids``, the processes of the run that can still run code, as ``pid stat``.

    Of the run: in the container's PID namespace (under gVisor: the sandbox's, with the
    stubs that run the run's code), not the runtime's own processes that the engine starts
    in the container's cgroup to clean up after it (gVisor's gofer, ``runsc`` commands).
    Not alive: zombies, processes in the kernel's exit path (``PF_EXITING``), and processes
    with a SIGKILL pending, taken before any return to user space (gVisor's stubs get
    theirs as the sandbox, their tracer, dies, a moment before they are scheduled)."""
    out = []
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue  # gone
        if pid_namespace(pid) != namespace:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        pending = 0
        for entry in status.splitlines():
            if entry.startswith(("SigPnd:", "ShdPnd:")):
                pending |= int(entry.split()[1], 16)
        if fields[0] in ("Z", "X") or int(fields[6]) & PF_EXITING or pending & SIGKILL_BIT:
            continue
        out.append(f"{pid} {stat[:80]}")
    return out


def execute_rogue(executor: Executor, mode: str, timeout: float = 20.0) -> tuple[ExecResult, list[str], float]:
    """Execute through the rogue launcher: the result, the run's processes alive right after, the time taken."""
    runtime = executor.runtime
    assert isinstance(runtime, DockerRuntime) and runtime.pool is not None
    assert runtime.pool.wait_ready()
    with RunSandbox(runtime.claim(SandboxPlan(f"rogue-{mode}", executor.repository.get("math-tools")))) as sandbox:
        box = sandbox.box
        assert isinstance(box, WarmBox)
        namespace = pid_namespace(runtime.engine.state(box.warm.id)["Pid"])
        assert namespace is not None and alive(processes_of(box.warm.id), namespace), "nothing seen to end"
        started = time.monotonic()
        result = sandbox.execute(rogue_command(sandbox, mode, timeout))
        took = time.monotonic() - started
        left = alive(processes_of(box.warm.id), namespace)  # before the sandbox is closed
    return result, left, took


def test_a_fake_exit_buys_nothing_the_container_is_dead_when_execute_returns(rogue: Executor) -> None:
    result, left, took = execute_rogue(rogue, "fake-exit")
    assert result.exit_code == 0 and result.stdout == b"done\n"
    assert left == []  # the "lived on" sleep and the launcher with it: dead before execute returned
    assert took < 10


@pytest.mark.parametrize(
    "mode, problem",
    [
        ("unknown-kind", "unknown frame kind"),
        ("bad-exit", "exit code in 0..255"),
        ("malformed-exit", "not JSON"),
        ("huge-control", "a control frame of 4294967295 bytes"),
    ],
)
def test_a_protocol_violation_stops_the_run_with_a_warning(rogue: Executor, mode: str, problem: str) -> None:
    result, left, took = execute_rogue(rogue, mode)
    assert result.exit_code is None, result
    assert any("broke its protocol" in w and problem in w for w in result.warnings), result
    assert left == []
    assert took < 10  # stopped at once, not at the deadline


def test_a_launcher_that_ends_mid_frame_gives_no_exit_status(rogue: Executor) -> None:
    result, left, _ = execute_rogue(rogue, "cut")
    assert result.exit_code is None
    assert any("without reporting an exit status" in w for w in result.warnings)
    assert left == []


def rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_an_endless_output_frame_keeps_the_service_bounded(rogue: Executor) -> None:
    peak = [rss()]
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.05):
            peak.append(rss())

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        result, left, _ = execute_rogue(rogue, "huge-output", timeout=3.0)
    finally:
        done.set()
        watcher.join()
    assert result.timed_out and result.stdout == b"x" * 1024 and result.stdout_truncated
    assert left == []
    assert max(peak) - peak[0] < 64 * 1024 * 1024, (peak[0], max(peak))


def test_the_real_request_through_the_pipeline_never_raises(rogue: Executor) -> None:
    """Through the whole pipeline (what the API serves): a normal result, no 5xx."""
    result = run(rogue, command="unknown-kind", timeout=20)
    assert result.exit_code is None and any("broke its protocol" in w for w in result.warnings), result
