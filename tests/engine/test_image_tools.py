"""The runner image's tools the way published skills call them, offline: ``uv run`` of a
PEP 723 script (its ``# /// script`` dependencies resolved when the skill is installed,
or a clear error naming what is missing), the real uv for the rest, ImageMagick 7's
``magick`` on IM6, ESM ``import`` of the image's npm modules.  Fixture skills written the
way the collections write theirs (their invocation patterns, not their code)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from skill_executor.config import Settings
from skill_executor.core import Executor

from ..conftest import make_settings
from ..helpers import make_skill, refused, run
from ..unit.test_skill_deps import AS_SERVICE, wheelhouse  # noqa: F401 - the fixture

SCRIPT = """# /// script
# requires-python = ">=3.10"
# dependencies = [
#   "tinypkg>=1",
#   "numpy",
# ]
# ///
import sys

import numpy
import tinypkg

print("tool", tinypkg.VALUE, int(numpy.arange(4).sum()), *sys.argv[1:])
"""
NEEDS_MISSING = """# /// script
# dependencies = ["nosuchpkg-for-tests>=1", "numpy>=99"]
# ///
print("should not run")
"""
NEWER_PYTHON = """# /// script
# requires-python = ">=3.99"
# ///
print("should not run")
"""


def uv_skill(root: Path) -> Path:
    skill = make_skill(root, "uv-tool", "name: uv-tool\ndescription: a PEP 723 script run with uv")
    (skill / "scripts").mkdir()
    (skill / "scripts/tool.py").write_text(SCRIPT)
    return skill


@pytest.fixture
def docker_settings(tmp_path: Path, docker_runtime_name: str) -> Iterator[dict[str, object]]:
    yield {"tmp_path": tmp_path, "runtime": docker_runtime_name}


def executor_with(settings: dict[str, object], **overrides: object) -> Executor:
    values: Settings = make_settings(settings["tmp_path"], settings["runtime"], **overrides)  # type: ignore[arg-type]
    return Executor.from_settings(values)


def test_uv_run_serves_a_pep723_script_from_what_install_resolved(
    docker_settings: dict[str, object],
    wheelhouse: Path,  # noqa: F811
) -> None:
    uv_skill(Path(str(docker_settings["tmp_path"])) / "extra-skills")
    executor = executor_with(docker_settings, wheelhouse=wheelhouse, npm_wheelhouse=wheelhouse, **AS_SERVICE)
    try:
        result = run(
            executor,
            skill="uv-tool",
            # as trailofbits' skills say it: uv run {baseDir}/scripts/x.py, with uv's own options
            command='uv run --no-project --quiet "$SKILL_DIR/scripts/tool.py" a b '
            "&& uv --no-config run --with tinypkg python -c 'import tinypkg; print(tinypkg.VALUE)' "
            "&& echo '{\"a\": 1}' | uv run -m json.tool --compact && uv --version",
        )
        assert result.exit_code == 0, result.stderr
        lines = result.stdout.splitlines()
        assert lines[:3] == ["tool 42 6 a b", "42", '{"a":1}']
        assert lines[3].startswith("uv 0.")  # the real uv answers everything but `run`
    finally:
        executor.close()


def test_uv_run_names_what_the_sandbox_does_not_have(docker_settings: dict[str, object]) -> None:
    root = Path(str(docker_settings["tmp_path"])) / "extra-skills"
    skill = make_skill(root, "uv-missing", "name: uv-missing\ndescription: needs what is not there")
    (skill / "scripts").mkdir()
    (skill / "scripts/missing.py").write_text(NEEDS_MISSING)
    newer_skill = make_skill(root, "uv-newer", "name: uv-newer\ndescription: needs a Python no sandbox has")
    (newer_skill / "scripts").mkdir()
    (newer_skill / "scripts/newer.py").write_text(NEWER_PYTHON)
    executor = executor_with(docker_settings, skill_deps="off")
    try:
        missing = run(executor, skill="uv-missing", command="uv run scripts/missing.py")
        assert missing.exit_code == 2 and "should not run" not in missing.stdout
        assert "nosuchpkg-for-tests>=1 (not installed)" in missing.stderr
        assert "numpy>=99 (this sandbox has 2." in missing.stderr and "no network" in missing.stderr
        # A skill's own script asking for a Python no tier has: refused before anything starts.
        error = refused(executor, skill="uv-newer", command="uv run --script scripts/newer.py")
        assert error.code == "skill_dependencies_unmet"
        assert error.details["unmet"] == [
            {
                "source": "scripts/newer.py",
                "need": "python>=3.99",
                "error": "requires Python >=3.99; this service's sandboxes have Python 3.11.2 and 3.13.5",
            }
        ]
        # A script the run writes itself: uv run says what it lacks.
        newer = run(
            executor,
            skill="uv-missing",
            command="cat > /tmp/newer.py && uv run --script /tmp/newer.py",
            stdin=NEWER_PYTHON,
        )
        assert newer.exit_code == 2 and "requires Python >=3.99; this sandbox has Python 3." in newer.stderr
        with_missing = run(executor, skill="uv-missing", command="uv run --with nosuchpkg-for-tests python -c 1")
        assert with_missing.exit_code == 2 and "--with needs nosuchpkg-for-tests (not installed)" in with_missing.stderr
    finally:
        executor.close()


def test_small_tools_published_scripts_call_are_there(docker_settings: dict[str, object]) -> None:
    executor = executor_with(docker_settings)
    try:
        result = run(
            executor,
            # obra's start-server.sh: the harness's pid from ps; trailofbits': strings, bc
            command='ps -o ppid= -p "$$" | tr -d " " | grep -qx "[0-9]*" && echo ps; pgrep -x bash >/dev/null && echo pgrep; '
            "echo '6*7' | bc; strings /bin/true | grep -c . >/dev/null && echo strings; make --version | head -1 | cut -c1-8; "
            "lsof -v 2>&1 | grep -q revision && echo lsof; "
            "printf 'def test_x():\\n    assert 1\\n' > out/test_x.py && python3 -m pytest -q -p no:cacheprovider out/test_x.py | tail -1 | cut -d' ' -f1-2",
        )
        assert result.stdout.splitlines() == ["ps", "pgrep", "42", "strings", "GNU Make", "lsof", "1 passed"], (
            result.stderr
        )
    finally:
        executor.close()


def test_magick_and_esm_imports_work_as_skills_call_them(docker_settings: dict[str, object]) -> None:
    executor = executor_with(docker_settings)
    try:
        result = run(
            executor,
            command="set -e; magick -version | head -1; magick -size 40x20 xc:red out/a.png; "
            "magick out/a.png -resize 50% out/b.png; magick identify -format '%w %h\\n' out/b.png; "
            "magick mogrify -format jpg out/b.png; ls out; "
            "printf 'import { Document } from \"docx\";\\nconsole.log(typeof Document);\\n' > out/esm.mjs; "
            "node out/esm.mjs",
        )
        assert result.exit_code == 0, result.stderr
        lines = result.stdout.splitlines()
        assert "ImageMagick" in lines[0]
        assert lines[1:] == ["20 10", "a.png", "b.jpg", "b.png", "function"]
    finally:
        executor.close()


def test_every_run_starts_with_the_images_warm_home(docker_settings: dict[str, object]) -> None:
    """A single-use sandbox starts as a long-lived container's second use would: the image's
    font cache and LibreOffice profile are in the run's HOME (its own copy: a run that spoils
    it spoils nothing for the next)."""
    executor = executor_with(docker_settings)
    try:
        template = executor.runtime.workspaces.home_template
        assert template is not None and (template / ".config/libreoffice/4/user").is_dir()
        result = run(
            executor,
            command="set -e; ls $MPLCONFIGDIR | grep -c '^fontlist-'; test -w $HOME/.config/libreoffice/4/user && echo lo; "
            "python3 -c 'import matplotlib.pyplot as p; p.plot([1]); p.savefig(\"out/a.png\")' 2>&1 | grep -ci 'building the font cache' || true; "
            "echo hi > out/a.txt && soffice --headless --convert-to pdf --outdir out out/a.txt >/dev/null && ls out/a.pdf; "
            "rm -rf $HOME/.config $HOME/.cache",
        )
        assert result.exit_code == 0, result.stderr
        assert result.stdout.splitlines() == ["1", "lo", "0", "out/a.pdf"]
        again = run(executor, command="test -d $HOME/.config/libreoffice/4/user && ls $MPLCONFIGDIR | grep -c fontlist")
        assert again.stdout == "1\n", again.stderr  # the next run has its own again
    finally:
        executor.close()
