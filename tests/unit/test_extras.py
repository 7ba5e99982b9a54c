"""A laptop install stays small: the cluster's and Kubernetes' dependencies are extras
(``cluster``, ``s3``, ``kubernetes``), and a base install imports none of them.

Each check runs a fresh interpreter whose import system refuses those modules (a finder
first on ``sys.meta_path``, recording every attempt), as an environment without the extras
would: importing the package, its service assembly, the API and the CLI touches none of
them, ``skill-executor serve`` on SQLite answers, and each part that needs an extra says
which one to install.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from ..api_server import free_port
from ..conftest import REPO, SKILLS

#: The top-level modules of the cluster, s3 and kubernetes extras' distributions.
EXTRA_MODULES = [
    "psycopg",
    "psycopg_binary",
    "procrastinate",
    "boto3",
    "botocore",
    "kubernetes",
    "k8s_agent_sandbox",
    "grpc",
]

BLOCKER = textwrap.dedent(
    """
    import importlib.abc, json, os, sys
    BLOCKED = set(json.loads(os.environ["BLOCKED_MODULES"]))
    ATTEMPTS = os.environ["BLOCKED_ATTEMPTS"]

    class Absent(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                with open(ATTEMPTS, "a") as out:
                    out.write(name + "\\n")
                raise ModuleNotFoundError(f"No module named {name!r} (not installed here)", name=name)
            return None

    sys.meta_path.insert(0, Absent())
    """
)

IMPORTS = BLOCKER + textwrap.dedent(
    """
    import skill_executor, skill_executor.service, skill_executor.core, skill_executor.api.app
    import skill_executor.lifecycle.dispatch, skill_executor.objects, skill_executor.db
    from skill_executor.cli import main as cli
    from skill_executor.config import Settings
    from skill_executor.db import Database
    from skill_executor.errors import ExecutorError
    from skill_executor.objects import open_object_store

    said = {}
    def refusal(what, call):
        try:
            call()
        except ExecutorError as exc:
            said[what] = [exc.code, exc.message]

    refusal("cluster", lambda: Database("postgresql://someone@127.0.0.1:1/nothing"))
    refusal("s3", lambda: open_object_store(Settings(data_dir=sys.argv[1], object_store="s3://bucket/prefix")))
    refusal("kubernetes", lambda: __import__("skill_executor.runtimes.agentsandbox.runtime"))
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
    print(json.dumps({"said": said, "loaded": loaded}))
    """
)


def blocked_env(tmp_path: Path) -> dict[str, str]:
    attempts = tmp_path / "attempts.txt"
    attempts.touch()
    return {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(REPO),
        "BLOCKED_MODULES": json.dumps(EXTRA_MODULES),
        "BLOCKED_ATTEMPTS": str(attempts),
    }


def attempted(tmp_path: Path) -> list[str]:
    return sorted(set((tmp_path / "attempts.txt").read_text().split()))


def test_the_base_install_imports_no_extra_and_each_part_names_its_extra(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", IMPORTS, str(tmp_path / "data")],
        env=blocked_env(tmp_path),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout)
    assert seen["loaded"] == []
    for extra, missing in (
        ("cluster", "psycopg, procrastinate"),
        ("s3", "boto3"),
        ("kubernetes", "k8s_agent_sandbox, kubernetes, grpc"),
    ):
        code, message = seen["said"][extra]
        assert code == "extra_missing"
        assert f"needs the {extra} extra: pip install 'skill-executor[{extra}]' (missing here: {missing})" in message
    # Only the parts asked for looked for their modules (find_spec: no import ran).
    assert set(attempted(tmp_path)) <= set(EXTRA_MODULES), attempted(tmp_path)


def test_serve_on_sqlite_needs_no_extra(tmp_path: Path) -> None:
    """``skill-executor serve`` (the CLI's own entry, in this interpreter) answers on SQLite and
    a local folder with every extra's module refused, and never tried one."""
    port = free_port()
    script = BLOCKER + textwrap.dedent(
        """
        from skill_executor.cli.main import main
        sys.exit(main(sys.argv[1:]))
        """
    )
    args = ["serve", "--runtime", "local", "--port", str(port), "--skills-dir", str(SKILLS)]
    server = subprocess.Popen(
        [sys.executable, "-c", script, *args, "--data-dir", str(tmp_path / "data")],
        env=blocked_env(tmp_path),
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, server.communicate()[1][-3000:]
            try:
                skills = httpx.get(f"http://127.0.0.1:{port}/v1/skills", timeout=5)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the service did not answer"
                time.sleep(0.2)
        assert skills.status_code == 200
        assert "math-tools" in {s["name"] for s in skills.json()["skills"]}
    finally:
        server.terminate()
        server.communicate(timeout=30)
    assert attempted(tmp_path) == []


@pytest.mark.parametrize("extra", ["cluster", "s3", "kubernetes"])
def test_each_extra_is_in_pyproject_with_the_modules_extras_checks(extra: str) -> None:
    import tomllib

    from skill_executor.extras import PARTS

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert extra in project["optional-dependencies"]
    assert set(PARTS) == {"cluster", "s3", "kubernetes"}
    for requirement in project["dependencies"]:
        assert not requirement.startswith(("psycopg", "procrastinate", "boto3", "k8s-agent-sandbox")), requirement
