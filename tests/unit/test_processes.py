"""A session's interactive processes on the real engine (runc and gVisor), driven the way an
agent loop drives them: start, write, poll until the answer is there, signal, kill; a dev
server in one process queried by a run of the same session; the limits; the session's end."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from skill_executor.access import key_id
from skill_executor.core import Executor
from skill_executor.errors import ExecutorError
from skill_executor.policy import parse_policy
from skill_executor.processes.base import Poll
from skill_executor.processes.manager import ProcessManager
from skill_executor.runs.models import RunRequest
from skill_executor.runtimes.docker import processes as docker_processes

from ..conftest import is_gvisor, make_settings

T = "local"  # the library's tenant


def until(
    pm: ProcessManager, session: str, pid: str, wanted: str, timeout: float = 30.0, after: int = 0
) -> tuple[str, Poll]:
    """Poll (as an agent does: from the last `next`) until ``wanted`` is in the output past ``after``."""
    seen, deadline = "", time.monotonic() + timeout
    while True:
        polled = pm.poll(T, session, pid, after=after, wait=1.0)
        seen += polled.output
        after = polled.next
        if wanted in seen or time.monotonic() > deadline or (not polled.running and after >= polled.total):
            assert wanted in seen, f"{wanted!r} not in {seen!r}"
            return seen, polled


@pytest.fixture
def pm(executor: Executor) -> ProcessManager:
    return executor.processes


def test_the_local_runtime_refuses_processes(tmp_path: Path) -> None:
    executor = Executor.from_settings(make_settings(tmp_path, "local"))
    try:
        with pytest.raises(ExecutorError) as refused:
            executor.processes.start(T, "s", "true")
        assert refused.value.code == "processes_unsupported" and refused.value.status == 501
    finally:
        executor.close()


def test_a_python_repl_driven_by_start_write_poll_kill(pm: ProcessManager) -> None:
    repl = pm.start(T, "repl", ["python3", "-i", "-u"])
    _, ready = until(pm, "repl", repl.id, ">>> ")  # the banner, and the prompt (on stderr)
    pm.write(T, "repl", repl.id, b"1+1\n")
    _, answered = until(pm, "repl", repl.id, "2", after=ready.next)  # what came since
    pm.write(T, "repl", repl.id, b"x = 40\nprint(x + 2)\n")
    until(pm, "repl", repl.id, "42", after=answered.next)
    killed = pm.kill(T, "repl", repl.id)
    assert killed.ended and killed.reason == "killed" and killed.exit_code == 137
    with pytest.raises(ExecutorError) as ended:
        pm.write(T, "repl", repl.id, b"1\n")
    assert ended.value.code == "process_ended" and ended.value.status == 409
    assert pm.network_of(T, "repl") is None  # its last process gone, the session's container is removed


def test_a_repl_on_a_pty_and_an_interrupt(pm: ProcessManager) -> None:
    repl = pm.start(T, "pty", ["python3", "-i"], pty=True)
    until(pm, "pty", repl.id, ">>> ")
    pm.write(T, "pty", repl.id, b"import sys; print(sys.stdin.isatty(), 6*7)\n")
    until(pm, "pty", repl.id, "True 42")
    pm.write(T, "pty", repl.id, b"while True: pass\n")
    time.sleep(0.3)
    pm.signal(T, "pty", repl.id, "INT")
    until(pm, "pty", repl.id, "KeyboardInterrupt")
    pm.write(T, "pty", repl.id, b"exit()\n")
    deadline = time.monotonic() + 20
    while not pm.get(T, "pty", repl.id).ended and time.monotonic() < deadline:
        time.sleep(0.05)
    done = pm.get(T, "pty", repl.id)
    assert done.ended and done.exit_code == 0 and done.reason == "exited"


def test_stdin_eof_and_the_exit_code(pm: ProcessManager) -> None:
    cat = pm.start(T, "eof", "cat; echo done; echo to-stderr >&2; exit 3")
    pm.write(T, "eof", cat.id, b"hello\n", eof=True)
    seen, after, deadline = "", 0, time.monotonic() + 20
    while True:  # to the end of its output
        polled = pm.poll(T, "eof", cat.id, after=after, wait=1)
        seen, after = seen + polled.output, polled.next
        if (not polled.running and after >= polled.total) or time.monotonic() > deadline:
            break
    assert polled.exit_code == 3 and polled.reason == "exited"
    # one stream, each of stdout and stderr in order (not their order across the two: two pipes)
    assert sorted(seen.splitlines()) == ["done", "hello", "to-stderr"] and seen.index("hello") < seen.index("done")


def test_the_output_ring_drops_the_oldest_and_says_so(executor: Executor, pm: ProcessManager) -> None:
    cap = executor.settings.process_output_bytes
    big = pm.start(T, "ring", f"head -c {cap + 5000} /dev/zero | tr '\\0' x; echo END")
    until(pm, "ring", big.id, "END")
    polled = pm.poll(T, "ring", big.id, after=0, limit=10)
    assert polled.total == cap + 5004 and polled.dropped == 5004 and polled.offset == 5004
    assert polled.output == "x" * 10 and polled.next == 5014


def test_a_kill_ends_everything_the_process_started(pm: ProcessManager) -> None:
    tree = pm.start(T, "tree", "sleep 300 & sleep 301 & echo started; wait")
    until(pm, "tree", tree.id, "started")
    probe = pm.start(T, "tree", "sleep 0.5; ps -eo args")  # the same sandbox
    seen, _ = until(pm, "tree", probe.id, "sleep 301")
    pm.kill(T, "tree", tree.id)
    check = pm.start(T, "tree", "ps -eo args; echo listed")
    seen, _ = until(pm, "tree", check.id, "listed")
    assert "sleep 300" not in seen and "sleep 301" not in seen


def test_wall_clock_and_idle_limits(pm: ProcessManager) -> None:
    wall = pm.start(T, "limits", "while true; do echo tick; sleep 0.2; done", timeout=1.5)
    idle = pm.start(T, "limits", "cat", idle_timeout=1.0)
    deadline = time.monotonic() + 20
    while not (pm.get(T, "limits", wall.id).ended and pm.get(T, "limits", idle.id).ended):
        assert time.monotonic() < deadline, "the limits did not end the processes"
        time.sleep(0.1)
    assert pm.get(T, "limits", wall.id).reason == "timeout"
    assert pm.get(T, "limits", idle.id).reason == "idle"


def test_the_session_end_ends_its_processes(executor: Executor, pm: ProcessManager) -> None:
    first = pm.start(T, "ending", "sleep 300")
    pm.start(T, "ending", "cat")
    executor.runner.sessions.end("ending", T)
    with pytest.raises(ExecutorError) as gone:
        pm.get(T, "ending", first.id)
    assert gone.value.code == "process_not_found" and gone.value.status == 404
    assert pm.network_of(T, "ending") is None


def test_a_dev_server_in_a_process_answers_a_run_of_the_session(
    executor: Executor, pm: ProcessManager, runtime_name: str
) -> None:
    server = pm.start(
        T, "web", "echo '<h1>hello from work</h1>' > index.html; exec python3 -u -m http.server 8765 --bind 127.0.0.1"
    )
    until(pm, "web", server.id, "Serving HTTP")
    fetch = "python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:8765/index.html').read().decode())\""
    if is_gvisor(runtime_name):
        # gVisor gives each container a network stack of its own: a run cannot join the
        # process's loopback, but another process of the session can.
        client = pm.start(T, "web", fetch)
        until(pm, "web", client.id, "hello from work")
    else:
        result = executor.runner.run(RunRequest(skill="math-tools", session="web", command=fetch, timeout=60))
        assert result.exit_code == 0, result.stderr
        assert "hello from work" in result.stdout
    pm.kill(T, "web", server.id)


SYSCALLS = r"""
import ctypes, socket, subprocess
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
child = subprocess.Popen(["sleep", "30"])
print("attach-child", libc.ptrace(16, child.pid, None, None), ctypes.get_errno())
child.kill()
print("io_uring", libc.syscall(425, 4, ctypes.create_string_buffer(120)), ctypes.get_errno())
try:
    socket.socket(40, socket.SOCK_STREAM)
    print("vsock open")
