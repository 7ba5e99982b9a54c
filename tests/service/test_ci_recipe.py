"""The CI recipes of examples/ci/ and scripts/run-ci-recipe.sh, which runs a GitHub
Actions workflow's ``run:`` steps here.

The Docker tests run the GitHub recipe end to end, as a skill author's repository would:
a copy of ``skills/`` in a temporary repository, skill-executor installed from this
source tree into a fresh virtualenv by the recipe's own pip step, the runner image
reused by its build step (it exists: ./scripts/test.sh builds it), then
``skill-executor test skills/`` and the report steps.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import venv
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from skill_executor.testing.format import TestFile

from ..conftest import in_ci, require_runtime

REPO = Path(__file__).resolve().parent.parent.parent
RUNNER = REPO / "scripts" / "run-ci-recipe.sh"
GITHUB = REPO / "examples" / "ci" / "github-actions.yml"
GITLAB = REPO / "examples" / "ci" / "gitlab-ci.yml"
SKILLS = REPO / "skills"


def run_recipe(
    recipe: Path, workdir: Path, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    # `python` is this interpreter unless the caller's PATH says otherwise.
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    full = {**os.environ, "PATH": path, "PYTHON": sys.executable, **(env or {})}
    return subprocess.run(
        ["bash", str(RUNNER), str(recipe), str(workdir)],
        env=full,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def cases_of(skill: Path) -> list[str]:
    data = yaml.safe_load((skill / "tests" / "skill-tests.yaml").read_text(encoding="utf-8"))
    return [case.name for case in TestFile.model_validate(data).cases]


def junit_cases(report: Path) -> dict[str, bool]:
    """testcase name (with its classname) -> passed."""
    root = ET.parse(report).getroot()
    assert root.tag in ("testsuites", "testsuite"), root.tag
    return {
        f"{case.get('classname', '')} {case.get('name', '')}": case.find("failure") is None
        and case.find("error") is None
        for case in root.iter("testcase")
    }


def named(results: dict[str, bool], case: str) -> bool:
    """The result of the one testcase whose name holds the case's name."""
    found = [passed for name, passed in results.items() if case in name]
    assert len(found) == 1, f"{case!r} in {sorted(results)}"
    return found[0]


# -- run-ci-recipe.sh on small workflows (no Docker) ---------------------------------------


def test_runner_emulates_steps_env_files_and_always(tmp_path: Path) -> None:
    recipe = tmp_path / "wf.yml"
    recipe.write_text(
        textwrap.dedent("""\
        on: push
        env: {A: workflow, B: workflow}
        jobs:
          first:
            env: {B: job}
            steps:
              - uses: actions/checkout@v4
              - name: set
                run: |
                  echo "FROM_FILE=one two" >> "$GITHUB_ENV"
                  printf 'MULTI<<END\\nl1\\nl2\\nEND\\n' >> "$GITHUB_ENV"
                  echo "GITHUB_WORKSPACE=/nope" >> "$GITHUB_ENV"
                  export LOST=1
                  mkdir -p sub
              - name: read
                working-directory: sub
                env: {C: "${{ env.FROM_FILE }}!"}
                run: |
                  echo "A=$A B=$B C=$C LOST=${LOST:-unset} CI=$CI" > ../seen.txt
                  echo "$MULTI" >> ../seen.txt
                  echo "$GITHUB_WORKSPACE" >> ../seen.txt
                  basename "$PWD" >> ../seen.txt
              - name: fails
                run: |
                  false
                  echo not reached > reached.txt
              - name: skipped after a failure
                run: touch skipped.txt
              - name: always
                if: ${{ always() }}
                run: touch always.txt; exit 0
              - name: on failure
                if: failure()
                run: exit 7
          second:
            steps: [{run: touch second-job.txt}]
        """)
    )
    proc = run_recipe(recipe, tmp_path)
    assert proc.returncode == 1, proc.stderr  # the first failing step's status
    seen = (tmp_path / "seen.txt").read_text().splitlines()
    assert seen == ["A=workflow B=job C=one two! LOST=unset CI=true", "l1", "l2", str(tmp_path.resolve()), "sub"]
    assert (tmp_path / "always.txt").exists()
    for absent in ("reached.txt", "skipped.txt", "second-job.txt"):
        assert not (tmp_path / absent).exists(), absent
    assert "skipped (uses: actions/checkout@v4)" in proc.stderr
    assert "GITHUB_ENV may not set GITHUB_WORKSPACE; ignored" in proc.stderr


