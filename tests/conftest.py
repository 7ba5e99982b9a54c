"""Shared fixtures: an Executor per test on each runtime under test; the tiers; the
session-end leftover check.

Pipeline tests take the ``executor`` fixture and run unchanged on every runtime in
``RUNTIMES``.  Docker runs need a real engine: in CI (``CI=true``) a missing engine
is a failure, elsewhere those tests skip with the reason.

Every test is in exactly one tier (a marker, ``./scripts/test.sh -m unit``), assigned
by the folder its module is in (``tests/<tier>/``; ``TEST_TIERS`` for the tests of a module that differ from it); see
docs/guides/development.md.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skill_executor.config import Settings
from skill_executor.core import Executor

from . import leftovers
from .databases import database  # noqa: F401 (a fixture for every test module)
from .engines import second_engine  # noqa: F401 (a fixture for every test module)
from .pgserver import postgres_server, postgres_url  # noqa: F401 (fixtures for every test module)

REPO = Path(__file__).resolve().parent.parent
SKILLS = REPO / "skills"
RUNTIMES = ["local", "docker", "docker-pool"]
#: The container-hardening tests run on runc (the engine's default) and on gVisor (``runsc``).
HARDENING_RUNTIMES = ["docker", "docker-pool", "docker-runsc", "docker-pool-runsc"]
#: Test runtime name -> the engine's OCI runtime it selects (``docker_oci_runtime``).
OCI_RUNTIMES = {"docker-runsc": "runsc", "docker-pool-runsc": "runsc"}
#: Modules whose ``executor`` tests run on gVisor too (the attacks on the sandbox's host side, the runtime seam's contract);
#: the other pipeline tests run on ``RUNTIMES``.
GVISOR_MODULES = {"test_boundary", "test_runtime_contract", "test_processes"}
#: Modules whose ``executor`` tests run on the Docker runtimes only (a session's processes).
DOCKER_ONLY_MODULES = {"test_processes"}
#: Modules whose ``executor`` tests run on the bwrap runtime too (bubblewrap, no Docker).
BWRAP_MODULES = {"test_boundary", "test_runtime_contract"}
#: Modules whose ``executor`` tests run on the agent-sandbox runtime too: the real SDK against
#: tests/fakekube.py, each pod our in-pod server in a container of the runner image.
AGENT_SANDBOX_MODULES = {"test_runtime_contract"}
#: Modules whose ``executor`` tests run on the agent-sandbox runtime only.
AGENT_SANDBOX_ONLY = {"test_agentsandbox_runtime"}
_docker_problem: list[str | None] = []
_bwrap_problem: list[str | None] = []
_runsc_problem: list[str | None] = []


def docker_problem() -> str | None:
    """Why Docker tests cannot run here (None when they can); probed once."""
    if not _docker_problem:
        reason = None
        try:
            import docker

            from skill_executor.config import Settings

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

            from skill_executor.errors import ExecutorError
            from skill_executor.runtimes.docker.oci import check_oci_runtime

            client = docker.DockerClient(base_url="unix:///var/run/docker.sock", version="auto", timeout=10)
            try:
                check_oci_runtime("runsc", client.info(), pool=True)
            except ExecutorError as exc:
                reason = f"{exc.message} (./scripts/test.sh registers it)"
        _runsc_problem.append(reason)
    return _runsc_problem[0]


def bwrap_problem() -> str | None:
    """Why the bwrap tests cannot run here (None when they can); probed once.

    ``scripts/test.sh`` installs bubblewrap (``ensure_bwrap``)."""
    if not _bwrap_problem:
        reason = None
        if shutil.which("bwrap") is None:
            reason = "no bwrap on PATH (./scripts/test.sh installs Debian's bubblewrap)"
        else:
            probe = subprocess.run(
                ["bwrap", "--unshare-user", "--unshare-pid", "--unshare-net", "--ro-bind", "/", "/", "true"],
                capture_output=True,
                check=False,
            )
            if probe.returncode != 0:
                reason = f"bwrap cannot make a sandbox here: {probe.stderr.decode(errors='replace').strip()}"
        _bwrap_problem.append(reason)
    return _bwrap_problem[0]


def is_gvisor(runtime: str) -> bool:
    return OCI_RUNTIMES.get(runtime) == "runsc"


def require_runtime(runtime: str) -> None:
    """Skip (or, in CI, fail) a Docker test when no engine (or no runsc) is usable (the
    agent-sandbox runtime's test pods are containers too)."""
    if runtime == "agent-sandbox":
        runtime = "docker"
    if runtime == "bwrap":
        problem = bwrap_problem()
        if problem is not None:
            if in_ci():
                pytest.fail(f"CI must run the bwrap tests: {problem}")
            pytest.skip(problem)
        return
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
    if runtime == "bwrap":
        # bwrap starts as the run's user (1000 under root): it must reach the workspaces,
        # which the sealed data dir does not let it (see skill_executor/runtimes/bwrap.py).
        values["workspace_root"] = tmp_path / "workspaces"
        if os.geteuid() == 0:
            for folder in (tmp_path, *tmp_path.parents):
                os.chmod(folder, os.stat(folder).st_mode | 0o001)
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``runtime_name``: every runtime of ``RUNTIMES``, plus gVisor for ``GVISOR_MODULES``."""
    if "runtime_name" in metafunc.fixturenames:
        names = list(RUNTIMES)
        module = metafunc.module.__name__.rsplit(".", 1)[-1]
        if module in GVISOR_MODULES:
            names += [name for name in HARDENING_RUNTIMES if is_gvisor(name)]
        if module in BWRAP_MODULES:
            names.append("bwrap")
        if module in AGENT_SANDBOX_MODULES:
            names.append("agent-sandbox")
        if module in DOCKER_ONLY_MODULES:
            names = [name for name in names if name.startswith("docker")]
        if module in AGENT_SANDBOX_ONLY:
            names = ["agent-sandbox"]
        metafunc.parametrize("runtime_name", names, indirect=True)


@pytest.fixture
def runtime_name(request: pytest.FixtureRequest) -> str:
    require_runtime(request.param)
    return request.param


@pytest.fixture
def docker_runtime_name() -> str:
    require_runtime("docker")
    return "docker"


@pytest.fixture(scope="session")
def agent_sandbox_farm() -> Iterator[dict[str, object]]:
    """A fake Kubernetes API whose pool ``pool-a`` holds warm pods (our in-pod server in
    containers of the runner image): the settings that point a worker's runtime at it."""
    from collections import deque

    from .agentsandbox_pods import PodFarm
    from .fakekube import FakeKube, Pool

    require_runtime("docker")
    farm = PodFarm()
    try:
        kube = FakeKube({"pool-a": Pool(ready=deque([farm.make(), farm.make()]), make=farm.make, discard=farm.discard)})
        with kube.serving():
            yield {
                "agent_sandbox_api_url": kube.url,
                "agent_sandbox_namespace": "sandboxes",
                "agent_sandbox_pools": {"document": "pool-a"},
                "agent_sandbox_rest_port": farm.rest_port,
                "agent_sandbox_grpc_port": farm.grpc_port,
                "agent_sandbox_claim_timeout_seconds": 60.0,
                "agent_sandbox_kill_grace_seconds": 1.0,
            }
    finally:
        farm.close()


@pytest.fixture
def make_executor(tmp_path: Path, runtime_name: str, request: pytest.FixtureRequest) -> Iterator:
    made: list[Executor] = []
    kube: dict[str, object] = {}
    if runtime_name == "agent-sandbox":
        kube = request.getfixturevalue("agent_sandbox_farm")

    def factory(**overrides: object) -> Executor:
        executor = Executor.from_settings(make_settings(tmp_path, runtime_name, **{**kube, **overrides}))
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
            left = executor.runtime.client.api.containers(
                all=True, filters={"label": f"io.skill-executor.owner={token}"}
            )
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


# --- Tiers -------------------------------------------------------------------------------

#: The tiers, lightest first (markers registered in pyproject.toml).
#: unit: no engine, no sandbox, no package resolver, no server process, no CLI subprocess (the
#: whole tier in well under a minute); engine: a real sandbox (a Docker engine, bwrap, the local
#: runtime's processes) or a real resolver (pip, npm), the executor in this process; service: real server
#: processes (tests/api_server.py's Server) and CLI subprocesses, on the engine when there is
#: one; world: published-skill patterns and the attack/boundary suites.
TIERS = ("unit", "engine", "service", "world")
#: Tests whose tier is not their module's (modules that mix tiers): module -> {test function: tier}.
TEST_TIERS: dict[str, dict[str, str]] = {
    "test_exec_policy": {
        "test_the_rule_reaches_the_launcher_as_its_files_are_named": "unit",
        "test_the_exit_frame_carries_a_checked_verdict": "unit",
        "test_a_tool_result_says_which_rule_stopped_the_run": "unit",
        "test_runtimes_that_cannot_enforce_refuse_the_run": "engine",
        "test_a_supervisor_killed_by_the_command_takes_the_command_with_it": "engine",
    },
    "test_artifact_races": {"test_the_cli_uses_the_configured_database": "service"},
    "test_client_package": {"test_the_generator_checks": "service"},  # the generator in a subprocess
    "test_database": {"test_processes_opening_one_new_sqlite_file_at_once_all_get_it": "service"},  # 48 processes
    "test_artifacts": {
        "test_cli_reading_an_absent_store_creates_nothing": "service",
        "test_cli_delete": "service",
        "test_service_start_sweeps_temps_and_expires_versions": "service",
    },
    "test_docker": {
        "test_gvisor_registration_needs_its_arguments": "unit",
        "test_a_process_that_can_no_longer_run_code_is_told_from_one_that_can": "unit",
        "test_a_container_that_exits_while_it_is_killed_for_its_removal_is_removed_again": "unit",
    },
    "test_content_safety": {
        "test_only_passive_types_are_inline": "unit",
        "test_file_names_cannot_break_the_header_or_disguise_themselves": "unit",
        "test_the_worker_answers_carry_the_headers_too": "unit",
        "test_the_pod_servers_rule_is_the_services": "unit",
    },
    "test_doctor": {"test_cli": "service", "test_http": "service"},
    "test_extras": {"test_serve_on_sqlite_needs_no_extra": "service"},  # a server process
    "test_docs": {  # the docs site's build (mkdocs) in a subprocess
        "test_the_site_builds_strictly_offline": "service",
        "test_reference_pages_are_generated_from_the_code": "service",
        "test_a_broken_link_fails_the_build": "service",
        "test_a_page_left_out_of_the_nav_fails_the_build": "service",
    },
    "test_image": {
        "test_every_promised_python_package_is_pinned_directly": "unit",
        "test_minimal_pins_are_full_pins_and_the_rest_is_the_full_part": "unit",
        "test_pins_that_disagree_are_refused": "unit",
        "test_the_tag_covers_pins_not_downloads": "unit",
        "test_wheels_are_fetched_for_the_image_python_not_the_host": "unit",
        "test_version_output_is_parsed": "unit",
    },
    "test_registry": {
        "test_uploads_over_the_byte_cap_are_refused_before_they_are_held": "service",
        "test_a_rollback_of_a_folder_skill_holds_across_a_touch_and_a_server_restart": "service",
    },
    "test_registry_no_default": {
        "test_the_registry_gives_a_new_upload_without_default_none": "unit",
        "test_a_replica_neither_lists_nor_resolves_another_replicas_skill_without_default": "unit",
    },
    "test_results_paths": {
        "test_cli_artifacts_put_sniffs_the_mime_type": "service",
        "test_cli_skills_show_expands_placeholders": "service",
    },
    "test_skill_deps": {"test_cli_install_refuses_unmet_needs": "service"},
    "test_skill_tests": {"test_the_schema_validates_what_the_models_accept": "service"},
}
#: Runtimes that start real sandboxes without Docker: a test on one is (at least) engine.
SANDBOX_RUNTIMES = {"local", "bwrap"}
#: Fixtures that resolve packages with a real pip (a wheelhouse to resolve from): engine.
RESOLVER_FIXTURES = {"wheelhouse"}
#: Fixtures that start a real server process: a test using one is (at least) service.
SERVER_FIXTURES = {
    "server",
    "secured",
    "service",
    "tenants",
    "open_local",
    "s3_server",
    "postgres_server",
    "postgres_url",
}


def tier_of(item: pytest.Item) -> str | None:
    """The item's tier: its own entry in ``TEST_TIERS``, else its module's folder's; raised to
    engine when it runs on Docker (a Docker ``runtime_name``, ``docker_runtime_name``, the
    ``docker`` marker) and to service when it uses a server fixture."""
    module = item.module.__name__.rsplit(".", 1)[-1] if isinstance(item, pytest.Function) else ""
    function = item.originalname if isinstance(item, pytest.Function) else item.name
    folder = item.path.parent.name if isinstance(item, pytest.Function) else ""
    tier = TEST_TIERS.get(module, {}).get(function) or (folder if folder in TIERS else None)
    if tier is None:
        return None
    names = set(getattr(item, "fixturenames", ()))
    callspec = getattr(item, "callspec", None)
    runtime = str(callspec.params.get("runtime_name", "")) if callspec is not None else ""
    if callspec is not None and callspec.params.get("database") == "postgresql":
        names.add("postgres_server")  # the database fixture's Postgres case
    if TIERS.index(tier) < TIERS.index("engine") and (
        runtime.startswith("docker")
        or runtime == "agent-sandbox"
        or "docker_runtime_name" in names
        or item.get_closest_marker("docker")
        or runtime in SANDBOX_RUNTIMES
        or names & RESOLVER_FIXTURES
    ):
        tier = "engine"
    if TIERS.index(tier) < TIERS.index("service") and names & SERVER_FIXTURES:
        tier = "service"
    return tier


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every item with its tier before ``-m`` selects; an item in no tier is an error."""
    lost = []
    for item in items:
        tier = tier_of(item)
        if tier is None:
            lost.append(item.nodeid)
            continue
        item.add_marker(getattr(pytest.mark, tier))
    if lost:
        raise pytest.UsageError(
            f"{len(lost)} test(s) in no tier (a test module belongs in tests/unit, tests/engine, tests/service or tests/world): "
            + ", ".join(lost[:10])
        )


@pytest.fixture(autouse=True)
def _unit_tier_guard(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A unit test that reaches the Docker engine or starts the service's CLI (a server
    included) fails, naming its real tier: the tier table cannot drift silently."""
    if request.node.get_closest_marker("unit") is None:
        return
    import docker.api.client

    def no_engine(*args: Any, **kwargs: Any) -> None:
        pytest.fail(
            f"{request.node.nodeid} is in the unit tier but uses the Docker engine: tests/conftest.py TEST_TIERS"
        )

    real_popen = subprocess.Popen.__init__

    def no_cli(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
        argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)
        if any("skill_executor.cli.main" in str(arg) or str(arg).endswith("skill-executor") for arg in argv):
            pytest.fail(
                f"{request.node.nodeid} is in the unit tier but runs the CLI or a server: tests/conftest.py TEST_TIERS"
            )
        words = [os.path.basename(str(arg)) for arg in argv]
        if "bwrap" in words or "mkdocs" in words or ("-m" in words and ("pip" in words or "mkdocs" in words)):
            pytest.fail(
                f"{request.node.nodeid} is in the unit tier but starts a sandbox, a resolver or a docs build "
                f"({' '.join(words[:4])}): tests/conftest.py TEST_TIERS"
            )
        real_popen(self, args, *rest, **kwargs)

    monkeypatch.setattr(docker.api.client.APIClient, "__init__", no_engine)
    monkeypatch.setattr(subprocess.Popen, "__init__", no_cli)


# --- The session-end leftover check -----------------------------------------------------


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Once every test ran (with xdist: in the controller, after every worker finished),
    nothing the session made may be left: a leftover fails the run."""
    config = session.config
    if hasattr(config, "workerinput") or config.option.collectonly or not session.testscollected:
        return
    factory: Any = getattr(config, "_tmp_path_factory", None)
    if factory is None:
        return
    left = leftovers.find(factory.getbasetemp(), engine=docker_problem() is None)
    if not left:
        return
    reporter: Any = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_sep("=", "LEFTOVERS: the session left these behind", red=True, bold=True)
        for line in left:
            reporter.write_line(line)
    if session.exitstatus == pytest.ExitCode.OK:  # a run already failing (or interrupted) keeps its status
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
