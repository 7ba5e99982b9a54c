"""Copy a skill's files into a workspace without letting links pull in host files."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from ..paths import is_within

SKIP = frozenset({".git", "__pycache__"})


def copy_skill(source: Path, dest: Path, *, readonly: bool = True) -> list[str]:
    """Copy ``source`` into the existing folder ``dest``; return warnings.

    Symbolic links are never followed: a link whose target stays inside the skill is
    recreated as a link, any other link is skipped with a warning.  With ``readonly``
    the copy is made read-only (which stops a non-root command; root ignores modes,
    but then it only writes to this copy, never to the source).
    """
    warnings: list[str] = []
    real_root = source.resolve()
    for dirpath, dirnames, filenames in os.walk(source):
        rel_dir = os.path.relpath(dirpath, source)
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP)
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
                shutil.copyfile(src, dst, follow_symlinks=False)
                os.chmod(dst, (st.st_mode & 0o555) if readonly else (st.st_mode & 0o777))
            else:
                warnings.append(f"skill file {rel!r} is a special file; not copied")
    if readonly:
        for dirpath, dirnames, _ in os.walk(dest, topdown=False):
            for name in dirnames:
                path = Path(dirpath, name)
                if not path.is_symlink():
                    os.chmod(path, 0o555)
        os.chmod(dest, 0o555)
    return warnings
