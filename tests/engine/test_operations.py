"""Operations: workers that survive, leases across PID namespaces, one service per data
dir, an engine that goes away and comes back (through a socket proxy the test controls)."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import httpx
import pytest

from skill_executor.activity import Activity
from skill_executor.owners import DataDirClaim, Lease, LeaseState
from skill_executor.runtimes.janitor import Janitor
from skill_executor.workers import Supervisor

from ..api_server import Server
from ..conftest import REPO, docker_problem, in_ci
from ..helpers import eventually

IMAGE = os.environ.get("SKILL_EXECUTOR_DOCKER_IMAGE", "skill-executor/runner:latest")


def needs_docker() -> None:
    problem = docker_problem()
    if problem is not None:
        if in_ci():
            pytest.fail(problem)
        pytest.skip(problem)


# -- supervised workers ------------------------------------------------------------------


def test_a_failing_worker_is_retried_and_logs_each_cause_once(caplog: pytest.LogCaptureFixture) -> None:
    supervisor = Supervisor("t")
    calls: list[int] = []

    def flaky() -> None:
        calls.append(1)
        if len(calls) < 4:
            raise ConnectionError("engine away")

    with caplog.at_level(logging.INFO, logger="skill_executor.workers"):
        supervisor.every("flaky", 0.01, flaky)
        assert eventually(lambda: len(calls) >= 6, timeout=20)
        supervisor.close()
    warnings = [r for r in caplog.records if "engine away" in r.getMessage()]
    assert len(warnings) == 1  # three failures, one cause: one line
    assert any("recovered" in r.getMessage() for r in caplog.records)
    stats = supervisor.stats()["flaky"]
    assert stats.failures == 3 and not stats.failing and stats.restarts == 0


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_dead_worker_is_restarted_and_counted() -> None:
    supervisor = Supervisor("t")
    runs: list[int] = []

    def dies_once() -> None:
        runs.append(1)
        if len(runs) == 1:
            raise SystemExit("thread killed")  # escapes `except Exception`: the thread dies

    supervisor.every("fragile", 0.01, dies_once)
    try:
        assert eventually(lambda: len(runs) >= 3, timeout=10)
        assert supervisor.stats()["fragile"].restarts == 1
        assert all(supervisor.alive().values())
    finally:
        supervisor.close()


def test_cleanup_keeps_up_while_runs_never_stop() -> None:
    """With a run always in progress there is never a quiet moment: once the backlog
    outgrows the workers, removals go at once (the old janitor waited 2 s per job)."""
    activity = Activity()
    supervisor = Supervisor("t")
    janitor = Janitor(activity, supervisor, workers=4)
    done: list[int] = []
    lock = threading.Lock()

    def job() -> None:
        time.sleep(0.01)
        with lock:
            done.append(1)

    try:
        with activity.running():
            for _ in range(200):
                janitor.submit(job)
            assert janitor.settle(timeout=20), f"backlog still {janitor.backlog}"
        assert len(done) == 200
    finally:
        janitor.close()
        supervisor.close()


# -- leases ------------------------------------------------------------------------------

HOLD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from skill_executor.owners import Lease
    lease = Lease(Path(sys.argv[1]))
    print(lease.token, flush=True)
    time.sleep(600)
""")


def _hold_lease(root: Path, *, new_pid_namespace: bool) -> tuple[subprocess.Popen[str], str]:
    argv = [sys.executable, "-c", HOLD, str(root)]
    if new_pid_namespace:
        argv = ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", *argv]
    process = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    return process, process.stdout.readline().strip()


