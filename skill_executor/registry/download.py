"""Skill content for downloads, streamed from disk with a bounded buffer.

A version's zip (``GET /v1/skills/{name}/versions/{v}/content``) is written entry by
entry into a small pipe that is emptied after every chunk read from disk, so a request
holds about :data:`CHUNK` bytes plus the compressor's window, whatever the version's
size (before: the whole zip in memory, per request).  A file
(``GET /v1/skills/{name}/files/{path}``) is read the same way, up to its cap.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from .manifest import FileDigest

CHUNK = 64 * 1024
#: Every entry's time in the zip: the same bytes for the same version, whenever it is fetched.
ZIP_TIME = (1980, 1, 1, 0, 0, 0)


class _Pipe:
    """A write-only, unseekable stream whose bytes are taken out as they come (:mod:`zipfile`
    then writes data descriptors instead of seeking back)."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def write(self, data: bytes) -> int:
        self._buffer += data
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass

    def take(self) -> bytes:
        data = bytes(self._buffer)
        self._buffer.clear()
        return data


def zip_chunks(folder: Path, top: str, files: Iterable[FileDigest]) -> Iterator[bytes]:
    """The regular files of ``files`` (manifest entries under ``folder``) as a deflated zip
    with the one top folder ``top``, in chunks; links are left out (an upload cannot hold them)."""
    pipe = _Pipe()
    with zipfile.ZipFile(pipe, "w", zipfile.ZIP_DEFLATED) as archive:
        for entry in files:
            if entry.link is not None:
                continue
            info = zipfile.ZipInfo(str(PurePosixPath(top) / entry.path), date_time=ZIP_TIME)
            info.external_attr = (0o100755 if entry.executable else 0o100644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            info.file_size = entry.size  # zip64 is decided before the first byte
            with open(folder / entry.path, "rb") as source, archive.open(info, "w") as target:
                while chunk := source.read(CHUNK):
                    target.write(chunk)
                    data = pipe.take()
                    if data:
                        yield data
            data = pipe.take()
            if data:
                yield data
    yield pipe.take()  # the central directory


def file_chunks(handle: BinaryIO, limit: int, head: bytes = b"") -> Iterator[bytes]:
    """``head`` (already read from ``handle``), then the rest of ``handle`` up to ``limit`` bytes
    in all; closes ``handle`` at the end (or when the consumer stops early)."""
    try:
        if head:
            yield head
        left = limit - len(head)
        while left > 0:
            chunk = handle.read(min(CHUNK, left))
            if not chunk:
                break
            left -= len(chunk)
            yield chunk
    finally:
        handle.close()
