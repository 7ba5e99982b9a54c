"""Bounded capture of a command's output.

A command may print gigabytes; the service keeps the *head* of each stream up to a
cap, counts the rest and flags truncation, so its memory never grows with the output.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Protocol

from .base import OutputListener


class BoundedBuffer:
    def __init__(self, limit: int) -> None:
        self.limit = max(0, limit)
        self._data = bytearray()
        self.total = 0

    def feed(self, chunk: bytes | memoryview) -> bytes | memoryview:
        """Keep what fits; return the part kept (empty once the cap is reached)."""
        self.total += len(chunk)
        room = self.limit - len(self._data)
        if room <= 0:
            return b""
        kept = chunk[:room]
        self._data += kept
        return kept

    @property
    def data(self) -> bytes:
        return bytes(self._data)

    @property
    def truncated(self) -> bool:
        return self.total > len(self._data)


class Sink(Protocol):
    """Where a stream's bytes go: ``feed`` returns the part kept."""

    def feed(self, chunk: bytes | memoryview) -> bytes | memoryview: ...


class Relay:
    """A sink that keeps nothing itself: it queues each chunk, named, in ``pending`` for
    the reader of a :class:`~skill_executor.runtimes.base.Process` to take before the
    next read (the chunks are views of a reused buffer)."""

    def __init__(self, name: str, pending: list[tuple[str, bytes | memoryview]]) -> None:
        self.name = name
        self.pending = pending

    def feed(self, chunk: bytes | memoryview) -> bytes | memoryview:
        if chunk:
            self.pending.append((self.name, chunk))
        return chunk


def decode(data: bytes) -> str:
    """Output as text: UTF-8 with invalid bytes replaced (never an exception)."""
    return data.decode("utf-8", "replace")


class ProtocolError(Exception):
    """The stream broke its framing rules (an unknown kind, an oversized control frame)."""


class Demux:
    """Length-prefixed frames from a byte stream, without copying discarded output.

    ``header`` bytes precede each frame; ``parse(header) -> (stream, length)``.  Bytes
    of streams in ``outputs`` go to their sink, a :class:`BoundedBuffer` (and the listener,
    only what is kept) as they arrive, never a whole frame at a time.  With
    ``control``, frames of the kinds in ``controls`` are collected whole (at most
    ``control_max`` bytes) and reported to it, and any other kind is a
    :class:`ProtocolError`; without it, other streams are dropped unbuffered.
    """

    def __init__(
        self,
        header: int,
        parse: Callable[[bytes], tuple[int, int]],
        outputs: dict[int, tuple[str, Sink]],
        listener: OutputListener | None,
        control: Callable[[int, bytes], None] | None = None,
        *,
        controls: frozenset[int] = frozenset(),
        control_max: int = 4096,
    ) -> None:
        self._size = header
        self._parse = parse
        self._outputs = outputs
        self._listener = listener
        self._control = control
        self._controls = controls
        self._control_max = control_max
        self._head = bytearray()
        self._stream = -1
        self._left = 0
        self._frame = bytearray()

    def feed(self, data: memoryview) -> None:
        i, n = 0, len(data)
        while i < n:
            if self._left == 0 and self._stream < 0:
                take = min(self._size - len(self._head), n - i)
                self._head += data[i : i + take]
                i += take
                if len(self._head) == self._size:
                    self._stream, self._left = self._parse(bytes(self._head))
                    self._head.clear()
                    self._check_frame()
                    if self._left == 0:
                        self._finish()
                continue
            take = min(self._left, n - i)
            chunk = data[i : i + take]
            target = self._outputs.get(self._stream)
            if target is not None:
                name, buffer = target
                kept = buffer.feed(chunk)
                if self._listener is not None and kept:
                    try:
                        self._listener(name, bytes(kept))
                    except Exception:
                        pass
            elif self._control is not None:
                self._frame += chunk
            i += take
            self._left -= take
            if self._left == 0:
                self._finish()

    def _check_frame(self) -> None:
        if self._control is None or self._stream in self._outputs:
            return
        if self._stream not in self._controls:
            raise ProtocolError(f"unknown frame kind {self._stream}")
        if self._left > self._control_max:
            raise ProtocolError(f"a control frame of {self._left} bytes (at most {self._control_max})")

    def _finish(self) -> None:
        if self._stream not in self._outputs and self._control is not None:
            self._control(self._stream, bytes(self._frame))
        self._frame.clear()
        self._stream = -1


def recv_loop(sock: socket.socket, demux: Demux, size: int = 256 * 1024) -> None:
    """Read ``sock`` to EOF into one reused buffer, feeding ``demux``."""
    buffer = bytearray(size)
    view = memoryview(buffer)
    while True:
        try:
            count = sock.recv_into(buffer)
        except OSError:
            return
        if not count:
            return
        demux.feed(view[:count])
