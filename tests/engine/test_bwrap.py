"""The bwrap runtime's sandbox, checked from inside the run and from the host: what
docs/guides/runtimes.md promises of it (and what it says it does not give)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from skill_executor.core import Executor
from skill_executor.errors import Unavailable
from skill_executor.runs.models import RunRequest, RunResult
from skill_executor.runs.pipeline import new_run_id

from ..conftest import in_ci, make_settings, require_runtime
from ..helpers import eventually


@pytest.fixture
def make_bwrap(tmp_path: Path):  # type: ignore[no-untyped-def]
    require_runtime("bwrap")
    made: list[Executor] = []

    def factory(**overrides: object) -> Executor:
        executor = Executor.from_settings(make_settings(tmp_path, "bwrap", **overrides))
        made.append(executor)
        return executor

    yield factory
    for executor in made:
        executor.close()
    for executor in made:
        assert os.listdir(executor.runner.workspaces.runs) == [], "workspaces left behind"


def run(executor: Executor, command: str, **fields: object) -> RunResult:
    return executor.runner.run(RunRequest.model_validate({"skill": "math-tools", "command": command, **fields}))


def test_no_network(make_bwrap) -> None:  # type: ignore[no-untyped-def]
    probe = (
        'cat /proc/net/dev; python3 -c "import socket,errno\n'
        "s=socket.socket(); s.settimeout(3)\n"
        "try:\n    s.connect(('10.20.30.40', 80)); print('CONNECTED')\n"
        "except OSError as e:\n    print('ERRNO', errno.errorcode.get(e.errno, e.errno))\""
    )
    result = run(make_bwrap(), probe)
    lines = result.stdout.split("ERRNO")[0].splitlines()[2:]
    assert [line.split(":", 1)[0].strip() for line in lines if ":" in line] == ["lo"]
    assert "ERRNO ENETUNREACH" in result.stdout and "CONNECTED" not in result.stdout


def test_read_only_root_and_skill_and_nothing_else_of_the_host(make_bwrap, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    executor = make_bwrap()
    source = executor.repository.get("math-tools").path
    before = {p: p.read_bytes() for p in source.rglob("*") if p.is_file()}
    probe = (
        "for t in /x /usr/x /workspace/x /workspace/skills/x /etc/hosts /opt/skill-envs/x $SKILL_DIR/scripts/x "
        "$SKILL_DIR/SKILL.md; do "
        '(echo hi >> $t) 2>/dev/null && echo "WROTE $t" || echo "DENIED $t"; done; '
        "echo ok > /tmp/t && echo TMP-OK; head -c 100M /dev/zero > /tmp/big 2>/dev/null || echo TMP-FULL; "
        "echo ok > $OUTPUT_DIR/o && echo OUT-OK; "
        f"for p in /root /home /var /run /srv {tmp_path}; do [ -e $p ] && echo SEEN $p; done; "
        "ls /mnt/skills/public /mnt/user-data/outputs/o; cat /etc/hosts"
    )
    result = run(executor, probe)
    assert result.stdout.count("DENIED") == 6, result.stdout
    assert "WROTE /workspace/skills/math-tools/scripts/x" in result.stdout
    assert "WROTE /workspace/skills/math-tools/SKILL.md" in result.stdout
    assert {p: p.read_bytes() for p in source.rglob("*") if p.is_file()} == before
    assert "TMP-OK" in result.stdout and "TMP-FULL" in result.stdout and "OUT-OK" in result.stdout
    assert "SEEN" not in result.stdout, result.stdout
    assert "math-tools" in result.stdout and "/mnt/user-data/outputs/o" in result.stdout
    assert "127.0.0.1\tlocalhost" in result.stdout


def test_identity_capabilities_and_limits(make_bwrap) -> None:  # type: ignore[no-untyped-def]
    executor = make_bwrap()
    result = run(
        executor,
        "id -u; id -g; grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs):' /proc/self/status; "
        "ulimit -n; ulimit -u; ulimit -f; ulimit -Hn; echo x > $OUTPUT_DIR/mine; "
        "unshare -U true 2>/dev/null && echo USERNS || echo NO-USERNS; ps -e -o pid= | wc -l",
        outputs={"globs": ["out/mine"]},
    )
    lines = result.stdout.split()
    assert lines[:2] == ["1000", "1000"]
    inside = dict(zip(lines[2:10:2], lines[3:10:2]))
    assert inside["CapEff:"] == inside["CapPrm:"] == inside["CapBnd:"] == "0000000000000000"
    assert inside["NoNewPrivs:"] == "1"
    assert lines[10:14] == ["1024", "256", str(1024**3 // 1024), "1024"]
    assert lines[14] == "NO-USERNS"
    assert int(lines[15]) <= 5  # its own PID namespace: the init, the shell, ps, wc
    if os.geteuid() == 0:  # started as the run's user: what it writes is that user's on the host
        assert result.output_files[0].name == "out/mine"


def test_files_written_belong_to_the_run_user_on_the_host(make_bwrap) -> None:  # type: ignore[no-untyped-def]
    executor = make_bwrap(keep_workspaces=True)
    result = run(executor, "echo x > $OUTPUT_DIR/mine")
    executor.runtime.settle()
    kept = executor.runner.workspaces.runs / result.run_id / "out" / "mine"
    expected = 1000 if os.geteuid() == 0 else os.getuid()
    assert kept.stat().st_uid == expected
    executor.runner.workspaces.discard(kept.parent.parent)


def test_fork_bomb_is_contained_and_ended(make_bwrap) -> None:  # type: ignore[no-untyped-def]
    executor = make_bwrap()
    marker = f"bomb-{os.getpid()}-{time.monotonic_ns()}"
    started = time.monotonic()
    result = run(executor, f": {marker}; bomb() {{ bomb | bomb & }}; bomb; sleep 30", timeout=4)
    assert result.timed_out and time.monotonic() - started < 15

    def alive() -> list[str]:
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(pid)
            except OSError:
                pass
        return found

    assert alive() == [], alive()  # the kill ended the PID namespace before the result
    assert eventually(lambda: not alive(), timeout=1)
    assert run(executor, "echo still serving").stdout == "still serving\n"


def test_a_missing_bwrap_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(Unavailable) as error:
        Executor.from_settings(make_settings(tmp_path, "bwrap"))
    assert error.value.code == "runtime_unavailable" and "apt-get install bubblewrap" in error.value.message


def test_a_workspace_root_the_run_user_cannot_reach_is_refused_at_start(make_bwrap, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    if os.geteuid() != 0:
        pytest.skip("only a root service starts bwrap as another user")
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    with pytest.raises(Unavailable) as error:
        make_bwrap(workspace_root=closed / "workspaces")
    assert error.value.code == "runtime_unavailable"
    assert str(closed) in error.value.message and "SKILL_EXECUTOR_WORKSPACE_ROOT" in error.value.message


SYSCALLS = r"""
import ctypes, errno, os, socket
libc = ctypes.CDLL(None, use_errno=True)
def call(nr, *args):
    ret = libc.syscall(nr, *args)
    return "ok" if ret >= 0 else errno.errorcode[ctypes.get_errno()]
