"""Every command's errors go to stderr, through the installed ``skill-executor`` entry
point: stdout stays empty (a script piping it gets no half-answer), stderr says what went
wrong in one line of ours (no traceback), the exit status is non-zero."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import REPO

SKILL = str(REPO / "skills" / "math-tools")
UNREACHABLE = "http://127.0.0.1:9"


def entry_point() -> list[str]:
    """The console script of this interpreter's environment (what users run)."""
    script = Path(sys.executable).parent / "skill-executor"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "skill_executor.cli.main"]


# (id, arguments, extra environment, exit status, what stderr says)
CASES: list[tuple[str, list[str], dict[str, str], int, str]] = [
    ("run-request-unreadable", ["run", "--request", "/nonexistent.json"], {}, 2, '"code": "usage"'),
    (
        "run-shorthand-unknown-skill",
        ["run", "nope", "--runtime", "local", "--", "true"],
        {},
        2,
        "skill-executor: skill_not_found: unknown skill 'nope'",
    ),
    (
        "run-invalid-setting",
        ["run", "math-tools", "--", "true"],
        {"SKILL_EXECUTOR_RUNTIME": "bogus"},
        2,
        "skill-executor: invalid_settings: SKILL_EXECUTOR_RUNTIME: Input should be 'docker', 'bwrap', 'local' or "
        "'agent-sandbox' (got 'bogus')",
    ),
    (
        "run-no-engine",
        ["run", "math-tools", "--runtime", "docker", "--", "true"],
        {"DOCKER_HOST": "unix:///nonexistent.sock"},
        2,
        "skill-executor: engine_unavailable: ",
    ),
    (
        "skills-show-unknown",
        ["skills", "show", "nope", "--root", str(REPO / "skills")],
        {},
        2,
        "skill-executor: skill_not_found: unknown skill 'nope'",
    ),
    ("skills-list-missing-root", ["skills", "list", "--root", "/nonexistent"], {}, 2, "'/nonexistent' does not exist"),
    (
        "skills-search-missing-root",
        ["skills", "search", "x", "--root", "/nonexistent"],
        {},
        2,
        "'/nonexistent' does not exist",
    ),
    ("skills-prompt-missing", ["skills", "prompt", "/nonexistent"], {}, 1, "skill-executor: /nonexistent: "),
    (
        "skills-install-unreadable",
        ["skills", "install", "/nonexistent.zip"],
        {},
        2,
        "skill-executor: cannot read /nonexistent.zip: No such file or directory",
    ),
    (
        "skills-doctor-unknown",
        ["skills", "doctor", "nope", "--runtime", "local"],
        {},
        2,
        "skill-executor: skill_not_found: unknown skill 'nope'",
    ),
    ("skills-push-no-server", ["skills", "push", SKILL], {}, 2, "skill-executor: give --server URL"),
    (
        "skills-versions-unreachable",
        ["skills", "versions", "math-tools", "--server", UNREACHABLE],
        {},
        3,
        f"skill-executor: cannot reach {UNREACHABLE}",
    ),
    ("artifacts-get-missing", ["artifacts", "get", "nope"], {}, 2, "skill-executor: artifact_not_found: "),
    (
        "artifacts-put-bad-name",
        ["artifacts", "put", "../a", SKILL + "/SKILL.md"],
        {},
        2,
        "skill-executor: invalid_artifact_name: ",
    ),
    (
        "artifacts-invalid-setting",
        ["artifacts", "list"],
        {"SKILL_EXECUTOR_MAX_TIMEOUT": "soon"},
        2,
        "skill-executor: invalid_settings: SKILL_EXECUTOR_MAX_TIMEOUT: ",
    ),
    (
        "image-build-no-engine",
        ["image", "build"],
        {"DOCKER_HOST": "unix:///nonexistent.sock"},
        2,
        "skill-executor: engine_unavailable: ",
    ),
    (
        "image-versions-no-engine",
        ["image", "versions"],
        {"DOCKER_HOST": "unix:///nonexistent.sock"},
        2,
        "skill-executor: engine_unavailable: ",
    ),
    ("test-missing-path", ["test", "/nonexistent"], {}, 2, "skill-executor test: /nonexistent does not exist"),
    (
        "db-status-unreachable",
        ["db", "status"],
        {"SKILL_EXECUTOR_DATABASE_URL": "postgresql://u:p@127.0.0.1:9/db"},
        2,
        "skill-executor: database_unavailable: ",
    ),
    (
        "db-upgrade-bad-url",
        ["db", "upgrade"],
        {"SKILL_EXECUTOR_DATABASE_URL": "mysql://127.0.0.1/db"},
        2,
        "skill-executor: invalid_database_url: ",
    ),
    ("cluster-status-no-schema", ["cluster", "status"], {}, 2, "skill-executor: database_schema: "),
    (
        "mcp-invalid-setting",
        ["mcp"],
        {"SKILL_EXECUTOR_RUNTIME": "bogus"},
        2,
        "skill-executor: invalid_settings: SKILL_EXECUTOR_RUNTIME: ",
    ),
    (
        "serve-invalid-setting",
        ["serve"],
        {"SKILL_EXECUTOR_PORT": "http"},
        2,
        "skill-executor: invalid_settings: SKILL_EXECUTOR_PORT: ",
    ),
    (
        "worker-invalid-setting",
        ["worker"],
        {"SKILL_EXECUTOR_RUNTIME": "bogus"},
        2,
        "skill-executor: invalid_settings: SKILL_EXECUTOR_RUNTIME: ",
    ),
    ("usage", ["skills", "nope"], {}, 2, "invalid choice: 'nope'"),
]


@pytest.mark.parametrize("args, env, status, message", [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_errors_go_to_stderr(tmp_path: Path, args: list[str], env: dict[str, str], status: int, message: str) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SKILL_EXECUTOR_")}
    base.update(SKILL_EXECUTOR_DATA_DIR=str(tmp_path / "data"), SKILL_EXECUTOR_SKILLS_DIRS=str(REPO / "skills"))
    proc = subprocess.run(
        [*entry_point(), *args],
        cwd=tmp_path,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == status, proc.stdout + proc.stderr
    assert proc.stdout == ""
    assert message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr


def test_a_refused_run_request_is_json_on_stderr(tmp_path: Path) -> None:
    """``run --request``: stdout is for the result; the refusal is ``{"error": ...}`` on stderr."""
    proc = subprocess.run(
        [*entry_point(), "run", "--request", "-", "--runtime", "local", "--data-dir", str(tmp_path)],
        input=json.dumps({"skill": "nope", "command": "true"}),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (proc.returncode, proc.stdout) == (2, "")
    assert json.loads(proc.stderr.splitlines()[-1]) == {
        "error": {"code": "skill_not_found", "message": "unknown skill 'nope'"}
    }
