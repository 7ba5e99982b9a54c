"""A PUT's body, read in pieces: exactly ``Content-Length`` bytes, or a chunked body (the SDK
streams file objects chunked) with its total capped as it is read."""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

PIECE = 64 * 1024
_HEX = frozenset(b"0123456789abcdefABCDEF")


class BodyError(Exception):
    """The body could not be read to its end (short, malformed chunking) or is too large."""

    def __init__(self, message: str, *, too_large: bool = False) -> None:
        super().__init__(message)
        self.too_large = too_large


def read(rfile: BinaryIO, length: int | None, cap: int) -> Iterator[bytes]:
    """``length`` bytes of ``rfile``, or (``None``) a chunked body of at most ``cap`` bytes."""
    if length is not None:
        yield from _exactly(rfile, length)
        return
    total = 0
    while True:
        line = rfile.readline(1026)
        size_text = line.split(b";", 1)[0].strip()
        if not line.endswith(b"\n") or not size_text or not set(size_text) <= _HEX:
            raise BodyError("malformed chunked body")
        size = int(size_text, 16)
        if size == 0:
            while rfile.readline(1026) not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return
        total += size
        if total > cap:
            raise BodyError(f"file larger than {cap} bytes", too_large=True)
        yield from _exactly(rfile, size)
        if rfile.readline(3) not in (b"\r\n", b"\n"):
            raise BodyError("malformed chunked body")


def _exactly(rfile: BinaryIO, length: int) -> Iterator[bytes]:
    left = length
    while left:
        piece = rfile.read(min(PIECE, left))
        if not piece:
            raise BodyError("the body ended before its announced length")
        left -= len(piece)
        yield piece
