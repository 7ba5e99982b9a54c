"""Container hardening on a real engine: each property checked from inside the run and
from the host (``docker inspect`` and the host's ``/proc`` view of the container).

Every test taking ``make_docker`` runs on runc and on gVisor (``runsc``), per-run
containers and warm pool.  Under gVisor the host does not see the run's processes: it
sees the sandbox (a user-space kernel, ``runsc-sandbox``, with its ptrace stubs) and the
gofer serving its files.  There the host-side checks look at those processes, and at the
run's processes as the sandbox's kernel reports them (``runsc ps``, ``docker exec``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from skill_executor.core import Executor
from skill_executor.errors import ExecutorError
from skill_executor.runs.models import RunRequest, RunResult
from skill_executor.runs.pipeline import new_run_id
from skill_executor.runtimes.docker import LABEL_DEADLINE, LABEL_MANAGED, LABEL_OWNER, LABEL_RUN, DockerRuntime
from skill_executor.runtimes.docker.engine import GVISOR_HOST_TASKS_PER_PID
from skill_executor.runtimes.docker.oci import check_oci_runtime
from skill_executor.workspace.volumes import SLACK

from ..conftest import HARDENING_RUNTIMES, REPO, make_settings, require_disk_cap, require_runtime
from ..helpers import eventually


@pytest.fixture(params=HARDENING_RUNTIMES)
def make_docker(request: pytest.FixtureRequest, tmp_path: Path):  # type: ignore[no-untyped-def]
    """Executors on the Docker runtime: per-run containers and a warm pool, on runc and on gVisor."""
    require_runtime(request.param)
    made: list[Executor] = []

    def factory(**overrides: object) -> Executor:
        executor = Executor.from_settings(make_settings(tmp_path, request.param, **overrides))
        if executor.runtime.pool is not None:  # type: ignore[attr-defined]
            assert executor.runtime.pool.wait_ready()  # type: ignore[attr-defined]
        made.append(executor)
        return executor

    yield factory
    for executor in made:
        executor.close()
    for executor in made:
        runtime = executor.runtime
        assert isinstance(runtime, DockerRuntime)
        left = runtime.client.containers.list(all=True, filters={"label": f"{LABEL_OWNER}={runtime.token}"})
        assert left == [], "containers left behind"
        assert list(executor.runner.workspaces.runs.iterdir()) == [], "workspaces left behind"


def request(**fields: Any) -> RunRequest:
    fields.setdefault("skill", "math-tools")
    return RunRequest.model_validate(fields)


def run_observed(executor: Executor, command: str, **fields: Any) -> tuple[RunResult, dict[str, Any], dict[str, str]]:
    """Run ``command; sleep``, and meanwhile inspect the container from the host.

    Returns the result, ``docker inspect`` of the container, and host-side reads of the
    container's ``/proc/<pid>/`` files (status and net/dev of its main process).  Under
    gVisor ``status``/``child_status`` are those of the run's init and its child as the
    sandbox's kernel reports them (read through the engine), and ``sandbox`` holds the
    host's status of every process of the container (the sandbox's and the gofer's), and
    ``guest`` the run's processes as ``runsc ps`` lists them.
    """
    runtime = executor.runtime
    assert isinstance(runtime, DockerRuntime)
    run_id = new_run_id()
    holder: dict[str, Any] = {}
    thread = threading.Thread(
        target=lambda: holder.setdefault(
            "result", executor.runner.run(request(command=f"{command}; sleep 3", **fields), run_id=run_id)
        )
    )
    thread.start()
    info: dict[str, Any] = {}
    proc: dict[str, str] = {}
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not info:
        container_id = runtime.container_of(run_id)
        if container_id is not None:
            data = runtime.client.api.inspect_container(container_id)
            if data["State"]["Running"] and data["State"]["Pid"]:
                time.sleep(0.5)
                info = data
                pid = data["State"]["Pid"]
                for name in ("status", "net/dev"):
                    proc[name] = Path(f"/proc/{pid}/{name}").read_text()
                if gvisor(executor):
                    proc.update(guest_statuses(runtime, container_id))
                    proc["sandbox"] = json.dumps(host_statuses(container_id, pid))
                    proc["guest"] = json.dumps(guest_processes(container_id, pid))
                else:
                    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
                    if children:
                        proc["child_status"] = Path(f"/proc/{children[0]}/status").read_text()
                source = next(m["Source"] for m in data["Mounts"] if m["Destination"] == "/workspace")
                skill_files = []
                for path in Path(source, "skills").rglob("*"):
                    st = path.lstat()
                    if not path.is_symlink():
                        skill_files.append(f"{path.relative_to(source)} {st.st_uid} {oct(st.st_mode)}")
                proc["skill_files"] = "\n".join(skill_files)
        time.sleep(0.05)
    thread.join()
    return holder["result"], info, proc


def gvisor(executor: Executor) -> bool:
    runtime = executor.runtime
    assert isinstance(runtime, DockerRuntime)
    return runtime.engine.gvisor


def cgroup_procs(container_id: str) -> list[int]:
    """The host processes in the container's cgroup (v1 pids controller, or v2)."""
    for path in (
        f"/sys/fs/cgroup/pids/docker/{container_id}/cgroup.procs",
        f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/cgroup.procs",
    ):
        try:
            return [int(pid) for pid in Path(path).read_text().split()]
        except OSError:
            continue
    return []


