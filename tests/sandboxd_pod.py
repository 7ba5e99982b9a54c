"""The in-pod server (``sandboxd`` of the runner image) in a real ``--network none`` container,
reached the way a worker reaches a pod: the SDK dials ``host:port`` over TCP, so a loopback relay
here forwards ``127.0.0.1:<rest>`` and ``127.0.0.1:<grpc>`` to the ``rest.sock`` and ``grpc.sock``
the server listens on in a bind-mounted folder (runsc: ``--host-uds=create``, as the warm pool).

:func:`start_pod` yields a :class:`Pod` with the SDK's own files client (``files``), its gRPC
stub (``stub``) and raw access for requests the SDK refuses to send (``http``)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import docker
import grpc
from k8s_agent_sandbox.commands._process_stubs import process_pb2 as pb
from k8s_agent_sandbox.commands._process_stubs import process_pb2_grpc as pb_grpc
from k8s_agent_sandbox.connector import SandboxConnector
from k8s_agent_sandbox.files.filesystem import Filesystem
from k8s_agent_sandbox.models import SandboxdInClusterConnectionConfig

from skill_executor.config import Settings
from skill_executor.runtimes.docker.engine import GVISOR_HOST_TASKS_PER_PID

#: The service's container hardening, as far as it applies to a long-lived server.
HARDENING: dict[str, Any] = {
    "network_mode": "none",
    "cap_drop": ["ALL"],
    "security_opt": ["no-new-privileges"],
    "read_only": True,
    "user": "1000:1000",
    "init": True,
    "pids_limit": 256,
    "mem_limit": "2g",  # gVisor keeps the in-sandbox tmpfs (the module fills it) in the sandbox's memory
    "tmpfs": {
        "/tmp": "rw,nosuid,nodev,size=64m",
        "/workspace": "rw,nosuid,nodev,uid=1000,gid=1000,mode=0755,size=512m",
    },
}


def for_runtime(hardening: dict[str, Any], oci_runtime: str | None) -> dict[str, Any]:
    """``hardening`` for a container on ``oci_runtime``: on gVisor, as the Docker runtime does,
    the pids limit holds in the sandbox (``nproc``) and the host cgroup allows the sandbox
    ``GVISOR_HOST_TASKS_PER_PID`` host tasks per process (its ptrace stubs): at a flat 256 a
    test pod's sentry could not create a stub ("error initializing first thread: resource
    temporarily unavailable") and died, its server with it."""
    if oci_runtime != "runsc":
        return hardening
    pids = int(hardening["pids_limit"])
    return {
        **hardening,
        "pids_limit": pids * GVISOR_HOST_TASKS_PER_PID,
        "ulimits": [docker.types.Ulimit(name="nproc", soft=pids, hard=pids)],
    }


