"""The skill test format, its checks, ``-k`` and the reports: pure logic (the runs are in
test_skill_tests_engine.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import jsonschema
import pytest
import xmlschema

from skill_executor.errors import BadRequest
from skill_executor.testing.checks import Failure, Observed, RunFile, check
from skill_executor.testing.diffs import subset_problems, text_diff
from skill_executor.testing.loader import TestFileError, collect, read_test_file
from skill_executor.testing.report import junit_xml
from skill_executor.testing.outcomes import Outcome, Report
from skill_executor.testing.runner import build_request
from skill_executor.testing.select import keyword_matcher
from skill_executor.testing.format import Expect, TestFile, json_schema

from ..conftest import REPO

JUNIT_XSD = Path(__file__).parent.parent / "fixtures" / "junit-jenkins.xsd"
SKILL_MD = "---\nname: {name}\ndescription: A skill to test the tests. Use in tests.\n---\n# {name}\n"


def skill(tmp_path: Path, name: str = "demo", tests: str | None = None, file_name: str = "skill-tests.yaml") -> Path:
    folder = tmp_path / name
    (folder / "tests").mkdir(parents=True)
    (folder / "SKILL.md").write_text(SKILL_MD.format(name=name))
    if tests is not None:
        (folder / "tests" / file_name).write_text(tests)
    return folder


def error_of(path: Path) -> TestFileError:
    with pytest.raises(TestFileError) as caught:
        read_test_file(path)
    return caught.value


# -- the format and its errors ------------------------------------------------------


def test_short_forms_expand() -> None:
    parsed = TestFile.model_validate(
        {
            "cases": [
                {
                    "name": "a",
                    "command": "true",
                    "inputs": ["data/x.csv", "artifact://report@2", {"path": "y", "to": "work/y"}],
                    "expect": {
                        "stdout": {"contains": "one", "matches": "^t"},
                        "files": [{"glob": "out/*.md", "contains": "#"}],
                    },
                }
            ]
        }
    )
    case = parsed.cases[0]
    assert [(i.path, i.from_, i.to) for i in case.inputs] == [
        ("data/x.csv", None, None),
        (None, "artifact://report@2", None),
        ("y", None, "work/y"),
    ]
    assert case.expect.stdout is not None and case.expect.stdout.contains == ["one"]
    assert case.expect.stdout.matches == ["^t"]
    assert case.expect.files[0].contains == ["#"]


def test_exit_code_defaults_to_zero_unless_a_timeout_is_expected() -> None:
    assert Expect().wanted_exit_code == 0
    assert Expect(timed_out=True).wanted_exit_code is None
    assert Expect(timed_out=True, exit_code=137).wanted_exit_code == 137


def test_request_stages_inputs_from_the_skills_tests_folder() -> None:
    case = TestFile.model_validate(
        {
            "cases": [
                {
                    "name": "a",
                    "command": "cat inputs/x.csv",
                    "inputs": ["fixtures/x.csv", "artifact://r"],
                    "env": {"A": "1"},
                    "stdin": "s",
                    "timeout": 5,
                    "expect": {"files": [{"path": "out/a[1].txt"}, {"glob": "out/**/*.json"}]},
                }
            ]
        }
    ).cases[0]
    request = build_request("demo@3", case, "skill-tests-x-s")
    assert [i.from_ for i in request.inputs] == ["skill://demo@3/tests/fixtures/x.csv", "artifact://r"]
    assert request.skill == "demo@3" and request.session == "skill-tests-x-s"
    assert request.env == {"A": "1"} and request.stdin == "s" and request.timeout == 5
    assert request.outputs is not None and request.outputs.globs == [r"out/a\[1\].txt", "out/**/*.json"]
    assert request.outputs.inline_binary


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("cases:\n  - name: a\n    command: x\n   bad: [\n", 4, "invalid YAML"),
        (
            "cases:\n  - name: a\n    command: x\n    expect:\n      files:\n        - {path: out/a, glob: '*'}\n",
            6,
            "cases[0].expect.files[0]: give exactly one of path or glob",
        ),
        ("cases:\n  - name: a\n    command: x\n    expext: {}\n", 4, "cases[0].expext: unknown key"),
        ("cases:\n  - name: a\n    command: x\n    command: y\n", 4, "duplicate key 'command'"),
        ("cases:\n  - name: a\n    command: x\n  - name: a\n    command: y\n", 1, "two cases are named 'a'"),
        (
            "cases:\n  - name: a\n    command: x\n    expect: {stdout: {matches: '(unclosed'}}\n",
            4,
            "invalid regular expression '(unclosed'",
        ),
        ("cases:\n  - name: a\n    command: x\n    inputs: [../secret]\n", 4, "must not contain '..'"),
        (
            "cases:\n  - name: a\n    command: x\n    expect:\n      files: [{path: /etc/passwd}]\n",
            5,
            "must be a relative path",
        ),
        ("cases:\n  - name: a\n    command: x\n    inputs: ['host:///etc/passwd']\n", 4, "from must be an artifact://"),
        (
            "cases:\n  - name: a\n    command: x\n    expect: {files: [{path: out/a, exists: false, min_size: 1}]}\n",
            4,
            "exists: false cannot be combined with min_size",
        ),
        ("cases: []\n", 1, "cases: List should have at least 1 item"),
        ("", None, "the file is empty"),
    ],
)
def test_a_broken_test_file_names_the_line(tmp_path: Path, text: str, line: int | None, message: str) -> None:
    folder = skill(tmp_path, tests=text)
    error = error_of(folder / "tests" / "skill-tests.yaml")
    assert error.line == line
    assert message in error.message
    assert error.message.startswith(f"{folder}/tests/skill-tests.yaml:{line}: " if line else f"{folder}/tests/")


def test_a_json_test_file_is_read_and_its_errors_name_the_line(tmp_path: Path) -> None:
    good = skill(tmp_path, "good", json.dumps({"cases": [{"name": "a", "command": "true"}]}), "skill-tests.json")
    assert read_test_file(good / "tests" / "skill-tests.json").cases[0].name == "a"
    bad = skill(tmp_path, "bad", '{\n  "cases": [\n    {"name": "a",}\n  ]\n}\n', "skill-tests.json")
    error = error_of(bad / "tests" / "skill-tests.json")
    assert error.line == 3 and "invalid JSON" in error.message
    wrong = skill(
        tmp_path, "wrong", '{\n  "cases": [\n    {"name": "a",\n     "command": 5}\n  ]\n}\n', "skill-tests.json"
    )
    error = error_of(wrong / "tests" / "skill-tests.json")
    assert error.line == 4 and "cases[0].command" in error.message


def test_paths_name_skills_folders_and_test_files(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    one = skill(root, "one", "cases:\n  - {name: a, command: 'true'}\n")
    skill(root / "nested", "two")
    found = collect([root])
    assert sorted(i.skill_dir.name for i in found) == ["one", "two"]
    assert [i.tests is not None for i in sorted(found, key=lambda i: i.skill_dir.name)] == [True, False]
    assert collect([one / "tests" / "skill-tests.yaml"])[0].only_file
    with pytest.raises(TestFileError, match="does not exist"):
        collect([tmp_path / "nope"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(TestFileError, match="holds no skill"):
        collect([tmp_path / "empty"])
    stray = tmp_path / "skill-tests.yaml"
    stray.write_text("cases: []\n")
    with pytest.raises(TestFileError, match="must be in the tests/ folder of a skill"):
        collect([stray])
    (one / "tests" / "skill-tests.json").write_text("{}")
    with pytest.raises(TestFileError, match="more than one test file"):
        collect([one])


def test_the_schema_validates_what_the_models_accept(tmp_path: Path) -> None:
    schema = json_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    validator = jsonschema.Draft202012Validator(schema)
    good = {
        "cases": [
            {
                "name": "a",
                "command": "x",
                "inputs": ["f.csv", {"from": "artifact://a"}],
                "expect": {
                    "exit_code": 1,
                    "stdout": {"contains": "x", "json": {"a": [1]}},
                    "files": [{"path": "out/a", "equals_file": "golden/a", "sha256": "a" * 64}],
                },
            }
        ]
    }
    assert list(validator.iter_errors(good)) == []
    TestFile.model_validate(good)
    for bad in (
        {"cases": [{"name": "a"}]},
        {"cases": [{"name": "a", "command": "x", "expext": {}}]},
        {"cases": [{"name": "a", "command": "x", "expect": {"files": [{"path": "a", "sha256": "zz"}]}}]},
    ):
        assert list(validator.iter_errors(bad)), bad
    printed = subprocess.run(
        [sys.executable, "-m", "skill_executor.cli.main", "test", "--schema"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(printed.stdout) == schema


# -- the checks --------------------------------------------------------------------


def seen(**fields: object) -> Observed:
    base: dict[str, object] = {"exit_code": 0, "timed_out": False, "stdout": "", "stderr": "", "duration_ms": 5}
    base.update(fields)
    return Observed(**base)  # type: ignore[arg-type]


def expect(**fields: object) -> Expect:
    return Expect.model_validate(fields)


def checks_of(expected: Expect, observed: Observed, tests_dir: Path = Path("/nonexistent")) -> list[str]:
    return [f.check for f in check(expected, observed, tests_dir=tests_dir)]


def test_json_subset_semantics() -> None:
    assert subset_problems({"a": 1}, {"a": 1, "b": 2}) == []
    assert subset_problems({"a": {"b": [1, {"c": 2}]}}, {"a": {"b": [1, {"c": 2, "d": 3}], "x": 0}}) == []
    assert subset_problems([1, 2], [1, 2, 3]) == ["$ has 3 elements, expected 2"]
    assert subset_problems({"a": 1}, {"b": 1}) == ["$.a is missing"]
    assert subset_problems({"a": True}, {"a": 1}) == ["$.a is 1, expected true"]
    assert subset_problems(1, 1.0) == []
    assert subset_problems({"a": "x"}, []) == ["$ is an array, expected an object"]


def test_exit_code_and_timeout_checks() -> None:
    assert checks_of(expect(), seen()) == []
    assert checks_of(expect(), seen(exit_code=3)) == ["exit_code"]
    assert checks_of(expect(exit_code=3), seen(exit_code=3)) == []
    assert checks_of(expect(timed_out=True), seen(timed_out=True, exit_code=None)) == []
    assert checks_of(expect(timed_out=True), seen()) == ["timed_out"]
    assert checks_of(expect(), seen(timed_out=True, exit_code=None)) == ["timed_out", "exit_code"]


def test_stream_checks_pass_and_fail() -> None:
    out = 'total: 3 rows\n{"ok": true}\n'
    passing = expect(
        stdout={"contains": ["total", "rows"], "not_contains": "error", "matches": r"^total: \d+", "equals": out}
    )
    assert checks_of(passing, seen(stdout=out)) == []
    failing = expect(stdout={"contains": "missing", "not_contains": "rows", "matches": r"^\d+$", "equals": "x\n"})
    assert checks_of(failing, seen(stdout=out)) == [
        "stdout.contains",
        "stdout.not_contains",
        "stdout.matches",
        "stdout.equals",
    ]
    assert checks_of(expect(stderr={"json": {"ok": True}}), seen(stderr='{"ok": true, "n": 1}')) == []
    failures = check(expect(stderr={"json": {"ok": False}}), seen(stderr='{"ok": true}'), tests_dir=Path("/"))
    assert failures[0].check == "stderr.json" and "$.ok is true, expected false" in failures[0].message
    not_json = check(expect(stdout={"json": {}}), seen(stdout="nope"), tests_dir=Path("/"))
    assert "stdout is not JSON" in not_json[0].message


def test_equals_shows_a_unified_diff() -> None:
    failures = check(
        expect(stdout={"equals": "one\ntwo\nthree\n"}), seen(stdout="one\n2\nthree\n"), tests_dir=Path("/")
    )
    assert failures[0].diff is not None
    assert "-two\n+2\n" in failures[0].diff
    assert "-a\n\\ No newline at end of file\n+a\n" in text_diff("a", "a\n")
    assert "No newline" not in text_diff('{"a": 1}', '{"a": 2}')


def file(name: str, data: bytes | None, mime: str = "text/plain", truncated: bool = False) -> RunFile:
    import hashlib

    size = len(data) if data is not None else 10
    return RunFile(name, mime, size, hashlib.sha256(data).hexdigest() if data is not None else None, data, truncated)


def test_file_checks_pass_and_fail(tmp_path: Path) -> None:
    (tmp_path / "golden").mkdir()
    (tmp_path / "golden" / "r.md").write_bytes(b"# Report\nrows: 3\n")
    files = [
        file("out/r.md", b"# Report\nrows: 3\n", "text/markdown"),
        file("out/d.json", b'{"rows": 3, "cols": ["a"]}', "application/json"),
        file("out/img.png", b"\x89PNG\r\n", "image/png"),
    ]
    import hashlib

    passing = expect(
        files=[
            {
                "path": "out/r.md",
                "mime_type": "text/markdown",
                "min_size": 5,
                "max_size": 100,
                "contains": "rows",
                "matches": r"^# Report$",
                "equals_file": "golden/r.md",
                "sha256": hashlib.sha256(b"# Report\nrows: 3\n").hexdigest(),
            },
            {"path": "out/d.json", "json": {"rows": 3}},
            {"glob": "out/*.png", "mime_type": "image/*"},
            {"path": "out/absent.txt", "exists": False},
        ]
    )
    assert checks_of(passing, seen(files=files), tmp_path) == []
    failing = expect(
        files=[
            {
                "path": "out/r.md",
                "mime_type": "text/csv",
                "min_size": 100,
                "max_size": 2,
                "contains": "cols",
                "matches": "^zzz",
                "equals_file": "golden/r.md",
                "sha256": "0" * 64,
            },
            {"path": "out/d.json", "json": {"rows": 4}},
            {"glob": "out/*", "max_size": 20},
            {"path": "out/r.md", "exists": False},
            {"path": "out/missing.txt"},
        ]
    )
    (tmp_path / "golden" / "r.md").write_bytes(b"# Report\nrows: 2\n")
    found = checks_of(failing, seen(files=files), tmp_path)
    assert found == [
        "files[0].mime_type",
        "files[0].min_size",
        "files[0].max_size",
        "files[0].sha256",
        "files[0].contains",
        "files[0].matches",
        "files[0].equals_file",
        "files[1].json",
        "files[2][out/d.json].max_size",
        "files[3].exists",
        "files[4].exists",
    ]
    golden = check(failing, seen(files=files), tests_dir=tmp_path)[6]
    assert golden.diff is not None and "-rows: 2\n+rows: 3\n" in golden.diff
    missing = check(failing, seen(files=files), tests_dir=tmp_path)[-1]
    assert missing.got == "files: out/r.md, out/d.json, out/img.png"


def test_content_checks_on_a_file_too_large_to_bring_back_fail_clearly() -> None:
    failures = check(
        expect(files=[{"path": "out/big", "contains": "x"}]),
        seen(files=[file("out/big", None, truncated=True)]),
        tests_dir=Path("/"),
    )
    assert [f.check for f in failures] == ["files[0].content"]
    assert "too large to bring back" in failures[0].message


def test_a_missing_golden_file_says_how_to_create_it(tmp_path: Path) -> None:
    failures = check(
        expect(files=[{"path": "out/a", "equals_file": "golden/a"}]),
        seen(files=[file("out/a", b"x")]),
        tests_dir=tmp_path,
    )
    assert "--update-golden" in failures[0].message
    binary = tmp_path / "golden" / "b"
    binary.parent.mkdir()
    binary.write_bytes(b"\xff\x00")
    failures = check(
        expect(files=[{"path": "out/b", "equals_file": "golden/b"}]),
        seen(files=[file("out/b", b"\xff\x01")]),
        tests_dir=tmp_path,
    )
    assert "binary: 2 bytes expected, 2 bytes got" in failures[0].message


# -- -k --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "matches"),
    [
        ("csv", ["csv-report::basic", "csv-report::broken input"]),
        ("csv and not broken", ["csv-report::basic"]),
        ("basic or fib", ["csv-report::basic", "math-tools::fib"]),
        ("not (csv or math)", ["file-bundle::zip"]),
        ("'broken input'", ["csv-report::broken input"]),
        ("FIB", ["math-tools::fib"]),
    ],
)
def test_keyword_expressions(expression: str, matches: list[str]) -> None:
    ids = ["csv-report::basic", "csv-report::broken input", "math-tools::fib", "file-bundle::zip"]
    chosen = keyword_matcher(expression)
    assert [i for i in ids if chosen(i)] == matches


@pytest.mark.parametrize("expression", ["and", "a or", "(a", "a )", "not"])
def test_a_malformed_keyword_expression_is_a_usage_error(expression: str) -> None:
    with pytest.raises(BadRequest, match="invalid -k expression"):
        keyword_matcher(expression)


# -- reports ------------------------------------------------------------------------


def sample_report() -> Report:
    outcomes = [
        Outcome("demo", "validate", "demo/tests/skill-tests.yaml", "passed"),
        Outcome("demo", "ok", "demo/tests/skill-tests.yaml", "passed", 120, stdout="hi\x00\x1b[31m\n"),
        Outcome(
            "demo",
            'bad <one> & "two"',
            "demo/tests/skill-tests.yaml",
            "failed",
            80,
            failures=[Failure("exit_code", "exit code 1, expected 0", "0", "1")],
            stderr="boom\x07\n",
            command="false",
        ),
        Outcome("demo", "broken", "demo/tests/skill-tests.yaml", "error", message="the run was refused: x"),
        Outcome(
            "demo",
            "no engine",
            "demo/tests/skill-tests.yaml",
            "error",
            message="engine_unavailable: gone",
            infrastructure=True,
        ),
        Outcome(
            "demo",
            "eval 1",
            "demo/evals/evals.json",
            "skipped",
            message="needs a grader",
            needs_grader=["The output is polite"],
        ),
    ]
    return Report(outcomes, "docker (test)", datetime(2026, 11, 23, 12, 0, tzinfo=UTC), 1234)


def test_junit_report_is_valid_for_ci_tools() -> None:
    report = sample_report()
    data = junit_xml(report)
    schema = xmlschema.XMLSchema(str(JUNIT_XSD))
    schema.validate(data.decode())
    tree = schema.to_dict(data.decode())
    assert tree["@tests"] == 6 and tree["@failures"] == 1 and tree["@errors"] == 2
    names = [c["@name"] for s in tree["testsuite"] for c in s["testcase"]]
    assert names == ["validate", "ok", 'bad <one> & "two"', "broken", "no engine", "eval 1"]
    assert b"\x00" not in data and b"\x07" not in data
    assert report.exit_code == 3


def test_report_exit_codes_and_summary() -> None:
    report = sample_report()
    assert report.summary().startswith("6 cases: 2 passed, 1 failed, 2 error, 1 skipped in 1.2 s")
    report.outcomes = [o for o in report.outcomes if not o.infrastructure]
    assert report.exit_code == 1
    report.outcomes = [o for o in report.outcomes if o.status in ("passed", "skipped")]
    assert report.exit_code == 0
    body = report.to_dict()
    assert body["summary"] == {"passed": 2, "failed": 0, "error": 0, "skipped": 1, "total": 3, "deselected": 0}


def test_a_golden_file_linked_out_of_tests_is_never_read(tmp_path: Path) -> None:
    """A test file from an untrusted change must not print a host file in a CI log's diff."""
    secret = tmp_path / "secret.txt"
    secret.write_text("TOKEN=hunter2\n")
    tests_dir = tmp_path / "skill" / "tests"
    (tests_dir / "golden").mkdir(parents=True)
    (tests_dir / "golden" / "out.txt").symlink_to(secret)
    (tests_dir / "linked").symlink_to(tmp_path)
    for golden in ("golden/out.txt", "linked/secret.txt"):
        failures = check(
            expect(files=[{"path": "out/a", "equals_file": golden}]),
            seen(files=[file("out/a", b"x\n")]),
            tests_dir=tests_dir,
        )
        assert [f.check for f in failures] == ["files[0].equals_file"]
        assert "resolves outside its root" in failures[0].message
        assert "hunter2" not in repr(failures)


