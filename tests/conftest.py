"""Shared fixtures: an Executor per test on each runtime under test.

Pipeline tests take the ``executor`` fixture and run unchanged on every runtime in
``RUNTIMES``.  Docker runs need a real engine: in CI (``CI=true``) a missing engine
is a failure, elsewhere those tests skip with the reason.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from executor.config import Settings
from executor.core import Executor

REPO = Path(__file__).resolve().parent.parent
SKILLS = REPO / "skills"
RUNTIMES = ["local", "docker", "docker-pool"]
#: The container-hardening tests run on runc (the engine's default) and on gVisor (``runsc``).
HARDENING_RUNTIMES = ["docker", "docker-pool", "docker-runsc", "docker-pool-runsc"]
#: Test runtime name -> the engine's OCI runtime it selects (``docker_oci_runtime``).
OCI_RUNTIMES = {"docker-runsc": "runsc", "docker-pool-runsc": "runsc"}
#: Modules whose ``executor`` tests run on gVisor too (the attacks on the sandbox's host side);
#: the other pipeline tests run on ``RUNTIMES``.
GVISOR_MODULES = {"test_boundary"}
_docker_problem: list[str | None] = []
_runsc_problem: list[str | None] = []


def docker_problem() -> str | None:
    """Why Docker tests cannot run here (None when they can); probed once."""
    if not _docker_problem:
        reason = None
        try:
            import docker

            from executor.config import Settings

            client = docker.DockerClient(base_url="unix:///var/run/docker.sock", version="auto", timeout=10)
            client.ping()
            client.images.get(Settings().docker_image)
        except Exception as exc:  # any failure means: no usable engine or image
            reason = f"no usable Docker engine/runner image: {exc}"
        _docker_problem.append(reason)
    return _docker_problem[0]


def runsc_problem() -> str | None:
    """Why the gVisor tests cannot run here (None when they can); probed once.

    ``scripts/test.sh`` registers runsc with the engine, or says why it could not
    (``SKILL_EXECUTOR_TEST_RUNSC_SKIP``)."""
    if not _runsc_problem:
        reason = docker_problem() or os.environ.get("SKILL_EXECUTOR_TEST_RUNSC_SKIP") or None
        if reason is None:
            import docker

            from executor.errors import ExecutorError
            from executor.runtimes.docker.engine import check_oci_runtime

            client = docker.DockerClient(base_url="unix:///var/run/docker.sock", version="auto", timeout=10)
            try:
                check_oci_runtime("runsc", client.info(), pool=True)
            except ExecutorError as exc:
                reason = f"{exc.message} (./scripts/test.sh registers it)"
        _runsc_problem.append(reason)
    return _runsc_problem[0]


def is_gvisor(runtime: str) -> bool:
    return OCI_RUNTIMES.get(runtime) == "runsc"


def require_runtime(runtime: str) -> None:
    """Skip (or, in CI, fail) a Docker test when no engine (or no runsc) is usable."""
    if not runtime.startswith("docker"):
        return
    problem = runsc_problem() if is_gvisor(runtime) else docker_problem()
    if problem is None:
        return
    if in_ci():
        pytest.fail(f"CI must run the Docker tests on a real engine: {problem}")
    pytest.skip(problem)


def require_disk_cap(kind: str) -> None:
    """Skip (or, in CI, fail) a test of the hard disk cap where it cannot work: not root
    (``./scripts/test.sh`` then runs the suite on the soft cap, and says so)."""
    if kind != "hard" or os.geteuid() == 0:
        return
    if in_ci():
        pytest.fail("CI must run the hard disk cap (root)")
    pytest.skip("the hard disk cap needs root (loop devices, mounts)")


def make_settings(tmp_path: Path, runtime: str, **overrides: object) -> Settings:
    """Settings for a test; ``docker-pool`` is the Docker runtime with a warm pool, and a
    ``-runsc`` suffix selects gVisor as the engine's OCI runtime."""
    extra = tmp_path / "extra-skills"
    extra.mkdir(exist_ok=True)
    values: dict[str, object] = {
        "runtime": "docker" if runtime.startswith("docker") else runtime,
        "pool_size": 2 if runtime.startswith("docker-pool") else 0,
        "docker_oci_runtime": OCI_RUNTIMES.get(runtime),
        "skills_dirs": [SKILLS, extra],
        "data_dir": tmp_path / "data",
        "skills_refresh_seconds": 0.0,
        "default_timeout": 30.0,
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``runtime_name``: every runtime of ``RUNTIMES``, plus gVisor for ``GVISOR_MODULES``."""
    if "runtime_name" in metafunc.fixturenames:
        names = list(RUNTIMES)
        if metafunc.module.__name__.rsplit(".", 1)[-1] in GVISOR_MODULES:
            names += [name for name in HARDENING_RUNTIMES if is_gvisor(name)]
        metafunc.parametrize("runtime_name", names, indirect=True)


@pytest.fixture
def runtime_name(request: pytest.FixtureRequest) -> str:
    require_runtime(request.param)
    return request.param


@pytest.fixture
def docker_runtime_name() -> str:
    require_runtime("docker")
    return "docker"


@pytest.fixture
def make_executor(tmp_path: Path, runtime_name: str) -> Iterator:
    made: list[Executor] = []

    def factory(**overrides: object) -> Executor:
        executor = Executor.from_settings(make_settings(tmp_path, runtime_name, **overrides))
        made.append(executor)
        pool = getattr(executor.runtime, "pool", None)
        if pool is not None:
            assert pool.wait_ready(), "the warm pool did not fill"
        return executor

    yield factory
    for executor in made:
        executor.close()
    for executor in made:
        # All closed: nothing may be left, warm containers included.
        assert os.listdir(executor.runner.workspaces.runs) == [], "workspaces left behind"
        token = getattr(executor.runtime, "token", None)
        if token is not None:
            left = executor.runtime.client.api.containers(all=True, filters={"label": f"io.skill-executor.owner={token}"})
            assert left == [], "containers left behind"


@pytest.fixture
def executor(make_executor) -> Executor:  # type: ignore[no-untyped-def]
    return make_executor()


@pytest.fixture
def extra_skills(tmp_path: Path) -> Path:
    path = tmp_path / "extra-skills"
    path.mkdir(exist_ok=True)
    return path


def has_command(name: str) -> bool:
    return shutil.which(name) is not None


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")
