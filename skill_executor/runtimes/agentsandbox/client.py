"""The worker's side of sandboxd's wire protocol, for one claimed pod (ours or a real sandboxd).

* files: :meth:`PodClient.put` sends a workspace's staged tops (a few plain PUTs with
  ``?mode=``, or one tar streamed into the stdin of the ``tar`` that unpacks it: one round
  trip, nothing left behind), :meth:`entries` lists a folder (its body
  bounded: a pod's listing is untrusted), :meth:`get` mirrors a folder back into a worker-side
  :class:`~skill_executor.workspace.fs.Tree` (:func:`.transfer.mirror`);
* processes: :meth:`start` -> :class:`.process.PodProcess` (``Start`` streamed by us).

Transport failures before the run's process starts are ``runtime_unavailable``
(``pod_unreachable``); after it, ``sandbox_lost``.  Requests go through the SDK's connector
(its redirect refusal, its retries of idempotent requests on 5xx).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from k8s_agent_sandbox.commands._process_stubs import process_pb2_grpc as pb_grpc
from k8s_agent_sandbox.connector import SandboxConnector
from k8s_agent_sandbox.exceptions import SandboxRequestError
from k8s_agent_sandbox.files.filesystem import Filesystem, _sandboxd_files_endpoint

from ...errors import ExecutorError
from ...workspace.fs import Tree
from .claims import unavailable
from .process import PodProcess, SandboxLost, execute
from .transfer import Mirrored, MirrorLimits, Packed, mirror, pack, plain_name

#: The most a folder listing's body may be (a pod's answer is untrusted).
LIST_MAX_BYTES = 8 << 20
#: How long unpacking the staging tar may take.
UNPACK_TIMEOUT = 120.0


@dataclass(frozen=True, slots=True)
class PodEntry:
    """One entry of a pod's folder listing (``kind``: ``file`` or ``directory``)."""

    name: str
    size: int
    type: str
    mode: str | None