def host_statuses(container_id: str, sandbox_pid: int) -> dict[str, dict[str, str]]:
    """The host's ``/proc/<pid>/status`` of each process of a gVisor container, with its
    user namespace and whether it is the sandbox (the main process) or a descendant of it."""
    sandbox = {sandbox_pid}
    for pid in sorted(cgroup_procs(container_id)):
        try:
            ppid = int(status_field(Path(f"/proc/{pid}/status").read_text(), "PPid"))
        except OSError:
            continue
        if ppid in sandbox:
            sandbox.add(pid)
    statuses = {}
    for pid in cgroup_procs(container_id):
        try:
            text = Path(f"/proc/{pid}/status").read_text()
            userns = os.readlink(f"/proc/{pid}/ns/user")
        except OSError:
            continue
        statuses[str(pid)] = {
            "Uid": status_field(text, "Uid").split()[0],
            "NoNewPrivs": status_field(text, "NoNewPrivs"),
            "Seccomp": status_field(text, "Seccomp"),
            "userns": userns,
            "sandbox": str(pid in sandbox),
        }
    return statuses


def guest_statuses(runtime: DockerRuntime, container_id: str) -> dict[str, str]:
    """``/proc/1/status`` (init) and the status of init's first child, read by the sandbox's
    kernel through the engine (``docker exec``), not by the run."""
    script = (
        "cat /proc/1/status; for p in /proc/[0-9]*; do "
        'if grep -qx "PPid:.1" $p/status; then echo ===; cat $p/status; break; fi; done'
    )
    output = runtime.client.containers.get(container_id).exec_run(["bash", "-c", script]).output.decode()
    init, _, child = output.partition("===\n")
    return {"status": init, "child_status": child}


def guest_processes(container_id: str, sandbox_pid: int) -> list[dict[str, str]]:
    """The run's processes as gVisor's kernel lists them (``runsc ps``: UID, PID, PPID, ...)."""
    args = Path(f"/proc/{sandbox_pid}/cmdline").read_bytes().split(b"\0")
    root = next(a.decode().split("=", 1)[1] for a in args if a.startswith(b"--root="))
    table = subprocess.run(
        ["runsc", "--root", root, "ps", container_id], capture_output=True, text=True, check=True, timeout=10
    ).stdout.splitlines()
    header = table[0].split()
    return [dict(zip(header, line.split())) for line in table[1:]]


def status_field(status: str, name: str) -> str:
    return next(line.split(":", 1)[1].strip() for line in status.splitlines() if line.startswith(name + ":"))


def interfaces(net_dev: str) -> list[str]:
    return [line.split(":", 1)[0].strip() for line in net_dev.splitlines()[2:] if ":" in line]


@pytest.mark.parametrize("setting", [{"docker_network_disabled": True}, {"docker_network_disabled": False}])
def test_no_network(make_docker, setting: dict[str, bool]) -> None:  # type: ignore[no-untyped-def]
    executor = make_docker(**setting)
    probe = (
        'cat /proc/net/dev; python3 -c "import socket,errno\n'
        "s=socket.socket(); s.settimeout(3)\n"
        "try:\n    s.connect(('10.20.30.40', 80)); print('CONNECTED')\n"
        "except OSError as e:\n    print('ERRNO', errno.errorcode.get(e.errno, e.errno))\""
    )
    result, info, proc = run_observed(executor, probe)
    assert interfaces(result.stdout.split("ERRNO")[0]) == ["lo"]
    # No route anywhere but lo: Linux says the network is unreachable, gVisor's netstack the host.
    unreachable = "EHOSTUNREACH" if gvisor(executor) else "ENETUNREACH"
    assert f"ERRNO {unreachable}" in result.stdout and "CONNECTED" not in result.stdout
    # From the host: no network attached, and the container's namespace has only lo.
    assert info["NetworkSettings"]["Networks"] in ({}, {"none": info["NetworkSettings"]["Networks"].get("none")})
    if setting["docker_network_disabled"]:
        assert info["Config"]["NetworkDisabled"] is True
    else:
        assert info["HostConfig"]["NetworkMode"] == "none"
    assert interfaces(proc["net/dev"]) == ["lo"]


