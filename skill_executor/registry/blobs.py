"""A version's files on disk: content-addressed blobs (read-only; ``<sha256>.x`` the
executable variant) hard-linked into the version's folder, links kept as links, and the
signature that says when a folder skill changed on disk."""

from __future__ import annotations

import hashlib
import os
import stat
import uuid
from pathlib import Path
from typing import Any

from .manifest import FileDigest

#: Folders never part of a version (the run's copy skips them too).
SKIP_DIRS = frozenset({".git", "__pycache__"})


def materialise(source: Path, target: Path, blobs: Path) -> list[FileDigest]:
    """Copy ``source``'s regular files into ``blobs`` and hard-link them under ``target``.

    Links stay links (as a run's copy keeps them): one that resolves inside the skill
    with a relative target, any other to its resolved absolute target -- which every
    reader refuses as leaving the skill, as before.
    """
    files: list[FileDigest] = []
    real_root = source.resolve()
    for dirpath, dirnames, filenames in os.walk(source):
        rel_dir = os.path.relpath(dirpath, source)
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        out_dir = target if rel_dir == "." else target / rel_dir
        for name in list(dirnames):
            if Path(dirpath, name).is_symlink():
                dirnames.remove(name)
                filenames.append(name)  # recorded as a link below
            else:
                (out_dir / name).mkdir(mode=0o755)
        for name in sorted(filenames):
            src = Path(dirpath, name)
            rel = name if rel_dir == "." else f"{rel_dir}/{name}".replace(os.sep, "/")
            st = os.lstat(src)
            if stat.S_ISLNK(st.st_mode):
                resolved = Path(os.path.realpath(src))
                inside = resolved.is_relative_to(real_root)
                link = os.path.relpath(resolved, Path(dirpath).resolve()) if inside else str(resolved)
                os.symlink(link, out_dir / name)
                sha = hashlib.sha256(os.fsencode(link)).hexdigest()
                files.append(FileDigest(rel, sha, 0, False, link))
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            executable = bool(st.st_mode & 0o111)
            sha, size = link_blob(blobs, src, out_dir / name, executable)
            files.append(FileDigest(rel, sha, size, executable))
    return files


def link_blob(blobs: Path, src: Path, dst: Path, executable: bool) -> tuple[str, int]:
    """Store ``src`` as a blob (if new) and hard-link it at ``dst``; returns (sha256 hex, size)."""
    tmp = blobs / f".tmp-{uuid.uuid4().hex}"
    h = hashlib.sha256()
    size = 0
    with open(src, "rb") as fin, open(tmp, "wb") as fout:
        while chunk := fin.read(1 << 20):
            h.update(chunk)
            fout.write(chunk)
            size += len(chunk)
    sha = h.hexdigest()
    blob = blobs / sha[:2] / (sha + (".x" if executable else ""))
    try:
        if blob.exists():
            tmp.unlink()
        else:
            blob.parent.mkdir(exist_ok=True)
            os.chmod(tmp, 0o555 if executable else 0o444)
            os.rename(tmp, blob)
    finally:
        if tmp.exists():
            tmp.unlink()
    os.link(blob, dst)
    return sha, size


def folder_signature(folder: Path) -> tuple[Any, ...]:
    """What changes whenever a file of ``folder`` does: (path, size, mtime, ctime, mode) per entry."""
    entries: list[tuple[str, int, int, int, int]] = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for name in sorted([*filenames, *(d for d in dirnames if os.path.islink(os.path.join(dirpath, d)))]):
            full = os.path.join(dirpath, name)
            try:
                st = os.lstat(full)  # a retargeted link is a new link: new times
            except OSError:
                continue
            entries.append((full, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode))
    return tuple(entries)
