"""Artifact contents: content-addressed blobs in the object store
(:mod:`skill_executor.objects`), ``artifacts/sha256/<ab>/<sha256>``.

Artifacts have their own namespace in the store: their collector deletes the blobs no
version references, which must never be a blob something else (a session snapshot, a skill
bundle) references by the same content.

A save's content is written into a :class:`TempBlob`: spooled by the store into a private,
locked temp file (never whole in memory; on the local store in the store's own folder, so
placing it is a rename; on S3 under the data dir's ``spool/``, then uploaded, in parts
above 8 MiB), hashed and capped as it is written.  Crashed writers' spools are swept at the
next start (:meth:`~skill_executor.objects.ObjectStore.sweep`), never a live writer's.
"""

from __future__ import annotations

from ..errors import TooLarge
from ..objects.base import BlobWriter

#: The object store namespace of artifact contents.
NAMESPACE = "artifacts"


class TempBlob:
    """A save's content being written: spooled, hashed as it goes, capped at ``max_bytes``
    while it is written.  :meth:`publish` stores it (under the store's metadata lock, see
    :mod:`skill_executor.artifacts.store`); close it in any case (that removes the spool)."""

    def __init__(self, writer: BlobWriter, max_bytes: int | None) -> None:
        self.writer = writer
        self.max_bytes = max_bytes
        #: Whether this save stored the blob (rather than finding it stored).
        self.placed = False

    @property
    def size(self) -> int:
        return self.writer.size

    def write(self, chunk: bytes | bytearray | memoryview) -> None:
        if self.max_bytes is not None and self.writer.size + len(chunk) > self.max_bytes:
            raise TooLarge(f"the artifact is larger than {self.max_bytes} bytes", code="too_large")
        self.writer.write(chunk)

    def finish(self) -> str:
        """Flush and fsync the content; returns its SHA-256 (hex)."""
        return self.writer.finish()

    def publish(self) -> bool:
        """Store the blob unless the store has it (same content); returns whether it was stored."""
        stored = self.writer.publish()
        self.placed = self.placed or stored
        return stored

    def __enter__(self) -> TempBlob:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Remove the spool (unless it became the object)."""
        self.writer.close()