class Relay:
    """Loopback TCP -> unix socket, one listener per socket, on an asyncio loop in a thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="pod-relay")
        self.thread.start()
        self.servers: list[asyncio.base_events.Server] = []

    def forward(self, unix_path: str, host: str = "127.0.0.1", port: int = 0) -> int:
        async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while data := await reader.read(65536):
                    writer.write(data)
                    await writer.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                with contextlib.suppress(Exception):
                    writer.close()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                unix_reader, unix_writer = await asyncio.open_unix_connection(unix_path)
            except OSError:
                writer.close()
                return
            await asyncio.gather(pipe(reader, unix_writer), pipe(unix_reader, writer))

        async def start() -> asyncio.base_events.Server:
            return await asyncio.start_server(handle, host, port)

        server = asyncio.run_coroutine_threadsafe(start(), self.loop).result(10)
        self.servers.append(server)
        return int(server.sockets[0].getsockname()[1])

    def stop(self, host: str) -> None:
        """Stop listening on ``host`` (connections already made stay up until their ends close)."""

        async def stop() -> None:
            for server in [s for s in self.servers if s.sockets and s.sockets[0].getsockname()[0] == host]:
                server.close()
                self.servers.remove(server)

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)

    def close(self) -> None:
        async def stop() -> None:
            for server in self.servers:
                server.close()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@dataclass
class Pod:
    container: Any
    rest_port: int
    grpc_port: int
    files: Filesystem
    stub: Any
    connector: SandboxConnector

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}/v1/files/"

    def sh(self, script: str, *, stdin: bytes | None = b"", timeout: float = 30) -> tuple[int, bytes, bytes]:
        """``bash -c script`` through Start (stdin then EOF): exit code, stdout, stderr."""
        return run(self.stub, ["bash", "-c", script], stdin=stdin, timeout=timeout)

    def logs(self) -> str:
        return str(self.container.logs().decode(errors="replace"))


def run(
    stub: Any, argv: list[str], *, stdin: bytes | None = b"", timeout: float = 30, **config: Any
) -> tuple[int, bytes, bytes]:
    stream = stub.Start(pb.StartRequest(config=pb.ProcessConfig(command=argv, **config)), timeout=timeout)
    out, err, code = bytearray(), bytearray(), -1
    for event in stream:
        kind = event.WhichOneof("event")
        if kind == "init" and stdin is not None:
            threading.Thread(target=feed, args=(stub, event.init.process_id, stdin), daemon=True).start()
        elif kind == "stdout":
            out += event.stdout
        elif kind == "stderr":
            err += event.stderr
        elif kind == "exit":
            code = event.exit.exit_code
    return code, bytes(out), bytes(err)


def feed(stub: Any, process_id: int, data: bytes) -> None:
    """Stdin in 1 MiB messages, then EOF; a process already gone (NOT_FOUND) is fine."""
    from google.protobuf import empty_pb2

    try:
        for i in range(0, len(data), 1 << 20):
            stub.WriteStdin(pb.WriteStdinRequest(process_id=process_id, input=data[i : i + (1 << 20)]), timeout=60)
        stub.WriteStdin(pb.WriteStdinRequest(process_id=process_id, eof=empty_pb2.Empty()), timeout=10)
    except grpc.RpcError as exc:
        if exc.code() not in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION):
            raise


def wait_for_sockets(container: Any, sockets: str, timeout: float = 60.0) -> None:
    """Until the pod's server listens on its two unix sockets in ``sockets`` (it says why not)."""
    deadline = time.monotonic() + timeout
    while not all(os.path.exists(os.path.join(sockets, n)) for n in ("rest.sock", "grpc.sock")):
        container.reload()
        if container.status == "exited" or time.monotonic() > deadline:
            raise RuntimeError(f"sandboxd did not start: {container.logs().decode(errors='replace')}")
        time.sleep(0.05)


@contextlib.contextmanager
def start_pod(*, oci_runtime: str | None = None, args: tuple[str, ...] = ("--container",)) -> Iterator[Pod]:
    client = docker.DockerClient(base_url="unix:///var/run/docker.sock", version="auto", timeout=60)
    sockets = tempfile.mkdtemp(prefix="sandboxd-pod-")
    os.chown(sockets, 1000, 1000)
    relay = Relay()
    container = None
    try:
        container = client.containers.run(
            Settings().docker_image,
            ["sandboxd", "--unix-dir", "/sock", "--rest-port", "0", "--grpc-port", "0", *args],
            detach=True,
            volumes={sockets: {"bind": "/sock", "mode": "rw"}},
            runtime=oci_runtime,
            labels={"skill-executor.test": "podserver"},
            **for_runtime(HARDENING, oci_runtime),
        )
        wait_for_sockets(container, sockets)
        rest_port = relay.forward(os.path.join(sockets, "rest.sock"))
        grpc_port = relay.forward(os.path.join(sockets, "grpc.sock"))
        config = SandboxdInClusterConnectionConfig(mode="in-cluster-pod-ip", rest_port=rest_port, grpc_port=grpc_port)
        connector = SandboxConnector(
            sandbox_id="pod",
            namespace="default",
            connection_config=config,
            k8s_helper=None,  # type: ignore[arg-type]
            get_pod_ip=lambda: "127.0.0.1",
        )
        connector.connect()
        files = Filesystem(connector, tracer=None, trace_service_name="test")
        stub = pb_grpc.ProcessServiceStub(connector.grpc_channel())
        yield Pod(container, rest_port, grpc_port, files, stub, connector)
    finally:
        if container is not None:
            with contextlib.suppress(docker.errors.APIError):
                container.remove(force=True)
        relay.close()
        shutil.rmtree(sockets, ignore_errors=True)
        client.close()
