"""The object store seam: moving bytes to and from a store by key, and the content-addressed
layer every caller uses on top of it.

:class:`ObjectStore` validates every key (:mod:`.keys`, the one place) and hands the rest to
its implementation (:mod:`.local`, :mod:`.s3`).  Bodies are streamed both ways, never held
in memory whole: a reader is copied in :data:`CHUNK_BYTES` pieces into a private temp file
(*the spool*) that the store then publishes (a rename on local disk, an upload on S3).
Downloads go to a temp file next to the target and are renamed into place only once whole
(and, for blobs, verified).
"""

from __future__ import annotations

import hashlib
import io
import os
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import BinaryIO, Protocol

from .errors import ObjectCorrupt
from .keys import blob_key, validate_key, validate_prefix, validate_sha256
from .spool import TEMP_PREFIX, disk_error, spool_file, sweep_spool

__all__ = ["CHUNK_BYTES", "TEMP_PREFIX", "BlobWriter", "ByteReader", "ObjectStore", "spool_file"]

#: The piece size bodies are copied and hashed in.
CHUNK_BYTES = 1024 * 1024


class ByteReader(Protocol):
    """Anything with a binary ``read`` (an open file, a request body, another store's reader)."""

    def read(self, size: int = ..., /) -> bytes: ...


class ObjectStore(ABC):
    """A store of immutable objects by key.  Keys are checked here; subclasses implement the
    ``_``-prefixed hooks and :meth:`check`, and may assume valid keys."""

    #: Objects are files on this machine's disk: publishing a spool is a rename, not an upload.
    local: bool = False

    # -- keys -------------------------------------------------------------------------------

    def put_file(self, key: str, path: Path) -> None:
        """Store the file at ``path`` under ``key`` (replacing an object with that key)."""
        self._put_file(validate_key(key), Path(path))

    def put_stream(self, key: str, reader: ByteReader) -> int:
        """Store what ``reader`` gives until its end under ``key``; returns the byte count."""
        validate_key(key)
        with self._spool() as (file, path):
            _, size = _copy(reader, file)
            _finish(file)
            self._publish(key, path)
        return size

    def open(self, key: str) -> BinaryIO:
        """A streaming reader of the object (close it, or use it as a context manager)."""
        return self._open(validate_key(key))

    def download(self, key: str, path: Path) -> int:
        """Write the object to ``path`` atomically (a temp file renamed once whole); its size."""
        validate_key(key)
        with _atomic_target(Path(path)) as (file, _):
            self._download_into(key, file)
            _finish(file)
            return os.fstat(file.fileno()).st_size  # parts may land out of order: not tell()

    def exists(self, key: str) -> bool:
        return self._exists(validate_key(key))

    def size(self, key: str) -> int:
        return self._size(validate_key(key))

    def delete(self, key: str) -> None:
        """Remove the object; removing an absent key is not an error (as on S3)."""
        self._delete(validate_key(key))

    def list(self, prefix: str = "") -> Iterator[str]:
        """The keys below ``prefix`` (``""``: all; else a key followed by ``/``), in no promised order."""
        return self._list(validate_prefix(prefix))

    @abstractmethod
    def check(self) -> None:
        """A cheap health probe: the store answers and takes a write (raises the store's error if not)."""

    @abstractmethod
    def describe(self) -> str:
        """Where the store is, for messages and logs (never a credential)."""

    def sweep(self) -> int:
        """Remove the spools crashed writers left (never a live writer's); how many."""
        folder = self._spool_folder()
        return sweep_spool(folder) if folder is not None else 0

    # -- content-addressed blobs: [<namespace>/]sha256/<ab>/<sha256> ---------------------------
    # ``namespace`` keeps the blobs of a user that deletes them (artifacts) apart from others'.

    def new_blob(self, namespace: str = "") -> BlobWriter:
        """A blob to write piece by piece (see :class:`BlobWriter`); close it in any case."""
        return BlobWriter(self, namespace)

    def put_blob(self, source: Path | ByteReader) -> tuple[str, int]:
        """Store a file's or a reader's bytes by their SHA-256; returns ``(sha256, size)``.

        The bytes are copied into the spool first, hashed as they go: what is uploaded is what
        was hashed, even if the source changes meanwhile.  Uploaded only when absent."""
        with self._spool() as (file, path):
            if isinstance(source, (str, os.PathLike)):
                with open(source, "rb") as reader:
                    sha256, size = _copy(reader, file)
            else:
                sha256, size = _copy(source, file)
            _finish(file)
            key = blob_key(sha256)
            if not self._exists(key):
                self._publish(key, path)
        return sha256, size

    def has_blob(self, sha256: str, namespace: str = "") -> bool:
        return self._exists(blob_key(sha256, namespace))

    def open_blob(self, sha256: str, namespace: str = "", *, verify: bool = True) -> BinaryIO:
        """A streaming reader of the blob that raises :class:`ObjectCorrupt` at its end if what
        was read does not hash to ``sha256`` (unless ``verify`` is off)."""
        key = blob_key(sha256, namespace)
        if not verify:
            return self._open(key)
        return io.BufferedReader(_Verifying(self._open(key), sha256, key), CHUNK_BYTES)

    def delete_blob(self, sha256: str, namespace: str = "") -> None:
        self._delete(blob_key(sha256, namespace))

    def import_blob(self, path: Path, sha256: str, namespace: str = "") -> bool:
        """Store the file at ``path`` as the blob ``sha256`` unless the store has it; returns
        whether it was stored now.  Copied and verified: a file that does not hash to ``sha256``
        raises :class:`ObjectCorrupt` and stores nothing.  (A local store links it instead.)"""
        if self.has_blob(sha256, namespace):
            return False
        with self.new_blob(namespace) as writer:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            with open(fd, "rb") as reader:
                while chunk := reader.read(CHUNK_BYTES):
                    writer.write(chunk)
            got = writer.finish()
            if got != sha256:
                raise ObjectCorrupt(f"{path} does not hash to its name (sha256 {got}): not imported")
            return writer.publish()

    def fetch_blob(self, sha256: str, path: Path) -> int:
        """Download the blob to ``path``, verified: a download whose SHA-256 differs raises
        :class:`ObjectCorrupt` and leaves nothing at ``path``.  Returns the size."""
        key = blob_key(sha256)
        with _atomic_target(Path(path)) as (file, temp):
            self._download_into(key, file)
            _finish(file)
            with open(temp, "rb") as written:
                got, size = _copy(written, None)
            if got != sha256:
                raise ObjectCorrupt(f"the object store {self.describe()} returned other bytes for {key} (sha256 {got})")
            return size

    # -- implementation hooks (keys already valid) ---------------------------------------------

    @abstractmethod
    def _spool_folder(self) -> Path | None:
        """Where this store's spools are made (None: a shared temp folder, never swept)."""

    @abstractmethod
    def _spool(self) -> AbstractContextManager[tuple[BinaryIO, Path]]:
        """A private, writable temp file this store can publish (removed on exit; see :func:`spool_file`)."""

    @abstractmethod
    def _publish(self, key: str, path: Path) -> None:
        """Make the finished spool file ``path`` the object ``key``."""

    @abstractmethod
    def _put_file(self, key: str, path: Path) -> None: ...

    @abstractmethod
    def _open(self, key: str) -> BinaryIO: ...

    @abstractmethod
    def _download_into(self, key: str, file: BinaryIO) -> None:
        """Write the object into ``file`` (open for writing, empty, seekable)."""

    @abstractmethod
    def _exists(self, key: str) -> bool: ...

    @abstractmethod
    def _size(self, key: str) -> int: ...

    @abstractmethod
    def _delete(self, key: str) -> None: ...

    @abstractmethod
    def _list(self, prefix: str) -> Iterator[str]: ...


