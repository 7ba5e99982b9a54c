"""``skill-executor test`` as a pull request's CI runs it, attacked by that pull request, on
the real engine and a real service: what reaches the CI log, how large the log and the
reports grow, and what a ``--server`` run changes on the service."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import xmlschema

from skill_executor_client import Client
from skill_executor_client.models import VersionList

from ..api_server import Server
from ..conftest import REPO, require_runtime
from ..world.test_skill_tests_hostile import HOSTILE, JUNIT_XSD, runner_commands

pytestmark = pytest.mark.docker

HOSTILE_PY = f"""\
import sys
lines = {HOSTILE!r}
for stream in (sys.stdout, sys.stderr):
    stream.write("\\n".join(lines) + "\\n")
    stream.flush()
    stream.buffer.write(b"bad utf-8: \\xed\\xa0\\x80 \\xff\\n")  # an encoded surrogate, a stray byte
    stream.buffer.flush()
if sys.argv[1:] == ["line"]:  # one 50 MB line, no newline, with a command at its very end
    chunk = "L" * (1 << 20)
    for _ in range(50):
        sys.stdout.write(chunk)
    sys.stdout.write("::add-mask::end-of-the-long-line")
sys.exit(1)
"""

TESTS = textwrap.dedent("""\
    cases:
      - name: inject
        command: python3 scripts/hostile.py
      - name: "::add-mask::name ##vso[task.setvariable variable=a]b ##[error]c"
        command: python3 scripts/hostile.py
        expect: {stdout: {equals: "::error file=a::b\\n##vso[task.complete]\\n"}}
      - name: flood
        command: "python3 scripts/hostile.py; yes 'flood ::add-mask::x ##vso[y]' | head -c 200000000; exit 1"
      - name: one line
        command: python3 scripts/hostile.py line
        expect: {stderr: {contains: "::stop-commands::never"}}
    """)


def hostile_skill(root: Path) -> Path:
    folder = root / "hostile"
    (folder / "scripts").mkdir(parents=True)
    (folder / "tests").mkdir()
    (folder / "SKILL.md").write_text(
        "---\nname: hostile\ndescription: Prints what a CI runner would obey. Use in tests.\n---\n# Hostile\n"
    )
    (folder / "scripts" / "hostile.py").write_text(HOSTILE_PY)
    (folder / "tests" / "skill-tests.yaml").write_text(TESTS)
    return folder


def cli_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILL_EXECUTOR_")}
    if "SKILL_EXECUTOR_DOCKER_IMAGE" in os.environ:
        env["SKILL_EXECUTOR_DOCKER_IMAGE"] = os.environ["SKILL_EXECUTOR_DOCKER_IMAGE"]
    env["SKILL_EXECUTOR_DATA_DIR"] = str(tmp_path / "data")
    env.update(extra)
    return env


def run_measured(tmp_path: Path, env: dict[str, str], *args: str) -> tuple[int, int, str, str]:
    """The CLI in a child process: its exit status, its peak RSS (MiB), stdout, stderr (as
    UTF-8: a lone surrogate could not have been written to the log)."""
    probe = textwrap.dedent(f"""\
        import json, resource, subprocess, sys
        done = subprocess.run([sys.executable, "-m", "skill_executor.cli.main", "test", *{list(args)!r}],
                              capture_output=True)
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024
        json.dump({{"rc": done.returncode, "peak_mib": peak}}, open("probe.json", "w"))
        open("out.bin", "wb").write(done.stdout)
        open("err.bin", "wb").write(done.stderr)
        """)
    subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env={**env, "PYTHONPATH": str(REPO)}, check=True, timeout=900
    )
    measured = json.loads((tmp_path / "probe.json").read_text())
    return (
        measured["rc"],
        measured["peak_mib"],
        (tmp_path / "out.bin").read_bytes().decode("utf-8"),
        (tmp_path / "err.bin").read_bytes().decode("utf-8"),
    )


def test_a_hostile_skills_output_commands_nothing_and_is_bounded(tmp_path: Path) -> None:
    """As GitHub Actions runs it (GITHUB_ACTIONS=true), with the stream capture raised to
    64 MiB so that the 50 MB line and 64 MiB of the 200 MB flood reach the CLI: no line of its
    output or its reports is a runner command; with the default caps the log and the reports
    stay small, and with small caps they stop at them with a marker; the JUnit file is
    schema-valid either way. The CLI's peak RSS is measured."""
    require_runtime("docker")
    hostile_skill(tmp_path / "skills")
    env = cli_env(
        tmp_path,
        GITHUB_ACTIONS="true",
        CI="true",
        SKILL_EXECUTOR_STDOUT_MAX_BYTES=str(64 << 20),
        SKILL_EXECUTOR_STDERR_MAX_BYTES=str(64 << 20),
    )
    schema = xmlschema.XMLSchema(str(JUNIT_XSD))
    sizes = []
    for caps in ([], ["--max-log-bytes", "6000", "--max-report-bytes", "8000"]):
        status, peak, out, err = run_measured(
            tmp_path, env, "skills", "-j", "2", "--junit", "r.xml", "--json", "r.json", *caps
        )
        assert status == 1, out[-3000:] + err[-3000:]
        assert runner_commands(out) == [] and runner_commands(err) == []
        last = out.rstrip("\n").split("\n")[-1]
        assert last.startswith("5 cases: 1 passed, 4 failed"), last
        junit, report = (tmp_path / "r.xml").read_bytes(), (tmp_path / "r.json").read_bytes()
        schema.validate(str(tmp_path / "r.xml"))
        assert junit.count(b"<testcase ") == 5 and runner_commands(junit.decode()) == []
        assert runner_commands(report.decode()) == []
        cases = {c["name"]: c["status"] for c in json.loads(report)["cases"]}
        assert list(cases.values()) == ["passed", "failed", "failed", "failed", "failed"]
        sizes.append((len(out.encode()), len(junit), len(report), peak))
        if caps:
            assert len(out.encode()) < 6000 + 600
            assert "[truncated: the log reached its limit of 6000 bytes (--max-log-bytes)" in out
            assert "(--max-report-bytes)" in junit.decode() and "(--max-report-bytes)" in report.decode()
            assert len(junit) < 8000 + 5 * 3000 and len(report) < 8000 + 5 * 3000
        else:
            assert "more characters on this line]" in out  # the 50 MB line, cut
            assert "FAIL  hostile::::add-mask::name ##vso\\x5btask.setvariable variable=a]b ##\\x5berror]c" in out
            assert len(out.encode()) < 200_000 and len(junit) < 400_000 and len(report) < 400_000
        assert peak < 2048  # generous; see the print
    print(f"(log, junit, json bytes, CLI peak RSS MiB) default caps: {sizes[0]}, small caps: {sizes[1]}")


