"""Warm pods for tests/fakekube.py: each a fresh ``sandboxd`` container of the runner image
(hardened, ``--network none``, as tests/sandboxd_pod.py starts it), reached on its own loopback
IP (``127.<n>.<m>.<k>``) at the same REST and gRPC ports, the way a worker reaches pod IPs in a
cluster.  Single use, as agent-sandbox's: a released pod's container is removed and the pool
makes a new one (:meth:`PodFarm.make` / :meth:`PodFarm.discard` are the fake pool's hooks)."""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import shutil
import socket
import tempfile
import threading
from typing import Any

import docker

from skill_executor.config import Settings

from .sandboxd_pod import HARDENING, Relay, for_runtime, wait_for_sockets

ARGS = ("--container", "--max-put-bytes", str(64 << 20), "--max-list-entries", "1000")
#: As tests/sandboxd_pod.py, with an executable /workspace (a pod's emptyDir is; Docker's tmpfs is not by default).
POD_HARDENING = {
    **HARDENING,
    "tmpfs": {**HARDENING["tmpfs"], "/workspace": "rw,exec,nosuid,nodev,uid=1000,gid=1000,mode=0755,size=512m"},
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PodFarm:
    def __init__(self, *, oci_runtime: str | None = None, image: str | None = None) -> None:
        self.client = docker.DockerClient(base_url="unix:///var/run/docker.sock", version="auto", timeout=60)
        self.oci_runtime = oci_runtime
        self.image = image or Settings().docker_image
        self.relay = Relay()
        self.rest_port, self.grpc_port = _free_port(), _free_port()
        net = random.randrange(16, 250)
        self._ips = (f"127.{net}.{i // 250}.{i % 250 + 1}" for i in itertools.count(random.randrange(0, 5000)))
        self.pods: dict[str, tuple[Any, str]] = {}
        self._lock = threading.Lock()

    def make(self) -> str:
        """Start a pod; its IP once it serves."""
        sockets = tempfile.mkdtemp(prefix="sandboxd-farm-")
        os.chown(sockets, 1000, 1000)
        container = self.client.containers.run(
            self.image,
            ["sandboxd", "--unix-dir", "/sock", "--rest-port", "0", "--grpc-port", "0", *ARGS],
            detach=True,
            volumes={sockets: {"bind": "/sock", "mode": "rw"}},
            runtime=self.oci_runtime,
            labels={"skill-executor.test": "agentsandbox-pod"},
            **for_runtime(POD_HARDENING, self.oci_runtime),
        )
        try:
            wait_for_sockets(container, sockets)
            for _ in range(20):
                with self._lock:
                    ip = next(self._ips)
                try:
                    self.relay.forward(os.path.join(sockets, "rest.sock"), ip, self.rest_port)
                except OSError:
                    continue  # taken by someone else on this host: the next address
                self.relay.forward(os.path.join(sockets, "grpc.sock"), ip, self.grpc_port)
                break
            else:
                raise RuntimeError("no free loopback address for a pod")
        except BaseException:
            container.remove(force=True)
            shutil.rmtree(sockets, ignore_errors=True)
            raise
        with self._lock:
            self.pods[ip] = (container, sockets)
        return ip

    def discard(self, ip: str) -> None:
        with self._lock:
            found = self.pods.pop(ip, None)
        self.relay.stop(ip)
        if found is not None:
            container, sockets = found
            with contextlib.suppress(docker.errors.APIError):
                container.remove(force=True)
            shutil.rmtree(sockets, ignore_errors=True)

    def container(self, ip: str) -> Any:
        return self.pods[ip][0]

    def close(self) -> None:
        for ip in list(self.pods):
            self.discard(ip)
        self.relay.close()
        self.client.close()