@pytest.mark.skipif(os.geteuid() != 0, reason="unshare --pid needs root")
def test_a_lease_is_judged_alive_across_pid_namespaces_and_dead_once_its_holder_is(tmp_path: Path) -> None:
    mine = Lease(tmp_path)
    process, token = _hold_lease(tmp_path, new_pid_namespace=True)
    try:
        assert token.startswith(f"lease:{mine.root_id}:")
        # From this PID namespace the holder's pid means nothing; its lease says it lives.
        assert mine.judge(token) is LeaseState.ALIVE
        assert mine.judge(mine.token) is LeaseState.MINE
        assert mine.judge("lease:0123456789abcdef:other-root") is LeaseState.FOREIGN
        assert mine.judge("host:123:456") is LeaseState.FOREIGN  # a legacy token: not judged here
    finally:
        process.kill()
        process.wait()
    assert eventually(lambda: mine.judge(token) is LeaseState.DEAD, timeout=10)
    assert mine.dead_leases() == [token]
    with mine.reclaim(token) as ours:
        assert ours
    assert mine.dead_leases() == [] and mine.judge(token) is LeaseState.DEAD  # the lease file is gone


def test_a_zombie_holds_no_lease(tmp_path: Path) -> None:
    mine = Lease(tmp_path)
    process, token = _hold_lease(tmp_path, new_pid_namespace=False)
    os.kill(process.pid, signal.SIGKILL)
    # Not reaped yet: the process is a zombie, its pid and start time still in /proc.
    assert eventually(lambda: Path(f"/proc/{process.pid}/stat").read_text().split(") ")[1].startswith("Z"), timeout=30)
    assert mine.judge(token) is LeaseState.DEAD
    process.wait()


def test_one_service_per_data_dir(tmp_path: Path) -> None:
    claim = DataDirClaim(tmp_path)
    try:
        with pytest.raises(Exception) as info:
            DataDirClaim(tmp_path)
        assert getattr(info.value, "code", None) == "data_dir_in_use"
        assert f"pid {os.getpid()}" in str(info.value) and "SKILL_EXECUTOR_DATA_DIR" in str(info.value)
    finally:
        claim.release()
    DataDirClaim(tmp_path).release()  # free again once released


# -- neighbours on one engine, in different PID namespaces -------------------------------

NEIGHBOUR = textwrap.dedent("""
    import sys, threading
    from pathlib import Path
    from skill_executor.config import Settings
    from skill_executor.core import Executor
    from skill_executor.runs.models import RunRequest
    # Its mount namespace (unshare's) is private: volumes mounted there would not reach the
    # engine, so the hard disk cap refuses to start; the soft cap needs none.
    settings = Settings(data_dir=Path(sys.argv[1]), skills_dirs=[Path(sys.argv[2])], pool_size=0,
                        skills_refresh_seconds=0, disk_cap="soft")
    executor = Executor.from_settings(settings)
    print(executor.runtime.token, flush=True)
    result = executor.runner.run(RunRequest(skill="math-tools", command="sleep 8; echo survived", timeout=60))
    print(f"{result.exit_code} {result.stdout.strip()}", flush=True)
    executor.close()
""")


def _containers(token: str) -> list[dict[str, object]]:
    import docker

    client = docker.DockerClient(base_url="unix:///var/run/docker.sock", version="auto")
    return list(client.api.containers(all=True, filters={"label": f"io.skill-executor.owner={token}"}))


