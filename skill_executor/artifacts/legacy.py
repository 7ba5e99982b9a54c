"""Blobs from before the object store: ``<data>/artifacts/blobs/<ab>/<sha256>`` moved into it.

Run at every start, before the store is used (so reads need no fallback): each blob is
imported (:meth:`~skill_executor.objects.ObjectStore.import_blob`: a hard link into a local
store on the same file system, else a copy verified against its name), and only then
removed from the old folder.  A crash at any point leaves every blob in at least one of the
two places, and the next start goes on where it stopped (a blob the store has already is not
copied again); two processes doing it at once are harmless.  A file that does not hash to
its name is left where it is and logged (its version then reads as not found).
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from ..objects import ObjectCorrupt, ObjectNotFound, ObjectStore
from ..objects.spool import LOCK_NAME, sweep_spool
from .blobs import NAMESPACE

log = logging.getLogger(__name__)

_SHA256 = re.compile(r"[0-9a-f]{64}")
_FANOUT = re.compile(r"[0-9a-f]{2}")


def import_blobs(folder: Path, objects: ObjectStore) -> int:
    """Move the blobs under ``folder`` into ``objects``; returns how many were moved."""
    if not folder.is_dir() or folder.is_symlink():
        return 0
    sweep_spool(folder)  # crashed writers' temps (a live writer holds its lock)
    moved = 0
    for sub in sorted(os.scandir(folder), key=lambda e: e.name):
        if not _FANOUT.fullmatch(sub.name) or not sub.is_dir(follow_symlinks=False):
            continue
        for entry in sorted(os.scandir(sub.path), key=lambda e: e.name):
            path = Path(entry.path)
            if not (
                _SHA256.fullmatch(entry.name) and entry.name[:2] == sub.name and entry.is_file(follow_symlinks=False)
            ):
                log.warning("not an artifact blob, left where it is: %s", path)
                continue
            try:
                objects.import_blob(path, entry.name, NAMESPACE)
            except (ObjectNotFound, FileNotFoundError):
                continue  # moved meanwhile by another process starting on this data dir
            except ObjectCorrupt as exc:
                log.error("artifact blob %s not moved into the object store: %s", path, exc)
                continue
            path.unlink(missing_ok=True)
            moved += 1
        _remove_empty(Path(sub.path))
    (folder / LOCK_NAME).unlink(missing_ok=True)
    if _remove_empty(folder):
        (folder.parent / f"{folder.name}.lock").unlink(missing_ok=True)  # the old writers' lock
    if moved:
        log.info("moved %d artifact blobs from %s into the object store %s", moved, folder, objects.describe())
    return moved


def _remove_empty(folder: Path) -> bool:
    try:
        folder.rmdir()
    except OSError:
        return False
    return True
