"""``skill-executor test`` and the pytest plugin end to end, on the real engine."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import xmlschema

from skill_executor_client import Client

from ..api_server import Server, free_port
from ..conftest import REPO, require_runtime

pytestmark = pytest.mark.docker

JUNIT_XSD = Path(__file__).parent.parent / "fixtures" / "junit-jenkins.xsd"
BYTES_SHA = hashlib.sha256(bytes(range(256))).hexdigest()

MAKE_PY = """\
import csv, json, pathlib, sys
rows = list(csv.reader(open(sys.argv[1])))
out = pathlib.Path("out")
(out / "parts").mkdir(parents=True, exist_ok=True)
(out / "report.md").write_text(f"# Report\\nrows: {len(rows) - 1}\\n")
(out / "summary.json").write_text(json.dumps({"rows": len(rows) - 1, "columns": rows[0], "extra": True}))
for i in (1, 2):
    (out / "parts" / f"{i}.txt").write_text(f"part {i}\\n")
(out / "bytes.bin").write_bytes(bytes(range(256)))
print(f"wrote report for {len(rows) - 1} rows")
"""

PASSING = textwrap.dedent(f"""\
    cases:
      - name: streams
        command: 'echo "total: 3 rows"; echo "{{\\"ok\\": true, \\"n\\": [1, 2]}}" >&2'
        expect:
          stdout: {{contains: [total, rows], not_contains: error, matches: '^total: \\d+ rows$', equals: "total: 3 rows\\n"}}
          stderr: {{json: {{ok: true, n: [1, 2]}}}}
      - name: exit code and env
        command: 'echo "$GREETING"; exit 3'
        env: {{GREETING: hi}}
        expect: {{exit_code: 3, stdout: {{equals: "hi\\n"}}}}
      - name: stdin
        command: tr a-z A-Z
        stdin: "shout\\n"
        expect: {{stdout: {{equals: "SHOUT\\n"}}}}
      - name: timeout
        command: sleep 30
        timeout: 1
        expect: {{timed_out: true}}
      - name: files
        command: python3 scripts/make.py inputs/data.csv
        inputs: [fixtures/data.csv, {{path: fixtures/data.csv, to: work/copy.csv}}]
        expect:
          stdout: {{contains: wrote report for 2 rows}}
          files:
            - {{path: out/report.md, mime_type: text/markdown, min_size: 10, max_size: 1000, contains: "# Report",
               matches: '^rows: 2$', equals_file: golden/report.md}}
            - {{path: out/summary.json, mime_type: application/json, json: {{rows: 2, columns: [a, b]}}}}
            - {{glob: "out/parts/*.txt", mime_type: "text/*", max_size: 10, matches: '^part \\d$'}}
            - {{path: out/bytes.bin, sha256: {BYTES_SHA}, min_size: 256, max_size: 256}}
            - {{path: out/never.txt, exists: false}}
            - {{path: work/copy.csv, contains: "a,b"}}
      - name: session writes
        session: shared
        command: echo 42 > work/state
      - name: session reads
        session: shared
        command: cat work/state
        expect: {{stdout: {{equals: "42\\n"}}}}
    """)

FAILING = textwrap.dedent("""\
    cases:
      - name: streams
        command: 'echo "total: 3 rows"; echo "{\\"ok\\": true}" >&2'
        expect:
          stdout: {contains: absent, not_contains: rows, matches: '^\\d+$', equals: "total: 4 rows\\n"}
          stderr: {json: {ok: false}}
      - name: exit code
        command: exit 3
      - name: timeout
        command: sleep 30
        timeout: 1
      - name: not timed out
        command: "true"
        expect: {timed_out: true}
      - name: files
        command: python3 scripts/make.py inputs/data.csv
        inputs: [fixtures/data.csv]
        expect:
          files:
            - {path: out/report.md, mime_type: text/csv, min_size: 1000, max_size: 1, contains: "# Nope",
               matches: '^rows: 9$', equals_file: golden/report.md}
            - {path: out/summary.json, json: {rows: 3, columns: [a]}}
            - {glob: "out/parts/*.txt", max_size: 2}
            - {path: out/bytes.bin, sha256: "0000000000000000000000000000000000000000000000000000000000000000"}
            - {path: out/report.md, exists: false}
            - {path: out/missing.txt}
      - name: missing input
        command: "true"
        inputs: [fixtures/absent.csv]
    """)

EXPECTED_FAILURES = {
    "streams": ["stdout.contains", "stdout.not_contains", "stdout.matches", "stdout.equals", "stderr.json"],
    "exit code": ["exit_code"],
    "timeout": ["timed_out", "exit_code"],
    "not timed out": ["timed_out"],
    "files": [
        "files[0].mime_type",
        "files[0].min_size",
        "files[0].max_size",
        "files[0].contains",
        "files[0].matches",
        "files[0].equals_file",
        "files[1].json",
        "files[2][out/parts/1.txt].max_size",
        "files[2][out/parts/2.txt].max_size",
        "files[3].sha256",
        "files[4].exists",
        "files[5].exists",
    ],
}


@pytest.fixture(autouse=True)
def _engine() -> None:
    require_runtime("docker")


def make_skill(root: Path, name: str, tests: str, golden: str | None = "# Report\nrows: 2\n") -> Path:
    folder = root / name
    (folder / "scripts").mkdir(parents=True)
    (folder / "tests" / "fixtures").mkdir(parents=True)
    (folder / "SKILL.md").write_text(
        f"---\nname: {name}\ndescription: Probe skill for the test command. Use in tests.\n---\n# Probe\n"
    )
    (folder / "scripts" / "make.py").write_text(MAKE_PY)
    (folder / "tests" / "fixtures" / "data.csv").write_text("a,b\n1,2\n3,4\n")
    if golden is not None:
        (folder / "tests" / "golden").mkdir()
        (folder / "tests" / "golden" / "report.md").write_text(golden)
    (folder / "tests" / "skill-tests.yaml").write_text(tests)
    return folder


def env_for(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILL_EXECUTOR_")}
    if "SKILL_EXECUTOR_DOCKER_IMAGE" in os.environ:
        env["SKILL_EXECUTOR_DOCKER_IMAGE"] = os.environ["SKILL_EXECUTOR_DOCKER_IMAGE"]
    env["SKILL_EXECUTOR_DATA_DIR"] = str(tmp_path / "data")
    return env


def run_test(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "skill_executor.cli.main", "test", *args],
        cwd=cwd or tmp_path,
        env=env or env_for(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
    )


def report_of(path: Path) -> dict[str, dict]:
    return {case["name"]: case for case in json.loads(path.read_text())["cases"]}


def test_every_expectation_kind_passes_and_fails(tmp_path: Path) -> None:
    make_skill(tmp_path / "skills", "probe-good", PASSING)
    make_skill(tmp_path / "skills", "probe-bad", FAILING, golden="# Report\nrows: 1\n")

    good = run_test(tmp_path, "skills/probe-good", "--json", "good.json", "--junit", "good.xml", "--plain")
    assert good.returncode == 0, good.stdout + good.stderr
    cases = report_of(tmp_path / "good.json")
    assert {n: c["status"] for n, c in cases.items()} == dict.fromkeys(
        ["validate", "streams", "exit code and env", "stdin", "timeout", "files", "session writes", "session reads"],
        "passed",
    )
    assert "8 cases: 8 passed" in good.stdout
    xmlschema.XMLSchema(str(JUNIT_XSD)).validate(str(tmp_path / "good.xml"))

    bad = run_test(tmp_path, "skills/probe-bad", "--json", "bad.json", "--junit", "bad.xml", "--plain")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    cases = report_of(tmp_path / "bad.json")
    for name, checks in EXPECTED_FAILURES.items():
        assert cases[name]["status"] == "failed", name
        assert [f["check"] for f in cases[name]["failures"]] == checks, name
    assert cases["missing input"]["status"] == "error"
    assert cases["missing input"]["message"] == "input tests/fixtures/absent.csv does not exist"
    # Readable: each failure with expected/got or a diff, the streams' tails, the files.
    out = bad.stdout
    assert "___ probe-bad::files ___" in out
    assert "x files[0].equals_file: out/report.md differs from tests/golden/report.md" in out
    assert "-rows: 1\n" in out.replace("      ", "") and "+rows: 2\n" in out.replace("      ", "")
    assert "x stdout.equals: stdout differs from the expected text" in out
    assert "x exit_code: exit code 3, expected 0" in out
    assert "files: out/bytes.bin" in out and "out/report.md (text/markdown, 17 bytes)" in out
    assert "| wrote report for 2 rows" in out
    assert "7 cases: 1 passed, 5 failed, 1 error" in out
    schema = xmlschema.XMLSchema(str(JUNIT_XSD))
    schema.validate(str(tmp_path / "bad.xml"))
    tree = schema.to_dict(str(tmp_path / "bad.xml"))
    assert (tree["@tests"], tree["@failures"], tree["@errors"]) == (7, 5, 1)


def test_golden_files_are_created_updated_and_compared(tmp_path: Path) -> None:
    tests = textwrap.dedent("""\
        cases:
          - name: report
            command: python3 scripts/make.py inputs/data.csv
            inputs: [fixtures/data.csv]
            expect:
              files:
                - {path: out/report.md, equals_file: golden/report.md}
                - {path: out/bytes.bin, equals_file: golden/bytes.bin}
        """)
    folder = make_skill(tmp_path, "golden-probe", tests, golden=None)
    first = run_test(tmp_path, "golden-probe")
    assert first.returncode == 1
    assert "the golden file tests/golden/report.md does not exist (create it with --update-golden)" in first.stdout
    updated = run_test(tmp_path, "golden-probe", "--update-golden")
    assert updated.returncode == 0, updated.stdout + updated.stderr
    assert "golden files updated:" in updated.stdout
    assert (folder / "tests" / "golden" / "report.md").read_text() == "# Report\nrows: 2\n"
    assert (folder / "tests" / "golden" / "bytes.bin").read_bytes() == bytes(range(256))
    assert run_test(tmp_path, "golden-probe").returncode == 0
    script = folder / "scripts" / "make.py"
    script.write_text(script.read_text().replace("# Report", "# Summary").replace("range(256)", "range(255)"))
    broken = run_test(tmp_path, "golden-probe")
    assert broken.returncode == 1
    assert "-# Report" in broken.stdout and "+# Summary" in broken.stdout
    assert (
        "out/bytes.bin differs from tests/golden/bytes.bin (binary: 256 bytes expected, 255 bytes got)" in broken.stdout
    )


def test_parallel_runs_are_isolated(tmp_path: Path) -> None:
    """Cases of one run in parallel, and two test commands at once on the same data folder
    with the same session names, never see each other's files."""
    cases = [
        f"""  - name: case {i}
    command: 'mkdir -p out && echo {i} > out/id.txt && echo {i} >> work/log && sleep 0.3 && cat work/log'
    session: s{i % 2}
    expect:
      files: [{{path: out/id.txt, equals_file: golden/{i}.txt}}]
"""
        for i in range(8)
    ]
    folder = make_skill(tmp_path, "parallel-probe", "cases:\n" + "".join(cases), golden=None)
    for i in range(8):
        (folder / "tests" / "golden" / f"{i}.txt").parent.mkdir(exist_ok=True)
        (folder / "tests" / "golden" / f"{i}.txt").write_text(f"{i}\n")
    last = (
        "cases:\n"
        + "".join(cases)
        + (
            '  - {name: log of s0, session: s0, command: cat work/log, expect: {stdout: {equals: "0\\n2\\n4\\n6\\n"}}}\n'
            '  - {name: log of s1, session: s1, command: cat work/log, expect: {stdout: {equals: "1\\n3\\n5\\n7\\n"}}}\n'
        )
    )
    (folder / "tests" / "skill-tests.yaml").write_text(last)
    env = env_for(tmp_path)
    command = [sys.executable, "-m", "skill_executor.cli.main", "test", "parallel-probe", "-j", "4", "--plain"]
    both = [
        subprocess.Popen(
            command + ["--json", f"r{n}.json"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for n in range(2)
    ]
    outputs = [p.communicate(timeout=600)[0] for p in both]
    for process, output in zip(both, outputs, strict=True):
        assert process.returncode == 0, output
    for n in range(2):
        assert all(c["status"] == "passed" for c in report_of(tmp_path / f"r{n}.json").values())


def test_exit_codes_for_usage_and_infrastructure(tmp_path: Path) -> None:
    make_skill(tmp_path, "probe", "cases:\n  - name: a\n    command: x\n   bad: [\n")
    broken = run_test(tmp_path, "probe")
    assert broken.returncode == 2
    assert "probe/tests/skill-tests.yaml:4: invalid YAML" in broken.stderr
    (tmp_path / "probe" / "tests" / "skill-tests.yaml").write_text("cases:\n  - {name: a, command: 'true'}\n")
    assert run_test(tmp_path, "probe", "-k", "a or").returncode == 2
    assert run_test(tmp_path, "nowhere").returncode == 2
    missing = run_test(tmp_path, "probe", "--image", "skill-executor/runner:no-such-tag")
    assert missing.returncode == 3, missing.stderr
    assert "image_missing" in missing.stderr and "skill-executor image build" in missing.stderr
    unreachable = run_test(tmp_path, "probe", "--server", f"http://127.0.0.1:{free_port()}", "--publish", "existing")
    assert unreachable.returncode == 3, unreachable.stderr
    assert "server_unreachable" in unreachable.stderr or "cannot reach" in unreachable.stderr
    env = env_for(tmp_path)
    env["DOCKER_HOST"] = f"unix://{tmp_path}/no-engine.sock"
    no_engine = run_test(tmp_path, "probe", env=env)
    assert no_engine.returncode == 3, no_engine.stderr
    assert "engine_unavailable" in no_engine.stderr


def test_runtime_local_says_loudly_it_is_not_sandboxed(tmp_path: Path) -> None:
    make_skill(tmp_path, "probe", "cases:\n  - {name: a, command: 'echo hi', expect: {stdout: {equals: \"hi\\n\"}}}\n")
    result = run_test(tmp_path, "probe", "--runtime", "local")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WARNING: --runtime local runs every command directly on this machine, NOT sandboxed" in result.stderr
    assert "on local (NOT sandboxed)" in result.stdout


def test_evals_are_staged_and_listed_as_needing_a_grader(tmp_path: Path) -> None:
    folder = make_skill(tmp_path, "probe", "cases:\n  - {name: a, command: 'true'}\n")
    (folder / "evals" / "files").mkdir(parents=True)
    (folder / "evals" / "files" / "in.txt").write_text("x")
    (folder / "evals" / "evals.json").write_text(
        json.dumps(
            {
                "skill_name": "probe",
                "evals": [
                    {"id": 1, "prompt": "p", "files": ["evals/files/in.txt"], "expectations": ["The reply is polite"]},
                    {"id": 2, "prompt": "q", "files": ["evals/files/gone.txt"], "expectations": ["x"]},
                ],
            }
        )
    )
    result = run_test(tmp_path, "probe", "--json", "r.json", "--junit", "r.xml")
    assert result.returncode == 1  # eval 2's file is missing: an error, not a skip
    cases = report_of(tmp_path / "r.json")
    assert cases["eval 1"]["status"] == "skipped"
    assert cases["eval 1"]["needs_grader"] == ["The reply is polite"]
    assert cases["eval 2"]["status"] == "error" and "gone.txt" in cases["eval 2"]["message"]
    assert "needs a grader (not machine-checkable yet):\n  probe::eval 1\n    - The reply is polite" in result.stdout
    xmlschema.XMLSchema(str(JUNIT_XSD)).validate(str(tmp_path / "r.xml"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(tmp_path_factory.mktemp("skill-tests-server"))
    srv.start()
    yield srv
    srv.stop()


def test_against_a_running_service_without_changing_its_default(tmp_path: Path, server: Server) -> None:
    tests = textwrap.dedent("""\
        cases:
          - name: made
            command: python3 scripts/make.py inputs/data.csv
            inputs: [fixtures/data.csv]
            expect:
              stdout: {contains: wrote report for 2 rows}
              files: [{path: out/report.md, equals_file: golden/report.md}]
        """)
    folder = make_skill(tmp_path, "probe-remote", tests)
    with Client(server.url) as client:
        first = client.push_skill(folder)  # what agents run: version 1, the default
    script = folder / "scripts" / "make.py"
    script.write_text(script.read_text().replace("wrote report", "wrote a report"))
    broken = run_test(tmp_path, "probe-remote", "--server", server.url, "--publish", "existing")
    assert broken.returncode == 1, broken.stdout + broken.stderr  # the edit broke the stdout check
    assert "FAIL  probe-remote::made" in broken.stdout and f"on server {server.url}" in broken.stdout
    script.write_text(script.read_text().replace("wrote a report", "wrote report"))
    fixed = run_test(tmp_path, "probe-remote", "--server", server.url, "--publish", "existing")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    with Client(server.url) as client:
        after = client.skill_versions("probe-remote")
    assert after.default_version == first.version == 1 and after.latest_version == 3
    assert len(after.versions) == 3  # each test run pushed its snapshot; none became the default


PLUGIN_TEST = """
def test_fixture_runs_a_skill(skill_run, skill_executor):
    result = skill_run("skills/probe", "python3 scripts/make.py tests/fixtures/data.csv")
    assert result.exit_code == 0
    assert result.file("out/summary.json").json()["rows"] == 2
    assert result.file("out/bytes.bin").bytes() == bytes(range(256))
    assert "wrote report" in result.stdout
"""


@pytest.mark.parametrize("loading", ["auto", "-p"])
def test_pytest_plugin_collects_skill_tests_and_offers_fixtures(tmp_path: Path, loading: str) -> None:
    make_skill(tmp_path / "skills", "probe", PASSING)
    make_skill(tmp_path / "skills", "probe-bad", "cases:\n  - {name: fails, command: 'exit 4'}\n")
    (tmp_path / "test_fixture.py").write_text(PLUGIN_TEST)
    env = env_for(tmp_path)
    args = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "skills",
        "test_fixture.py",
        "--junitxml",
        "pytest.xml",
    ]
    if loading == "-p":
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        args[3:3] = ["-p", "skill_executor"]
    result = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 failed, 10 passed" in result.stdout
    assert "FAILED skills/probe-bad/tests/skill-tests.yaml::fails - exit code 4, expected 0" in result.stdout
    assert "x exit_code: exit code 4, expected 0" in result.stdout


def test_pytest_plugin_reports_a_broken_test_file_with_its_line(tmp_path: Path) -> None:
    make_skill(tmp_path / "skills", "probe", "cases:\n  - name: a\n    command: x\n    expext: {}\n")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "skills"],
        cwd=tmp_path,
        env=env_for(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stdout
    assert "skills/probe/tests/skill-tests.yaml:4: cases[0].expext: unknown key" in result.stdout


def test_the_example_skills_pass_their_own_tests(tmp_path: Path) -> None:
    result = run_test(
        tmp_path,
        "skills",
        "--junit",
        str(tmp_path / "examples.xml"),
        "--json",
        str(tmp_path / "examples.json"),
        cwd=REPO,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    cases = json.loads((tmp_path / "examples.json").read_text())["cases"]
    assert {c["skill"] for c in cases} == {"csv-report", "file-bundle", "math-tools"}
    assert sum(c["name"] != "validate" for c in cases) >= 15
    xmlschema.XMLSchema(str(JUNIT_XSD)).validate(str(tmp_path / "examples.xml"))


def test_sessions_are_private_to_a_skill_and_removed_after_the_run(tmp_path: Path) -> None:
    writer = (
        "cases:\n  - {name: write, session: shared, command: 'echo {n} > work/state'}\n"
        "  - {name: read, session: shared, command: 'cat work/state', expect: {stdout: {equals: \"{n}\\n\"}}}\n"
    )
    make_skill(tmp_path / "skills", "one", writer.replace("{n}", "1"))
    make_skill(tmp_path / "skills", "two", writer.replace("{n}", "2"))
    make_skill(
        tmp_path / "skills", "three", "cases:\n  - {name: fresh, session: shared, command: 'test ! -e work/state'}\n"
    )
    result = run_test(tmp_path, "skills", "-j", "3", "--json", "r.json")
    assert result.returncode == 0, result.stdout + result.stderr
    sessions = tmp_path / "data" / "workspaces" / "sessions"
    left = [p.name for p in sessions.glob("*/*")] if sessions.exists() else []
    assert left == []


def test_two_folders_with_one_skill_name_are_refused_by_name(tmp_path: Path) -> None:
    make_skill(tmp_path / "a", "dup", "cases:\n  - {name: x, command: 'true'}\n")
    make_skill(tmp_path / "b", "dup", "cases:\n  - {name: x, command: 'true'}\n")
    result = run_test(tmp_path, "a", "b")
    assert result.returncode == 1
    real = tmp_path.resolve()
    assert f"error: {real}/b/dup has the same name as {real}/a/dup ('dup'); test them in separate runs" in result.stdout