def test_read_only_root_and_skill(make_docker) -> None:  # type: ignore[no-untyped-def]
    executor = make_docker()
    source = executor.repository.get("math-tools").path
    before = {p: p.read_bytes() for p in source.rglob("*") if p.is_file()}
    probe = (
        "for t in /x /usr/x /workspace/x /workspace/skills/x /etc/hosts /opt/skill-envs/x $SKILL_DIR/scripts/x "
        "$SKILL_DIR/SKILL.md; do "
        '(echo hi >> $t) 2>/dev/null && echo "WROTE $t" || echo "DENIED $t"; done; '
        "echo ok > /tmp/t && echo TMP-OK; head -c 100M /dev/zero > /tmp/big 2>/dev/null || echo TMP-FULL; "
        "echo ok > $OUTPUT_DIR/o && echo OUT-OK"
    )
    result, info, proc = run_observed(executor, probe)
    # The root file system and the workspace's own folders are read-only; the skill is the
    # run's private copy (cold and warm alike), writable, while the installed one is untouched.
    assert result.stdout.count("DENIED") == 6, result.stdout
    assert "WROTE /workspace/skills/math-tools/scripts/x" in result.stdout
    assert "WROTE /workspace/skills/math-tools/SKILL.md" in result.stdout
    assert {p: p.read_bytes() for p in source.rglob("*") if p.is_file()} == before
    assert "TMP-OK" in result.stdout and "TMP-FULL" in result.stdout and "OUT-OK" in result.stdout
    assert info["HostConfig"]["ReadonlyRootfs"] is True
    mounts = {m["Destination"]: m for m in info["Mounts"]}
    # Only the run's own workspace (no mount of the installed skill), the hosts file and
    # the skills' dependency environments (read-only).
    assert set(mounts) == {"/workspace", "/etc/hosts", "/opt/skill-envs"}
    assert mounts["/workspace"]["RW"] is True and mounts["/etc/hosts"]["RW"] is False
    assert mounts["/opt/skill-envs"]["RW"] is False
    entries = [line.split() for line in proc["skill_files"].splitlines()]
    assert len(entries) >= 5
    for name, uid, mode in entries:
        # The copy belongs to the run's user; nothing of it is writable by others.
        assert uid == "1000" and int(mode, 8) & 0o022 == 0, (name, uid, mode)
    assert "size=" in info["HostConfig"]["Tmpfs"]["/tmp"]


def test_identity_capabilities_and_limits(make_docker) -> None:  # type: ignore[no-untyped-def]
    executor = make_docker()
    result, info, proc = run_observed(
        executor,
        "id -u; id -g; grep -E '^(CapEff|CapPrm|NoNewPrivs):' /proc/self/status; "
        "python3 -c 'import ctypes; print(\"PR_GET_NO_NEW_PRIVS:\", ctypes.CDLL(None).prctl(39, 0, 0, 0, 0))'",
    )
    lines = result.stdout.split()
    assert lines[0] != "0" and lines[0] == "1000" and lines[1] == "1000"
    inside = dict(zip(lines[2::2], lines[3::2]))
    assert inside["CapEff:"] == "0000000000000000" and inside["CapPrm:"] == "0000000000000000"
    assert inside["PR_GET_NO_NEW_PRIVS:"] == "1"
    if not gvisor(executor):  # gVisor's /proc/<pid>/status has no NoNewPrivs line: prctl above says it
        assert inside["NoNewPrivs:"] == "1"
    # The container's processes (init and the command, or the launcher): from the host's
    # /proc, or under gVisor as the sandbox's kernel reports them.
    for status in (proc["status"], proc["child_status"]):
        assert status_field(status, "CapEff") == "0000000000000000"
        assert status_field(status, "Uid").split()[0] == "1000"
        if not gvisor(executor):
            assert status_field(status, "NoNewPrivs") == "1"
    if gvisor(executor):
        # From the host: the run's processes exist only inside the sandbox, whose own processes
        # run as nobody in a user namespace of their own; every process of the container (the
        # sandbox's and the gofer's) has no-new-privileges and a seccomp filter.
        sandbox = json.loads(proc["sandbox"])
        assert any(p["sandbox"] == "True" for p in sandbox.values()) and len(sandbox) >= 2
        host_userns = os.readlink("/proc/self/ns/user")
        for status in sandbox.values():
            assert status["NoNewPrivs"] == "1" and status["Seccomp"] == "2", status
            if status["sandbox"] == "True":
                assert status["Uid"] == "65534" and status["userns"] != host_userns, status
        guest = json.loads(proc["guest"])
        assert len(guest) >= 2 and {p["UID"] for p in guest} == {"1000"}, guest
    host = info["HostConfig"]
    assert info["Config"]["User"] == "1000:1000"
    assert host["CapDrop"] == ["ALL"] and "no-new-privileges" in host["SecurityOpt"]
    assert host["Memory"] == 1024**3 and host["MemorySwap"] == 1024**3 and host["NanoCpus"] == 10**9
    assert host["Init"] is True
    ulimits = {u["Name"]: u["Hard"] for u in host["Ulimits"]}
    if gvisor(executor):
        # gVisor enforces the pids limit in its kernel (nproc, counting only the run's processes);
        # the host's cgroup bounds the sandbox, which needs host tasks of its own per process.
        assert host["PidsLimit"] == 256 * GVISOR_HOST_TASKS_PER_PID
        assert ulimits.keys() == {"nofile", "fsize", "nproc"} and ulimits["nproc"] == 256
    else:
        assert host["PidsLimit"] == 256
        assert ulimits.keys() == {"nofile", "fsize"}
    labels = info["Config"]["Labels"]
    assert labels[LABEL_MANAGED] == "1" and labels[LABEL_RUN] in (
        result.run_id,
        "warm",
    )  # warm: labelled before the run