# -- 5a: a --server run changes nothing live ------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(tmp_path_factory.mktemp("skill-tests-ci-server"))
    srv.start()
    yield srv
    srv.stop()


PROBE_TESTS = "cases:\n  - {name: says hi, command: 'echo hi', expect: {stdout: {equals: \"hi\\n\"}}}\n"


def probe_skill(root: Path, name: str, description: str) -> Path:
    folder = root / name
    (folder / "tests").mkdir(parents=True)
    (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {description}\n---\n# {name}\n")
    (folder / "tests" / "skill-tests.yaml").write_text(PROBE_TESTS)
    return folder


def run_cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "skill_executor.cli.main", "test", *args],
        cwd=tmp_path,
        env=cli_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
    )


def live_state(server: Server, name: str) -> tuple[object, object]:
    """(the skill's version list or its 404 code, the overview's entry for it)."""
    with Client(server.url) as client:
        try:
            versions: object = client.skill_versions(name)
        except Exception as exc:  # noqa: BLE001 -- the code is the state
            versions = getattr(exc, "code", repr(exc))
    listed = [s for s in httpx.get(f"{server.url}/v1/skills").json()["skills"] if s["id"] == name]
    return versions, listed


def test_a_server_run_of_a_new_skill_changes_nothing_live(tmp_path: Path, server: Server) -> None:
    folder = probe_skill(tmp_path, "pr-new-skill", "A pull request's new skill. Use in tests.")
    before = live_state(server, "pr-new-skill")
    assert before == ("skill_not_found", [])
    plain = run_cli(tmp_path, str(folder), "--server", server.url)
    assert plain.returncode == 2 and "--publish existing" in plain.stderr, plain.stderr
    existing = run_cli(tmp_path, str(folder), "--server", server.url, "--publish", "existing", "--json", "r.json")
    assert existing.returncode == 1, existing.stdout + existing.stderr
    case = {c["name"]: c for c in json.loads((tmp_path / "r.json").read_text())["cases"]}["says hi"]
    assert case["status"] == "error" and "would make this folder the live default" in case["message"]
    assert live_state(server, "pr-new-skill") == before  # not uploaded: no default, not listed