@pytest.mark.skipif(os.geteuid() != 0, reason="unshare --pid needs root")
def test_neighbours_in_other_pid_namespaces_never_sweep_each_other(tmp_path: Path) -> None:
    """A runtime in another PID namespace (the compose service next to a host instance)
    runs a command; a runtime starting here on the same data dir sweeps at start-up and
    leaves it alone; once the neighbour is killed, the next start removes its leftovers."""
    needs_docker()
    from skill_executor.config import Settings
    from skill_executor.core import Executor

    from ..conftest import SKILLS

    data = tmp_path / "data"
    env = {**os.environ, "SKILL_EXECUTOR_DOCKER_IMAGE": IMAGE}
    neighbour = subprocess.Popen(
        [
            "unshare",
            "--pid",
            "--fork",
            "--kill-child",
            "--mount-proc",
            sys.executable,
            "-c",
            NEIGHBOUR,
            str(data),
            str(SKILLS),
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert neighbour.stdout is not None
    token = neighbour.stdout.readline().strip()
    assert token, "the neighbour did not start"
    assert eventually(lambda: any(c["State"] == "running" for c in _containers(token)), timeout=30)
    settings = Settings(data_dir=data, skills_dirs=[SKILLS], pool_size=0, docker_image=IMAGE)
    here = Executor.from_settings(settings)  # its start-up sweep runs now
    try:
        assert [c["State"] for c in _containers(token)] == ["running"]
        assert len(list((data / "workspaces" / "runs").iterdir())) == 1
        assert neighbour.stdout.readline().split() == ["0", "survived"]
        assert neighbour.wait(timeout=30) == 0
    finally:
        here.close()
    # A neighbour killed in the middle of a run leaves a container and a folder ...
    neighbour = subprocess.Popen(
        [
            "unshare",
            "--pid",
            "--fork",
            "--kill-child",
            "--mount-proc",
            sys.executable,
            "-c",
            NEIGHBOUR,
            str(data),
            str(SKILLS),
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert neighbour.stdout is not None
    token = neighbour.stdout.readline().strip()
    assert eventually(lambda: any(c["State"] == "running" for c in _containers(token)), timeout=30)
    neighbour.kill()  # --kill-child: the namespace's init dies with unshare, and every process in it
    neighbour.wait()
    assert eventually(
        lambda: (
            not (data / "workspaces" / "leases" / token.split(":")[2]).exists()
            or Lease(data / "workspaces").judge(token) is LeaseState.DEAD
        ),
        timeout=10,
    )
    # ... which the next start removes.
    here = Executor.from_settings(settings)
    try:
        assert _containers(token) == []
        assert list((data / "workspaces" / "runs").iterdir()) == []
    finally:
        here.close()


# -- the service: a second instance, an engine that goes away ------------------------------


class SocketProxy:
    """A Unix socket forwarding to the engine's, which the test can stop and start."""

    def __init__(self, path: Path, target: str = "/var/run/docker.sock") -> None:
        self.path = path
        self.target = target
        self._listener: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()

    def start(self) -> None:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(self.path))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def stop(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        self.path.unlink(missing_ok=True)
        with self._lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(self.target)
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            try:
                sink.shutdown(socket.SHUT_WR)
            except OSError:
                pass


def _run(server: Server, command: str, **fields: object) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/runs", json={"skill": "math-tools", "command": command, **fields}, timeout=60)


def _metric(server: Server, name: str) -> dict[str, float]:
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    found = {}
    for line in text.splitlines():
        if line.startswith(name):
            key, _, value = line.rpartition(" ")
            found[key] = float(value)
    return found


def test_the_service_survives_the_engine_going_away(tmp_path: Path) -> None:
    """Start without an engine (degraded), get it, lose it, get it back: health tells the
    truth throughout, runs are refused with JSON 503 while it is away, /metrics never
    fails, and nothing is left behind once it is back."""
    needs_docker()
    proxy = SocketProxy(tmp_path / "engine.sock")
    server = Server(
        tmp_path,
        env={
            "DOCKER_HOST": f"unix://{proxy.path}",
            "SKILL_EXECUTOR_DOCKER_IMAGE": IMAGE,
            "SKILL_EXECUTOR_POOL_SIZE": "1",
        },
    )
    server.start()  # no engine yet: it starts all the same
    try:
        health = httpx.get(f"{server.url}/healthz", timeout=10)
        assert health.status_code == 503 and "engine" in health.json()["failing"]
        refused = _run(server, "echo hi")
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "engine_unavailable"
        assert httpx.get(f"{server.url}/metrics", timeout=10).status_code == 200

        proxy.start()  # the engine appears: the service completes its start by itself
        assert eventually(lambda: httpx.get(f"{server.url}/healthz", timeout=10).status_code == 200, timeout=30)
        assert _run(server, "echo one").json()["stdout"] == "one\n"

        proxy.stop()  # a hiccup
        health = httpx.get(f"{server.url}/healthz", timeout=10)
        assert health.status_code == 503 and health.json()["failing"] == ["engine", "image"]
        assert httpx.get(f"{server.url}/metrics", timeout=10).status_code == 200
        # A warm container started before the hiccup needs no engine call to run (its
        # launcher listens in the workspace); once it is used, nothing can start another.
        warm = _run(server, "echo warm")
        assert warm.status_code == 503 or warm.json()["stdout"] == "warm\n", warm.text
        for fields in ({"session": "s1"}, {}):
            refused = _run(server, "echo hi", **fields)
            assert refused.status_code == 503, refused.text
            assert refused.json()["error"]["code"] in ("engine_unavailable", "engine_error")
        time.sleep(3)  # the workers fail meanwhile (pool refill, cleanup): they must survive it

        proxy.start()
        assert eventually(lambda: httpx.get(f"{server.url}/healthz", timeout=10).status_code == 200, timeout=30)
        for i in range(6):
            response = _run(server, f"echo {i}", **({"session": "s1"} if i % 2 else {}))
            assert response.status_code == 200 and response.json()["stdout"] == f"{i}\n", response.text
        assert httpx.get(f"{server.url}/healthz", timeout=10).json()["checks"]["workers"]["ok"]

        # Cleanup caught up (the reconciliation removes what failed while the engine was away).
        def clean() -> bool:
            states = _metric(server, "skill_executor_containers{")
            running = states.get('skill_executor_containers{state="running"}', 0)
            others = sum(v for k, v in states.items() if "running" not in k)
            backlog = _metric(server, "skill_executor_cleanup_backlog").get("skill_executor_cleanup_backlog", 1)
            return running <= 1 and others == 0 and backlog == 0

        assert eventually(clean, timeout=40, interval=1), httpx.get(f"{server.url}/metrics").text
        restarts = _metric(server, "skill_executor_worker_restarts_total")
        assert all(v == 0 for v in restarts.values()), restarts
    finally:
        server.stop()
        proxy.stop()


def test_a_second_service_on_a_busy_data_dir_refuses_before_touching_records(tmp_path: Path) -> None:
    needs_docker()
    env = {"SKILL_EXECUTOR_DOCKER_IMAGE": IMAGE, "SKILL_EXECUTOR_POOL_SIZE": "0"}
    first = Server(tmp_path, env=env).start()
    try:
        accepted = httpx.post(
            f"{first.url}/v1/runs?wait=false",
            json={"skill": "math-tools", "command": "sleep 10; echo done"},
            timeout=30,
        )
        assert accepted.status_code == 202, accepted.text
        run_id = accepted.json()["run_id"]
        assert eventually(lambda: httpx.get(f"{first.url}/v1/runs/{run_id}").json()["status"] == "running", timeout=30)
        second = Server(tmp_path, env=env)
        with pytest.raises(RuntimeError) as info:
            second.start(timeout=30)
        assert "exited with 1" in str(info.value) and "in use by another skill-executor service" in str(info.value)
        # The live instance's run was never touched, and finishes.
        assert httpx.get(f"{first.url}/v1/runs/{run_id}").json()["status"] == "running"
        record = eventually(
            lambda: (r := httpx.get(f"{first.url}/v1/runs/{run_id}").json())["status"] != "running" and r, timeout=30
        )
        assert record["status"] == "completed" and record["result"]["stdout"] == "done\n", record
    finally:
        first.stop()


HOLD_ID = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from skill_executor.owners import Lease
    lease = Lease(Path(sys.argv[1]), sys.argv[2])
    print(lease.token, flush=True)
    time.sleep(600)
""")


def test_a_fixed_instance_id_starts_again_after_a_crash_but_never_twice(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD_ID, str(tmp_path), "web-1"], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None and process.stdout.readline().startswith("lease:")
    with pytest.raises(Exception) as info:
        Lease(tmp_path, "web-1")  # its holder lives
    assert getattr(info.value, "code", None) == "instance_in_use"
    process.kill()
    process.wait()
    lease = Lease(tmp_path, "web-1")  # the holder died (kill -9): its lease file is taken over
    try:
        other = Lease(tmp_path)
        assert other.judge(lease.token) is LeaseState.ALIVE
        other.release()
    finally:
        lease.release()


def test_odd_entries_in_the_leases_folder_neither_hang_nor_break_a_sweep(tmp_path: Path) -> None:
    lease = Lease(tmp_path)
    leases = tmp_path / "leases"
    os.mkfifo(leases / "fifo")
    (leases / "folder").mkdir()
    (leases / "link").symlink_to(lease.path)
    for name in ("fifo", "folder", "link", "root-id"):
        assert lease.judge(f"lease:{lease.root_id}:{name}") in (LeaseState.ALIVE, LeaseState.FOREIGN)
    assert lease.dead_leases() == []
    assert (leases / "root-id").exists()
    lease.release()


def test_the_workspace_sweep_spares_half_written_and_unjudgeable_owners(tmp_path: Path) -> None:
    from skill_executor.workspace.layout import OWNER_FILE, WorkspaceManager

    manager = WorkspaceManager(tmp_path)
    empty = manager.runs / "owner-file-being-written"
    empty.mkdir()
    (empty / OWNER_FILE).write_text("")
    legacy = manager.runs / "older-version"
    legacy.mkdir()
    (legacy / OWNER_FILE).write_text("somehost:1234:5678")
    old_legacy = manager.runs / "older-version-long-gone"
    old_legacy.mkdir()
    (old_legacy / OWNER_FILE).write_text("somehost:1234:5678")
    day_ago = time.time() - 2 * 86400
    os.utime(old_legacy, (day_ago, day_ago))
    assert manager.sweep() == ["older-version-long-gone"]
    assert empty.exists() and legacy.exists()
    manager.close()


def test_reconciliation_spares_runs_in_flight_and_removes_what_cleanup_missed(tmp_path: Path) -> None:
    needs_docker()
    from concurrent.futures import ThreadPoolExecutor

    from skill_executor.core import Executor
    from skill_executor.runs.models import RunRequest
    from skill_executor.runtimes.docker import LABEL_DEADLINE, LABEL_MANAGED, LABEL_OWNER, DockerRuntime

    from ..conftest import make_settings

    executor = Executor.from_settings(make_settings(tmp_path, "docker-pool", pool_size=1, docker_image=IMAGE))
    runtime = executor.runtime
    assert isinstance(runtime, DockerRuntime) and runtime.pool is not None
    try:
        assert runtime.pool.wait_ready()
        requests = [
            RunRequest(skill="math-tools", command="sleep 2; echo ok", **extra)  # type: ignore[arg-type]
            for extra in ({}, {}, {"session": "s"})
        ]  # warm, cold, session
        with ThreadPoolExecutor(3) as pool:
            futures = [pool.submit(executor.runner.run, request) for request in requests]
            while not all(f.done() for f in futures):
                runtime.reconcile()
                time.sleep(0.1)
        assert [f.result().stdout for f in futures] == ["ok\n"] * 3
        assert runtime.pool.wait_ready()
        runtime.settle()
        # What a failed cleanup would leave: an ended container of ours, a folder in no use.
        leaked = runtime.client.containers.create(
            IMAGE, ["true"], labels={LABEL_MANAGED: "1", LABEL_OWNER: runtime.token, LABEL_DEADLINE: "9999999999"}
        )
        leaked.start()
        leaked.wait()
        folder = runtime.workspaces.create_root("leaked")
        with runtime.workspaces._live_lock:
            runtime.workspaces._live.discard("leaked")
        old = time.time() - 60
        os.utime(folder, (old, old))
        assert runtime.reconcile() == 2
        assert not folder.exists()
        assert [c["Id"] for c in runtime.engine.own() if c["Id"] == leaked.id] == []
        # The warm container idle in the pool is the pool's: untouched.
        assert runtime.pool.idle == 1
    finally:
        executor.close()
