"""The warm-pool launcher's protocol (``images/runner/launcher.c``), host side.

Request (host -> launcher): u32 count, then count fields of u32 length + bytes, all
big-endian: command, cwd, stdin path (``""`` for none), the exec policy (``b""``: none;
:meth:`skill_executor.policy.enforcement.ExecRule.spec`), then ``NAME=value`` entries.

Frames (launcher -> host): 1 byte kind + u32 big-endian length + payload: ``O`` stdout
bytes, ``E`` stderr bytes, ``X`` ``{"exit_code": N}`` (last; with
``"policy_denied_exec": {"rule", "program", "path", "reason"}`` when the exec supervisor
refused a program and stopped the run).  Everything the launcher
sends is untrusted: output goes into bounded buffers as it streams, never a whole
frame at a time.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import stat
from pathlib import Path, PurePosixPath
from typing import Any

from ...workspace.layout import LAUNCHER_SOCKET, Workspace
from ..base import OutputListener
from ..streams import BoundedBuffer, Demux, ProtocolError, Sink

log = logging.getLogger(__name__)

#: The most an exit frame may hold (``{"exit_code": N}``, or with a verdict of paths up to 4 KiB, escaped).
EXIT_FRAME_MAX = 32 * 1024
#: The fields of a ``policy_denied_exec`` verdict (each a string).
VERDICT_FIELDS = frozenset({"rule", "program", "path", "reason"})


class LauncherFrames:
    """The launcher's frames, demultiplexed into bounded stdout/stderr buffers.

    Only ``O``, ``E`` and one ``X`` frame are valid; the exit frame must be a JSON object
    with exactly an integer ``exit_code`` in 0..255.  Anything else raises
    :class:`~skill_executor.runtimes.streams.ProtocolError` from :meth:`feed`.
    """

    def __init__(
        self,
        stdout_max: int,
        stderr_max: int,
        listener: OutputListener | None,
        *,
        outputs: tuple[Sink, Sink] | None = None,
    ) -> None:
        """``outputs``: sinks for stdout and stderr instead of ``out``/``err`` (which stay empty)."""
        self.out, self.err = BoundedBuffer(stdout_max), BoundedBuffer(stderr_max)
        sinks: tuple[Sink, Sink] = outputs or (self.out, self.err)
        self.exit_code: int | None = None
        self.exited = False
        #: the exec the launcher refused under the command policy, if any
        self.policy_denied_exec: dict[str, str] | None = None
        self._demux = Demux(
            5,
            lambda h: (h[0], int.from_bytes(h[1:5], "big")),
            {ord("O"): ("stdout", sinks[0]), ord("E"): ("stderr", sinks[1])},
            listener,
            self._control,
            controls=frozenset({ord("X")}),
            control_max=EXIT_FRAME_MAX,
        )

    def feed(self, data: memoryview) -> None:
        if self.exited:
            raise ProtocolError("data after the exit frame")
        self._demux.feed(data)

    def _control(self, stream: int, payload: bytes) -> None:
        if self.exited:
            raise ProtocolError("a second exit frame")
        try:
            message: Any = json.loads(payload)
        except ValueError:
            raise ProtocolError("an exit frame that is not JSON") from None
        keys = set(message) if isinstance(message, dict) else set()
        code = message.get("exit_code") if keys in ({"exit_code"}, {"exit_code", "policy_denied_exec"}) else None
        if type(code) is not int or not 0 <= code <= 255:
            raise ProtocolError("an exit frame without an exit code in 0..255")
        if "policy_denied_exec" in keys:
            verdict = parse_verdict(message["policy_denied_exec"])
            if verdict is None:
                raise ProtocolError("an exit frame with a malformed policy verdict")
            self.policy_denied_exec = verdict
        self.exit_code, self.exited = code, True


def parse_verdict(value: Any) -> dict[str, str] | None:
    """A launcher's ``policy_denied_exec`` verdict, checked: exactly ``rule``, ``program``,
    ``path`` and ``reason``, each a string of at most 4096 characters (None otherwise)."""
    if not isinstance(value, dict) or set(value) != VERDICT_FIELDS:
        return None
    if not all(isinstance(v, str) and len(v) <= 4096 for v in value.values()):
        return None
    return {k: str(value[k]) for k in ("rule", "program", "path", "reason")}


def request_bytes(command: str, cwd: str, stdin: str, env: dict[str, str], policy: bytes = b"") -> bytes:
    """u32 count, then (u32 length, bytes) fields: command, cwd, stdin path, exec policy, NAME=value..."""
    fields = [command, cwd, stdin]
    encoded = [field.encode() for field in fields] + [policy]
    encoded += [f"{name}={value}".encode() for name, value in env.items()]
    parts = [len(encoded).to_bytes(4, "big")]
    for field in encoded:
        parts += [len(field).to_bytes(4, "big"), field]
    return b"".join(parts)


def read_verdict(workspace: Workspace, nonce: str) -> dict[str, str] | None:
    """The verdict an exec-mode launcher left in ``run/.policy-verdict-<nonce>`` (removed
    once read); None when there is none (or it is not one: the name is known only to the
    host and the launcher, so the command cannot have written it)."""
    name = f".policy-verdict-{nonce}"
    try:
        with workspace.tree("run") as run_dir:
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=run_dir.fd)
            except FileNotFoundError:
                return None
            try:
                data = os.read(fd, EXIT_FRAME_MAX) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
            finally:
                os.close(fd)
                os.unlink(name, dir_fd=run_dir.fd)
    except OSError as exc:
        log.warning("reading the exec verdict of %s failed: %s", workspace.run_id, exc)
        return None
    try:
        return parse_verdict(json.loads(data))
    except ValueError:
        return None


def connect_unix(conn: socket.socket, path: Path) -> None:
    """Connect to a Unix socket at any depth (paths are limited to 108 bytes)."""
    if len(os.fsencode(path)) < 100:
        conn.connect(str(path))
        return
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        conn.connect(f"/proc/self/fd/{fd}/{path.name}")
    finally:
        os.close(fd)


def unpublish(workspace: Workspace) -> None:
    """Remove the launcher's socket once connected, before the command starts.

    The launcher removes it itself, except under gVisor, which can neither unlink nor
    rename a socket it created on the host: there it published ``<socket>.tmp`` under the
    final name with a symbolic link.  Entries are removed by name, never followed.
    """
    name = PurePosixPath(LAUNCHER_SOCKET).name
    try:
        with workspace.tree("run") as run_dir:
            for entry in (name, f"{name}.tmp"):
                try:
                    os.unlink(entry, dir_fd=run_dir.fd)
                except FileNotFoundError:
                    pass
    except OSError as exc:
        log.warning("removing the launcher socket of %s failed: %s", workspace.run_id, exc)
