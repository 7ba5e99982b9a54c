"""The ``skill-executor run`` and ``artifacts`` command-line contract."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from ..api_server import Server
from ..conftest import REPO, require_runtime

RUNTIMES = ["local", "docker"]  # the CLI's --runtime values


def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "skill_executor.cli.main", *args], capture_output=True, text=True, cwd=REPO, input=stdin
    )


def refusal(result: subprocess.CompletedProcess[str]) -> str:
    """The code of ``run --request``'s refusal: ``{"error": ...}`` as stderr's last line, stdout empty."""
    assert result.stdout == "", result.stdout
    return str(json.loads(result.stderr.splitlines()[-1])["error"]["code"])


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_run_request_file_and_stdin(tmp_path: Path, runtime: str) -> None:
    require_runtime(runtime)
    request = {
        "skill": "csv-report",
        "command": "python3 scripts/report.py inputs/sample.csv out/ --title Sample",
        "inputs": [{"from": "skill://csv-report/assets/sample.csv"}],
        "output_files": ["out/*"],
    }
    path = tmp_path / "req.json"
    path.write_text(json.dumps(request))
    common = ["--runtime", runtime, "--data-dir", str(tmp_path / "data")]
    for args, stdin in ((["--request", str(path)], None), (["--request", "-"], json.dumps(request))):
        result = cli("run", *args, *common, stdin=stdin)
        assert result.returncode == 0, result.stderr
        body = json.loads(result.stdout)
        types = {f["name"]: f["mime_type"] for f in body["output_files"]}
        assert types == {
            "out/chart.svg": "image/svg+xml",
            "out/report.md": "text/markdown",
            "out/summary.json": "application/json",
        }
        assert body["exit_code"] == 0 and "4 rows" in body["stdout"] + json.dumps(body["output_files"])


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_run_refused_and_failed(tmp_path: Path, runtime: str) -> None:
    require_runtime(runtime)
    common = ["--runtime", runtime, "--data-dir", str(tmp_path / "data")]
    refused = cli("run", "--request", "-", *common, stdin=json.dumps({"skill": "nope", "command": "true"}))
    assert refused.returncode == 2
    assert refusal(refused) == "skill_not_found"
    invalid = cli("run", "--request", "-", *common, stdin=json.dumps({"skill": "math-tools"}))
    assert invalid.returncode == 2 and refusal(invalid) == "invalid_request"
    host = cli(
        "run",
        "--request",
        "-",
        *common,
        stdin=json.dumps({"skill": "math-tools", "command": "true", "inputs": [{"from": "host:///etc/passwd"}]}),
    )
    assert host.returncode == 2 and refusal(host) == "host_input_refused"
    # A command that ran: the CLI exits with its status (the result JSON is printed all the same).
    failed = cli("run", "--request", "-", *common, stdin=json.dumps({"skill": "math-tools", "command": "exit 7"}))
    assert failed.returncode == 7 and json.loads(failed.stdout)["exit_code"] == 7
    killed = cli(
        "run", "--request", "-", *common, stdin=json.dumps({"skill": "math-tools", "command": "kill -TERM $$"})
    )
    assert killed.returncode == 143 and json.loads(killed.stdout)["signal"] == "SIGTERM"
    slow = cli(
        "run", "--request", "-", *common, stdin=json.dumps({"skill": "math-tools", "command": "sleep 30", "timeout": 1})
    )
    assert slow.returncode == 124 and json.loads(slow.stdout)["timed_out"] is True


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_run_shorthand(tmp_path: Path, runtime: str) -> None:
    require_runtime(runtime)
    result = cli(
        "run",
        "math-tools",
        "--runtime",
        runtime,
        "--data-dir",
        str(tmp_path / "d"),
        "--",
        "python3 scripts/primes.py 20 out/p.txt",
    )
    assert result.returncode == 0, result.stderr
    assert "8 primes below 20" in result.stdout and "--- out/p.txt (text/plain" in result.stdout
    assert "2\n3\n5\n7\n11\n13\n17\n19\n" in result.stdout
    failed = cli(
        "run", "math-tools", "--runtime", runtime, "--data-dir", str(tmp_path / "d"), "--", "echo partial; exit 3"
    )
    assert failed.returncode == 3 and "partial" in failed.stdout and "--- exit 3 in" in failed.stderr


def test_version() -> None:
    from skill_executor import __version__

    result = cli("--version")
    assert result.returncode == 0 and result.stdout == f"skill-executor {__version__}\n"


@pytest.mark.parametrize(
    "args, message",
    [
        (["serve", "--port", "70000"], "invalid port 70000: must be 1-65535"),
        (["serve", "--port", "0"], "invalid port 0: must be 1-65535"),
        (["serve", "--port", "-1"], "invalid port -1: must be 1-65535"),
        (["serve", "--port", "http"], "invalid port 'http': not a number"),
        (["serve", "--skills-dir", "/nonexistent/skills"], "'/nonexistent/skills' does not exist"),
        (["serve", "--skills-dir", "/etc/hostname"], "'/etc/hostname' is not a folder"),
        (
            ["run", "math-tools", "--skills-dir", "/nonexistent/skills", "--", "true"],
            "'/nonexistent/skills' does not exist",
        ),
    ],
)
def test_usage_errors(tmp_path: Path, args: list[str], message: str) -> None:
    """Refused before anything starts: exit 2 with the reason (serve never binds)."""
    result = cli(*args, "--data-dir", str(tmp_path / "d"))
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "usage:" in result.stderr
    assert not (tmp_path / "d").exists()


def test_allow_host_root_flag(tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("from host")
    request = {"skill": "math-tools", "command": "cat inputs/in.txt", "inputs": [{"from": f"host://{tmp_path}/in.txt"}]}
    result = cli(
        "run",
        "--request",
        "-",
        "--runtime",
        "local",
        "--data-dir",
        str(tmp_path / "d"),
        "--allow-host-root",
        str(tmp_path),
        stdin=json.dumps(request),
    )
    assert json.loads(result.stdout)["stdout"] == "from host"


def test_artifacts_put_get_list(tmp_path: Path) -> None:
    data = ["--data-dir", str(tmp_path)]
    src = tmp_path / "a.txt"
    src.write_text("one")
    first = json.loads(cli("artifacts", "put", "docs/a.txt", str(src), *data).stdout)
    second = json.loads(cli("artifacts", "put", "docs/a.txt", "-", *data, stdin="two").stdout)
    assert (first["version"], second["version"]) == (1, 2) and second["ref"] == "artifact://docs/a.txt@2"
    assert cli("artifacts", "get", "docs/a.txt", *data).stdout == "two"
    assert cli("artifacts", "get", "artifact://docs/a.txt@1", *data).stdout == "one"
    listed = json.loads(cli("artifacts", "list", *data).stdout)
    assert [(a["name"], a["version"]) for a in listed] == [("docs/a.txt", 2)]
    versions = json.loads(cli("artifacts", "list", "docs/a.txt", *data).stdout)
    assert [v["version"] for v in versions] == [1, 2]
    missing = cli("artifacts", "get", "nope", *data)
    assert missing.returncode == 2 and "artifact_not_found" in missing.stderr
    bad = cli("artifacts", "put", "../evil", str(src), *data)
    assert bad.returncode == 2 and "invalid_artifact_name" in bad.stderr


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_example_skills_and_mime_types(tmp_path: Path, runtime: str) -> None:
    require_runtime(runtime)
    common = ["--runtime", runtime, "--data-dir", str(tmp_path / "data")]
    cases = [
        (
            {
                "skill": "math-tools",
                "command": "python3 scripts/fib.py 12 --json out/fib.json && python3 scripts/primes.py 50 out/primes.txt "
                "&& python3 scripts/stats.py inputs/n.txt out/stats.json",
                "inputs": [{"from": "skill://math-tools/references/REFERENCE.md", "to": "inputs/ref.md"}],
                "stdin": None,
            },
            None,
        ),
        (
            {
                "skill": "file-bundle",
                "command": "bash scripts/bundle.sh inputs out",
                "inputs": [{"from": "skill://csv-report/assets"}, {"from": "skill://math-tools/scripts"}],
            },
            {"out/bundle.tar.gz": "application/gzip", "out/manifest.tsv": "text/tab-separated-values"},
        ),
    ]
    # math-tools: numbers staged from an artifact made through the CLI
    numbers = tmp_path / "n.txt"
    numbers.write_text("4 8 15 16 23 42\n")
    assert cli("artifacts", "put", "n.txt", str(numbers), "--data-dir", str(tmp_path / "data")).returncode == 0
    cases[0][0]["inputs"].append({"from": "artifact://n.txt"})
    del cases[0][0]["stdin"]
    expected_math = {
        "out/fib.json": "application/json",
        "out/primes.txt": "text/plain",
        "out/stats.json": "application/json",
    }
    for request, expected in cases:
        request["outputs"] = {"globs": ["out/*"]}
        result = cli("run", "--request", "-", *common, stdin=json.dumps(request))
        assert result.returncode == 0, result.stderr
        body = json.loads(result.stdout)
        assert body["exit_code"] == 0, body["stderr"]
        types = {f["name"]: f["mime_type"] for f in body["output_files"]}
        assert types == (expected or expected_math)
        if request["skill"] == "math-tools":
            outputs = {f["name"]: f for f in body["output_files"]}
            assert json.loads(outputs["out/fib.json"]["content"])[-1] == 89
            assert json.loads(outputs["out/stats.json"]["content"])["mean"] == 18.0
        else:
            manifest = next(f for f in body["output_files"] if f["name"] == "out/manifest.tsv")["content"]
            assert (
                "assets/sample.csv\t87\t" in manifest
                and "scripts/fib.py\t" in manifest
                and "bundled 4 files" in body["stdout"]
            )


def test_a_cli_run_is_recorded_where_the_service_lists_it(tmp_path: Path) -> None:
    """``skill-executor run`` goes through the same front door as ``POST /v1/runs``: its run is
    recorded in the data dir's store, and a service started on that data dir lists it (and
    its result) as any run of the local tenant; a CLI run never marks the service's runs
    interrupted."""
    server = Server(tmp_path)
    common = ["--runtime", "local", "--skills-dir", str(server.skills_dir), "--data-dir", str(server.data_dir)]
    shutil.copytree(REPO / "skills", server.skills_dir)
    done = cli("run", "--request", "-", *common, stdin=json.dumps({"skill": "math-tools", "command": "echo front"}))
    assert done.returncode == 0, done.stderr
    run_id = json.loads(done.stdout)["run_id"]
    server.start()
    try:
        listed = httpx.get(f"{server.url}/v1/runs", timeout=10).json()
        assert run_id in [run["run_id"] for run in listed["runs"]]
        record = httpx.get(f"{server.url}/v1/runs/{run_id}", timeout=10).json()
        assert record["status"] == "completed" and record["result"]["stdout"] == "front\n"
        # A CLI run on the data dir of a running service leaves the service's runs alone.
        slow = httpx.post(
            f"{server.url}/v1/runs?wait=false",
            json={"skill": "math-tools", "command": "sleep 3; echo late"},
            timeout=10,
        ).json()["run_id"]
        again = cli("run", "--request", "-", *common, stdin=json.dumps({"skill": "math-tools", "command": "true"}))
        assert again.returncode == 0, again.stderr
        final = httpx.get(f"{server.url}/v1/runs/{slow}", timeout=10).json()
        while final["status"] not in ("completed", "failed", "cancelled"):
            time.sleep(0.2)
            final = httpx.get(f"{server.url}/v1/runs/{slow}", timeout=10).json()
        assert final["status"] == "completed" and final["result"]["stdout"] == "late\n", json.dumps(final)
    finally:
        server.stop()