def test_runner_passes_and_refuses_what_it_cannot_run(tmp_path: Path) -> None:
    good = tmp_path / "good.yml"
    good.write_text(
        "jobs:\n  j:\n    steps:\n      - run: echo hi\n      - run: exit 3\n        continue-on-error: true\n"
    )
    proc = run_recipe(good, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "hi\n"
    bad = tmp_path / "bad.yml"
    bad.write_text("jobs:\n  j:\n    steps:\n      - run: echo ${{ secrets.TOKEN }}\n")
    proc = run_recipe(bad, tmp_path)
    assert proc.returncode == 2
    assert "unsupported expression ${{ secrets.TOKEN }}" in proc.stderr
    proc = subprocess.run(["bash", str(RUNNER)], capture_output=True, text=True, check=False)
    assert proc.returncode == 2
    assert proc.stderr == "usage: run-ci-recipe.sh RECIPE.yml [WORKDIR]\n"


# -- the recipes' shape (no Docker) --------------------------------------------------------


def test_github_recipe_shape() -> None:
    workflow = yaml.safe_load(GITHUB.read_text(encoding="utf-8"))
    (job,) = workflow["jobs"].values()
    steps = job["steps"]
    uses = [step.get("uses", "").split("@")[0] for step in steps]
    assert uses[:3] == ["actions/checkout", "actions/setup-python", "actions/checkout"]
    assert steps[1]["with"]["python-version"] == "3.11"
    assert steps[2]["with"]["path"] == ".skill-executor"
    runs = [step["run"] for step in steps if "run" in step]
    assert any('pip install "${SKILL_EXECUTOR_SOURCE:-./.skill-executor}"' in run for run in runs)
    assert any("skill-executor image build" in run and "GITHUB_ENV" in run for run in runs)
    test_step = next(i for i, step in enumerate(steps) if "skill-executor test" in step.get("run", ""))
    assert "--junit report.xml" in steps[test_step]["run"]
    assert "--json report.json" in steps[test_step]["run"]
    after = steps[test_step + 1 :]
    assert after and all(step.get("if") == "always()" for step in after)
    publish = {step["uses"].split("@")[0]: step for step in after if "uses" in step}
    assert publish["mikepenz/action-junit-report"]["with"]["report_paths"] == "report.xml"
    assert "actions/upload-artifact" in publish


def test_github_summary_step_lists_the_failed_cases(tmp_path: Path) -> None:
    workflow = yaml.safe_load(GITHUB.read_text(encoding="utf-8"))
    (job,) = workflow["jobs"].values()
    (step,) = [step for step in job["steps"] if step.get("name") == "Summary"]
    recipe = tmp_path / "summary.yml"
    recipe.write_text(yaml.safe_dump({"jobs": {"only": {"steps": [{"run": step["run"]}]}}}))
    summary = tmp_path / "summary.md"
    proc = run_recipe(recipe, tmp_path, {"GITHUB_STEP_SUMMARY": str(summary)})
    assert proc.returncode == 1  # no report: the step says so and fails
    assert summary.read_text() == "### Skill tests: no report\n"
    (tmp_path / "report.xml").write_text(
        '<testsuites><testsuite name="math-tools" tests="3">'
        '<testcase classname="math-tools" name="fib ok"/>'
        '<testcase classname="math-tools" name="fib bad"><failure message="exit 1"/></testcase>'
        '<testcase classname="csv-report" name="crashed"><error message="boom"/></testcase>'
        "</testsuite></testsuites>"
    )
    summary.unlink()
    proc = run_recipe(recipe, tmp_path, {"GITHUB_STEP_SUMMARY": str(summary)})
    assert proc.returncode == 0, proc.stderr
    assert summary.read_text() == (
        "### Skill tests: 1 of 3 passed\n- :x: math-tools: fib bad\n- :x: csv-report: crashed\n"
    )


def test_github_summary_shows_a_hostile_case_name_as_text(tmp_path: Path) -> None:
    """The summary page renders Markdown: a pull request's case name must not add a link, an
    image, HTML or a line of its own to it."""
    workflow = yaml.safe_load(GITHUB.read_text(encoding="utf-8"))
    (job,) = workflow["jobs"].values()
    (step,) = [step for step in job["steps"] if step.get("name") == "Summary"]
    assert workflow["permissions"] == {"contents": "read", "checks": "write"}
    recipe = tmp_path / "summary.yml"
    recipe.write_text(yaml.safe_dump({"jobs": {"only": {"steps": [{"run": step["run"]}]}}}))
    hostile = "![x](https://evil.example/p.png) <img src=x> [all passed](https://x) `code`\n### 9 of 9 passed"
    suite = ET.Element("testsuites")
    case = ET.SubElement(ET.SubElement(suite, "testsuite"), "testcase", classname="skills.demo", name=hostile)
    ET.SubElement(case, "failure", message="x")
    (tmp_path / "report.xml").write_bytes(ET.tostring(suite))
    summary = tmp_path / "summary.md"
    proc = run_recipe(recipe, tmp_path, {"GITHUB_STEP_SUMMARY": str(summary)})
    assert proc.returncode == 0, proc.stderr
    lines = summary.read_text().splitlines()
    assert lines[0] == "### Skill tests: 0 of 1 passed" and len(lines) == 2
    assert lines[1] == (
        "- :x: skills.demo: \\!\\[x\\]\\(https://evil.example/p.png\\) \\<img src=x\\> "
        "\\[all passed\\]\\(https://x\\) \\`code\\` \\#\\#\\# 9 of 9 passed"
    )


def test_gitlab_recipe_shape() -> None:
    config = yaml.safe_load(GITLAB.read_text(encoding="utf-8"))
    job = config["skill-tests"]
    assert set(job) >= {"image", "services", "variables", "script", "artifacts"}
    assert any("dind" in str(service) for service in job["services"])
    assert job["variables"]["DOCKER_HOST"] == "tcp://docker:2375"
    script = "\n".join(job["script"])
    assert 'pip install "${SKILL_EXECUTOR_SOURCE:-./.skill-executor}"' in script
    assert "skill-executor image build" in script and "SKILL_EXECUTOR_DOCKER_IMAGE" in script
    assert "skill-executor test skills/ --junit report.xml --json report.json" in script
    assert job["artifacts"]["when"] == "always"
    assert job["artifacts"]["reports"]["junit"] == "report.xml"


# -- the GitHub recipe end to end (Docker) -------------------------------------------------


@pytest.fixture(scope="session")
def recipe_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A fresh virtualenv for the recipe's python/pip, and a clean copy of this source
    tree (what a checkout holds) as SKILL_EXECUTOR_SOURCE."""
    require_runtime("docker")
    _require_current_image()
    base = tmp_path_factory.mktemp("ci-recipe")
    source = base / "skill-executor"
    listed = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, listed):
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    env_dir = base / "venv"
    venv.create(env_dir, with_pip=True)
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("SKILL_EXECUTOR_DOCKER_IMAGE", "VIRTUAL_ENV", "PYTHONPATH", "GITHUB_ENV")
    }
    env.update(
        PATH=f"{env_dir / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        VIRTUAL_ENV=str(env_dir),
        SKILL_EXECUTOR_SOURCE=str(source),
        PYTHON=sys.executable,
    )
    return env


def _require_current_image() -> None:
    """The recipe reuses the runner image of this tree; building it here would take long."""
    import docker

    from skill_executor.image.inputs import flavour_inputs, runner_tag, tree_hash

    root = REPO / "images"
    inputs = flavour_inputs(root / "runner", "full")
    tags = {runner_tag("full", tree_hash(paths, root)) for paths in (inputs, [*inputs, root / "build-base.sh"])}
    client = docker.DockerClient(
        base_url=os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"), version="auto", timeout=30
    )
    if not any(client.images.list(name=tag) for tag in tags):
        problem = (
            f"the runner image of this tree ({' or '.join(sorted(tags))}) is not built; ./scripts/test.sh builds it"
        )
        if in_ci():
            pytest.fail(problem)
        pytest.skip(problem)


def make_repo(tmp_path: Path, skills: list[str]) -> Path:
    repo = tmp_path / "skills-repo"
    for name in skills:
        shutil.copytree(SKILLS / name, repo / "skills" / name)
    return repo


@pytest.mark.docker
def test_github_recipe_passes_on_the_bundled_skills(tmp_path: Path, recipe_env: dict[str, str]) -> None:
    names = ["csv-report", "file-bundle", "math-tools"]
    repo = make_repo(tmp_path, names)
    summary = tmp_path / "summary.md"
    proc = run_recipe(GITHUB, repo, {**recipe_env, "GITHUB_STEP_SUMMARY": str(summary)}, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert '"built": false' in proc.stdout  # the image step reused the image
    results = junit_cases(repo / "report.xml")
    expected = [case for name in names for case in cases_of(SKILLS / name)]
    # Every case, and each skill's SKILL.md validation.
    assert len(results) == len(expected) + len(names)
    assert all(results.values()), [name for name, passed in results.items() if not passed]
    for case in expected:
        assert named(results, case)
    report = json.loads((repo / "report.json").read_text(encoding="utf-8"))
    assert report["summary"]["total"] == len(results)
    assert report["summary"]["failed"] == 0
    assert f"{len(results)} of {len(results)} passed" in summary.read_text(encoding="utf-8")


@pytest.mark.docker
def test_github_recipe_fails_on_a_broken_skill_and_still_reports(tmp_path: Path, recipe_env: dict[str, str]) -> None:
    repo = make_repo(tmp_path, ["math-tools"])
    (repo / "skills" / "math-tools" / "scripts" / "fib.py").write_text("import sys\nsys.exit(1)\n")
    summary = tmp_path / "summary.md"
    proc = run_recipe(GITHUB, repo, {**recipe_env, "GITHUB_STEP_SUMMARY": str(summary)}, timeout=900)
    assert proc.returncode == 1, proc.stdout[-4000:] + proc.stderr[-4000:]  # a case failed
    results = junit_cases(repo / "report.xml")
    cases = cases_of(SKILLS / "math-tools")
    assert len(results) == len(cases) + 1  # and the SKILL.md validation
    fib = {case for case in cases if case.startswith("fib ")}
    assert fib
    for case in cases:
        assert named(results, case) == (case not in fib), case
    # The if: always() steps ran after the failure.
    text = summary.read_text(encoding="utf-8")
    assert f"{len(results) - len(fib)} of {len(results)} passed" in text
    assert all(case in text for case in fib)