def test_fork_bomb_is_contained(make_docker) -> None:  # type: ignore[no-untyped-def]
    executor = make_docker()
    runtime = executor.runtime
    assert isinstance(runtime, DockerRuntime)
    run_id = new_run_id()
    seen: dict[str, Any] = {}

    def watch() -> None:
        while "result" not in seen:
            container_id = runtime.container_of(run_id)
            if container_id is not None:
                seen["id"] = container_id
                try:
                    pids = Path(f"/sys/fs/cgroup/pids/docker/{container_id}/pids.current").read_text()
                    seen["max_pids"] = max(seen.get("max_pids", 0), int(pids))
                    if gvisor(executor):  # the run's processes, as the sandbox's kernel counts them
                        sandbox_pid = runtime.client.api.inspect_container(container_id)["State"]["Pid"]
                        guest = len(guest_processes(container_id, sandbox_pid))
                        seen["max_guest"] = max(seen.get("max_guest", 0), guest)
                except (OSError, subprocess.SubprocessError, StopIteration):
                    pass
            time.sleep(0.1)

    watcher = threading.Thread(target=watch)
    watcher.start()
    started = time.monotonic()
    try:
        seen["result"] = result = executor.runner.run(
            request(command="bomb() { bomb | bomb & }; bomb; sleep 30", timeout=4), run_id=run_id
        )
    finally:
        seen.setdefault("result", None)
        watcher.join()
    assert result.timed_out and time.monotonic() - started < 15
    if gvisor(executor):
        # The run's processes stop at 256 in the sandbox; on the host the sandbox stays within its cgroup.
        assert "id" in seen and 1 < seen.get("max_guest", 0) <= 256, seen
        assert 0 < seen.get("max_pids", 1) <= 256 * GVISOR_HOST_TASKS_PER_PID, seen
    else:
        assert "id" in seen and 0 < seen.get("max_pids", 1) <= 256

    def survivors() -> list[str]:
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if seen["id"] in Path(f"/proc/{pid}/cgroup").read_text():
                    found.append(pid)
            except OSError:
                pass
        return found

    assert eventually(lambda: not survivors(), timeout=10), survivors()
    assert executor.runner.run(request(command="echo still serving")).stdout == "still serving\n"


def test_oom_is_reported(make_docker) -> None:  # type: ignore[no-untyped-def]
    executor = make_docker(docker_memory_bytes=128 * 1024**2)
    result = executor.runner.run(
        request(
            command="python3 -c \"x = bytearray(256 * 1024 * 1024); x[::4096] = b'1' * len(x[::4096]); print('survived')\""
        )
    )
    assert result.oom_killed and "survived" not in result.stdout
    assert result.exit_code == 137 and result.signal == "SIGKILL" and "memory" in result.limits_hit


def test_timeout_kills_and_removes_the_container(make_docker) -> None:  # type: ignore[no-untyped-def]
    executor = make_docker()
    runtime = executor.runtime
    run_id = new_run_id()
    started = time.monotonic()
    result = executor.runner.run(request(command="echo before; sleep 1000", timeout=2), run_id=run_id)
    elapsed = time.monotonic() - started
    assert result.timed_out and result.stdout == "before\n"
    assert 2.0 <= result.duration_ms / 1000 <= 3.5 and elapsed <= 2 + 1.5 + 1.0
    # The killed container has exited; the cleanup workers remove it (with the workspace).
    runtime.settle()
    assert runtime.client.containers.list(all=True, filters={"label": f"{LABEL_RUN}={run_id}"}) == []


