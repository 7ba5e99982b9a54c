"""``name_template``: a fixed set of fields, nothing else; bad templates are 400s, long names are warnings."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from skill_executor.core import Executor
from skill_executor.errors import ExecutorError
from skill_executor.outputs.naming import FIELDS, MAX_TEMPLATE_CHARS, NameTemplate

from ..conftest import make_settings
from ..helpers import refused, run

VALUES = {
    "path": "out/report.csv",
    "name": "report.csv",
    "stem": "report",
    "ext": ".csv",
    "run_id": "0190-abc",
    "session": "s1",
    "prefix": "p/",
}


def render(template: str, **overrides: str) -> str:
    return NameTemplate.parse(template).render(**{**VALUES, **overrides})


@pytest.mark.parametrize(
    "template, name",
    [
        ("{prefix}{path}", "p/out/report.csv"),  # the default
        ("out-{run_id}/{name}", "out-0190-abc/report.csv"),  # the example in docs/concepts/runs.md
        ("{session}/{stem}-v{ext}", "s1/report-v.csv"),
        ("fixed.txt", "fixed.txt"),
        ("{{literal}}-{stem}}}", "{literal}-report}"),
        ("", ""),
    ],
)
def test_fields_and_escapes(template: str, name: str) -> None:
    assert render(template) == name


def test_every_field_is_known() -> None:
    assert FIELDS == ("path", "name", "stem", "ext", "run_id", "session", "prefix")
    assert render("".join(f"{{{f}}}" for f in FIELDS)) == "".join(VALUES[f] for f in FIELDS)


@pytest.mark.parametrize(
    "template, problem",
    [
        ("{path:>20000000}", "unknown placeholder '{path:>20000000}' at position 0"),  # was a 19 MiB answer
        ("x/{path.nonexistent}", "unknown placeholder '{path.nonexistent}' at position 2"),  # was a 500
        ("{name.__class__.__mro__}", "unknown placeholder '{name.__class__.__mro__}' at position 0"),  # was Python
        ("{name!r}", "unknown placeholder '{name!r}' at position 0"),
        ("{path[0]}", "unknown placeholder '{path[0]}' at position 0"),
        ("{}", "unknown placeholder '{}' at position 0"),
        ("{0}", "unknown placeholder '{0}' at position 0"),
        ("{nope}", "unknown placeholder '{nope}' at position 0"),
        ("{ path }", "unknown placeholder '{ path }' at position 0"),
        ("{{{path", "the '{' at position 2 is never closed"),
        ("a}b", "a single '}' at position 1"),
        ("{a{path}", "unknown placeholder '{a{path}' at position 0"),
        ("{" + "x" * 500 + "}", "unknown placeholder '{" + "x" * 39 + "...' at position 0"),
        ("x" * 256, "its text alone is 256 characters; an artifact name is at most 255"),
        ("{path}" * 200, f"it is 1200 characters; the limit is {MAX_TEMPLATE_CHARS}"),
    ],
)
def test_anything_else_is_refused_with_its_position(template: str, problem: str) -> None:
    with pytest.raises(ExecutorError) as info:
        NameTemplate.parse(template)
    assert info.value.status == 400 and info.value.code == "invalid_name_template"
    assert problem in info.value.message
    assert "{path} {name} {stem} {ext} {run_id} {session} {prefix}" in info.value.message
    assert len(info.value.message) < 400


def test_rendering_stops_at_the_name_limit() -> None:
    template = NameTemplate.parse("{prefix}{path}")
    assert len(template.render(**{**VALUES, "prefix": "", "path": "a" * 255})) == 255
    with pytest.raises(ExecutorError) as info:
        template.render(**{**VALUES, "path": "a" * 10_000_000})
    assert info.value.code == "invalid_artifact_name" and len(info.value.message) < 200
    assert "longer than 255 characters" in info.value.message


# -- through a run (local runtime: no Docker needed) -------------------------------------


@pytest.fixture
def local(tmp_path: Path) -> Iterator[Executor]:
    executor = Executor.from_settings(make_settings(tmp_path, "local"))
    yield executor
    executor.close()


@pytest.mark.parametrize("template", ["{path:>20000000}", "{path.nonexistent}", "{name.__class__.__mro__}"])
def test_injections_are_refused_before_the_run(local: Executor, template: str) -> None:
    error = refused(
        local, command="echo x > out/a.txt", outputs={"globs": ["out/*"], "save": True, "name_template": template}
    )
    assert error.status == 400 and error.code == "invalid_name_template" and len(error.message) < 400


def test_templates_save_and_overlong_names_are_warnings(local: Executor) -> None:
    legacy = run(
        local, command="echo 1 > out/a.txt", output_files=["out/a.txt"], save_as_artifacts=True, artifact_prefix="runs/"
    )
    assert [a.name for a in legacy.artifact_files] == ["runs/out/a.txt"]
    readme = run(
        local,
        command="echo 1 > out/a.txt",
        outputs={"globs": ["out/*"], "save": True, "name_template": "out-{run_id}/{name}"},
    )
    assert [a.name for a in readme.artifact_files] == [f"out-{readme.run_id}/a.txt"]
    long = "d" * 200
    overlong = run(
        local,
        command=f"mkdir -p out/{long} && echo 1 > out/{long}/b.txt && echo 2 > out/c.txt",
        outputs={"globs": ["out/**"], "save": True, "name_template": "{path}-{path}"},
    )
    assert overlong.exit_code == 0 and [a.name for a in overlong.artifact_files] == ["out/c.txt-out/c.txt"]
    warning = next(w for w in overlong.warnings if "b.txt" in w)
    assert "not saved" in warning and "longer than 255 characters" in warning and len(warning) < 600