def _copy(reader: ByteReader, file: BinaryIO | None) -> tuple[str, int]:
    """Copy ``reader`` to ``file`` (None: only hash) in pieces; ``(sha256, size)``.  An error
    reading is the reader's (raised as it is); an error writing is the local disk's (503)."""
    digest = hashlib.sha256()
    size = 0
    while chunk := reader.read(CHUNK_BYTES):
        digest.update(chunk)
        if file is not None:
            try:
                file.write(chunk)
            except OSError as exc:
                raise _disk_error(exc) from None
        size += len(chunk)
    return digest.hexdigest(), size


def _finish(file: BinaryIO) -> None:
    try:
        file.flush()
        os.fsync(file.fileno())
    except OSError as exc:
        raise _disk_error(exc) from None


_disk_error = disk_error


class BlobWriter:
    """A blob being written: spooled piece by piece into a private temp file (never whole in
    memory) and hashed as it goes; :meth:`finish` it, then :meth:`publish` it (stored under its
    SHA-256 unless the store has it).  A context manager: the spool is removed on exit."""

    def __init__(self, store: ObjectStore, namespace: str = "") -> None:
        if namespace:
            validate_key(namespace)
        self.store = store
        self.namespace = namespace
        self.size = 0
        self.sha256 = ""
        self.published = False
        self._digest = hashlib.sha256()
        self._spool = store._spool()
        self._file, self.path = self._spool.__enter__()

    def write(self, chunk: bytes | bytearray | memoryview) -> None:
        self._digest.update(chunk)
        try:
            self._file.write(chunk)
        except OSError as exc:
            raise _disk_error(exc) from None
        self.size += len(chunk)

    def finish(self) -> str:
        """Flush and fsync the spool; returns the blob's SHA-256 (hex)."""
        _finish(self._file)
        self.sha256 = self._digest.hexdigest()
        return self.sha256

    @property
    def key(self) -> str:
        return blob_key(self.sha256, self.namespace)

    def publish(self) -> bool:
        """Store the finished blob unless the store has it; returns whether it was stored now.
        On a :attr:`~ObjectStore.local` store the spool itself becomes the object (once)."""
        key = self.key
        if self.store._exists(key):
            return False
        if self.published and self.store.local:
            raise RuntimeError("a local blob's spool was moved into the store already")
        self.store._publish(key, self.path)
        self.published = True
        return True

    def close(self) -> None:
        self._spool.__exit__(None, None, None)

    def __enter__(self) -> BlobWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def _atomic_target(path: Path) -> Iterator[tuple[BinaryIO, Path]]:
    """A temp file (0600) next to ``path``, renamed to it when the block ends without an error
    (removed otherwise).  The target's folder is the caller's: its errors are raised as they are."""
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=TEMP_PREFIX)
    temp = Path(name)
    try:
        with os.fdopen(fd, "w+b") as file:
            yield file, temp
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)


class _Verifying(io.RawIOBase):
    """Passes a reader through, hashing; at its end, raises if the hash is not the expected one."""

    def __init__(self, inner: BinaryIO, sha256: str, key: str) -> None:
        self._inner = inner
        self._expected = validate_sha256(sha256)
        self._key = key
        self._digest = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        data = self._inner.read(len(buffer))
        if not data:
            got = self._digest.hexdigest()
            if got != self._expected:
                raise ObjectCorrupt(f"the object store returned other bytes for {self._key} (sha256 {got})")
            return 0
        self._digest.update(data)
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            super().close()
