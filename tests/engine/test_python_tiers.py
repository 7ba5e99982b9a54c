"""Python tiers (issue 28): a skill whose ``requires-python`` the default sandbox's Python
(3.11, Debian bookworm) does not meet runs on the oldest tier that meets it (3.13, Debian
trixie, its own image), its environment resolved for that Python; a skill no tier can run
is refused naming what it asked for.  Fixture skills written the way trailofbits' trailmark
skills are (a PEP 723 script run with ``uv run {baseDir}/scripts/x.py``, a
``scripts/pyproject.toml``), never their code."""

from __future__ import annotations

from pathlib import Path

import pytest

from skill_executor.config import Settings
from skill_executor.core import Executor
from skill_executor.envs import DependenciesUnmet, ImagePackages, SkillEnvs, Sources, declared
from skill_executor.envs.plan import choose_tier
from skill_executor.image.inputs import DEFAULT_TIER, PYTHON_TIERS, RUNNER_PINS
from skill_executor.runtimes.hostpython import check_host_python

from ..conftest import make_settings, require_runtime
from ..helpers import make_skill, refused, run
from ..unit.test_skill_deps import AS_SERVICE, wheelhouse  # noqa: F401 - the fixture

TIER = PYTHON_TIERS["3.13"]
OFFERED = [DEFAULT_TIER, TIER]

# As trailmark's scripts are written: a PEP 723 header asking for 3.12+, a dependency, and
# syntax older Pythons cannot parse (PEP 695 type aliases).
GRAPH_SCRIPT = """# /// script
# requires-python = ">=3.12"
# dependencies = ["tinypkg", "numpy"]
# ///
\"\"\"Print a small graph.  Run via ``uv run {this_file} --target ...``.\"\"\"

import sys

import numpy
import tinypkg

type Edge = tuple[str, str]


def edges() -> list[Edge]:
    return [("a", "b"), ("b", "c")]


print(f"python {sys.version_info[0]}.{sys.version_info[1]}", tinypkg.VALUE, int(numpy.arange(3).sum()), len(edges()))
"""
PYPROJECT = """[project]
name = "slicer"
version = "0.0.0"
requires-python = ">=3.12"
dependencies = ["tinypkg>=1"]
"""


def graph_skill(root: Path) -> Path:
    skill = make_skill(
        root,
        "graph-tool",
        "name: graph-tool\ndescription: draws graphs",
        body="Run `uv run {baseDir}/scripts/graph.py --target {targetDir}`.\n",
    )
    (skill / "scripts").mkdir()
    (skill / "scripts/graph.py").write_text(GRAPH_SCRIPT)
    return skill


# -- choosing the tier (pure) ---------------------------------------------------------


def needs_of(tmp_path: Path, **files: str) -> object:
    skill = tmp_path / "s" / str(len(list((tmp_path / "s").glob("*"))) if (tmp_path / "s").is_dir() else 0)
    for name, text in files.items():
        (skill / name).parent.mkdir(parents=True, exist_ok=True)
        (skill / name).write_text(text)
    return declared(skill)


def test_the_default_tier_when_it_meets_every_requires_python(tmp_path: Path) -> None:
    assert choose_tier(declared(tmp_path), OFFERED) == DEFAULT_TIER  # nothing asked
    needs = needs_of(tmp_path, **{"a.py": '# /// script\n# requires-python = ">=3.10"\n# ///\n'})
    assert choose_tier(needs, OFFERED) == DEFAULT_TIER  # type: ignore[arg-type]


def test_a_newer_python_chooses_the_oldest_tier_that_has_it(tmp_path: Path) -> None:
    needs = needs_of(tmp_path, **{"scripts/pyproject.toml": PYPROJECT, "scripts/b.py": "print(1)\n"})
    assert needs.requires_python == (("scripts/pyproject.toml", ">=3.12"),)  # type: ignore[attr-defined]
    assert choose_tier(needs, OFFERED) == TIER  # type: ignore[arg-type]


def test_no_tier_is_refused_naming_each_unmet_specifier(tmp_path: Path) -> None:
    needs = needs_of(tmp_path, **{"x.py": '# /// script\n# requires-python = ">=3.12"\n# ///\n'})
    with pytest.raises(DependenciesUnmet) as info:
        choose_tier(needs, [DEFAULT_TIER])  # type: ignore[arg-type]
    assert info.value.details["unmet"] == [
        {
            "source": "x.py",
            "need": "python>=3.12",
            "error": "requires Python >=3.12; this service's sandboxes have Python 3.11.2",
        }
    ]
    both = needs_of(
        tmp_path,
        **{"old.py": '# /// script\n# requires-python = "<3.12"\n# ///\n', "pyproject.toml": PYPROJECT},
    )
    with pytest.raises(DependenciesUnmet) as info:
        choose_tier(both, OFFERED)  # type: ignore[arg-type]
    assert info.value.details["unmet"] == [
        {
            "source": "old.py, pyproject.toml",
            "need": "python<3.12,>=3.12",
            "error": "no one Python meets all of them; this service's sandboxes have Python 3.11.2 and 3.13.5",
        }
    ]


def test_an_invalid_requires_python_is_a_finding(tmp_path: Path) -> None:
    needs = needs_of(tmp_path, **{"x.py": '# /// script\n# requires-python = "three"\n# ///\n'})
    assert [(f.source, f.message) for f in needs.findings] == [  # type: ignore[attr-defined]
        ("x.py", "'requires-python' is not a PEP 440 version specifier")
    ]


