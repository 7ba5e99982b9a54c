"""A hostile pull request's test file and output against the host that runs ``skill-executor
test`` (no engine needed): regular-expression and glob bombs, CI log commands, unbounded
output. The engine-level versions are in test_skill_tests_ci.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import xmlschema

from skill_executor.testing.checks import RunFile, check_files
from skill_executor.testing.loader import TestFileError, read_test_file
from skill_executor.testing.patterns import MAX_PATTERN_CHARS, PatternError, compile_pattern
from skill_executor.testing.format import FileExpect

from ..conftest import REPO

JUNIT_XSD = Path(__file__).parent.parent / "fixtures" / "junit-jenkins.xsd"
SKILL_MD = "---\nname: {name}\ndescription: A skill to test the tests. Use in tests.\n---\n# {name}\n"


def skill(tmp_path: Path, tests: str, name: str = "demo") -> Path:
    folder = tmp_path / name
    (folder / "tests").mkdir(parents=True)
    (folder / "SKILL.md").write_text(SKILL_MD.format(name=name))
    (folder / "tests" / "skill-tests.yaml").write_text(tests)
    return folder


# -- 4a: untrusted regular expressions -------------------------------------------------

#: pattern -> the stable code it is refused with
BOMBS = {
    "(?:a{1000}){1000}": "pattern_too_large",  # `regex` built this in ~270 MiB
    "(?:a{10000}){10000}": "pattern_too_large",  # and this in > 3 GiB (MemoryError under a 3 GiB rlimit)
    "((((a{10}){10}){10}){10})": "pattern_too_large",
    "\\pL{1000}": "pattern_too_large",  # a huge class, repeated: over RE2's memory budget
    "(?i)[\\pL\\pN\\pP]{1000}": "pattern_too_large",
    "x" * (MAX_PATTERN_CHARS + 1): "pattern_too_long",
    "(?=secret)": "pattern_unsupported",  # lookarounds
    "(?<!a)b": "pattern_unsupported",
    "(a)\\1": "pattern_unsupported",  # backreferences
    "(?P<x>a)(?P=x)": "pattern_unsupported",
    "a++": "pattern_unsupported",  # possessive / atomic
    "(?>a)": "pattern_unsupported",
    "(unclosed": "invalid_pattern",
}


@pytest.mark.parametrize("pattern", list(BOMBS))
def test_a_pattern_bomb_is_refused_with_a_stable_code(pattern: str) -> None:
    with pytest.raises(PatternError) as caught:
        compile_pattern(pattern)
    assert caught.value.code == BOMBS[pattern] and caught.value.status == 400


def test_pattern_bombs_in_a_test_file_are_refused_with_the_line_and_bounded_memory(tmp_path: Path) -> None:
    """Run the command a CI job runs, in a child process whose peak RSS is measured: every
    bomb is refused at load (exit 2), quickly, and memory stays far below what `regex` took."""
    for index, (pattern, code) in enumerate(BOMBS.items()):
        where = "stdout" if index % 2 else "files"
        body = (
            f"        stdout: {{matches: {json.dumps(pattern)}}}\n"
            if where == "stdout"
            else f"        files: [{{path: out/a, matches: {json.dumps(pattern)}}}]\n"
        )
        folder = skill(tmp_path / str(index), "cases:\n  - name: bomb\n    command: 'true'\n    expect:\n" + body)
        probe = textwrap.dedent(f"""\
            import resource, subprocess, sys, time
            started = time.monotonic()
            done = subprocess.run([sys.executable, "-m", "skill_executor.cli.main", "test", {str(folder)!r}],
                                  capture_output=True, text=True)
            peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024
            print(done.returncode, peak, round(time.monotonic() - started, 1))
            print(done.stderr)
            """)
        result = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120)
        first, _, stderr = result.stdout.partition("\n")
        status, peak_mib, seconds = first.split()
        assert status == "2", result.stdout + result.stderr
        assert f"({code})" in stderr and "skill-tests.yaml:5:" in stderr, stderr
        print(f"{pattern[:40]!r}: exit 2 in {seconds} s, peak RSS {peak_mib} MiB")
        assert int(peak_mib) < 250, f"{pattern[:40]!r}: peak RSS {peak_mib} MiB"
        assert float(seconds) < 60
        assert "re2.cc" not in stderr  # RE2's own logging (which quotes the pattern) is off


def test_patterns_keep_python_meanings_re2_shares() -> None:
    """^/$ match at line ends (as re.MULTILINE did); Python's \\Z is RE2's \\z; matching a
    pathological pattern on a long text takes linear time."""
    assert compile_pattern("^b$").search("a\nb\nc") is not None
    assert compile_pattern("^97\\n\\Z").search("2\n97\n") is not None
    assert compile_pattern("^97\\n\\Z").search("97\n2\n") is None
    assert compile_pattern("\\\\Z").search("a\\Z") is not None  # an escaped backslash, then Z
    assert compile_pattern("(?i)no such file").search("No Such File") is not None
    started = time.monotonic()
    assert compile_pattern("^(a|a)*$").search("a" * 1_000_000 + "b") is None
    assert compile_pattern("(x+x+)+y").search("x" * 1_000_000) is None
    assert time.monotonic() - started < 30  # a backtracking engine would not finish


def test_a_glob_bomb_matches_in_linear_time() -> None:
    """A glob is compiled by pathspec's RE2 backend: ``*a*a*a...*b`` against long names used
    to backtrack for minutes (in CI on the host, and in a service's output collection)."""
    spec = FileExpect(glob="out/" + "*a" * 40 + "*b")
    files = [RunFile(f"out/{'a' * 250}{i}", "text/plain", 1, None, b"x") for i in range(20)]
    started = time.monotonic()
    failures = check_files("files[0]", spec, files, tests_dir=Path("/"))
    assert time.monotonic() - started < 10
    assert [f.check for f in failures] == ["files[0].exists"]


def test_a_test_file_cannot_carry_control_characters_in_a_case_name(tmp_path: Path) -> None:
    folder = skill(tmp_path, 'cases:\n  - {name: "ok\\n::add-mask::x", command: "true"}\n')
    with pytest.raises(TestFileError, match="control characters"):
        read_test_file(folder / "tests" / "skill-tests.yaml")


# -- 5b: workflow-command injection, 5c: unbounded log and report -----------------------

#: What a line may not look like once printed: a runner would act on it.
#: GitHub (actions/runner ActionCommand): "::cmd::" after TrimStart (V2), "##[cmd]" anywhere (V1);
#: Azure: "##vso[" anywhere (any case); TeamCity "##teamcity["; GitLab: "\r" and ANSI (section markers).
_NET_WHITESPACE = "".join(chr(c) for c in range(0x110000) if chr(c).isspace() and c not in range(0x1C, 0x20))


def runner_commands(text: str) -> list[str]:
    found = [repr(c) for c in ("\r", "\x1b", "\x9b", "\x07") if c in text]
    for line in text.split("\n"):
        if line.lstrip(_NET_WHITESPACE).startswith("::"):
            found.append(line[:120])
        if re.search(r"##[a-z]*\[", line, re.IGNORECASE):
            found.append(line[:120])
    return found


HOSTILE = [
    "::add-mask::hunter2",
    "  \t::set-env name=NODE_OPTIONS::--require /tmp/x.js",
    "::error file=SKILL.md,line=1::pwned",
    "\u00a0\u2003::warning::nbsp-indented",
    "::stop-commands::tok3n",
    "##vso[task.setvariable variable=x]y",
    "text then ##VSO[task.complete result=Succeeded]done",
    "##[error]legacy",
    "## [not a command]",
    "##teamcity[buildStatus text='ok']",
    "ok\r::add-mask::after-cr",
    "\x1b[2J\x1b]0;title\x07colour",
    "\x1b[0Ksection_start:1:hidden\r\x1b[0Kheader",
    "a\u2028::set-output name=x::y",
    "\u202eevil\u202c",
    "\x85::notice::nel",
    "\ufeff::debug::bom",
]
#: Also tried in text: a lone surrogate (no UTF-8 log could take it).
SURROGATE = "\ud800lone surrogate"


def test_inert_leaves_nothing_a_runner_acts_on() -> None:
    from skill_executor.testing.logtext import inert

    text = "\n".join([*HOSTILE, SURROGATE])
    assert runner_commands(text)  # the checker sees them
    out = inert(text)
    assert runner_commands(out) == [], out
    assert out.encode("utf-8")  # writable to a UTF-8 log
    assert inert("## Heading\nplain: text, a::b, C:\\path") == "## Heading\nplain: text, a::b, C:\\path"
    assert inert(out) == out  # idempotent
    assert inert("::add-mask::x") == "\\x3a:add-mask::x" and inert("##vso[x]") == "##vso\\x5b" + "x]"


def test_cuts_never_make_a_new_command_line() -> None:
    from skill_executor.testing.logtext import Caps, for_log

    caps = Caps(line_chars=10, case_chars=30)
    for shift in range(12):
        text = "x" * shift + "::add-mask::abcdefghijklmnopqrstuvwxyz" * 3
        for keep in ("head", "tail"):
            out = for_log(text, caps, keep=keep)
            assert runner_commands(out) == [], (shift, keep, out)
            assert "[truncated:" in out


def failing_outcome(stdout: str, name: str = "hostile") -> Any:
    from skill_executor.testing.checks import Failure
    from skill_executor.testing.outcomes import Outcome

    return Outcome(
        "demo",
        name,
        "demo/tests/skill-tests.yaml",
        "failed",
        5,
        run_id="r",
        exit_code=1,
        command="echo '::add-mask::x'\n::set-output name=a::b",
        stdout=stdout,
        stderr=stdout,
        message="note ##vso[task.complete]",
        failures=[
            Failure(
                "stdout.equals",
                "stdout differs\n::error::x",
                expected="::warning::e\n##[error]",
                got=stdout,
                diff="--- a\n+++ b\n-::add-mask::x\n+" + stdout[:5000],
            ),
            Failure("stdout.contains", "::debug::y", expected=stdout, got=stdout),
        ],
    )


def test_a_failure_text_is_inert_and_bounded() -> None:
    from skill_executor.testing.logtext import Caps
    from skill_executor.testing.report import describe

    hostile = "\n".join([*HOSTILE, SURROGATE])
    huge = hostile + "\n" + "y" * 5_000_000 + "\n" + "\n".join(f"::add-mask::{i}" for i in range(10_000))
    caps = Caps()
    text = describe(failing_outcome(huge), caps)
    assert runner_commands(text) == []
    assert len(text) < caps.case_chars + 200
    assert all(len(line) < caps.line_chars + 100 for line in text.split("\n"))
    assert "[truncated:" in text


def test_the_console_is_bounded_and_always_ends_with_the_summary() -> None:
    import io

    from skill_executor.testing.console import Console
    from skill_executor.testing.logtext import Caps
    from skill_executor.testing.outcomes import Report

    outcomes = [failing_outcome("\n".join(HOSTILE) + "z" * 100_000, name=f"case {i} ##[error]x") for i in range(300)]
    stream = io.StringIO()
    console = Console(stream, live=False, caps=Caps(log_bytes=256 * 1024))
    for outcome in outcomes:
        console.finished(outcome)
    console.report(Report(outcomes, "docker (test)", datetime(2026, 11, 23, tzinfo=UTC), 10))
    out = stream.getvalue()
    assert runner_commands(out) == []
    assert len(out.encode()) < 256 * 1024 + 1024
    assert "[truncated: the log reached its limit of 262144 bytes (--max-log-bytes)" in out
    assert re.search(r"\[truncated: \d+ bytes of the log were left out\]", out)
    assert out.rstrip("\n").split("\n")[-1].startswith("300 cases: 300 failed")


def test_reports_are_bounded_schema_valid_and_inert() -> None:
    from skill_executor.testing.logtext import Caps
    from skill_executor.testing.report import json_report, junit_xml
    from skill_executor.testing.outcomes import Report

    big = "\n".join(HOSTILE) + "\n" + ("w" * 50_000 + "\n") * 20
    outcomes = [failing_outcome(big, name=f"case {i}") for i in range(200)]
    report = Report(outcomes, "docker (test)", datetime(2026, 11, 23, tzinfo=UTC), 10)
    caps = Caps(report_bytes=2 * 1024 * 1024)
    xml = junit_xml(report, caps)
    assert len(xml) < caps.report_bytes + 200 * 2000  # the budget, plus each case's verdict and markers
    xmlschema.XMLSchema(str(JUNIT_XSD)).validate(xml.decode())
    assert b"(--max-report-bytes); " in xml and xml.count(b"<testcase ") == 200
    assert runner_commands(xml.decode()) == []
    body = json_report(report, caps)
    assert len(body) < caps.report_bytes + 200 * 4000
    data = json.loads(body)
    assert len(data["cases"]) == 200 and {c["status"] for c in data["cases"]} == {"failed"}
    assert "(--max-report-bytes)" in body.decode()
    assert runner_commands(body.decode()) == [] and runner_commands(json.dumps(data, ensure_ascii=False)) == []
    small = json.loads(json_report(Report(outcomes[:1], "x", datetime(2026, 11, 23, tzinfo=UTC), 1)))
    assert "[truncated:" in small["cases"][0]["failures"][0]["got"]  # per-line cut, not the budget


def test_a_huge_test_file_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    from skill_executor.testing.loader import MAX_FILE_BYTES, read_evals

    folder = skill(tmp_path, "cases:\n  - {name: a, command: 'true', stdin: '" + "x" * MAX_FILE_BYTES + "'}\n")
    with pytest.raises(TestFileError, match="larger than 8 MiB"):
        read_test_file(folder / "tests" / "skill-tests.yaml")
    (folder / "evals").mkdir()
    (folder / "evals" / "evals.json").write_text('{"evals": [' + '{"id": 1},' * MAX_FILE_BYTES + "]}")
    with pytest.raises(TestFileError, match="larger than 8 MiB"):
        read_evals(folder / "evals" / "evals.json")
