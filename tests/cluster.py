"""A cluster for tests: API replicas (``serve --role api``) and run workers
(``skill-executor worker``) as separate processes on one fresh Postgres database, with
free loopback ports; every process has its own data dir, they share the skills.

:class:`Cluster` starts, stops, kills (``kill -9``) and restarts its parts; :meth:`Cluster.close`
stops everything (a killed worker is started again on its data dir first, so it sweeps the
containers its predecessor left: nothing outlives the test, ``tests/leftovers.py``).
"""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from .api_server import free_port
from .conftest import REPO, SKILLS

#: Faster leases than the defaults (5/20/5 s) for the tests that do not measure them.
FAST = {
    "SKILL_EXECUTOR_WORKER_HEARTBEAT_SECONDS": "1",
    "SKILL_EXECUTOR_WORKER_LEASE_SECONDS": "5",
    "SKILL_EXECUTOR_WORKER_SWEEP_SECONDS": "1",
}
START_SECONDS = 60.0


@dataclass
class Proc:
    """One process of the cluster (``serve --role api`` or ``worker``)."""

    kind: str
    base: Path
    env: dict[str, str]
    skills: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.base / f"{self.kind}.log"

    def start(self, timeout: float = START_SECONDS) -> Proc:
        self.launch()
        return self.ready(timeout)

    def launch(self) -> None:
        """Start the process (SIGTERM when the thread that started it ends: call this from
        the test's own thread, so nothing outlives a test process that is killed)."""
        command = ["serve", "--role", "api"] if self.kind == "api" else ["worker"]
        self.base.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [
                "setpriv",
                "--pdeathsig",
                "TERM",
                "--",
                sys.executable,
                "-m",
                "skill_executor.cli.main",
                *command,
                "--port",
                str(self.port),
                "--skills-dir",
                str(self.skills),
                "--data-dir",
                str(self.base / "data"),
            ],
            cwd=REPO,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()

    def ready(self, timeout: float = START_SECONDS) -> Proc:
        """Wait until it answers /healthz with 200 (a worker: registered, lease held)."""
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.kind} exited with {self.process.returncode}: {self.log()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{self.kind} did not start: {self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """``kill -9``."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> int | None:
        """SIGTERM and wait (SIGKILL after 30 s); the exit code."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


class Cluster:
    def __init__(
        self,
        base: Path,
        database_url: str,
        *,
        apis: int = 2,
        workers: int = 2,
        env: dict[str, str] | None = None,
        worker_env: list[dict[str, str]] | None = None,
    ) -> None:
        """``worker_env``: settings of each worker over ``env`` (by index; e.g. its
        ``DOCKER_HOST``: a worker on an engine of its own)."""
        self.base = base
        self.database_url = database_url
        self.skills = base / "skills"
        if not self.skills.exists():
            shutil.copytree(SKILLS, self.skills)
        common = {k: v for k, v in os.environ.items() if not k.startswith("SKILL_EXECUTOR_")}
        if "SKILL_EXECUTOR_DOCKER_IMAGE" in os.environ:
            common["SKILL_EXECUTOR_DOCKER_IMAGE"] = os.environ["SKILL_EXECUTOR_DOCKER_IMAGE"]
        common.update(
            {
                "SKILL_EXECUTOR_DATABASE_URL": database_url,
                "SKILL_EXECUTOR_RUNTIME": "docker",
                "SKILL_EXECUTOR_SKILLS_REFRESH_SECONDS": "0",
                "SKILL_EXECUTOR_MAX_CONCURRENT_RUNS": "2",
                "SKILL_EXECUTOR_SHUTDOWN_GRACE_SECONDS": "2",
                # the store every process of the cluster shares (a folder here; S3 in some tests)
                "SKILL_EXECUTOR_OBJECT_STORE": str(base / "objects"),
                **(env if env is not None else FAST),
            }
        )
        self.env = common
        # API replicas execute nothing: they get no Docker engine at all
        no_engine = {**common, "DOCKER_HOST": f"unix://{base}/no-engine.sock"}
        self.apis = [Proc("api", base / f"api-{i}", no_engine, self.skills) for i in range(apis)]
        own = worker_env or []
        self.workers = [
            Proc("worker", base / f"worker-{i}", {**common, **(own[i] if i < len(own) else {})}, self.skills)
            for i in range(workers)
        ]
        self._killed: set[int] = set()

    def start(self) -> Cluster:
        # workers first: each registers before it answers /healthz, so the cluster has capacity
        for group in (self.workers, self.apis):
            for proc in group:
                proc.launch()
            with concurrent.futures.ThreadPoolExecutor(len(group) or 1) as pool:
                list(pool.map(lambda proc: proc.ready(), group))
        return self

    def kill_worker(self, index: int) -> None:
        self.workers[index].kill()
        self._killed.add(index)

    def restart_worker(self, index: int) -> Proc:
        """A new worker process on the same data dir (it sweeps what the old one left)."""
        old = self.workers[index]
        if old.alive:
            old.stop()
        fresh = Proc("worker", old.base, old.env, self.skills)
        self.workers[index] = fresh
        self._killed.discard(index)
        return fresh.start()

    def stop(self) -> dict[str, int | None]:
        """SIGTERM everything (API replicas first); exit codes by process."""
        codes = {}
        for kind, group in (("api", self.apis), ("worker", self.workers)):
            with concurrent.futures.ThreadPoolExecutor(len(group) or 1) as pool:
                for i, code in enumerate(pool.map(lambda proc: proc.stop(), group)):
                    codes[f"{kind}-{i}"] = code
        return codes

    def close(self) -> None:
        try:
            for index in sorted(self._killed):  # let a successor sweep the containers it left
                try:
                    self.restart_worker(index)
                except Exception:
                    pass
        finally:
            self.stop()

    def logs(self) -> str:
        return "\n".join(f"--- {p.kind} {p.base.name}:\n{p.log()}" for p in self.apis + self.workers)

    def api(self, i: int) -> str:
        return self.apis[i % len(self.apis)].url


def run_body(command: str, **more: Any) -> dict[str, Any]:
    return {"skill": "math-tools", "command": command, **more}


def worker_id(proc: Proc) -> str:
    """The id a worker process registered under (its /healthz says)."""
    detail = httpx.get(f"{proc.url}/healthz", timeout=10).json()["checks"]["worker"]["detail"]
    return str(detail.split(":", 1)[0].removeprefix("worker "))
