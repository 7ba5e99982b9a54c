"""Bodies in and out: folders pushed as files, uploads streamed from files or iterables,
downloads checked against the service's digest, Server-Sent Events parsed."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import zipfile
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from stat import S_ISREG
from typing import Any, BinaryIO, cast

import anyio.to_thread
import httpx

from .calls import JSON, ApiError

#: Folders a push leaves out (the registry does not version them either).
PUSH_SKIP = frozenset({".git", "__pycache__"})


def folder_files(directory: str | os.PathLike[str]) -> list[tuple[str, bytes]]:
    """A skill folder's files as (path relative to the folder, content); links are not followed."""
    root = os.fspath(directory)
    if not os.path.isdir(root):
        raise FileNotFoundError(f"no such folder: {root}")
    out: list[tuple[str, bytes]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in PUSH_SKIP)
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            if os.path.islink(full) or not os.path.isfile(full):
                continue
            with open(full, "rb") as handle:
                out.append((os.path.relpath(full, root).replace(os.sep, "/"), handle.read()))
    return out


#: What a client's ``bundle=`` takes: an archive's bytes, or a path to a skill folder or an archive.
Bundle = bytes | str | os.PathLike[str]


def bundle_field(bundle: Bundle) -> JSON:
    """A run request's ``bundle``: an archive's bytes as they are, an archive file's content, or
    a skill folder zipped (its files at the zip's root; links and ``.git`` left out)."""
    if isinstance(bundle, bytes):
        data = bundle
    elif os.path.isdir(bundle):
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
            for path, content in folder_files(bundle):
                archive.writestr(path, content)
        data = buffer.getvalue()
    else:
        with open(bundle, "rb") as handle:
            data = handle.read()
    media_type = "application/zip" if data[:2] == b"PK" else "application/gzip" if data[:2] == b"\x1f\x8b" else None
    field: JSON = {"type": "base64", "data": base64.b64encode(data).decode("ascii")}
    if media_type is not None:
        field["media_type"] = media_type
    return field


def with_bundle(request: JSON, bundle: Bundle | None) -> JSON:
    """``request`` with ``bundle`` as its ``bundle`` field (a copy; unchanged without one)."""
    return request if bundle is None else {**request, "bundle": bundle_field(bundle)}


def file_name_of(data: object, name: str | None) -> str:
    """An upload's file name: ``name``, else a path's (or an open file's) base name."""
    if name:
        return name
    path = data if isinstance(data, str | os.PathLike) else getattr(data, "name", None)
    if isinstance(path, str | os.PathLike):
        return os.path.basename(os.fspath(path))
    raise ValueError("name= is needed for data that is not a path or a named file")


def extract_version(response: httpx.Response, directory: str | os.PathLike[str]) -> JSON:
    """Unpack a version's zip (one top folder) into ``directory``, which must be empty or absent."""
    target = os.fspath(directory)
    os.makedirs(target, exist_ok=True)
    if os.listdir(target):
        raise FileExistsError(f"{target} is not empty")
    real = os.path.realpath(target)
    with zipfile.ZipFile(io.BytesIO(response.content)) as archive:
        for info in archive.infolist():
            parts = info.filename.split("/")[1:]  # drop the skill's folder name
            if info.is_dir() or not parts or any(p in ("", ".", "..") for p in parts):
                continue
            dest = os.path.join(real, *parts)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with open(dest, "wb") as handle:
                handle.write(archive.read(info))
            os.chmod(dest, 0o755 if (info.external_attr >> 16) & 0o111 else 0o644)
    return {
        "version": int(response.headers.get("x-skill-version", "0")) or None,
        "digest": response.headers.get("x-skill-digest"),
        "path": target,
    }


class SSEParser:
    """Feed lines of a Server-Sent Events stream; get (event, data) per finished block."""

    def __init__(self) -> None:
        self._event = "message"
        self._data: list[str] = []

    def feed(self, line: str) -> tuple[str, Any] | None:
        if line.startswith("event:"):
            self._event = line[6:].strip()
        elif line.startswith("data:"):
            self._data.append(line[5:].strip())
        elif not line and self._data:
            parsed = (self._event, json.loads("\n".join(self._data)))
            self._event, self._data = "message", []
            return parsed
        return None


#: Upload and download chunk size.
CHUNK = 256 * 1024
#: What an artifact upload reads: bytes, a file path, a binary file or chunks.
Body = bytes | os.PathLike[str] | BinaryIO | Iterable[bytes]
AsyncBody = bytes | os.PathLike[str] | BinaryIO | AsyncIterable[bytes]


def _file_size(handle: BinaryIO) -> int | None:
    """What is left to read of a regular file (None for pipes and the like)."""
    try:
        stat = os.fstat(handle.fileno())
        return stat.st_size - handle.tell() if S_ISREG(stat.st_mode) else None
    except (OSError, ValueError, AttributeError):
        return None


def _read_chunks(handle: BinaryIO) -> Iterator[bytes]:
    while chunk := handle.read(CHUNK):
        yield chunk


def _path_chunks(path: os.PathLike[str]) -> Iterator[bytes]:
    with open(path, "rb") as handle:
        yield from _read_chunks(handle)


async def _aread_chunks(handle: BinaryIO) -> AsyncIterator[bytes]:
    while chunk := await anyio.to_thread.run_sync(handle.read, CHUNK):
        yield chunk


async def _apath_chunks(path: os.PathLike[str]) -> AsyncIterator[bytes]:
    handle = await anyio.to_thread.run_sync(open, path, "rb")
    try:
        async for chunk in _aread_chunks(handle):
            yield chunk
    finally:
        await anyio.to_thread.run_sync(handle.close)


def upload_body(data: Body) -> tuple[bytes | Iterable[bytes], int | None]:
    """(what httpx sends, its size when known) for :meth:`Client.put_artifact`."""
    if isinstance(data, bytes):
        return data, len(data)
    if isinstance(data, os.PathLike):
        return _path_chunks(data), os.stat(data).st_size
    if hasattr(data, "read"):
        handle = cast(BinaryIO, data)
        return _read_chunks(handle), _file_size(handle)
    return data, None


async def aupload_body(data: AsyncBody) -> tuple[bytes | AsyncIterable[bytes], int | None]:
    """(what httpx sends, its size when known) for :meth:`AsyncClient.put_artifact`."""
    if isinstance(data, bytes):
        return data, len(data)
    if isinstance(data, os.PathLike):
        return _apath_chunks(data), (await anyio.to_thread.run_sync(os.stat, data)).st_size
    if hasattr(data, "read"):
        handle = cast(BinaryIO, data)
        return _aread_chunks(handle), _file_size(handle)
    return data, None


class Download:
    """Checks a streamed artifact while it is written: its SHA-256 against the
    service's ``X-Artifact-SHA256``; ``done()`` returns its metadata."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.digest = hashlib.sha256()
        self.size = 0

    def update(self, chunk: bytes) -> None:
        self.digest.update(chunk)
        self.size += len(chunk)

    def done(self) -> JSON:
        headers = self.response.headers
        expected = headers.get("x-artifact-sha256")
        if expected is not None and expected != self.digest.hexdigest():
            raise ApiError(
                self.response.status_code,
                "checksum_mismatch",
                f"the download's SHA-256 {self.digest.hexdigest()} is not the artifact's {expected}",
            )
        return {
            "version": int(headers.get("x-artifact-version", "0")),
            "sha256": self.digest.hexdigest(),
            "size": self.size,
            "mime_type": headers.get("content-type", "").split(";")[0],
        }
