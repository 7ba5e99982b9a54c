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
import os
import socket
from pathlib import Path
from typing import Any

from ..base import OutputListener
from ..streams import BoundedBuffer, Demux


class LauncherFrames:
    """The launcher's frames, demultiplexed into bounded stdout/stderr buffers."""

    def __init__(self, stdout_max: int, stderr_max: int, listener: OutputListener | None) -> None:
        self.out, self.err = BoundedBuffer(stdout_max), BoundedBuffer(stderr_max)
        self.exit: dict[str, Any] | None = None
        self.demux = Demux(
            5,
            lambda h: (h[0], int.from_bytes(h[1:5], "big")),
            {ord("O"): ("stdout", self.out), ord("E"): ("stderr", self.err)},
            listener,
            self._control,
        )

    def _control(self, stream: int, payload: bytes) -> None:
        if stream == ord("X"):
            self.exit = json.loads(payload)


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
