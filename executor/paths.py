"""Path rules shared by every layer that takes a path from a caller.

A caller-supplied path is always *relative* to some root (a skill, a workspace, an
allowed host root).  It is refused when it is absolute, contains ``..``, a NUL byte, or
when its resolved form -- symlinks included -- lands outside that root.  Nothing here
touches the file system beyond ``resolve``.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from .errors import BadRequest, Forbidden


def clean_relative(path: str, *, what: str = "path", allow_empty: bool = False) -> PurePosixPath:
    """Validate a caller's relative path lexically; return it normalised (no ``.`` parts)."""
    if "\x00" in path:
        raise BadRequest(f"{what} {path!r} contains a NUL byte", code="invalid_path")
    if path.startswith(("/", "\\")) or (len(path) > 1 and path[1] == ":"):
        raise BadRequest(f"{what} {path!r} must be relative, not absolute", code="invalid_path")
    parts = [p for p in path.replace("\\", "/").split("/") if p not in ("", ".")]
    if ".." in parts:
        raise BadRequest(f"{what} {path!r} must not contain '..'", code="invalid_path")
    if not parts and not allow_empty:
        raise BadRequest(f"{what} is empty", code="invalid_path")
    return PurePosixPath(*parts) if parts else PurePosixPath(".")


def is_within(path: Path, root: Path) -> bool:
    """True when ``path`` is ``root`` or below it (both already resolved)."""
    return path == root or root in path.parents


def resolve_within(root: Path, relative: PurePosixPath | str, *, what: str = "path") -> Path:
    """Join and resolve (following symlinks); refuse a result outside ``root``.

    ``root`` itself is resolved too, so a root reached through a symlink is fine.
    """
    real_root = root.resolve()
    candidate = (real_root / str(relative)).resolve()
    if not is_within(candidate, real_root):
        raise Forbidden(
            f"{what} {str(relative)!r} resolves outside its root",
            code="path_escape",
        )
    return candidate


def has_symlink_component(root: Path, relative: PurePosixPath) -> bool:
    """True when any component of ``root/relative`` (below root) is a symlink."""
    current = root
    for part in relative.parts:
        current = current / part
        if os.path.islink(current):
            return True
    return False
