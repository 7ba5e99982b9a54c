"""Bounded capture of a command's output.

A command may print gigabytes; the service keeps the *head* of each stream up to a
cap, counts the rest and flags truncation, so its memory never grows with the output.
"""

from __future__ import annotations

import os
import threading
from typing import BinaryIO

from .base import OutputListener

_CHUNK = 64 * 1024


class BoundedBuffer:
    def __init__(self, limit: int) -> None:
        self.limit = max(0, limit)
        self._data = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> bytes:
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


def pump(stream: BinaryIO, buffer: BoundedBuffer, name: str, listener: OutputListener | None) -> threading.Thread:
    """Read ``stream`` to EOF in a daemon thread, into ``buffer``."""

    def run() -> None:
        fd = stream.fileno()
        try:
            while chunk := os.read(fd, _CHUNK):
                kept = buffer.feed(chunk)
                if listener is not None and kept:
                    try:
                        listener(name, kept)
                    except Exception:  # a broken listener must not break the run
                        pass
        except OSError:
            pass
        finally:
            try:
                stream.close()
            except OSError:
                pass

    thread = threading.Thread(target=run, name=f"pump-{name}", daemon=True)
    thread.start()
    return thread


def decode(data: bytes) -> str:
    """Output as text: UTF-8 with invalid bytes replaced (never an exception)."""
    return data.decode("utf-8", "replace")
