"""Copy a skill's files into a workspace without letting links pull in host files."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from ..paths import is_within

SKIP = frozenset({".git", "__pycache__"})


def _safe_to_link(st: os.stat_result, user: tuple[int, int]) -> bool:
    """A hard link shares the source's inode: only safe if ``user`` cannot write it."""
    uid, gid = user
    if st.st_uid == uid or st.st_mode & 0o002:
        return False
    return not (st.st_mode & 0o020 and st.st_gid == gid)


def copy_skill(
    source: Path,
    dest: Path,
    *,
    readonly: bool = True,
    link_unless_writable_by: tuple[int, int] | None = None,
    skip_top: frozenset[str] = frozenset(),
) -> list[str]:
    """Copy ``source`` into the existing folder ``dest``; return warnings.

    Symbolic links are never followed: a link whose target stays inside the skill is
    recreated as a link, any other link is skipped with a warning.  With ``readonly``
    copied files lose their write bits (:func:`make_read_only` does the folders); a
    root command ignores modes, but then it only writes to this copy, never the source.

    With ``link_unless_writable_by=(uid, gid)``, a file that user cannot write is hard
    linked instead of copied (no data moves; its mode is left alone, as it is the
    source's); others are copied as usual.
    """
    warnings: list[str] = []
    real_root = source.resolve()
    for dirpath, dirnames, filenames in os.walk(source):
        rel_dir = os.path.relpath(dirpath, source)
        skip = SKIP | skip_top if rel_dir == "." else SKIP
        dirnames[:] = sorted(d for d in dirnames if d not in skip)
        if rel_dir == ".":
            filenames = [f for f in filenames if f not in skip_top]
        target_dir = dest if rel_dir == "." else dest / rel_dir
        for name in [*dirnames, *sorted(filenames)]:
            src = Path(dirpath, name)
            dst = target_dir / name
            rel = os.path.normpath(os.path.join(rel_dir, name))
            st = os.lstat(src)
            if stat.S_ISLNK(st.st_mode):
                if name in dirnames:
                    dirnames.remove(name)
                target = src.resolve()
                if is_within(target, real_root):
                    os.symlink(os.path.relpath(target, src.parent.resolve()), dst)
                else:
                    warnings.append(f"skill file {rel!r} is a link out of the skill; not copied")
            elif stat.S_ISDIR(st.st_mode):
                dst.mkdir()
            elif stat.S_ISREG(st.st_mode):
                if link_unless_writable_by is not None and _safe_to_link(st, link_unless_writable_by):
                    try:
                        os.link(src, dst, follow_symlinks=False)
                        continue
                    except OSError:
                        pass  # another file system, say: copy instead
                shutil.copyfile(src, dst, follow_symlinks=False)
                os.chmod(dst, (st.st_mode & 0o555) if readonly else (st.st_mode & 0o777))
            else:
                warnings.append(f"skill file {rel!r} is a special file; not copied")
    return warnings


def make_read_only(dest: Path) -> None:
    """Directories of a copied skill: read-only (files got their modes when copied)."""
    for dirpath, dirnames, _ in os.walk(dest, topdown=False):
        for name in dirnames:
            path = Path(dirpath, name)
            if not path.is_symlink():
                os.chmod(path, 0o555)
    os.chmod(dest, 0o555)