@pytest.mark.parametrize("disk_cap", ["hard", "soft"])
def test_disk_cap_single_file_and_many_files(make_docker, disk_cap: str) -> None:  # type: ignore[no-untyped-def]
    """The hard cap (a file system per workspace) refuses every write past it and lets the
    run go on; the soft one (SKILL_EXECUTOR_DISK_CAP=soft, polled) stops the run."""
    require_disk_cap(disk_cap)
    cap = 32 * 1024**2
    executor = make_docker(docker_disk_bytes=cap, disk_cap=disk_cap)
    big = executor.runner.run(request(command="head -c 100M /dev/zero > out/big; echo $?"))
    assert big.disk_limit_hit and "disk" in big.limits_hit
    assert big.stdout == f"{128 + 25}\n"  # the writer got SIGXFSZ: nothing past the cap was written
    many = executor.runner.run(
        request(
            command="for i in $(seq 1 400); do head -c 1M /dev/zero > out/f$i; done; echo finished",
            timeout=60,
            outputs={"globs": ["out/*"], "max_files": 1000, "max_total_bytes": 256 * 1024**2},
        ),
    )
    assert many.disk_limit_hit
    assert any("disk cap" in w for w in many.warnings)
    if disk_cap == "soft":
        assert "finished" not in many.stdout  # stopped
    else:
        # Every write past the cap failed, the run went on to its end; what it wrote is kept.
        assert "finished" in many.stdout and many.exit_code == 0
        assert "No space left on device" in many.stderr
        kept = sum(f.size_bytes for f in many.output_files)
        assert cap <= kept <= cap + SLACK, kept
    small = executor.runner.run(request(command="head -c 1M /dev/zero > out/ok; echo fine"))
    assert not small.disk_limit_hit and small.stdout == "fine\n"


def test_concurrent_runs_have_no_cross_talk(make_docker) -> None:  # type: ignore[no-untyped-def]
    executor = make_docker(max_concurrent_runs=8)

    def one(i: int) -> tuple[int, RunResult]:
        token = f"run-{i}-{new_run_id()}"
        return i, executor.runner.run(
            request(
                command=f"echo {token} > out/id.txt; sleep 0.5; (cd $OUTPUT_DIR && ls -A); cat out/id.txt",
                output_files=["out/*"],
            )
        )

    # (cd DIR && ls): the ls of Debian 12 cannot stat a named path under gVisor 20221219 (EINVAL:
    # that gVisor rejects statx's AT_NO_AUTOMOUNT), while listing the current folder works everywhere.
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(one, range(8)))
    tokens = set()
    for _, result in results:
        ls, token = result.stdout.split()
        assert ls == "id.txt"
        assert [f.content for f in result.output_files] == [token + "\n"]
        tokens.add(token)
    assert len(tokens) == 8 and len({r.run_id for _, r in results}) == 8


def test_sweep_and_reaper_remove_leftovers(make_docker) -> None:  # type: ignore[no-untyped-def]
    executor = make_docker()
    runtime = executor.runtime
    assert isinstance(runtime, DockerRuntime)
    root_id = runtime.token.split(":")[1]
    # An owner of this root whose lease is gone (crashed), one of another root (a
    # neighbour with another data dir: not ours to judge), and one of ours past its deadline.
    dead = runtime.client.containers.create(
        executor.settings.docker_image,
        ["sleep", "100"],
        labels={LABEL_MANAGED: "1", LABEL_OWNER: f"lease:{root_id}:crashed0", LABEL_DEADLINE: "9999999999"},
    )
    foreign = runtime.client.containers.create(
        executor.settings.docker_image,
        ["sleep", "100"],
        labels={LABEL_MANAGED: "1", LABEL_OWNER: "lease:0123456789abcdef:neighbour", LABEL_DEADLINE: "9999999999"},
    )
    stale = runtime.client.containers.create(
        executor.settings.docker_image,
        ["sleep", "100"],
        labels={LABEL_MANAGED: "1", LABEL_OWNER: runtime.token, LABEL_DEADLINE: str(int(time.time()) - 3600)},
    )
    try:
        assert runtime.sweep() == 1
        ids = {c["Id"] for c in runtime.client.api.containers(all=True, filters={"label": f"{LABEL_MANAGED}=1"})}
        assert dead.id not in ids and stale.id in ids and foreign.id in ids
        assert runtime.reap() >= 1
        ids = {c["Id"] for c in runtime.client.api.containers(all=True, filters={"label": f"{LABEL_MANAGED}=1"})}
        assert stale.id not in ids and foreign.id in ids
    finally:
        foreign.remove(force=True)


def test_missing_image_is_a_clear_error(tmp_path: Path, docker_runtime_name: str) -> None:
    with pytest.raises(ExecutorError) as info:
        Executor.from_settings(make_settings(tmp_path, "docker", docker_image="skill-executor/runner:does-not-exist"))
    assert info.value.code == "image_missing" and "image build" in info.value.message


