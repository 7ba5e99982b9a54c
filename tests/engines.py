"""A second Docker engine beside the main one (``/var/run/docker.sock``), for the tests and
benchmarks of workers that each own an engine (issue 32): ``second_engine`` (a session
fixture) and :class:`SecondEngine`; ``python -m tests.engines up|down|status`` for
``scripts/lib.sh ensure_second_engine``.

It is a ``dockerd`` of its own: its own ``--data-root``, ``--exec-root``, ``--pidfile``
and ``-H unix://`` socket (so its own containerd), no bridge, no iptables rules, no IP
forwarding or masquerading, and gVisor's ``runsc`` registered as on the main engine
(``scripts/lib.sh engine_config``). The main engine is only read: the runner image is
streamed from it (``docker save``) into the second one (``docker load``), once per image
tag (the tag names the build's hash; the data root persists), since no registry is
reachable.

One user at a time per folder: the user holds an exclusive ``flock`` on ``<root>/lock``
(xdist workers and a benchmark of one checkout wait their turn). Started by a fixture or
a benchmark, the engine is that process's child with SIGTERM as its parent-death signal:
it cannot outlive its user. Started by the command line (``up``), it runs on until
``down``. The engine is private to its folder: on start, managed containers a previous
user left on it are removed.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    import docker

REPO = Path(__file__).resolve().parent.parent
#: The default folder (git-ignored): the data root persists there, the loaded image with it.
DEFAULT_ROOT = REPO / "build" / "engine-2"
ROOT_ENV = "SKILL_EXECUTOR_TEST_ENGINE2_DIR"
MAIN_ENGINE = "unix:///var/run/docker.sock"
#: Daemon options kept in its config file (the rest are flags): nothing of the host's network.
DAEMON_CONFIG = {"bridge": "none", "iptables": False, "ip-forward": False, "ip-masq": False}
START_SECONDS = 90.0
STOP_SECONDS = 60.0
LOCK_SECONDS = 1800.0


class EngineError(RuntimeError):
    """The second engine could not be set up (the reason and its log's tail)."""


def engine_problem() -> str | None:
    """Why a second engine cannot be started here (None when it can)."""
    if os.geteuid() != 0:
        return "a second dockerd needs root"
    for tool in ("dockerd", "setpriv"):
        if shutil.which(tool, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") is None:
            return f"{tool} is not installed (Debian packages docker.io, util-linux)"
    try:
        import docker

        docker.DockerClient(base_url=MAIN_ENGINE, version="auto", timeout=10).ping()
    except Exception as exc:
        return f"the main Docker engine does not answer: {exc}"
    return None


def require_second_engine() -> None:
    """Skip (or, in CI, fail) a test when no second engine can be started here."""
    from .conftest import in_ci

    problem = engine_problem()
    if problem is None:
        return
    if in_ci():
        pytest.fail(f"CI must run the two-engine tests: {problem}")
    pytest.skip(problem)


class SecondEngine:
    """A ``dockerd`` rooted in ``root``: :meth:`start` (with :meth:`acquire` first, or
    ``detach=True`` for the command line), :meth:`load_image`, :meth:`stop`."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = (root or Path(os.environ.get(ROOT_ENV) or DEFAULT_ROOT)).resolve()
        self.data_root = self.root / "data"
        self.pidfile = self.root / "docker.pid"
        self.config = self.root / "daemon.json"
        self.log = self.root / "dockerd.log"
        # Unix socket paths are short (108 bytes, containerd's below the exec root too):
        # the exec root and the socket live in a short folder named after the root.
        tag = hashlib.sha256(str(self.root).encode()).hexdigest()[:12]
        self.run_dir = Path(tempfile.gettempdir()) / f"skill-executor-engine-{tag}"
        self.exec_root = self.run_dir / "exec"
        self.socket = self.run_dir / "docker.sock"
        self.process: subprocess.Popen[bytes] | None = None
        self._lock: int | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    # -- the one-user lock ---------------------------------------------------------------

    def acquire(self, timeout: float = LOCK_SECONDS) -> None:
        """Hold ``<root>/lock`` (wait while another user of this folder holds it)."""
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise EngineError(f"{self.root} stayed in use by another process for {timeout:.0f} s") from None
                time.sleep(0.5)
        self._lock = fd

    def release(self) -> None:
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    # -- the daemon ----------------------------------------------------------------------

    def answers(self) -> bool:
        import docker

        if not self.socket.is_socket():
            return False
        try:
            client = docker.DockerClient(base_url=self.url, version="auto", timeout=5)
            try:
                return bool(client.ping())
            finally:
                client.close()
        except Exception:
            return False

    def running_pid(self) -> int | None:
        """The pid of a dockerd of this root that is running (its pidfile, checked)."""
        try:
            pid = int(self.pidfile.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            return None
        return pid if Path(cmdline[0].decode()).name == "dockerd" and str(self.data_root).encode() in cmdline else None

    def _write_config(self) -> None:
        """The config file: the runsc runtime as scripts/lib.sh registers it on the main
        engine (its ``engine_config``, the one place that knows how), no host network."""
        done = subprocess.run(
            [
                "bash",
                "-c",
                'source "$1/scripts/lib.sh" && engine_config "" "$2" "$3"',
                "engine_config",
                str(REPO),
                str(self.config),
                json.dumps(DAEMON_CONFIG),
            ],
            env={**os.environ, "SKILL_EXECUTOR_VENV": sys.prefix},
            capture_output=True,
            text=True,
            timeout=60,
        )
        if done.returncode != 0:
            raise EngineError(f"could not write {self.config}: {done.stderr[-2000:]}")

    def argv(self) -> list[str]:
        return [
            "dockerd",
            "--config-file",
            str(self.config),
            "--data-root",
            str(self.data_root),
            "--exec-root",
            str(self.exec_root),
            "--pidfile",
            str(self.pidfile),
            "-H",
            self.url,
        ]

    def start(self, *, detach: bool = False) -> SecondEngine:
        """Start the daemon and wait until it answers. ``detach``: it outlives this process
        (the command line's ``up``); else it is this process's child, killed with it."""
        if self.answers() and self.running_pid() is not None:
            if not detach:
                raise EngineError(f"a dockerd of {self.root} is already running (pid {self.running_pid()})")
            return self
        for folder in (self.root, self.data_root, self.run_dir, self.exec_root):
            folder.mkdir(parents=True, exist_ok=True)
        os.chmod(self.run_dir, 0o700)
        self._write_config()
        self.socket.unlink(missing_ok=True)
        prefix = [] if detach else ["setpriv", "--pdeathsig", "TERM", "--"]
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [*prefix, *self.argv()],
                env={"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C reaches the user, which stops it
            )
        deadline = time.monotonic() + START_SECONDS
        while not self.answers():
            if self.process.poll() is not None:
                raise EngineError(f"dockerd exited with {self.process.returncode}: {self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise EngineError(f"dockerd did not answer within {START_SECONDS:.0f} s: {self.log_tail()}")
            time.sleep(0.2)
        self._remove_leftovers()
        return self

    def _remove_leftovers(self) -> None:
        """Managed containers a previous user of this (private) engine left behind."""
        from skill_executor.runtimes.docker import LABEL_MANAGED

        client = self.client()
        try:
            for container in client.api.containers(all=True, filters={"label": f"{LABEL_MANAGED}=1"}):
                client.api.remove_container(container["Id"], force=True)
        finally:
            client.close()

    def stop(self) -> None:
        """SIGTERM the daemon (it stops its containers) and wait; SIGKILL after a minute."""
        pid = self.process.pid if self.process is not None else self.running_pid()
        if pid is None:
            return
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + STOP_SECONDS
        while time.monotonic() < deadline:
            if self.process is not None:
                if self.process.poll() is not None:
                    break
            elif not Path(f"/proc/{pid}").exists():
                break
            time.sleep(0.2)
        else:
            os.kill(pid, signal.SIGKILL)
            if self.process is not None:
                self.process.wait(timeout=STOP_SECONDS)
        self.process = None

    def log_tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-3000:]
        except OSError:
            return "(no log)"

    # -- images --------------------------------------------------------------------------

    def client(self, timeout: float = 60) -> docker.DockerClient:
        import docker

        return docker.DockerClient(base_url=self.url, version="auto", timeout=timeout)

    def load_image(self, tag: str) -> bool:
        """Make ``tag`` (an image of the main engine) present here: streamed from the main
        engine's ``docker save`` into this one's ``docker load`` unless already here. True
        when it was copied."""
        import docker
        from docker.errors import ImageNotFound

        mine = self.client(timeout=1800)
        try:
            try:
                mine.images.get(tag)
                return False
            except ImageNotFound:
                pass
            main = docker.DockerClient(base_url=MAIN_ENGINE, version="auto", timeout=1800)
            try:
                stream = main.api.get_image(tag, chunk_size=1 << 20)
                for message in mine.api.load_image(stream):
                    if "error" in message:
                        raise EngineError(f"docker load of {tag} failed: {message['error']}")
            finally:
                main.close()
            mine.images.get(tag)  # it is there now, under its tag
            return True
        finally:
            mine.close()


def small_image() -> str:
    """The runner's minimal flavour on the main engine (built when missing, else reused by
    its hash tag): what the two-engine tests and benchmarks run on both engines."""
    import docker

    from skill_executor.image.build import build_image

    client = docker.DockerClient(base_url=MAIN_ENGINE, version="auto", timeout=1800)
    try:
        return build_image(client, flavour="minimal").tag
    finally:
        client.close()


@pytest.fixture(scope="session")
def second_engine() -> Iterator[SecondEngine]:
    """A running second engine holding the runner's minimal image (``small_image``), for
    the session; stopped at its end."""
    require_second_engine()
    engine = SecondEngine()
    engine.acquire()
    try:
        engine.start()
        engine.load_image(small_image())
        yield engine
    finally:
        try:
            engine.stop()
        finally:
            engine.release()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.engines", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["up", "down", "status"])
    parser.add_argument("--root", type=Path, help=f"the engine's folder (default {DEFAULT_ROOT}, or ${ROOT_ENV})")
    parser.add_argument("--image", action="append", default=[], help="an image of the main engine to copy (repeat)")
    args = parser.parse_args(argv)
    engine = SecondEngine(args.root)
    if args.action == "up":
        problem = engine_problem()
        if problem is not None:
            print(f"second engine: {problem}", file=sys.stderr)
            return 1
        try:
            engine.acquire(timeout=0)  # not while a test or a benchmark uses the folder
            try:
                engine.start(detach=True)
            finally:
                engine.release()
            copied = {tag: engine.load_image(tag) for tag in args.image}
        except EngineError as exc:
            print(f"second engine: {exc}", file=sys.stderr)
            return 1
        print(json.dumps({"docker_host": engine.url, "pid": engine.running_pid(), "copied": copied}))
    elif args.action == "down":
        engine.stop()
        print(json.dumps({"docker_host": engine.url, "running": engine.running_pid() is not None}))
    else:
        print(json.dumps({"docker_host": engine.url, "pid": engine.running_pid(), "answers": engine.answers()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
