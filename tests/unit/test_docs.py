"""The docs site builds with ``mkdocs build --strict`` -- offline, every reference page
generated from the code -- and a broken link or a page missing from the nav fails it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from skill_executor.config import Settings
from skill_executor.errorcodes import CATALOGUE

ROOT = Path(__file__).resolve().parent.parent.parent

# The build runs with every socket to a non-loopback address refused (and a dead proxy):
# a page, theme or plugin that fetches anything fails the build instead of reaching out.
OFFLINE = """
import socket, sys
_connect = socket.socket.connect
def _refuse(self, address):
    host = address[0] if isinstance(address, tuple) else address
    if self.family in (socket.AF_INET, socket.AF_INET6) and host not in ("127.0.0.1", "::1", "localhost"):
        raise OSError(f"network access during the docs build: {address!r}")
    return _connect(self, address)
socket.socket.connect = _refuse
def _no_dns(*args, **kwargs):
    raise OSError(f"name lookup during the docs build: {args[:1]!r}")
socket.getaddrinfo = _no_dns
from mkdocs.__main__ import cli
sys.exit(cli())
"""


def build(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "NO_MKDOCS_2_WARNING": "1",
        "http_proxy": "http://127.0.0.1:9",
        "https_proxy": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9",
        "HTTPS_PROXY": "http://127.0.0.1:9",
    }
    env = {k: v for k, v in env.items() if not k.startswith("SKILL_EXECUTOR_")}  # the defaults, not this shell's
    return subprocess.run(
        [
            sys.executable,
            "-c",
            OFFLINE,
            "build",
            "--strict",
            "--config-file",
            str(root / "mkdocs.yml"),
            "--site-dir",
            str(site),
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = build(ROOT, out)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "WARNING" not in done.stderr, done.stderr[-4000:]
    return out


def test_the_site_builds_strictly_offline(site: Path) -> None:
    for page in (
        "index.html",
        "quickstart/index.html",
        "concepts/skills/index.html",
        "security/threat-model/index.html",
        "reference/errors/index.html",
    ):
        assert (site / page).is_file(), page
    html = "".join(p.read_text(errors="replace") for p in site.rglob("*.html"))
    assert "fonts.googleapis.com" not in html and "fonts.gstatic.com" not in html


def test_reference_pages_are_generated_from_the_code(site: Path) -> None:
    settings = (site / "reference/settings/index.html").read_text()
    for name, field in Settings.model_fields.items():
        assert f"SKILL_EXECUTOR_{name.upper()}" in settings
        assert field.description, f"Settings.{name} has no docstring (its description)"
    errors = (site / "reference/errors/index.html").read_text()
    assert all(f"<code>{code}</code>" in errors for code in CATALOGUE)
    cli = (site / "reference/cli/index.html").read_text()
    assert "skill-executor run" in cli and "skill-executor test" in cli
    document = json.loads((site / "reference/openapi.json").read_text())
    assert "/v1/runs" in document["paths"]
    assert "/v1/runs" in (site / "reference/openapi/index.html").read_text()
    tools = (site / "reference/mcp-tools/index.html").read_text()
    assert all(name in tools for name in ("skill_run", "skill_load", "artifact_put", "context_load"))


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    shutil.copy(ROOT / "mkdocs.yml", root)
    shutil.copytree(ROOT / "docs", root / "docs")
    return root


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    page = root / "docs/quickstart.md"
    page.write_text(page.read_text() + "\nSee [the missing page](concepts/missing.md).\n")
    done = build(root, tmp_path / "site")
    assert done.returncode != 0 and "missing.md" in done.stderr


def test_a_page_left_out_of_the_nav_fails_the_build(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    (root / "docs/concepts/orphan.md").write_text("# Orphan\n")
    done = build(root, tmp_path / "site")
    assert done.returncode != 0 and "orphan.md" in done.stderr
