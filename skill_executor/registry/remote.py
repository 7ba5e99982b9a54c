"""A version's files through the object store, so any machine sharing the database runs it.

Publishing puts every regular file's blob into the store (:func:`upload`) before the version's
row commits: a row never names content the store lacks.  A machine that finds the row but not
the folder builds the folder from the row's manifest (:func:`build`): every blob fetched
verified into the local blob cache (or found there) and hard-linked, as a publish does, into
a staging folder the caller renames into place.  The manifest comes from the database and
the bytes from the store, both outside this process: the manifest is checked before anything
is written (its digest, safe relative paths, no entry below a link) and every blob is checked
against its SHA-256 as it arrives (:class:`~skill_executor.objects.ObjectCorrupt` otherwise).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from pathlib import Path, PurePosixPath

from ..errors import ExecutorError
from ..objects import ObjectCorrupt, ObjectStore
from .manifest import FileDigest, Version, manifest_digest

#: The deepest path a manifest may name (a publish walks real folders: far fewer levels).
MAX_DEPTH = 64


class ManifestInvalid(ExecutorError):
    """A version's row names files that cannot be a version (a path leaving the folder, a
    digest that is not its manifest's): nothing of it is written."""

    code = "version_manifest_invalid"
    status = 500


def blob_path(blobs: Path, sha256: str, executable: bool) -> Path:
    """Where the local blob cache keeps a blob (``<sha256>.x``: the executable variant)."""
    return blobs / sha256[:2] / (sha256 + (".x" if executable else ""))


def upload(store: ObjectStore, blobs: Path, files: list[FileDigest]) -> int:
    """Put the blob of every regular file of ``files`` (from the local cache) into ``store``;
    a blob already there costs one lookup.  Returns how many were uploaded."""
    uploaded = 0
    done: set[str] = set()
    for entry in files:
        if entry.link is not None or entry.sha256 in done:
            continue
        done.add(entry.sha256)
        if store.has_blob(entry.sha256):
            continue
        got, _ = store.put_blob(blob_path(blobs, entry.sha256, entry.executable))
        if got != entry.sha256:  # the local cache changed under the publish: not a version
            raise ObjectCorrupt(f"the local blob {entry.sha256} no longer holds its content (sha256 {got})")
        uploaded += 1
    return uploaded


def check(version: Version) -> None:
    """Refuse a manifest that is not a version's: its digest differs, a path is absolute, has
    ``.``/``..``/empty parts or repeats, an entry lies below a link, a link's hash is not its text's."""

    def bad(why: str) -> ManifestInvalid:
        return ManifestInvalid(f"version {version.number} of skill {version.skill!r} has an invalid manifest: {why}")

    if manifest_digest([(f.path, f.digest_field) for f in version.files]) != version.digest:
        raise bad("its files do not hash to its digest")
    if not _safe_segment(version.dirname):
        raise bad(f"folder name {version.dirname[:80]!r}")
    links: set[str] = set()
    seen: set[str] = set()
    for entry in version.files:
        parts = entry.path.split("/")
        if (
            not entry.path
            or "\\" in entry.path
            or len(parts) > MAX_DEPTH
            or not all(_safe_segment(p) for p in parts)
            or entry.path in seen
        ):
            raise bad(f"path {entry.path[:80]!r}")
        seen.add(entry.path)
        if entry.link is not None:
            if (
                not entry.link
                or "\0" in entry.link
                or hashlib.sha256(os.fsencode(entry.link)).hexdigest() != entry.sha256
            ):
                raise bad(f"link {entry.path[:80]!r}")
            links.add(entry.path)
    for entry in version.files:
        parents = PurePosixPath(entry.path).parents
        if any(str(parent) in links for parent in parents):
            raise bad(f"{entry.path[:80]!r} lies below a link")


def build(store: ObjectStore, version: Version, blobs: Path, stage: Path, fetched: list[Path]) -> Path:
    """Build ``version``'s folder in the empty ``stage`` (``stage/<dirname>``); every blob
    fetched into ``blobs`` is appended to ``fetched`` (the caller's to remove on a failure)."""
    check(version)
    target = stage / version.dirname
    target.mkdir(mode=0o755)
    for entry in sorted(version.files, key=lambda f: f.link is not None):  # links last: nothing is written through one
        dst = target.joinpath(*entry.path.split("/"))
        _make_parents(target, dst.parent)
        if entry.link is not None:
            os.symlink(entry.link, dst)
        else:
            os.link(_cached(store, blobs, entry, fetched), dst)
    return target


def _cached(store: ObjectStore, blobs: Path, entry: FileDigest, fetched: list[Path]) -> Path:
    """The local blob of ``entry`` (its variant), fetched verified when the cache lacks it."""
    blob = blob_path(blobs, entry.sha256, entry.executable)
    if blob.exists():
        return blob
    other = blob_path(blobs, entry.sha256, not entry.executable)
    temp = blobs / f".tmp-{uuid.uuid4().hex}"
    try:
        if other.exists():  # the other variant is here: a local copy, no download
            shutil.copyfile(other, temp)
        else:
            store.fetch_blob(entry.sha256, temp)
            fetched.append(blob)
        os.chmod(temp, 0o555 if entry.executable else 0o444)
        blob.parent.mkdir(exist_ok=True)
        os.rename(temp, blob)
    finally:
        temp.unlink(missing_ok=True)
    return blob


def _make_parents(top: Path, folder: Path) -> None:
    missing: list[Path] = []
    while folder != top and not folder.is_dir():
        missing.append(folder)
        folder = folder.parent
    for path in reversed(missing):
        path.mkdir(mode=0o755)


def _safe_segment(part: str) -> bool:
    return part not in ("", ".", "..") and "/" not in part and "\0" not in part and len(part.encode()) <= 255