except OSError as exc:
    print("vsock", exc.errno)
print("done")
"""


def test_a_process_is_under_the_runs_seccomp_filter(pm: ProcessManager) -> None:
    """A process is a ``docker exec``, no child of the container's first process: it gets the
    launcher's filter itself, as every run's command (tests/world/test_launcher_boundary.py)."""
    probe = pm.start(T, "filter", ["python3", "-c", SYSCALLS])
    seen, _ = until(pm, "filter", probe.id, "done")
    lines = dict(line.split(" ", 1) for line in seen.splitlines() if " " in line)
    assert lines["attach-child"] == "-1 1", seen  # EPERM: not even its own child
    assert lines["io_uring"] == "-1 1", seen
    assert lines["vsock"] == "1", seen


def test_a_process_cannot_steer_its_kill(pm: ProcessManager) -> None:
    """Whom a kill signals is the pid the wrapper said before the process ran, kept by the
    service: nothing the process writes in its sandbox (once: a pidfile in /tmp) redirects it."""
    dodge = "for f in /tmp/.skill-executor-processes/*; do echo 99999 > $f; done; sleep 300 & echo dodged; wait"
    process = pm.start(T, "steer", dodge)
    until(pm, "steer", process.id, "dodged")
    pm.start(T, "steer", "sleep 300")  # the sandbox stays
    killed = pm.kill(T, "steer", process.id, wait=10.0)
    assert killed.ended and killed.reason == "killed", killed.state()
    check = pm.start(T, "steer", "ps -eo args; echo listed")
    seen, _ = until(pm, "steer", check.id, "listed")
    assert "sleep 300 & echo dodged" not in seen and seen.count("sleep 300\n") == 1, seen


def test_what_left_the_group_ends_with_the_process(pm: ProcessManager) -> None:
    """``setsid`` (a daemon's double fork) leaves the process's group and session: it ends with
    the process all the same, though the session's sandbox lives on for another process."""
    escape = pm.start(T, "escape", "setsid sleep 777 & (setsid sh -c 'sleep 778 &') ; echo escaped; wait")
    until(pm, "escape", escape.id, "escaped")
    keeper = pm.start(T, "escape", "sleep 300")
    pm.kill(T, "escape", escape.id)
    check = pm.start(T, "escape", "ps -eo args; echo listed")
    seen, _ = until(pm, "escape", check.id, "listed")
    assert "sleep 777" not in seen and "sleep 778" not in seen, seen
    assert "sleep 300" in seen and not pm.get(T, "escape", keeper.id).ended  # the others live on


def test_a_write_to_a_process_that_does_not_read_gives_up(pm: ProcessManager, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process that never reads its stdin holds no caller (a service thread) forever."""
    monkeypatch.setattr(docker_processes, "WRITE_WAIT_SECONDS", 1.0)
    deaf = pm.start(T, "deaf", "sleep 300")
    began = time.monotonic()
    with pytest.raises(ExecutorError) as full:
        for _ in range(8):
            pm.write(T, "deaf", deaf.id, b"x" * (1024 * 1024))
    assert full.value.code == "process_stdin_full" and full.value.status == 409
    assert full.value.details["written"] < full.value.details["size"] == 1024 * 1024
    assert time.monotonic() - began < 8 * 1.0 + 5
    cat = pm.start(T, "deaf", "cat")  # a process that reads takes the same megabyte at once
    pm.write(T, "deaf", cat.id, b"y" * (1024 * 1024))
    until(pm, "deaf", cat.id, "y" * 100)
    assert pm.kill(T, "deaf", deaf.id).ended


def test_a_key_and_the_service_hold_a_bounded_number_of_sandboxes(make_executor) -> None:  # type: ignore[no-untyped-def]
    """Each session with processes keeps a sandbox as big as a run's, taking no run slot: a key
    (and the service) may have only so many (else one key holds ``sessions_per_tenant`` of them)."""
    pm = make_executor(process_sandboxes_per_key=2, process_sandboxes=3).processes
    first = pm.start(T, "box-1", "sleep 300")
    pm.start(T, "box-1", "sleep 300")  # the same sandbox
    pm.start(T, "box-2", "sleep 300")
    with pytest.raises(ExecutorError) as per_key:
        pm.start(T, "box-3", "sleep 300")
    assert per_key.value.code == "process_limit" and per_key.value.status == 429
    assert "SKILL_EXECUTOR_PROCESS_SANDBOXES_PER_KEY" in per_key.value.message
    pm.start("other", "box-1", "sleep 300")  # another key's first
    with pytest.raises(ExecutorError) as service:
        pm.start("other", "box-2", "sleep 300")
    assert service.value.code == "process_limit" and "SKILL_EXECUTOR_PROCESS_SANDBOXES)" in service.value.message
    for process in pm.list(T, "box-1"):
        pm.kill(T, "box-1", process.id)
    assert pm.network_of(T, "box-1") is None and first.ended  # its sandbox gone, one is free again
    pm.start("other", "box-2", "sleep 300")


def test_a_key_a_rule_limits_starts_no_process_named_by_id_or_name(pm: ProcessManager) -> None:
    """A rule limiting programs or asking for approval refuses the key's processes, whether it
    names the key by its id or by its name (SKILL_EXECUTOR_API_KEYS_FILE's ``name=``)."""
    by_name, by_id, free = key_id("ci-secret"), key_id("person-secret"), key_id("free-secret")
    rules = f"""
rules:
  - {{name: ci-python-only, key: ci, allow: [python3]}}
  - {{name: person-approval, key: {by_id}, approval: always}}
"""
    pm.policy = parse_policy(rules, names={by_name: "ci"})
    for tenant, rule in ((by_name, "ci-python-only"), (by_id, "person-approval")):
        with pytest.raises(ExecutorError) as refused:
            pm.start(tenant, "policed", "curl http://example.com")
        assert refused.value.code == "command_denied" and refused.value.status == 403
        assert refused.value.details["rule"] == rule
    free_process = pm.start(free, "policed", "true")  # no rule for this key
    pm.kill(free, "policed", free_process.id)


def test_the_pid_line_is_stdouts_whatever_stderr_says_first(pm: ProcessManager) -> None:
    """The wrapper says the pid on stdout; stderr (another pipe, copied apart) may come first:
    the pid is still known (signals reach the process) and never part of the output."""
    missing = pm.start(T, "first", ["/no/such/program"])
    seen, done = until(pm, "first", missing.id, "No such file")
    while done.running:
        done = pm.poll(T, "first", missing.id, after=0, wait=1.0)
    assert done.output == "bash: line 1: /no/such/program: No such file or directory\n" and done.exit_code == 127
    noisy = ["python3", "-c", "import sys, time; sys.stderr.write('e' * 100000); sys.stderr.flush(); time.sleep(60)"]
    for _ in range(4):
        process = pm.start(T, "first", noisy)
        until(pm, "first", process.id, "eeee")
        pm.signal(T, "first", process.id, "TERM")
        deadline = time.monotonic() + 10
        while not pm.get(T, "first", process.id).ended and time.monotonic() < deadline:
            time.sleep(0.05)
        ended = pm.get(T, "first", process.id)
        assert ended.reason == "exited" and ended.exit_code == 143, ended.state()
        assert pm.poll(T, "first", process.id, limit=200000).output == "e" * 100000
