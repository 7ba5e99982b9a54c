"""skill-executor as users install it: a wheel built from a clean copy of this source
tree, installed (not editable) into a virtualenv with the locked dependencies, and its
``skill-executor`` command run from a folder that has no ``images/``.

Two virtualenvs, kept under ``build/test-venvs/`` keyed by their requirements (made in
about 50 s each, then only the wheel is reinstalled: a few seconds): the lock file without
the mcp extra (a plain ``pip install <source>``), and the same with the MCP SDK 1.x
installed first (a framework's environment).
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import socket
import subprocess
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from ..conftest import REPO, require_runtime
from ..wheels import LOCK, VENVS, build_wheel, clean_copy, install_wheel, locked_venv, venv_env, without

PINS = ("requirements-full.txt", "requirements-minimal.txt", "npm/package.json")
#: The mcp extra's distributions in the lock file (and the test tools that need them).
MCP_SDK = {"mcp", "mcp-types", "fastmcp", "fastmcp-slim"}


@dataclass(frozen=True)
class Installed:
    """A virtualenv with the built wheel installed."""

    root: Path
    wheel: Path

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    def env(self, **extra: str) -> dict[str, str]:
        # Nothing of this checkout leaks in: no PYTHONPATH, no SKILL_EXECUTOR_* of the caller.
        env = {k: v for k, v in os.environ.items() if not k.startswith("SKILL_EXECUTOR_")}
        env.pop("PYTHONPATH", None)
        env.pop("PYTHONHOME", None)
        env.update(VIRTUAL_ENV=str(self.root), PATH=f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}")
        return {**env, **extra}

    def cli(self, *args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bin / "skill-executor"), *args],
            cwd=cwd,
            env=env or self.env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("wheel")
    return build_wheel(clean_copy(base / "source"), base / "dist")


@pytest.fixture(scope="module")
def installed(wheel: Path) -> Installed:
    """The locked environment less the mcp extra: what ``pip install <source>`` gives."""
    root = locked_venv("no-mcp", without(LOCK.read_text(), MCP_SDK))
    install_wheel(root, wheel)
    return Installed(root, wheel)


def skill_zip(name: str, files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        archive.writestr(f"{name}/SKILL.md", f"---\nname: {name}\ndescription: declares needs\n---\n# {name}\n")
        for path, text in files.items():
            archive.writestr(f"{name}/{path}", text)
    return buf.getvalue()


# -- the runner image's pins travel with the package ---------------------------------------


def test_the_wheel_ships_the_runner_pins(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        for name in PINS:
            shipped = archive.read(f"skill_executor/image/pins/{name}")
            assert shipped == (REPO / "images" / "runner" / name).read_bytes(), name


def test_an_installed_package_judges_needs_against_the_image(tmp_path: Path, installed: Installed) -> None:
    """Needs the runner image pins (pypdf, pdf-lib) are met without images/ at hand: with
    an empty wheelhouse, anything not provided by the image could not be installed."""
    empty = tmp_path / "wheelhouse"
    empty.mkdir()
    package = tmp_path / "pdf.zip"
    package.write_bytes(
        skill_zip(
            "pdf-tool",
            {"requirements.txt": "pypdf>=5\n", "package.json": json.dumps({"dependencies": {"pdf-lib": "^1.17.0"}})},
        )
    )
    work = tmp_path / "elsewhere"  # no images/ here
    work.mkdir()
    env = installed.env(
        SKILL_EXECUTOR_DATA_DIR=str(tmp_path / "data"),
        SKILL_EXECUTOR_SKILLS_DIRS=str(tmp_path / "none"),
        SKILL_EXECUTOR_WHEELHOUSE=str(empty),
        SKILL_EXECUTOR_NPM_WHEELHOUSE=str(empty),
        SKILL_EXECUTOR_HOST_TOOLS_USER="root",
    )
    proc = installed.cli("skills", "install", str(package), cwd=work, env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["id"] == "pdf-tool"
    assert "cannot read the runner image's" not in proc.stderr
    # Where the package was imported from: the virtualenv, not this checkout.
    where = subprocess.run(
        [str(installed.bin / "python"), "-c", "import skill_executor; print(skill_executor.__file__)"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert where.startswith(str(installed.root)), where


# -- the MCP server is the mcp extra ---------------------------------------------------------


@pytest.fixture(scope="module")
def without_mcp(installed: Installed) -> Installed:
    return installed


@pytest.fixture(scope="module")
def next_to_mcp1(wheel: Path) -> Installed:
    """A framework's environment: the MCP SDK 1.x installed first (pip resolving it against
    the locked packages), then skill-executor, and ``pip check``: every requirement of
    skill-executor and of mcp 1.x holds in the one environment."""
    root = locked_venv("mcp1", without(LOCK.read_text(), MCP_SDK), then=("mcp>=1.20,<2",))
    with open(VENVS / f".{root.name}.install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        subprocess.run(
            [str(root / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
            + ["--force-reinstall", "--no-deps", str(wheel)],
            check=True,
            capture_output=True,
            timeout=300,
            env=venv_env(),
        )
        check = subprocess.run(
            [str(root / "bin" / "python"), "-m", "pip", "check"],
            capture_output=True,
            text=True,
            check=False,
            env=venv_env(),
        )
    assert check.returncode == 0, check.stdout + check.stderr  # skill-executor's requirements hold next to mcp 1.x
    return Installed(root, wheel)


def mcp_version(installed: Installed) -> str | None:
    proc = subprocess.run(
        [str(installed.bin / "python"), "-c", "import importlib.metadata as m; print(m.version('mcp'))"],
        env=installed.env(),
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.stdout.strip() if proc.returncode == 0 else None


def test_the_wheel_asks_for_mcp_only_in_its_extra(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(name).decode()
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist: mcp")]
    assert requires == ['Requires-Dist: mcp<3,>=2.3; extra == "mcp"'], requires


def test_the_wheel_ships_the_clients_package_as_it_is(wheel: Path) -> None:
    """skill_executor_client (client/, its own distribution too) is in the service's wheel,
    byte for byte: the CLI's registry commands and the skill-test HTTP backend use it."""
    source = REPO / "client" / "skill_executor_client"
    with zipfile.ZipFile(wheel) as archive:
        shipped = {n.split("/", 1)[1] for n in archive.namelist() if n.startswith("skill_executor_client/")}
        assert shipped == {p.name for p in source.iterdir() if p.suffix in (".py", ".typed")}
        for name in shipped:
            assert archive.read(f"skill_executor_client/{name}") == (source / name).read_bytes(), name