def test_the_environment_is_planned_for_the_tier_python(tmp_path: Path) -> None:
    skill = graph_skill(tmp_path)
    envs = SkillEnvs(
        tmp_path / "envs",
        sources=Sources(),
        image=ImagePackages.load(RUNNER_PINS),
        tiers={"3.13": ImagePackages.load(RUNNER_PINS, tier=TIER)},
    )
    planned = envs.plan(skill)
    assert planned.tier == TIER
    assert planned.provided == ("numpy",)  # the tier's image pins numpy
    assert planned.python == ("tinypkg",)
    (skill / "scripts/graph.py").write_text(GRAPH_SCRIPT.replace('">=3.12"', '">=3.10"'))
    default = envs.plan(skill)
    assert default.tier == DEFAULT_TIER and default.key != planned.key  # a key per tier


def test_host_runtimes_refuse_a_tier_the_host_python_is_not() -> None:
    check_host_python(DEFAULT_TIER, "local", "/usr/bin:/bin")  # the default tier: any host
    with pytest.raises(Exception, match="the local runtime runs the host's python3, which is 3.11") as info:
        check_host_python(TIER, "local", "/usr/bin:/bin")
    assert getattr(info.value, "code", None) == "python_tier_unavailable"


# -- runs on the real engine ----------------------------------------------------------


def tier_executor(tmp_path: Path, runtime: str, wheels: Path, **overrides: object) -> Executor:
    graph_skill(tmp_path / "extra-skills")
    values: Settings = make_settings(
        tmp_path, runtime, wheelhouse=wheels, npm_wheelhouse=wheels, **AS_SERVICE, **overrides
    )
    return Executor.from_settings(values)


@pytest.mark.parametrize("runtime", ["docker-pool", "docker-runsc"])
def test_a_skill_asking_for_python_312_runs_on_the_313_tier(
    tmp_path: Path,
    runtime: str,
    wheelhouse: Path,  # noqa: F811
) -> None:
    require_runtime(runtime)
    executor = tier_executor(tmp_path, runtime, wheelhouse)
    try:
        result = run(
            executor,
            skill="graph-tool",
            # as trailmark's SKILL.md says it, then the interpreter straight
            command='uv run "$SKILL_DIR/scripts/graph.py" --target . && python3 "$SKILL_DIR/scripts/graph.py"',
        )
        assert result.exit_code == 0, result.stderr
        assert result.stdout.splitlines() == ["python 3.13 42 3 2"] * 2
        # the default tier's skills still run on the default image (and its warm pool)
        other = run(executor, command="python3 -c 'import sys; print(sys.version_info[:2])'")
        assert other.exit_code == 0 and other.stdout.strip() == "(3, 11)"
    finally:
        executor.close()


def test_a_tier_without_its_image_is_refused_saying_how_to_build_it(
    tmp_path: Path,
    docker_runtime_name: str,
    wheelhouse: Path,  # noqa: F811
) -> None:
    executor = tier_executor(
        tmp_path, docker_runtime_name, wheelhouse, python_tier_images={"3.13": "skill-executor/runner:no-such-tier"}
    )
    try:
        error = refused(executor, skill="graph-tool", command="true")
        assert error.code == "image_missing" and error.status == 503
        assert error.message == (
            "the Python 3.13 runner image 'skill-executor/runner:no-such-tier' is missing; build it with "
            "'skill-executor image build --flavour python3.13'"
        )
        ok, detail = executor.runtime.health()["python_tiers"]
        # degraded, not down: the other skills still run (a readiness probe keeps the service)
        assert ok and "3.13: skill-executor/runner:no-such-tier is missing" in detail
        assert run(executor, command="true").exit_code == 0
    finally:
        executor.close()


def test_a_service_offering_only_the_default_tier_refuses_the_skill(
    tmp_path: Path,
    docker_runtime_name: str,
    wheelhouse: Path,  # noqa: F811
) -> None:
    executor = tier_executor(tmp_path, docker_runtime_name, wheelhouse, python_tier_images={})
    try:
        error = refused(executor, skill="graph-tool", command="true")
        assert error.code == "skill_dependencies_unmet" and error.status == 422
        assert error.details["unmet"] == [
            {
                "source": "scripts/graph.py",
                "need": "python>=3.12",
                "error": "requires Python >=3.12; this service's sandboxes have Python 3.11.2",
            }
        ]
    finally:
        executor.close()


def test_an_unknown_tier_in_the_settings_is_refused() -> None:
    with pytest.raises(ValueError, match="'3.12' is not a Python tier besides the default"):
        Settings(python_tier_images={"3.12": "x"})


def test_agent_sandbox_claims_a_tier_pod_from_its_python_pool() -> None:
    from types import SimpleNamespace

    from skill_executor.runtimes.agentsandbox.runtime import AgentSandboxRuntime

    runtime = SimpleNamespace(tier="document", claims=SimpleNamespace(pools={"document": "d", "python3.13": "p"}))
    assert AgentSandboxRuntime.pool_tier(runtime, DEFAULT_TIER) == "document"  # type: ignore[arg-type]
    assert AgentSandboxRuntime.pool_tier(runtime, TIER) == "python3.13"  # type: ignore[arg-type]
    runtime.claims.pools = {"document": "d"}
    with pytest.raises(Exception, match="SKILL_EXECUTOR_AGENT_SANDBOX_POOLS has no 'python3.13' pool") as info:
        AgentSandboxRuntime.pool_tier(runtime, TIER)  # type: ignore[arg-type]
    assert getattr(info.value, "code", None) == "python_tier_unavailable"