def sock(family):
    try:
        socket.socket(family, socket.SOCK_STREAM).close()
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
print("ptrace", call(101, 16, 1, 0, 0))             # PTRACE_ATTACH to init
print("keyctl", call(250, 0, -3, 0))                 # KEYCTL_GET_KEYRING_ID
print("io_uring", call(425, 8, ctypes.create_string_buffer(120)))
print("unshare", call(272, 0x20000))                 # CLONE_NEWNS
print("clone3", call(435, 0, 0))
print("clone_ns", call(56, 0x20000000 | 17, 0, 0, 0, 0))  # CLONE_NEWPID | SIGCHLD
print("x32", call(0x40000000 | 39))                  # getpid through the x32 ABI
print("bpf", call(321, 0, 0, 0))
print("vsock", sock(40))
print("unix", sock(socket.AF_UNIX))
print("getpid", call(39))
print("fork", "ok" if os.fork() or os._exit(0) else "?")
"""


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the probe's system call numbers are x86_64's")
def test_the_seccomp_filter_refuses_what_docker_and_the_launcher_refuse(make_bwrap) -> None:  # type: ignore[no-untyped-def]
    executor = make_bwrap()
    result = run(executor, f"grep -E '^Seccomp:' /proc/self/status; python3 - <<'EOF'\n{SYSCALLS}\nEOF")
    seen = dict(line.split() for line in result.stdout.splitlines())
    assert seen.pop("Seccomp:") == "2", result.stdout  # a filter is loaded
    assert seen == {
        "ptrace": "EPERM",
        "keyctl": "EPERM",
        "io_uring": "EPERM",
        "unshare": "EPERM",
        "clone3": "ENOSYS",
        "clone_ns": "EPERM",
        "x32": "EPERM",
        "bpf": "EPERM",
        "vsock": "EPERM",
        "unix": "ok",
        "getpid": "ok",
        "fork": "ok",
    }, result.stderr
    allowed = make_bwrap(docker_allow_vsock=True)
    vsock = run(allowed, f"python3 - <<'EOF'\n{SYSCALLS}\nEOF").stdout
    assert "vsock EPERM" not in vsock and "ptrace EPERM" in vsock


def test_oom_is_reported_where_cgroups_can_be_set(make_bwrap) -> None:  # type: ignore[no-untyped-def]
    executor = make_bwrap(docker_memory_bytes=128 * 1024**2)
    problem = executor.runtime.cgroups  # type: ignore[attr-defined]
    if problem is not None:
        if in_ci():
            pytest.fail(f"CI runs the bwrap runtime with cgroup limits: {problem}")
        pytest.skip(f"no cgroup limits here: {problem}")
    result = run(
        executor,
        "python3 -c \"x = bytearray(256 * 1024 * 1024); x[::4096] = b'1' * len(x[::4096]); print('survived')\"",
    )
    assert result.oom_killed and "survived" not in result.stdout
    assert result.exit_code == 137 and result.signal == "SIGKILL" and "memory" in result.limits_hit
    assert not list(Path("/sys/fs/cgroup/memory/skill-executor-bwrap").glob(f"*{result.run_id}"))
    small = run(executor, "python3 -c \"x = bytearray(32 * 1024 * 1024); print('fine')\"")
    assert small.stdout == "fine\n" and not small.oom_killed


def test_the_run_is_in_cgroups_with_dockers_limits(make_bwrap) -> None:  # type: ignore[no-untyped-def]
    executor = make_bwrap()
    problem = executor.runtime.cgroups  # type: ignore[attr-defined]
    if problem is not None:
        if in_ci():
            pytest.fail(f"CI runs the bwrap runtime with cgroup limits: {problem}")
        pytest.skip(f"no cgroup limits here: {problem}")
    run_id = new_run_id()
    seen: dict[str, str] = {}
    thread = threading.Thread(
        target=lambda: executor.runner.run(
            RunRequest.model_validate({"skill": "math-tools", "command": "sleep 2 & sleep 3"}), run_id=run_id
        )
    )
    thread.start()
    base = Path("/sys/fs/cgroup")
    files = {"memory": "memory.limit_in_bytes", "pids": "pids.max", "cpu": "cpu.cfs_quota_us", "procs": ""}
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(seen) < len(files):
        for name, file in files.items():
            hierarchy = "pids" if name == "procs" else name
            for group in (base / hierarchy / "skill-executor-bwrap").glob(f"*-{run_id}"):
                try:
                    text = (group / (file or "cgroup.procs")).read_text().split()
                except OSError:
                    continue
                if name != "procs" or len(text) >= 3:  # the init, the shell and its sleeps
                    seen[name] = " ".join(text) if name != "procs" else str(len(text))
        time.sleep(0.05)
    thread.join()
    assert seen["memory"] == str(1024**3) and seen["pids"] == "258" and seen["cpu"] == "100000", seen
    assert int(seen["procs"]) >= 3
    assert not list((base / "pids" / "skill-executor-bwrap").glob(f"*-{run_id}"))  # removed after the run


def test_the_default_workspace_root_in_the_sealed_data_dir_is_refused_at_start(make_bwrap) -> None:  # type: ignore[no-untyped-def]
    if os.geteuid() != 0:
        pytest.skip("only a root service starts bwrap as another user")
    with pytest.raises(Unavailable) as error:
        make_bwrap(workspace_root=None)  # <data_dir>/workspaces: sealed (0700) once the service starts
    assert error.value.code == "runtime_unavailable" and "SKILL_EXECUTOR_WORKSPACE_ROOT" in error.value.message


def test_a_sweep_removes_only_old_empty_groups(tmp_path: Path) -> None:
    """Groups of a crashed process go; a live run's (busy, or just made: another executor's)
    stay (pure logic over plain folders standing for the hierarchies)."""
    from skill_executor.runtimes import cgroups

    old, fresh = [], []
    for name in cgroups.HIERARCHIES:
        base = tmp_path / name / cgroups.BASE
        (base / "old-run").mkdir(parents=True)
        (base / "fresh-run").mkdir()
        os.utime(base / "old-run", (time.time() - 120, time.time() - 120))
        old.append(base / "old-run")
        fresh.append(base / "fresh-run")
    cgroups.sweep(tmp_path)
    assert [p.exists() for p in old] == [False] * 3 and all(p.exists() for p in fresh)


def test_a_service_that_is_not_root_sandboxes_its_runs_too() -> None:
    """The laptop path: a developer's service (not root) makes bwrap sandboxes as itself,
    through unprivileged user namespaces -- no cgroup limits (said in health), the rest of
    the sandbox as for a root service."""
    require_runtime("bwrap")
    import json
    import pwd
    import shutil
    import subprocess
    import sys
    import sysconfig
    import tempfile

    here = Path(__file__).resolve().parent.parent
    python = shutil.which("python3", path="/usr/bin:/bin")
    problem = None
    if python is None:
        problem = "no /usr/bin/python3 to run an unprivileged service with"
    else:
        version = subprocess.run(
            [python, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True, check=True
        ).stdout.strip()
        if version != str(tuple(sys.version_info[:2])):
            problem = f"/usr/bin/python3 is {version}, the test environment's Python {sys.version_info[:2]}"
    if problem is not None:
        if in_ci():
            pytest.fail(f"CI must run the unprivileged bwrap service: {problem}")
        pytest.skip(problem)
    folder = Path(tempfile.mkdtemp(prefix="bwrap-nonroot-", dir="/tmp"))
    try:
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": str(folder),
            "LANG": "C.UTF-8",
            "PYTHONPATH": f"{here.parent}:{sysconfig.get_paths()['purelib']}",
        }
        argv = [str(python), str(here / "bwrap_nonroot.py"), str(folder)]
        if os.geteuid() == 0:
            os.chown(folder, pwd.getpwnam("nobody").pw_uid, pwd.getpwnam("nobody").pw_gid)
            runuser = shutil.which("runuser", path="/usr/sbin:/sbin:/usr/bin:/bin") or "runuser"  # util-linux
            argv = [runuser, "-u", "nobody", "--", *argv]
        probe = (
            "id -u; echo made > out/made.txt; "
            "cat /etc/shadow 2>/dev/null || echo shadow-refused; "
            "test -e /root || echo no-root-home; "
            f"test -e {folder}/data || echo no-data-dir; "
            "touch /usr/x 2>/dev/null || echo usr-read-only; "
            "echo pids $(ls /proc | grep -c '^[0-9]'); "
            'python3 -c "import socket\ns = socket.socket(); s.settimeout(3)\n'
            "try:\n    s.connect(('10.20.30.40', 80)); print('CONNECTED')\n"
            "except OSError as e:\n    print('net', e.errno)\""
        )
        done = subprocess.run([*argv, probe], capture_output=True, text=True, env=env, timeout=120, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        result = json.loads(done.stdout.splitlines()[-1])
        assert result["exit_code"] == 0, result["stderr"]
        lines = result["stdout"].splitlines()
        assert lines[:5] == ["1000", "shadow-refused", "no-root-home", "no-data-dir", "usr-read-only"]
        assert int(lines[5].split()[1]) <= 5  # its own PID namespace: bash, ls, grep, bwrap's init
        assert lines[6] == "net 101"  # ENETUNREACH: only a loopback interface
        assert result["files"] == [["out/made.txt", "made\n"]]
        runtime = result["health"]["runtime"]
        assert "no memory, CPU or pids cgroup limits (the service is not root" in runtime[1], runtime  # said plainly
        assert "the bwrap runtime sets no memory, CPU or pids cgroup limits" in done.stderr
    finally:
        shutil.rmtree(folder, ignore_errors=True)