@pytest.mark.parametrize("variant", ["without_mcp", "next_to_mcp1"])
def test_the_mcp_command_names_the_extra(tmp_path: Path, variant: str, request: pytest.FixtureRequest) -> None:
    installed: Installed = request.getfixturevalue(variant)
    version = mcp_version(installed)
    assert (version is None) if variant == "without_mcp" else (version or "").startswith("1."), version
    proc = installed.cli("mcp", "--skills-dir", str(REPO / "skills"), "--data-dir", str(tmp_path / "d"), cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr
    assert proc.stderr.startswith("skill-executor: mcp_unavailable: the MCP server needs "), proc.stderr
    assert "pip install 'skill-executor[mcp]'" in proc.stderr
    if version is not None:
        assert f"this environment has mcp {version}" in proc.stderr


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_next_to_mcp1_the_library_client_and_rest_api_work(tmp_path: Path, next_to_mcp1: Installed) -> None:
    """The REST API serves; /mcp answers 501 mcp_unavailable (not a crash, not a 404)."""
    installed = next_to_mcp1
    imported = subprocess.run(
        [
            str(installed.bin / "python"),
            "-c",
            "import skill_executor.core, skill_executor_client, skill_executor.api.app",
        ],
        cwd=tmp_path,
        env=installed.env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert imported.returncode == 0, imported.stderr
    port = free_port()
    args = ["serve", "--runtime", "local", "--port", str(port), "--skills-dir", str(REPO / "skills")]
    server = subprocess.Popen(
        [str(installed.bin / "skill-executor"), *args, "--data-dir", str(tmp_path / "d")],
        cwd=tmp_path,
        env=installed.env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, server.communicate()[1]
            try:
                skills = httpx.get(f"{url}/v1/skills", timeout=5)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the service did not answer"
                time.sleep(0.2)
        assert skills.status_code == 200
        assert {s["name"] for s in skills.json()["skills"]} >= {"math-tools"}
        answer = httpx.post(f"{url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "initialize"}, timeout=5)
        assert answer.status_code == 501
        assert answer.json()["error"]["code"] == "mcp_unavailable"
        assert "skill-executor[mcp]" in answer.json()["error"]["message"]
    finally:
        server.terminate()
        _, stderr = server.communicate(timeout=30)
    assert "MCP over HTTP (/mcp) is off: the MCP server needs mcp>=2.3" in stderr


def test_an_installed_package_asks_for_the_image_context(tmp_path: Path, installed: Installed) -> None:
    """images/ is not in the wheel: the image build says which option gives it."""
    require_runtime("docker")
    proc = installed.cli("image", "build", cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr
    assert proc.stderr.startswith(
        f"skill-executor: image_context_missing: no runner Dockerfile at {tmp_path}/images/runner"
    )
    assert "(pass --context: the images/ folder of skill-executor's source tree)" in proc.stderr