@pytest.mark.parametrize("runtime", ["docker-pool", "docker-pool-runsc"])
def test_warm_pool_runs_are_single_use_and_isolated(tmp_path: Path, runtime: str) -> None:
    require_runtime(runtime)
    executor = Executor.from_settings(make_settings(tmp_path, runtime, pool_size=2))
    try:
        pool = executor.runtime.pool  # type: ignore[attr-defined]
        assert pool.wait_ready()
        first = executor.runner.run(
            request(
                command="echo secret-1 > out/s.txt; touch /workspace/run/mark; cd /workspace && ls",
                output_files=["out/*"],
            )
        )
        assert pool.hits == 1 and first.exit_code == 0
        assert first.output_files[0].content == "secret-1\n"
        assert pool.wait_ready()
        second = executor.runner.run(
            request(command="(cd /workspace/run && ls -A); cat out/s.txt 2>&1; (cd /workspace/out && ls -A) | wc -l")
        )
        assert pool.hits == 2
        assert "mark" not in second.stdout and "secret-1" not in second.stdout and second.stdout.endswith("0\n")
        # The warm workspace never holds the launcher socket once a run has it.
        assert ".launcher.sock" not in second.stdout
        # Each run used its own container: none of them exists any more.
        runtime = executor.runtime
        assert isinstance(runtime, DockerRuntime)

        def only_warm() -> bool:
            alive = runtime.client.api.containers(filters={"label": f"{LABEL_OWNER}={runtime.token}"})
            return all(c["Labels"][LABEL_RUN] == "warm" for c in alive)

        assert eventually(only_warm)
    finally:
        executor.close()


@pytest.mark.parametrize("runtime", ["docker-pool", "docker-pool-runsc"])
def test_warm_pool_prepares_the_latest_skill_never_stale_nor_another(tmp_path: Path, runtime: str) -> None:
    """A warm container is prepared with a copy of the latest run's skill (moved into the
    next run's workspace, not copied on its path), never a copy of what the skill was
    before an edit, and never visible to a run of another skill."""
    require_runtime(runtime)
    skill = tmp_path / "extra-skills" / "edit-me"
    (skill / "edit-me-data").mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: edit-me\ndescription: A skill edited between runs.\n---\nBody.\n")
    (skill / "edit-me-data" / "v.txt").write_text("one\n")
    executor = Executor.from_settings(make_settings(tmp_path, runtime, pool_size=2))
    runs = executor.runner.workspaces.runs
    show = "cat edit-me-data/v.txt; python3 -c 'import os; print(os.stat(\"edit-me-data/v.txt\").st_ino)'"
    try:
        pool = executor.runtime.pool  # type: ignore[attr-defined]
        assert pool.wait_ready()
        assert executor.runner.run(request(skill="edit-me", command=show)).stdout.startswith("one\n")

        def staged() -> dict[int, Path]:
            assert pool.wait_ready()
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                found = {p.stat().st_ino: p for p in runs.glob("*/skills/.prepared/edit-me/edit-me-data/v.txt")}
                if found:  # the containers started since the latest run
                    return found
                time.sleep(0.05)
            raise AssertionError(f"no prepared copies: {sorted(runs.iterdir())}")

        copies = staged()
        ran = executor.runner.run(request(skill="edit-me", command=show))
        assert ran.exit_code == 0, (ran.stdout, ran.stderr)
        text, inode = ran.stdout.split()
        assert text == "one" and ran.exit_code == 0
        if not runtime.endswith("-runsc"):  # gVisor shows its own inode numbers
            assert int(inode) in copies, "the run's copy is not the one prepared for it"

        staged()
        (skill / "edit-me-data" / "v.txt").write_text("two\n")  # after the copies were made
        assert executor.runner.run(request(skill="edit-me", command=show)).stdout.startswith("two\n")

        staged()
        listing = "import os; print(os.listdir('/workspace'), os.listdir('/workspace/skills'))"
        other = executor.runner.run(request(command=f'python3 -c "{listing}"'))
        assert other.exit_code == 0 and "math-tools" in other.stdout, (other.stdout, other.stderr)
        assert "edit-me" not in other.stdout, other.stdout  # neither the copy nor its root links
        assert ".prepared" not in other.stdout, other.stdout  # nor the folder it waited in
    finally:
        executor.close()
    assert list(runs.iterdir()) == [], "workspaces or prepared copies left behind"


