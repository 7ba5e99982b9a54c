"""File access below the server's root: every path is opened component by component under a
descriptor of the root with ``O_NOFOLLOW``, so no symbolic link is ever followed and nothing the
command swaps in between a check and a use (a link for a directory) leads out of the root.

Paths arrive as sandboxd's SDK sends them: the whole relative path percent-encoded as one
segment (``/`` as ``%2F``, ``..`` as ``%2E%2E``).  They are decoded exactly once; a NUL, a
``..`` component or a link on the way is refused (:class:`PathRefused`), ``.`` and empty
components are dropped, and an absolute path is taken below the root (as sandboxd does).
"""

from __future__ import annotations

import errno
import os
import stat
import urllib.parse
from datetime import UTC, datetime

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class PathRefused(Exception):
    """A path the server will not resolve: it would leave the root or pass through a link."""


class TooManyEntries(Exception):
    """A directory listing larger than the server answers."""


def split(raw: str, root: str = "") -> list[str]:
    """The components of a request path (still percent-encoded), checked; ``[]`` is the root."""
    text = os.fsdecode(urllib.parse.unquote_to_bytes(raw))
    if "\x00" in text:
        raise PathRefused("NUL in path")
    if root and (text == root or text.startswith(root + "/")):
        text = text[len(root) :]  # sandboxd accepts the root's own absolute path too
    parts: list[str] = []
    for part in text.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            raise PathRefused("'..' in path")
        parts.append(part)
    return parts


class PodRoot:
    """The directory the files API serves (``--root-dir``, default ``/workspace``)."""

    def __init__(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)
        self.path = os.path.realpath(path)
        self.fd = os.open(self.path, DIR_FLAGS)

    def open_dir(self, parts: list[str], *, create: bool = False) -> int:
        """A descriptor of the directory ``parts`` (missing ones made 0755 when ``create``)."""
        fd = os.dup(self.fd)
        try:
            for part in parts:
                nxt = _open_child_dir(fd, part, create)
                os.close(fd)
                fd = nxt
            return fd
        except BaseException:
            os.close(fd)
            raise


def _open_child_dir(fd: int, name: str, create: bool) -> int:
    try:
        return _open_checked(fd, name, DIR_FLAGS)
    except FileNotFoundError:
        if not create:
            raise
    try:
        os.mkdir(name, 0o755, dir_fd=fd)
    except FileExistsError:
        pass  # made meanwhile: opened (and checked) below like any other
    return _open_checked(fd, name, DIR_FLAGS)


def _open_checked(dir_fd: int, name: str, flags: int) -> int:
    """``openat(dir_fd, name, flags | O_NOFOLLOW)``, then proof that what was opened is the
    entry itself, not a link's target: gVisor follows a final link despite ``O_NOFOLLOW`` when
    ``O_DIRECTORY`` is given, so the opened inode must be the one ``lstat`` finds there."""
    try:
        fd = os.open(name, flags | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and is_link(dir_fd, name):
            raise PathRefused("a link in the path") from None
        raise
    try:
        opened = os.fstat(fd)
        entry = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISLNK(entry.st_mode) or (opened.st_dev, opened.st_ino) != (entry.st_dev, entry.st_ino):
            raise PathRefused("a link in the path")
    except BaseException:
        os.close(fd)
        raise
    return fd


def is_link(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def open_file(dir_fd: int, name: str) -> int:
    """A read descriptor of ``name`` (a link: refused; a FIFO: opened without blocking)."""
    return _open_checked(dir_fd, name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)


def listing(fd: int, limit: int) -> list[dict[str, object]]:
    """sandboxd's listing entries, sorted by name: files and directories only (links, FIFOs,
    sockets are left out; sandboxd lists links resolved inside the root, this server never
    follows one)."""
    entries: list[dict[str, object]] = []
    with os.scandir(fd) as found:
        for entry in found:
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(st.st_mode):
                kind = "directory"
            elif stat.S_ISREG(st.st_mode):
                kind = "file"
            else:
                continue
            if len(entries) >= limit:
                raise TooManyEntries(f"more than {limit} entries")
            entries.append(
                {
                    "name": entry.name,
                    "size": st.st_size,
                    "type": kind,
                    "modified_at": datetime.fromtimestamp(int(st.st_mtime), UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "mode": f"{stat.S_IMODE(st.st_mode) & 0o777:04o}",
                }
            )
    entries.sort(key=lambda e: str(e["name"]))
    return entries


def remove(parent: int, name: str) -> None:
    """Remove ``name`` (a whole tree, iteratively: no depth limit) without following links."""
    st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=parent)
        return
    fds = [_open_checked(parent, name, DIR_FLAGS)]
    names = [name]
    try:
        while fds:
            fd, deeper = fds[-1], None
            with os.scandir(fd) as found:
                for entry in found:
                    if entry.is_dir(follow_symlinks=False):
                        deeper = entry.name
                        break
                    os.unlink(entry.name, dir_fd=fd)
            if deeper is not None:
                fds.append(_open_checked(fd, deeper, DIR_FLAGS))
                names.append(deeper)
                continue
            os.close(fds.pop())
            os.rmdir(names.pop(), dir_fd=fds[-1] if fds else parent)
    finally:
        for fd in fds:
            os.close(fd)
