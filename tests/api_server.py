"""Start the real service (``skill-executor serve``) on a free loopback port for tests."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from .conftest import REPO, SKILLS, docker_problem


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def api_runtime() -> str:
    """Docker when an engine is usable (always in CI), else the local runtime."""
    return "docker" if docker_problem() is None else "local"


@dataclass
class Server:
    base: Path
    env: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def skills_dir(self) -> Path:
        return self.base / "skills"

    @property
    def data_dir(self) -> Path:
        return self.base / "data"

    def start(self, timeout: float = 30) -> "Server":
        if not self.skills_dir.exists():
            shutil.copytree(SKILLS, self.skills_dir)
        env = {k: v for k, v in os.environ.items() if not k.startswith("SKILL_EXECUTOR_")}
        if "SKILL_EXECUTOR_DOCKER_IMAGE" in os.environ:  # the image the suite pinned (its hash tag)
            env["SKILL_EXECUTOR_DOCKER_IMAGE"] = os.environ["SKILL_EXECUTOR_DOCKER_IMAGE"]
        env.update({"SKILL_EXECUTOR_RUNTIME": api_runtime(), "SKILL_EXECUTOR_SKILLS_REFRESH_SECONDS": "0"})
        env.update(self.env)
        log = open(self.base / f"server-{self.port}.log", "ab")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "skill_executor.cli.main",
                "serve",
                "--port",
                str(self.port),
                "--skills-dir",
                str(self.skills_dir),
                "--data-dir",
                str(self.data_dir),
            ],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}: {self.log()}")
            try:
                httpx.get(f"{self.url}/healthz", timeout=1)
                return self
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError(f"server did not start: {self.log()}")

    def log(self) -> str:
        path = self.base / f"server-{self.port}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def log_lines(self) -> list[str]:
        """Every line the server logged so far."""
        path = self.base / f"server-{self.port}.log"
        return path.read_text(errors="replace").splitlines() if path.exists() else []

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def terminate(self) -> float:
        """SIGTERM (as ``docker stop``); seconds until the process has exited."""
        assert self.process is not None
        started = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        finally:
            elapsed = time.monotonic() - started
            self.stop(signal.SIGKILL)
        return elapsed
