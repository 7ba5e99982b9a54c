"""Removing a run's tree, whatever the run left there: links are removed, never
followed; read-only folders are made writable first; sub-folders are hoisted to the top
before they are emptied, so the removal is iterative with a bounded number of open
descriptors at any depth.  Parts that vanish meanwhile (another remover) are fine."""

from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path

from .fs import DIR_FLAGS, unlink_entry

#: Passes over a tree that is refilled while it is removed (concurrent removers) before giving up.
_REMOVE_PASSES = 1000
#: Name prefix of folders hoisted to the top of a tree while it is being removed.
_HOIST = ".rm-"


def remove_tree(path: Path) -> None:
    """Remove ``path`` and everything below it, whatever a run left there.

    Links are removed, never followed; read-only folders are made writable first;
    sub-folders are hoisted to the top of the tree before they are emptied, so the
    removal is iterative with a bounded number of open descriptors at any depth.  Parts
    that vanish meanwhile (another remover got there first) are fine.
    """
    try:
        parent = os.open(path.parent, DIR_FLAGS)
    except FileNotFoundError:
        return
    name = path.name
    try:
        for _ in range(_REMOVE_PASSES):
            try:
                st = os.stat(name, dir_fd=parent, follow_symlinks=False)
            except FileNotFoundError:
                return
            if not stat.S_ISDIR(st.st_mode):
                unlink_entry(parent, name)
                return
            try:
                top = os.open(name, DIR_FLAGS, dir_fd=parent)
            except FileNotFoundError:
                return
            try:
                _empty(top)
            finally:
                os.close(top)
            try:
                os.rmdir(name, dir_fd=parent)
                return
            except FileNotFoundError:
                return
            except OSError as exc:
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
                # Refilled meanwhile (a concurrent remover hoisted into it): another pass.
        raise OSError(errno.ENOTEMPTY, f"{path} kept refilling while being removed")
    finally:
        os.close(parent)


def empty_tree(path: Path) -> None:
    """Remove everything inside the folder ``path`` (which stays), as :func:`remove_tree` does."""
    top = os.open(path, DIR_FLAGS)
    try:
        _empty(top)
    finally:
        os.close(top)


def _empty(top: int) -> None:
    """Remove everything inside the folder ``top``; its sub-folders are first renamed
    to the top level (``.rm-*``), then each is emptied the same way and removed."""
    _make_writable(top)
    pending = _clear_level(top, top)
    while pending:
        name = pending.pop()
        try:
            fd = os.open(name, DIR_FLAGS, dir_fd=top)
        except FileNotFoundError:
            continue
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                unlink_entry(top, name)
                continue
            raise
        try:
            _make_writable(fd)
            pending += _clear_level(fd, top)
        finally:
            os.close(fd)
        try:
            os.rmdir(name, dir_fd=top)
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ENOTEMPTY, errno.EEXIST):
                raise


def _clear_level(fd: int, top: int) -> list[str]:
    """Unlink the non-folders in ``fd``; move its folders to ``top`` and return their names."""
    moved: list[str] = []
    try:
        entries = list(os.scandir(fd))
    except FileNotFoundError:
        return moved
    for entry in entries:
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
        except OSError:
            continue
        if not is_dir:
            try:
                unlink_entry(fd, entry.name)
                continue
            except IsADirectoryError:
                pass  # replaced by a folder since it was listed: hoist it
        if fd == top and entry.name.startswith(_HOIST):
            moved.append(entry.name)
            continue
        name = f"{_HOIST}{secrets.token_hex(8)}"
        _writable_child(fd, entry.name)
        try:
            os.rename(entry.name, name, src_dir_fd=fd, dst_dir_fd=top)
        except FileNotFoundError:
            continue
        except NotADirectoryError:
            unlink_entry(fd, entry.name)  # replaced by a file since it was listed
            continue
        moved.append(name)
    return moved


def _writable_child(dir_fd: int, name: str) -> None:
    """A service that is not root can only move a folder it may write: fix its mode
    through an ``O_PATH`` descriptor (never following a link)."""
    if os.geteuid() == 0:
        return
    try:
        fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return
    try:
        os.chmod(f"/proc/self/fd/{fd}", 0o700)
    except OSError:
        pass
    finally:
        os.close(fd)


def _make_writable(fd: int) -> None:
    try:
        st = os.fstat(fd)
        if st.st_mode & 0o700 != 0o700:
            os.fchmod(fd, (st.st_mode & 0o7777) | 0o700)
    except OSError:
        pass