class PodClient:
    """Files and processes of one pod, through ``connector`` (the claim's ``sandbox.connector``)."""

    def __init__(self, connector: SandboxConnector, *, root: str = "/workspace", kill_grace: float = 2.0) -> None:
        self.connector = connector
        self.root = root
        self.kill_grace = kill_grace
        try:
            connector.connect()
            self.stub = pb_grpc.ProcessServiceStub(connector.grpc_channel())
        except Exception as exc:
            raise unavailable("pod_unreachable", f"the claimed pod cannot be reached: {exc}") from None
        self.files = Filesystem(connector, tracer=None, trace_service_name="skill-executor")

    # -- files in ------------------------------------------------------------------------------
    def put_file(self, path: str, data: bytes | IO[bytes], mode: int = 0o644) -> None:
        """PUT one file (``mode``'s permission bits kept: sandboxd's ``?mode=0NNN``)."""
        if not plain_path(path):
            raise ExecutorError(f"{path[:80]!r} is not a plain relative path", code="invalid_path")
        endpoint = f"{_sandboxd_files_endpoint(path)}?mode=0{mode & 0o777:03o}"
        headers = {"Content-Type": "application/octet-stream"}
        self._before_start(
            lambda: self.connector.send_request("PUT", endpoint, data=data, headers=headers, timeout=120)
        )

    def put(self, sources: dict[str, Path], *, root: Path | None = None, folders: Sequence[str] = ()) -> Packed:
        """Send the workspace's staged tops (top name in the pod -> worker-side folder), the
        root's links into the skill (``root``) and empty ``folders`` to make (``out``)."""
        packed = pack(sources, root=root, folders=folders, box_root=self.root)
        if packed.tar is None:
            for path, data, mode in packed.plain:
                self.put_file(path, data, mode)
            return packed
        with packed.tar:  # streamed: a tar past memory's spool is read from disk as it goes
            argv = ["tar", "-x", "-p", "-f", "-", "-C", self.root]
            process = self.start(argv, cwd=self.root, env={}, stdin=packed.tar, timeout=UNPACK_TIMEOUT)
            try:
                done = execute(process, timeout=UNPACK_TIMEOUT, stdout_max=4096, stderr_max=4096)
            except SandboxLost as exc:
                raise unavailable("pod_unreachable", f"the pod was lost while staging: {exc.message}") from None
        if done.exit_code != 0:
            error = done.stderr.data.decode(errors="replace")[:500]
            raise unavailable("stage_failed", f"unpacking the staged files in the pod failed: {error}")
        return packed

    def _before_start(self, request: Any) -> Any:
        try:
            return request()
        except SandboxRequestError as exc:
            status = exc.status_code
            if status == 413 or status == 507:
                raise ExecutorError(
                    "the staged files do not fit in the sandbox pod", code="inputs_too_large", status=413
                ) from None
            raise unavailable("pod_unreachable", f"the pod refused the staged files: {status}: {exc}") from None

    # -- files out -----------------------------------------------------------------------------
    def entries(self, path: str) -> list[PodEntry]:
        """The files and folders of ``path`` in the pod ([] when missing); the body is bounded."""
        try:
            response = self.connector.send_request(
                "GET", _sandboxd_files_endpoint(path), timeout=60, stream=True, allowed_statuses={404}
            )
        except SandboxRequestError as exc:
            raise SandboxLost(f"listing {path!r} in the pod failed: {exc.status_code}: {exc}") from None
        with response:
            if response.status_code == 404:
                return []
            body = response.raw.read(LIST_MAX_BYTES + 1, decode_content=True)
        if len(body) > LIST_MAX_BYTES:
            raise SandboxLost(f"the pod's listing of {path!r} is larger than {LIST_MAX_BYTES} bytes")
        try:
            listing = json.loads(body)
            raw = listing["entries"] or []
            entries = [
                PodEntry(str(e["name"]), int(e["size"]), str(e["type"]), e.get("mode"))
                for e in raw
                if isinstance(e, dict) and e.get("type") in ("file", "directory")
            ]
        except (ValueError, KeyError, TypeError, OverflowError) as exc:
            raise SandboxLost(f"the pod's listing of {path!r} is not sandboxd's: {exc}") from None
        return entries

    def read(self, path: str, limit: int) -> bytes:
        """The first ``limit`` bytes of the pod's file ``path`` (fewer: the file is shorter)."""
        if not plain_path(path):
            raise ExecutorError(f"{path[:80]!r} is not a plain relative path", code="invalid_path")
        try:
            response = self.connector.send_request("GET", _sandboxd_files_endpoint(path), timeout=60, stream=True)
        except SandboxRequestError as exc:
            raise SandboxLost(f"reading {path!r} from the pod failed: {exc.status_code}: {exc}") from None
        with response:  # only the prefix is read; the rest of the body is dropped with the connection
            data = bytearray()
            while len(data) < limit and (
                chunk := response.raw.read(min(1 << 20, limit - len(data)), decode_content=True)
            ):
                data += chunk
        return bytes(data)

    def get(self, remote: str, tree: Tree, *, limits: MirrorLimits, owner: tuple[int, int] | None) -> Mirrored:
        """Mirror the pod's folder ``remote`` into ``tree`` (bounded, link-free)."""

        def read_to(path: str, into: IO[bytes], limit: int) -> int:
            try:
                return self.files.read_to(path, into, max_bytes=limit)
            except SandboxRequestError as exc:
                raise SandboxLost(f"reading {path!r} from the pod failed: {exc.status_code}: {exc}") from None

        return mirror(self.entries, read_to, remote, tree, limits=limits, owner=owner)

    # -- processes -----------------------------------------------------------------------------
    def start(
        self,
        argv: list[str],
        *,
        cwd: str,
        env: dict[str, str],
        stdin: bytes | IO[bytes] | None = None,
        timeout: float | None = None,
    ) -> PodProcess:
        return PodProcess(self.stub, argv, cwd=cwd, env=env, stdin=stdin, timeout=timeout, kill_grace=self.kill_grace)


def plain_path(path: str) -> bool:
    parts: Sequence[str] = path.split("/")
    return bool(parts) and all(plain_name(p) for p in parts)
