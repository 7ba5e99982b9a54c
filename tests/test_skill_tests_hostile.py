"""A hostile pull request's test file and output against the host that runs ``skill-executor
test`` (no engine needed): regular-expression and glob bombs, CI log commands, unbounded
output. The engine-level versions are in test_skill_tests_ci.py."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from executor.testing.checks import RunFile, check_files
from executor.testing.loader import TestFileError, read_test_file
from executor.testing.patterns import MAX_PATTERN_CHARS, PatternError, compile_pattern
from executor.testing.spec import FileExpect

from .conftest import REPO

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
    "(?:a{1000}){1000}": "pattern_too_large",         # `regex` built this in ~270 MiB
    "(?:a{10000}){10000}": "pattern_too_large",       # and this in > 3 GiB (MemoryError under a 3 GiB rlimit)
    "((((a{10}){10}){10}){10})": "pattern_too_large",
    "\\pL{1000}": "pattern_too_large",                 # a huge class, repeated: over RE2's memory budget
    "(?i)[\\pL\\pN\\pP]{1000}": "pattern_too_large",
    "x" * (MAX_PATTERN_CHARS + 1): "pattern_too_long",
    "(?=secret)": "pattern_unsupported",               # lookarounds
    "(?<!a)b": "pattern_unsupported",
    "(a)\\1": "pattern_unsupported",                   # backreferences
    "(?P<x>a)(?P=x)": "pattern_unsupported",
    "a++": "pattern_unsupported",                      # possessive / atomic
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
        body = (f"        stdout: {{matches: {json.dumps(pattern)}}}\n" if where == "stdout" else
                f"        files: [{{path: out/a, matches: {json.dumps(pattern)}}}]\n")
        folder = skill(tmp_path / str(index), "cases:\n  - name: bomb\n    command: 'true'\n    expect:\n" + body)
        probe = textwrap.dedent(f'''\
            import resource, subprocess, sys, time
            started = time.monotonic()
            done = subprocess.run([sys.executable, "-m", "executor.cli.main", "test", {str(folder)!r}],
                                  capture_output=True, text=True)
            peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024
            print(done.returncode, peak, round(time.monotonic() - started, 1))
            print(done.stderr)
            ''')
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
