"""Runs last (by name): the suite left no container and no workspace behind."""

from __future__ import annotations

import os
import time

import pytest

from .conftest import docker_problem, in_ci


def test_no_project_containers_left(tmp_path_factory: pytest.TempPathFactory) -> None:
    base_temp = tmp_path_factory.getbasetemp()
    problem = docker_problem()
    if problem is not None:
        if in_ci():
            pytest.fail(problem)
        pytest.skip(problem)
    import docker

    from executor.owners import LEASES, ROOT_ID, parse
    from executor.runtimes.docker import LABEL_MANAGED, LABEL_OWNER

    client = docker.DockerClient(base_url="unix:///var/run/docker.sock", version="auto")
    # Owner tokens are "lease:<root id>:<instance>": the roots are this session's temp folders.
    roots = {path.read_text().strip() for path in base_temp.glob(f"**/{LEASES}/{ROOT_ID}")}
    deadline = time.monotonic() + 10
    while True:
        ours = [
            c for c in client.api.containers(all=True, filters={"label": f"{LABEL_MANAGED}=1"})
            if parse(c["Labels"].get(LABEL_OWNER, ""))[0] in roots
        ]
        if not ours or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert ours == []


def test_no_workspaces_left(tmp_path_factory: pytest.TempPathFactory) -> None:
    base = tmp_path_factory.getbasetemp()
    leftovers = [
        str(run) for runs in base.glob("*/data/workspaces/runs") for run in runs.iterdir()
    ]
    assert leftovers == []


def test_no_volumes_left(tmp_path_factory: pytest.TempPathFactory) -> None:
    """No volume (hard disk cap) is still mounted below this session's temp folders, and no
    loop device still holds an image there (a device clears itself once the last container
    holding its file system is gone)."""
    from executor.workspace.volumes import mounts_under

    base = tmp_path_factory.getbasetemp().resolve()
    assert mounts_under(base) == []

    def loops() -> list[str]:
        found = []
        for name in os.listdir("/sys/block"):
            try:
                with open(f"/sys/block/{name}/loop/backing_file") as backing:
                    path = backing.read().strip()
            except OSError:
                continue
            if path.startswith(f"{base}/"):
                found.append(f"{name}: {path}")
        return found

    deadline = time.monotonic() + 10
    while loops() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert loops() == []