def test_drained_pool_falls_back_to_cold_containers(tmp_path: Path, docker_runtime_name: str) -> None:
    executor = Executor.from_settings(make_settings(tmp_path, "docker-pool", pool_size=1, max_concurrent_runs=6))
    try:
        pool = executor.runtime.pool  # type: ignore[attr-defined]
        assert pool.wait_ready()
        with ThreadPoolExecutor(max_workers=6) as workers:
            results = list(workers.map(lambda i: executor.runner.run(request(command=f"echo {i}")), range(6)))
        assert [r.stdout for r in results] == [f"{i}\n" for i in range(6)]
        assert all(r.exit_code == 0 and not r.warnings for r in results)
        assert pool.hits >= 1 and pool.misses >= 1 and pool.hits + pool.misses == 6
    finally:
        executor.close()


def test_runner_image_libraries_and_binary_outputs(tmp_path: Path, docker_runtime_name: str) -> None:
    """The libraries docs/guides/images.md lists import, and real binary outputs are typed by content."""
    executor = Executor.from_settings(make_settings(tmp_path, "docker"))
    try:
        script = (
            "import numpy, pandas, matplotlib, PIL, openpyxl, pypdf, reportlab, docx, yaml, lxml\n"
            "import matplotlib.pyplot as plt\n"
            "plt.plot([1, 2, 3], [1, 4, 9]); plt.savefig('out/chart.png')\n"
            "from reportlab.pdfgen import canvas\n"
            "c = canvas.Canvas('out/doc.pdf'); c.drawString(100, 750, 'hello'); c.save()\n"
            "wb = openpyxl.Workbook(); wb.active['A1'] = 42; wb.save('out/book.xlsx')\n"
            "print(pandas.DataFrame({'a': [1, 2]})['a'].sum())\n"
        )
        result = executor.runner.run(
            request(
                command=f"python3 - <<'PY'\n{script}PY\nfile --version | head -1; pdftotext out/doc.pdf - | head -1",
                outputs={"globs": ["out/*"], "inline_binary": True},
            )
        )
        assert result.exit_code == 0, result.stderr
        lines = result.stdout.splitlines()
        assert lines[0] == "3" and lines[1].startswith("file-") and lines[2] == "hello"
        types = {f.name: f.mime_type for f in result.output_files}
        assert types == {
            "out/chart.png": "image/png",
            "out/doc.pdf": "application/pdf",
            "out/book.xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        }
        assert all(f.encoding == "base64" for f in result.output_files)
    finally:
        executor.close()


def test_unregistered_oci_runtime_is_a_clear_error_at_start(tmp_path: Path, docker_runtime_name: str) -> None:
    with pytest.raises(ExecutorError) as info:
        Executor.from_settings(make_settings(tmp_path, "docker", docker_oci_runtime="runcs"))
    error = info.value
    assert error.code == "oci_runtime_missing" and error.status == 503
    assert "'runcs'" in error.message and "SKILL_EXECUTOR_DOCKER_OCI_RUNTIME" in error.message
    assert '"runtimeArgs": ["--network=none", "--platform=ptrace", "--host-uds=all"]' in error.message
    assert "kill -HUP" in error.message and "runc" in error.message.split("it has:")[1]


@pytest.mark.parametrize(
    "args, pool, missing",
    [
        (["--platform=ptrace"], False, ["--network=none"]),
        (["--network=none", "--platform=ptrace"], True, ["--host-uds=all"]),
        (["--platform=ptrace"], True, ["--network=none", "--host-uds=all"]),
        (["--network=none", "--host-uds=open"], True, ["--host-uds=all"]),
        (["--network=none", "--platform=ptrace"], False, []),
        (["--network=none", "--host-uds=all"], True, []),
        (["--network=none", "--host-uds=create"], True, []),
    ],
)
def test_gvisor_registration_needs_its_arguments(args: list[str], pool: bool, missing: list[str]) -> None:
    """Pure logic on the engine's ``Runtimes`` answer: gVisor without ``--network=none`` cannot
    start a network-less container, and the warm pool needs ``--host-uds=create`` (``all``
    holds it; ``open`` alone does not): what is missing is named with the argument to add."""
    info = {
        "Runtimes": {"runc": {"path": "runc"}, "gv": {"path": "/usr/bin/runsc", "runtimeArgs": args}},
        "DefaultRuntime": "runc",
    }
    if missing:
        with pytest.raises(ExecutorError) as error:
            check_oci_runtime("gv", info, pool=pool)
        assert error.value.code == "oci_runtime_misconfigured"
        assert all(arg in error.value.message.split("(it has")[0] for arg in missing), error.value.message
    else:
        runtime = check_oci_runtime("gv", info, pool=pool)
        assert runtime.gvisor and runtime.args == tuple(args)
        assert runtime.opens_host_sockets == ("--host-uds=all" in args)  # egress: the gateway's socket
    default = check_oci_runtime(None, info, pool=True)
    assert default.name == "runc" and not default.gvisor and default.describe() == "runc (runc)"


@pytest.mark.parametrize(
    "existing, expected",
    [
        (None, ["--network=none", "--platform=ptrace", "--host-uds=all"]),
        (
            ["--host-uds=create", "--platform=kvm", "--debug"],
            ["--host-uds=all", "--platform=kvm", "--debug", "--network=none"],
        ),
        (["--network=none", "--host-uds=open"], ["--network=none", "--host-uds=all", "--platform=ptrace"]),
        (
            ["--network=none", "--host-uds=all", "--platform=ptrace"],
            ["--network=none", "--host-uds=all", "--platform=ptrace"],
        ),
    ],
)
def test_the_scripts_register_runsc_with_host_sockets_for_egress(
    tmp_path: Path, existing: list[str] | None, expected: list[str]
) -> None:
    """``scripts/lib.sh engine_config`` (what test.sh, serve.sh and bench.sh merge into an
    engine's config): an existing runsc entry keeps its path, its other arguments and its
    platform; its ``--host-uds`` becomes ``all`` (``create`` for the warm pool and ``open``
    for the egress gateway's socket), where it stood."""
    source = tmp_path / "in.json"
    config: dict[str, Any] = {"log-level": "warn"}
    if existing is not None:
        config["runtimes"] = {"runsc": {"path": "/opt/runsc", "runtimeArgs": existing}}
    source.write_text(json.dumps(config))
    target = tmp_path / "out.json"
    done = subprocess.run(
        ["bash", "-c", 'source "$1/scripts/lib.sh" && engine_config "$2" "$3"', "engine_config"]
        + [str(REPO), str(source), str(target)],
        env={**os.environ, "SKILL_EXECUTOR_VENV": sys.prefix},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    written = json.loads(target.read_text())
    assert written["log-level"] == "warn" and written["runtimes"]["runsc"]["runtimeArgs"] == expected
    assert written["runtimes"]["runsc"]["path"] == (
        "/opt/runsc" if existing is not None else shutil.which("runsc") or "/usr/bin/runsc"
    )
    info = {"Runtimes": {"runsc": written["runtimes"]["runsc"]}}
    assert check_oci_runtime("runsc", info, pool=True).opens_host_sockets


@pytest.mark.parametrize("runtime", ["docker", "docker-runsc"])
def test_health_reports_the_oci_runtime(tmp_path: Path, runtime: str) -> None:
    require_runtime(runtime)
    executor = Executor.from_settings(make_settings(tmp_path, runtime))
    try:
        docker_runtime = executor.runtime
        assert isinstance(docker_runtime, DockerRuntime)
        ok, detail = docker_runtime.health()["oci_runtime"]
        assert ok
        if runtime == "docker-runsc":
            assert (
                detail.startswith("runsc (/usr/bin/runsc ")
                and "--network=none" in detail
                and detail.endswith("; gVisor)")
            )
        else:
            assert detail.startswith("runc (runc")
        # Gone from the engine later: /healthz says so.
        engine = docker_runtime.engine
        engine.settings = engine.settings.model_copy(update={"docker_oci_runtime": "gone"})
        ok, detail = docker_runtime.health()["oci_runtime"]
        assert not ok and "'gone'" in detail and "not registered" in detail
    finally:
        executor.close()


def test_a_process_that_can_no_longer_run_code_is_told_from_one_that_can() -> None:
    """What a gVisor warm box waits out after killing its sandbox (pure /proc reading)."""
    from skill_executor.runtimes.docker.hostview import may_run

    child = subprocess.Popen(["sleep", "30"])
    try:
        assert may_run(child.pid)
        child.kill()
        deadline = time.monotonic() + 10
        while may_run(child.pid) and time.monotonic() < deadline:  # exiting, then a zombie: never again
            time.sleep(0.01)
        assert not may_run(child.pid)
    finally:
        child.kill()
        child.wait()
    assert not may_run(child.pid)  # reaped: gone


def test_a_container_that_exits_while_it_is_killed_for_its_removal_is_removed_again() -> None:
    """Docker 20.10 answers 500 "Could not kill running container ... is not running" when a
    container exits during ``rm -f``'s kill (seen in a fresh-clone run): a second removal works."""
    import docker.errors

    from skill_executor.runtimes.docker.engine import Engine

    calls: list[str] = []

    class Api:
        def remove_container(self, container_id: str, *, force: bool, v: bool) -> None:
            calls.append(container_id)
            if len(calls) == 1:
                raise docker.errors.APIError(
                    "500 Server Error",
                    explanation=f"Could not kill running container {container_id}, cannot remove - "
                    f"Container {container_id} is not running",
                )

    engine = object.__new__(Engine)
    engine.api = Api()  # type: ignore[assignment]
    assert engine.remove("c0ffee", strict=True) == 1 and calls == ["c0ffee", "c0ffee"]
