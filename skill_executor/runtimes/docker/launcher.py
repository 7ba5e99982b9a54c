"""The warm-pool launcher's protocol (``images/runner/launcher.c``), host side.

Request (host -> launcher): u32 count, then count fields of u32 length + bytes, all
big-endian: command, cwd, stdin path (``""`` for none), then ``NAME=value`` entries.

Frames (launcher -> host): 1 byte kind + u32 big-endian length + payload: ``O`` stdout
bytes, ``E`` stderr bytes, ``X`` ``{"exit_code": N}`` (last).  Everything the launcher
sends is untrusted: output goes into bounded buffers as it streams, never a whole
frame at a time.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from pathlib import Path, PurePosixPath
from typing import Any

from ...workspace.layout import LAUNCHER_SOCKET, Workspace
from ..base import OutputListener
from ..streams import BoundedBuffer, Demux, ProtocolError, Sink

log = logging.getLogger(__name__)

#: The most an exit frame may hold (it is ``{"exit_code": N}``).
EXIT_FRAME_MAX = 256


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
        code = message.get("exit_code") if isinstance(message, dict) and set(message) == {"exit_code"} else None
        if type(code) is not int or not 0 <= code <= 255:
            raise ProtocolError("an exit frame without an exit code in 0..255")
        self.exit_code, self.exited = code, True


def request_bytes(command: str, cwd: str, stdin: str, env: dict[str, str]) -> bytes:
    """u32 count, then (u32 length, bytes) fields: command, cwd, stdin path, NAME=value..."""
    fields = [command, cwd, stdin, *(f"{name}={value}" for name, value in env.items())]
    encoded = [field.encode() for field in fields]
    parts = [len(encoded).to_bytes(4, "big")]
    for field in encoded:
        parts += [len(field).to_bytes(4, "big"), field]
    return b"".join(parts)


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
