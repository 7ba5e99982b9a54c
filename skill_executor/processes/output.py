"""One process's record (:class:`SessionProcess`) and the ring its output is kept in
(:class:`OutputRing`); :func:`as_text`, the ring's bytes as a poll answers them."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..runtimes.base import RuntimeProcess
from .base import Reason


class OutputRing:
    """The newest ``cap`` bytes of a stream, numbered from 0 as written; ``total`` counts all."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._data = bytearray()
        self.total = 0

    @property
    def start(self) -> int:
        """The offset of the oldest byte still held."""
        return self.total - len(self._data)

    def write(self, chunk: bytes) -> None:
        self._data += chunk
        self.total += len(chunk)
        over = len(self._data) - self.cap
        if over > 0:
            del self._data[:over]

    def read(self, after: int, limit: int) -> tuple[int, bytes, int]:
        """From offset ``after`` (clamped to what was written), at most ``limit`` bytes:
        (the offset of the first byte answered, the bytes, how many bytes past ``after``
        the ring no longer holds)."""
        after = min(max(0, after), self.total)
        start = self.start
        dropped = max(0, start - after)
        begin = max(after, start)
        return begin, bytes(self._data[begin - start : begin - start + limit]), dropped


@dataclass(eq=False)
class SessionProcess:
    id: str
    tenant: str
    session: str
    command: str | list[str]
    pty: bool
    handle: RuntimeProcess
    ring: OutputRing
    timeout: float
    idle_timeout: float
    started_at: float = field(default_factory=time.time)
    started: float = field(default_factory=time.monotonic)
    active: float = field(default_factory=time.monotonic)
    cond: threading.Condition = field(default_factory=threading.Condition)
    ended: bool = False
    ended_at: float | None = None
    exit_code: int | None = None
    reason: Reason | None = None
    killing: float | None = None  # when a kill was sent (monotonic)
    gone: bool = False  # its output is over (set under its host's lock)
    stdin_open: bool = True

    def state(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "session": self.session,
            "command": self.command,
            "pty": self.pty,
            "running": not self.ended,
            "exit_code": self.exit_code,
            "reason": self.reason,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "total": self.ring.total,
            "timeout": self.timeout,
            "idle_timeout": self.idle_timeout,
        }


def as_text(data: bytes, cut: bool) -> tuple[str, int]:
    """The bytes as text (invalid UTF-8 replaced); when ``cut`` (more follows), an incomplete
    character at the end is left for the next poll.  (text, bytes used)"""
    used = len(data)
    if cut:
        for back in range(1, min(4, len(data)) + 1):
            lead = data[-back]
            if lead & 0xC0 != 0x80:  # the last character's first byte
                need = 1 if lead < 0x80 else 2 if lead >> 5 == 0b110 else 3 if lead >> 4 == 0b1110 else 4
                if need > back and back < len(data):
                    used -= back
                break
    return data[:used].decode("utf-8", errors="replace"), used