def test_a_server_run_of_an_existing_skill_keeps_its_default(tmp_path: Path, server: Server) -> None:
    live = probe_skill(tmp_path / "live", "pr-old-skill", "The live version. Use in tests.")
    with Client(server.url) as client:
        first = client.push_skill(live)
    assert first.version == 1 and first.is_default
    changed = probe_skill(tmp_path / "pr", "pr-old-skill", "The pull request's version. Use in tests.")
    before = live_state(server, "pr-old-skill")
    plain = run_cli(tmp_path, str(changed), "--server", server.url)
    assert plain.returncode == 2, plain.stdout + plain.stderr
    assert live_state(server, "pr-old-skill") == before  # nothing uploaded: versions and overview as they were
    pushed = run_cli(tmp_path, str(changed), "--server", server.url, "--publish", "existing")
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    versions, _ = live_state(server, "pr-old-skill")
    assert isinstance(versions, VersionList)
    assert versions.default_version == 1 and versions.latest_version == 2
    with Client(server.url) as client:
        assert client.load_skill("pr-old-skill").description == "The live version. Use in tests."


def test_the_pytest_plugin_uploads_nothing_unless_asked(tmp_path: Path, server: Server) -> None:
    probe_skill(tmp_path / "skills", "pr-plugin-skill", "A pull request's skill, through pytest. Use in tests.")
    args = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "skills",
        "--skill-executor-server",
        server.url,
    ]
    result = subprocess.run(args, cwd=tmp_path, env=cli_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "publish_not_allowed" in result.stdout
    existing = subprocess.run(
        [*args, "--skill-executor-publish", "existing"],
        cwd=tmp_path,
        env=cli_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert existing.returncode == 1 and "skill_not_on_server" in existing.stdout, existing.stdout
    assert live_state(server, "pr-plugin-skill") == ("skill_not_found", [])


def test_a_pull_requests_ini_file_cannot_turn_on_uploads(tmp_path: Path, server: Server) -> None:
    """The repository's own files are the pull request's: an ini file naming the server and
    `publish = any` sends nothing (only the CI job's command line can)."""
    probe_skill(tmp_path / "skills", "pr-ini-skill", "A pull request's skill, through pytest.ini. Use in tests.")
    (tmp_path / "pytest.ini").write_text(
        f"[pytest]\nskill_executor_server = {server.url}\nskill_executor_publish = any\n"
    )
    args = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "skills"]
    subprocess.run(args, cwd=tmp_path, env=cli_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert live_state(server, "pr-ini-skill") == ("skill_not_found", [])


def test_a_default_that_moves_during_the_upload_is_an_error_and_is_put_back(tmp_path: Path, server: Server) -> None:
    """A service that ignored ``no_default`` (simulated: the upload is promoted right after it
    lands, on the real service) is caught by reading the default before and after."""
    from skill_executor.testing.backends import ServerBackend
    from skill_executor.testing.publish import PublishRefused

    with Client(server.url) as client:
        client.push_skill(probe_skill(tmp_path / "live", "pr-moved-skill", "Live. Use in tests."))
    backend = ServerBackend(server.url, publish="existing")
    real_push = backend._client.push_skill

    def push_and_promote(*args: object, **kwargs: object) -> object:
        pushed = real_push(*args, **kwargs)  # type: ignore[arg-type]
        assert pushed.version is not None
        backend._client.set_default_version(pushed.id, pushed.version)
        return pushed

    backend._client.push_skill = push_and_promote  # type: ignore[method-assign]
    try:
        with pytest.raises(PublishRefused) as caught:
            backend.prepare(probe_skill(tmp_path / "pr", "pr-moved-skill", "The PR. Use in tests."))
    finally:
        backend.close()
    assert caught.value.code == "default_moved"
    assert "moved from 1 to 2" in caught.value.message and "set back to 1" in caught.value.message
    versions, _ = live_state(server, "pr-moved-skill")
    assert isinstance(versions, VersionList) and versions.default_version == 1
