"""Dependency environments through the object store: resolved once (at install), fetched by
every other process that shares the store instead of resolving again.

An environment is stored as a tree (:mod:`skill_executor.objects.trees`: a blob per file, a
manifest of the tree) and a pointer ``envs/<key>`` naming the manifest, written last: an
environment is all there or not there.  Its key is content-derived (the needs, the image,
the sources: :func:`~.plan.env_key`), so the pointer of a key never has to change.  A
fetched environment is built in a temporary folder next to its place, checked (its
``manifest.json`` names its key) and renamed there in one step, as a resolved one is, with
the same modes (folders 0755, files 0644/0755, the service's): runs mount it read-only.
"""

from __future__ import annotations

import errno
import io
import json
import logging
import os
import re
import secrets
import shutil
from pathlib import Path

from ..objects import ObjectNotFound, ObjectStore
from ..objects.trees import TreeManifestInvalid, put_tree, restore_tree

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
_SHA256 = re.compile(r"[0-9a-f]{64}")


def pointer_key(key: str) -> str:
    return f"envs/{key}"


def stored(store: ObjectStore, key: str) -> bool:
    return store.exists(pointer_key(key))


def store_env(store: ObjectStore, key: str, folder: Path) -> str:
    """Store the environment in ``folder`` under ``key``; the manifest's sha256."""
    sha = put_tree(store, folder)
    store.put_stream(pointer_key(key), io.BytesIO(f"{sha}\n".encode()))
    return sha


def fetch_env(store: ObjectStore, key: str, root: Path, final: Path) -> bool:
    """Build the stored environment ``key`` at ``final`` (in ``root``); False when the store has
    none.  A failure (the store down, a blob that is not its hash, an invalid manifest) leaves
    nothing behind."""
    try:
        with store.open(pointer_key(key)) as reader:
            text = reader.read(128).decode("ascii", "replace").strip()
    except ObjectNotFound:
        return False
    if not _SHA256.fullmatch(text):
        raise TreeManifestInvalid(f"the object store's pointer of the environment {key} is invalid")
    temp = root / f".tmp-{key}-fetch-{secrets.token_hex(4)}"
    temp.mkdir(mode=0o755)
    try:
        os.chmod(temp, 0o755)
        restore_tree(store, text, temp)
        _check(temp, key)
        try:
            os.rename(temp, final)
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            shutil.rmtree(temp, ignore_errors=True)  # another process put it in place: use that one
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    log.info("fetched the skill environment %s from %s", key, store.describe())
    return True


def _check(folder: Path, key: str) -> None:
    path = folder / MANIFEST
    try:
        if path.is_symlink() or not path.is_file():
            raise ValueError("no manifest")
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        raise TreeManifestInvalid(f"the stored environment {key} has no readable {MANIFEST}") from None
    if not isinstance(data, dict) or data.get("key") != key:
        raise TreeManifestInvalid(f"the stored environment {key} is another environment's")