# -- what an untrusted test file must not do to the host (review of 2026-11-23) -------------


def test_a_tests_folder_linked_out_of_the_skill_is_refused(tmp_path: Path) -> None:
    """tests -> ../.. would make the repository root the golden root (.git/config in a CI log,
    or rewritten by --update-golden)."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "skill-tests.yaml").write_text("cases:\n  - {name: a, command: 'true'}\n")
    folder = repo / "skills" / "x"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(SKILL_MD.format(name="x"))
    (folder / "tests").symlink_to("../..")
    for path in (repo / "skills", folder, folder / "tests" / "skill-tests.yaml"):
        with pytest.raises(TestFileError, match="tests is a symbolic link"):
            collect([path])
    from skill_executor.testing.checks import golden_path

    with pytest.raises(Exception, match="symbolic link"):
        golden_path(folder / "tests", ".git/config")


def test_a_linked_test_file_or_skill_md_is_refused(tmp_path: Path) -> None:
    host = tmp_path / "host.yaml"
    host.write_text("secret_key: x\n")
    folder = skill(tmp_path)
    (folder / "tests" / "skill-tests.yaml").symlink_to(host)
    with pytest.raises(TestFileError, match="skill-tests.yaml is a symbolic link"):
        collect([folder])
    (folder / "tests" / "skill-tests.yaml").unlink()
    (folder / "tests" / "skill-tests.yaml").write_text("cases:\n  - {name: a, command: 'true'}\n")
    (tmp_path / "elsewhere.md").write_text(SKILL_MD.format(name="demo"))
    (folder / "SKILL.md").unlink()
    (folder / "SKILL.md").symlink_to(tmp_path / "elsewhere.md")
    with pytest.raises(TestFileError, match="SKILL.md is a symbolic link"):
        collect([folder])


def test_aliases_are_refused_so_an_alias_bomb_costs_nothing(tmp_path: Path) -> None:
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{n}: &{n} [{', '.join(['*' + p] * 9)}]\n" for p, n in zip("abcdefghij", "bcdefghijk", strict=False)
    )
    folder = skill(tmp_path, tests=bomb + "cases:\n  - {name: a, command: 'true'}\n")
    import time

    started = time.monotonic()
    error = error_of(folder / "tests" / "skill-tests.yaml")
    assert time.monotonic() - started < 2
    assert error.line == 1 and "anchors and aliases" in error.message


def test_yaml_scalars_mean_what_json_means(tmp_path: Path) -> None:
    folder = skill(
        tmp_path,
        tests="cases:\n  - name: a\n    command: x\n    env: {FLAG: yes}\n"
        "    expect: {stdout: {json: {country: NO, day: 2024-01-01, ok: true}}}\n",
    )
    case = read_test_file(folder / "tests" / "skill-tests.yaml").cases[0]
    assert case.env == {"FLAG": "yes"}
    assert case.expect.stdout is not None
    assert case.expect.stdout.json_ == {"country": "NO", "day": "2024-01-01", "ok": True}
    (folder / "tests" / "skill-tests.yaml").write_text(
        "cases:\n  - name: a\n    command: x\n    expect:\n      stdout: {json: !!set {a, b}}\n"
    )
    error = error_of(folder / "tests" / "skill-tests.yaml")
    assert error.line == 5 and "set is not a JSON value" in error.message


def test_a_catastrophic_pattern_is_stopped_not_hung() -> None:
    import time

    started = time.monotonic()
    failures = check(
        expect(stdout={"matches": ["^(a+)+$", "^(a|a)*$"]}), seen(stdout="a" * 40 + "b"), tests_dir=Path("/")
    )
    assert time.monotonic() - started < 10
    assert [f.check for f in failures] == ["stdout.matches", "stdout.matches"]
    assert failures[0].message == "stdout does not match /^(a+)+$/"
    # RE2 matches in linear time: no time limit is needed, and the answer is the real one
    assert failures[1].message == "stdout does not match /^(a|a)*$/"


def test_a_huge_diff_shows_the_first_difference_quickly() -> None:
    import time

    want = "".join(f"line {i % 7}\n" for i in range(60_000))
    got = want.replace("line 3\n", "line three\n", 1)
    started = time.monotonic()
    diff = text_diff(want, got)
    assert time.monotonic() - started < 2
    assert "@@ first difference at line 4 (60000 lines expected, 60000 got" in diff
    assert "-line 3\n" in diff and "+line three\n" in diff


def test_output_from_a_run_cannot_drive_a_terminal_or_a_ci_log() -> None:
    from skill_executor.testing.report import describe, safe

    assert safe("ok\x1b]52;c;aGk=\x07\x1b[2J\x9b") == "ok\\x1b]52;c;aGk=\\x07\\x1b[2J\\x9b"
    outcome = Outcome(
        "demo",
        "x",
        "demo/tests/skill-tests.yaml",
        "failed",
        run_id="r",
        exit_code=0,
        failures=check(
            expect(stdout={"equals": "a\n::error file=x::injected\nb\n"}),
            seen(stdout="a\n::error file=x::injected\nc\n"),
            tests_dir=Path("/"),
        ),
    )
    for line in describe(outcome).splitlines():
        assert not line.lstrip().startswith("::"), line


def test_junit_attributes_are_sanitised_too() -> None:
    import xml.etree.ElementTree as ET

    report = sample_report()
    report.outcomes[2].failures = [Failure("files[0][out/a\x01b.txt].contains", "no \x02", "x", "y")]
    report.outcomes[2].skill = "de\x03mo"
    ET.fromstring(junit_xml(report))
    xmlschema.XMLSchema(str(JUNIT_XSD)).validate(junit_xml(report).decode())


def test_a_test_file_and_an_evals_file_named_together_both_run(tmp_path: Path) -> None:
    folder = skill(tmp_path, tests="cases:\n  - {name: a, command: 'false'}\n")
    (folder / "evals").mkdir()
    (folder / "evals" / "evals.json").write_text('{"evals": [{"id": 1, "prompt": "p"}]}')
    found = collect([folder / "evals" / "evals.json", folder / "tests" / "skill-tests.yaml"])
    assert len(found) == 1
    assert found[0].tests is not None and found[0].evals is not None


def test_evals_of_odd_shapes_are_read_entry_by_entry(tmp_path: Path) -> None:
    from skill_executor.testing.loader import read_evals

    path = tmp_path / "evals.json"
    path.write_text(
        json.dumps(
            [
                {"prompt": "no id", "files": "evals/files/a.txt", "assertions": [{"text": "is polite"}, "is short"]},
                {"id": 7, "files": {"not": "a list"}},
                "not an object",
            ]
        )
    )
    evals = read_evals(path).evals
    assert [(e.id, e.files, e.statements, e.problem is None) for e in evals] == [
        ("1", ["evals/files/a.txt"], ["is polite", "is short"], True),
        ("7", [], [], False),
        ("3", [], [], False),
    ]
