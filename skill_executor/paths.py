"""Path rules shared by every layer that takes a path from a caller.

A caller-supplied path is always *relative* to some root (a skill, a workspace, an
allowed host root).  It is refused when it is absolute, contains ``..``, a NUL byte, or
when its resolved form -- symlinks included -- lands outside that root.  Nothing here
touches the file system beyond ``resolve``.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from .errors import BadRequest, Forbidden

#: Longest path and path component a caller may name (Linux's PATH_MAX and NAME_MAX).
MAX_PATH_BYTES = 4096
MAX_NAME_BYTES = 255


def clean_relative(path: str, *, what: str = "path", allow_empty: bool = False) -> PurePosixPath:
    """Validate a caller's relative path lexically; return it normalised (no ``.`` parts)."""
    encoded = path.encode("utf-8", "surrogatepass")
    if len(encoded) > MAX_PATH_BYTES:
        raise BadRequest(f"{what} is longer than {MAX_PATH_BYTES} bytes", code="invalid_path")
    if "\x00" in path:
        raise BadRequest(f"{what} {path!r} contains a NUL byte", code="invalid_path")
    if path.startswith(("/", "\\")) or (len(path) > 1 and path[1] == ":"):
        raise BadRequest(f"{what} {path!r} must be relative, not absolute", code="invalid_path")
    parts = [p for p in path.replace("\\", "/").split("/") if p not in ("", ".")]
    if ".." in parts:
        raise BadRequest(f"{what} {path!r} must not contain '..'", code="invalid_path")
    for part in parts:
        if len(part.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
            raise BadRequest(f"{what} has a name longer than {MAX_NAME_BYTES} bytes", code="invalid_path")
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
