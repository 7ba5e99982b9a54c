"""Leftovers after a crash (issue 39, class 5), on the real engine under the hard disk cap.

* A service killed with ``kill -9`` while a run sleeps and a session process runs leaves
  containers (the run's, the session's sandbox), mounted volumes and their loop devices; the
  next start on the same data dir releases all of them and says so (log, runtime figures,
  metrics).
* Two services on one engine never end each other's containers or session sandboxes, also
  when one's data dir is a copy of the other's (same lease root id, same lease files: before,
  the copy's start-up sweep judged the original's containers dead and removed them, and with
  one instance id both reconciliations took the other's session sandbox for a stray a
  minute after it started).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import docker
import pytest

from skill_executor.config import Settings
from skill_executor.core import Executor
from skill_executor.runtimes.docker import LABEL_MANAGED, LABEL_OWNER
from skill_executor.workspace import volumes

from ..conftest import REPO, SKILLS, make_settings, require_runtime
from ..helpers import eventually

CRASHER = textwrap.dedent("""
    import sys, threading
    from pathlib import Path
    from skill_executor.config import Settings
    from skill_executor.core import Executor
    from skill_executor.runs.models import RunRequest
    settings = Settings(data_dir=Path(sys.argv[1]), skills_dirs=[Path(sys.argv[2])], pool_size=0,
                        skills_refresh_seconds=0, docker_disk_bytes=64 << 20, session_disk_bytes=64 << 20)
    executor = Executor.from_settings(settings)
    executor.processes.start("local", "kept", "sleep 600")
    request = RunRequest(skill="math-tools", command="echo x > $OUTPUT_DIR/x; sleep 600", timeout=600)
    threading.Thread(target=executor.runner.run, args=(request,), daemon=True).start()
    print(executor.runtime.token, flush=True)
    threading.Event().wait()
""")


def _containers(**labels: str) -> list[dict[str, Any]]:
    client = docker.DockerClient(base_url="unix:///var/run/docker.sock", version="auto")
    try:
        wanted = [f"{LABEL_MANAGED}=1", *(f"{k}={v}" for k, v in labels.items())]
        return list(client.api.containers(all=True, filters={"label": wanted}))
    finally:
        client.close()


def _loops_under(root: Path) -> list[str]:
    found = []
    for name in os.listdir("/sys/block"):
        try:
            backing = Path(f"/sys/block/{name}/loop/backing_file").read_text().strip()
        except OSError:
            continue
        if backing.startswith(f"{root}/"):
            found.append(f"{name}: {backing}")
    return found


def test_a_killed_services_containers_volumes_and_loop_devices_are_released_and_reported(tmp_path: Path) -> None:
    require_runtime("docker")
    data = tmp_path / "data"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [sys.executable, "-c", CRASHER, str(data), str(SKILLS)], env=env, stdout=subprocess.PIPE, text=True
    )
    root = data.resolve()
    try:
        assert child.stdout is not None
        token = child.stdout.readline().strip()
        assert token.startswith("lease:"), token
        # the session's sandbox and the run's container run; the run's volume and the session's are mounted
        assert eventually(
            lambda: sum(c["State"] == "running" for c in _containers(**{LABEL_OWNER: token})) == 2, timeout=60
        )
        assert eventually(lambda: len(volumes.mounts_under(root)) >= 2, timeout=30), volumes.mounts_under(root)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    time.sleep(0.5)
    assert len(_containers(**{LABEL_OWNER: token})) == 2
    left = volumes.mounts_under(root)
    assert any(p.name == "work" for p in left) and len(left) >= 2, left
    assert _loops_under(root)
    executor = Executor.from_settings(make_settings(tmp_path, "docker", pool_size=0))
    try:
        assert _containers(**{LABEL_OWNER: token}) == []
        assert volumes.mounts_under(root) == []
        assert eventually(lambda: not _loops_under(root), timeout=30), _loops_under(root)
        report = executor.runtime.stats()["crash_cleanup"]
        assert report["containers"] == 2 and report["workspaces"] == 1 and report["volumes"] == 1, report
        assert executor.runner.sessions.released_volumes == 1
        from prometheus_client import generate_latest

        from skill_executor.api.metrics import RuntimeCollector

        text = generate_latest(_registry(RuntimeCollector(executor.runtime.stats))).decode()
        assert 'skill_executor_crash_leftovers_removed{kind="containers"} 2.0' in text, text
    finally:
        executor.close()


def _registry(collector: Any) -> Any:
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    registry.register(collector)
    return registry


@pytest.mark.parametrize("instance", ["same-instance", None], ids=["one-instance-id", "random-instance-ids"])
def test_two_services_one_a_copy_of_the_others_data_dir_never_end_each_others_sandboxes(
    tmp_path: Path, instance: str | None
) -> None:
    """Service A holds a session process; its data dir is copied (a backup restored beside
    it, a cloned volume: same lease root id, same lease files, same instance id when one is
    fixed) and service B starts on the copy, on the same engine: B's start-up sweep (which
    took A's copied lease for a dead one's), its reconciliation (which, with one instance id,
    took A's sandbox for its own stray) and its reaper leave A's session sandbox running, and
    A's process lives on."""
    require_runtime("docker")
    a_dir = tmp_path / "a"
    a_dir.mkdir()
    settings_a = make_settings(a_dir, "docker", pool_size=0, instance_id=instance)
    a = Executor.from_settings(settings_a)
    b: Executor | None = None
    try:
        process = a.processes.start("local", "chat", "sleep 600")
        host = _containers(**{LABEL_OWNER: a.runtime.token})
        assert [c["State"] for c in host] == ["running"]
        b_dir = tmp_path / "b"
        shutil.copytree(
            a_dir, b_dir, symlinks=True, ignore=shutil.ignore_patterns("*.sock", "instance.lock", "work.img", ".volume")
        )
        settings_b: Settings = make_settings(b_dir, "docker", pool_size=0, instance_id=instance)
        b = Executor.from_settings(settings_b)  # its start-up sweep runs now
        assert (b.runtime.token == a.runtime.token) == (instance is not None)  # one id: one token for both
        assert [c["State"] for c in _containers(**{LABEL_OWNER: a.runtime.token})] == ["running"]
        # what B would do a minute later: its reconciliation (strays) and its reaper
        import skill_executor.runtimes.docker.cleanup as docker_cleanup

        stray = docker_cleanup.STRAY_GRACE_SECONDS
        docker_cleanup.STRAY_GRACE_SECONDS = 0.0
        try:
            b.runtime.reconcile()
        finally:
            docker_cleanup.STRAY_GRACE_SECONDS = stray
        b.runtime.reap()
        assert [c["Id"] for c in _containers(**{LABEL_OWNER: a.runtime.token})] == [host[0]["Id"]]
        view = a.processes.get("local", "chat", process.id)
        assert not view.ended, view
    finally:
        if b is not None:
            b.close()
        a.close()
    assert _containers(**{LABEL_OWNER: a.runtime.token}) == []
