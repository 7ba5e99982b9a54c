"""The one way the service touches a tree that a run can write.

A run controls the contents of its workspace's ``work/``, ``out/`` and ``run/`` (and
of its session's ``work/``): it can plant symbolic links, swap folders for links,
make FIFOs, device-less special files, sparse giants and absurdly deep folders.  The
service runs as root, so any host-side operation that resolves a path inside such a
tree by name -- ``open(path)``, ``os.chown(path)``, ``os.walk`` -- can be turned into
a root action on the host.  This module is the only code that operates inside those
trees, and it never resolves a path by name:

* Every operation starts from a directory file descriptor of a folder the service
  made itself (:class:`Tree`) and walks one component at a time with ``openat``,
  ``O_NOFOLLOW`` and ``O_DIRECTORY``: a link anywhere on the way fails the operation
  (``path_escape``) instead of being followed, and a component swapped after it was
  opened changes nothing, because the next step is relative to the descriptor.
* Types are checked on the opened descriptor (``fstat``): only regular files are
  read or written, and they are opened ``O_NONBLOCK`` so a FIFO can never block.
* Ownership and modes are changed with ``fchown``/``fchmod`` on descriptors the
  service opened itself, never by path.  A file is replaced by unlink + ``O_EXCL``
  create, never truncated in place (it might be a hard link to something else).
* Walks are iterative and hold one descriptor per level; removal (:mod:`.remove`)
  needs no recursion either.

Why the host side at all, rather than letting the sandbox stage and collect (a tar
stream through the launcher or the engine's archive API)?  Because the host must
still measure disk use during the run, remove the tree afterwards and serve the
local runtime, so it needs this discipline anyway; and because the service never
touches a run-writable tree while a process of that run is alive (staging happens
before the run starts, collection after its container is dead, sessions are
serialised), so descriptor-relative operations leave no race to win.  A remote
engine would ship the same operations over the archive API.

The module is longer than the others on purpose: it is the single place where the
service operates inside run-writable trees, so every such operation stays together
where it can be reviewed at once.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from ..errors import BadRequest, Conflict, ExecutorError, Forbidden, NotFound, TooLarge

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 1024 * 1024
#: Deepest folder level a walk descends to (one open descriptor per level).
MAX_DEPTH = 1024
#: Most entries a disk-use measurement visits; a run with more is over its disk cap
#: (it bounds what one measurement costs the service).
MAX_ENTRIES = 200_000

Owner = tuple[int, int] | None


class PathEscape(Forbidden):
    code = "path_escape"


def _refusal(exc: OSError, what: str) -> ExecutorError:
    """Map an ``OSError`` of an operation on ``what`` to the refusal a caller sees."""
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EXDEV):
        return PathEscape(f"{what} goes through a symbolic link or a non-folder")
    if exc.errno == errno.ENAMETOOLONG:
        return BadRequest(f"{what} has a name that is too long", code="invalid_path")
    if exc.errno == errno.ENOENT:
        return NotFound(f"{what} does not exist", code="input_not_found")
    if exc.errno == errno.EEXIST:
        return Conflict(f"{what} exists", code="target_conflict")
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        # The run's workspace or its session's work/ is full: what the request stages does not fit.
        return TooLarge(f"{what}: no space left (the session's or the run's disk cap)", code="disk_full")
    return ExecutorError(f"{what}: {exc.strerror}", code="workspace_error", status=500)


@dataclass(frozen=True, slots=True)
class Entry:
    """One walked entry: its path relative to the tree and its ``lstat``."""

    path: PurePosixPath
    stat: os.stat_result
    depth: int

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.stat.st_mode)


class Tree:
    """A folder the service made, opened once; everything below it is run-controlled.

    ``path`` itself must be trusted (made by the service, not replaceable by a run).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, DIR_FLAGS)
        #: Set by a walk that could not read or enter a folder (other than one removed meanwhile).
        self.incomplete = False

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Tree:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- descending --------------------------------------------------------------------

    def _open_dir(self, rel: PurePosixPath, *, create: bool, owner: Owner, what: str) -> int:
        """A descriptor of folder ``rel``; with ``create``, missing folders are made
        (mode 0755, owned by ``owner``).  Links on the way are refused."""
        fd = os.dup(self.fd)
        try:
            for part in _parts(rel):
                try:
                    child = os.open(part, DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    try:
                        os.mkdir(part, 0o755, dir_fd=fd)
                    except FileExistsError:
                        pass  # made meanwhile: opened (and checked) below
                    child = os.open(part, DIR_FLAGS, dir_fd=fd)
                    if owner is not None:
                        os.fchown(child, *owner)
                os.close(fd)
                fd = child
            return fd
        except OSError as exc:
            os.close(fd)
            raise _refusal(exc, what) from None

    def lstat(self, rel: PurePosixPath, *, what: str = "path") -> os.stat_result | None:
        """``lstat`` of ``rel`` (None when missing), reached without following links."""
        if not _parts(rel):
            return os.fstat(self.fd)
        try:
            parent = self._open_dir(rel.parent, create=False, owner=None, what=what)
        except NotFound:
            return None
        try:
            return os.stat(rel.name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _refusal(exc, what) from None
        finally:
            os.close(parent)

    def is_dir(self, rel: PurePosixPath, *, what: str = "path") -> bool:
        st = self.lstat(rel, what=what)
        return st is not None and stat.S_ISDIR(st.st_mode)

    # -- writing -----------------------------------------------------------------------

    def make_dirs(self, rel: PurePosixPath, *, owner: Owner, what: str = "folder") -> None:
        """``mkdir -p`` below the tree; every folder made belongs to ``owner``."""
        os.close(self._open_dir(rel, create=True, owner=owner, what=what))

    def write(
        self,
        rel: PurePosixPath,
        source: BinaryIO | bytes,
        *,
        owner: Owner,
        mode: int = 0o644,
        what: str = "file",
        size: int | None = None,
    ) -> int:
        """Create ``rel`` afresh with the content of ``source``; return the bytes written.
        ``size``: the file's size, past what is written (a hole: a file of which only a
        prefix was copied keeps its true size).

        Missing parent folders are made (owned by ``owner``).  An existing regular file
        is replaced (unlinked, then created exclusively); an existing link is refused,
        an existing folder is a conflict.  The new file belongs to ``owner`` unless it is
        read-only (``mode`` without write bits), which stays the service's.
        """
        if not _parts(rel):
            raise BadRequest(f"{what} names the folder itself", code="invalid_path")
        parent = self._open_dir(rel.parent, create=True, owner=owner, what=what)
        try:
            name = rel.name
            try:
                existing = os.stat(name, dir_fd=parent, follow_symlinks=False)
            except FileNotFoundError:
                existing = None
            if existing is not None:
                if stat.S_ISLNK(existing.st_mode):
                    raise PathEscape(f"{what} is a symbolic link")
                if stat.S_ISDIR(existing.st_mode):
                    raise Conflict(f"{what} exists and is a folder", code="target_conflict")
                os.unlink(name, dir_fd=parent)
            fd = os.open(name, _CREATE_FLAGS, 0o600, dir_fd=parent)
            written = 0
            try:
                if isinstance(source, bytes | bytearray | memoryview):
                    written = _write_all(fd, memoryview(source))
                else:
                    while chunk := source.read(_CHUNK):
                        written += _write_all(fd, memoryview(chunk))
                if size is not None and size > written:
                    os.ftruncate(fd, size)
                if owner is not None and mode & 0o222:
                    os.fchown(fd, *owner)
                os.fchmod(fd, mode)
            except BaseException:
                unlink_entry(parent, name)  # never half a file (a full disk cap, say): none at all
                raise
            finally:
                os.close(fd)
            return written
        except OSError as exc:
            raise _refusal(exc, what) from None
        finally:
            os.close(parent)

    def make_link(self, rel: PurePosixPath, target: str, *, owner: Owner, what: str = "link") -> None:
        """Create the symbolic link ``rel`` -> ``target`` (the target is text: never
        resolved here); missing parents are made, an existing entry is a conflict."""
        if not _parts(rel):
            raise BadRequest(f"{what} names the folder itself", code="invalid_path")
        parent = self._open_dir(rel.parent, create=True, owner=owner, what=what)
        try:
            os.symlink(target, rel.name, dir_fd=parent)
            if owner is not None:
                os.chown(rel.name, *owner, dir_fd=parent, follow_symlinks=False)
        except FileExistsError:
            raise Conflict(f"{what} exists", code="target_conflict") from None
        except OSError as exc:
            raise _refusal(exc, what) from None
        finally:
            os.close(parent)

    def set_mode(self, rel: PurePosixPath, mode: int, *, what: str = "folder") -> None:
        """``chmod`` folder ``rel`` (through its descriptor; a link on the way is refused)."""
        fd = self._open_dir(rel, create=False, owner=None, what=what)
        try:
            os.fchmod(fd, mode)
        finally:
            os.close(fd)

    def read_link(self, rel: PurePosixPath, *, what: str = "link") -> str:
        """The target text of the symbolic link ``rel`` (not followed)."""
        parent = self._open_dir(rel.parent, create=False, owner=None, what=what)
        try:
            return os.readlink(rel.name, dir_fd=parent)
        except OSError as exc:
            raise _refusal(exc, what) from None
        finally:
            os.close(parent)

    def make_read_only(self, rel: PurePosixPath, *, what: str = "folder") -> None:
        """Folders at and below ``rel``: mode 0555, owned by the service (not the run)."""
        for entry, fd in self._walk_fds(rel, what=what):
            if entry.is_dir and fd >= 0:
                os.fchown(fd, os.getuid(), os.getgid())
                os.fchmod(fd, 0o555)

    # -- reading -----------------------------------------------------------------------

    def open_file(self, rel: PurePosixPath, *, what: str = "file") -> tuple[int, os.stat_result]:
        """A read descriptor of regular file ``rel`` and its ``fstat``; never blocks,
        never follows a link; anything but a regular file is refused."""
        if not _parts(rel):
            raise BadRequest(f"{what} names the folder itself", code="invalid_path")
        parent = self._open_dir(rel.parent, create=False, owner=None, what=what)
        try:
            fd = os.open(rel.name, _READ_FLAGS, dir_fd=parent)
        except OSError as exc:
            raise _refusal(exc, what) from None
        finally:
            os.close(parent)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise BadRequest(f"{what} is not a regular file", code="invalid_input")
        os.set_blocking(fd, True)
        return fd, st

    def walk(self, rel: PurePosixPath = PurePosixPath("."), *, what: str = "folder") -> Generator[Entry, None, None]:
        """Every entry below ``rel`` (not ``rel`` itself), depth first, in name order;
        links and special files are yielded, never followed.  Folders deeper than
        :data:`MAX_DEPTH` are yielded but not entered."""
        for entry, _ in self._walk_fds(rel, what=what, include_root=False):
            yield entry

    def _walk_fds(self, rel: PurePosixPath, *, what: str, include_root: bool = True) -> Iterator[tuple[Entry, int]]:
        """Like :meth:`walk`, with a descriptor of each folder (valid during the yield)."""
        start = self._open_dir(rel, create=False, owner=None, what=what)
        base = PurePosixPath(*_parts(rel)) if _parts(rel) else PurePosixPath(".")
        stack: list[tuple[int, PurePosixPath, Iterator[os.DirEntry[str]] | None]] = []
        try:
            if include_root:
                yield Entry(base, os.fstat(start), 0), start
            stack.append((start, base, None))
            start = -1
            while stack:
                fd, path, entries = stack[-1]
                if entries is None:
                    try:
                        listing = sorted(os.scandir(fd), key=lambda e: e.name)
                    except OSError:
                        self.incomplete = True
                        listing = []
                    entries = iter(listing)
                    stack[-1] = (fd, path, entries)
                entry = next(entries, None)
                if entry is None:
                    os.close(fd)
                    stack.pop()
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                except OSError:
                    self.incomplete = True
                    continue
                child_path = path / entry.name if str(path) != "." else PurePosixPath(entry.name)
                item = Entry(child_path, st, len(stack))
                if not stat.S_ISDIR(st.st_mode) or len(stack) > MAX_DEPTH:
                    yield item, -1
                    continue
                try:
                    child = os.open(entry.name, DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno not in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
                        self.incomplete = True  # unreadable (EACCES, EMFILE): not measured
                    yield item, -1  # replaced meanwhile, or unreadable: not entered
                    continue
                yield item, child
                stack.append((child, child_path, None))
        finally:
            if start >= 0:
                os.close(start)
            for fd, _, _ in stack:
                os.close(fd)

    def usage(self) -> tuple[int, bool]:
        """(bytes allocated below the tree, whether it could not be measured whole:
        folders deeper than :data:`MAX_DEPTH`, more than :data:`MAX_ENTRIES` entries, or a
        folder that could not be read).

        Hard links count once; nothing is followed.  Measured at least twice per run
        (before and after its command), so this is :meth:`walk` without its paths and
        its ordering: one descriptor per level, as there.
        """
        start = self._open_dir(PurePosixPath("."), create=False, owner=None, what="folder")
        seen: set[tuple[int, int]] = set()
        total = count = 0
        stack: list[tuple[int, Iterator[os.DirEntry[str]] | None]] = [(start, None)]
        try:
            while stack:
                fd, entries = stack[-1]
                if entries is None:
                    try:
                        with os.scandir(fd) as listing:
                            entries = iter(list(listing))
                    except OSError:
                        self.incomplete = True
                        entries = iter(())
                    stack[-1] = (fd, entries)
                entry = next(entries, None)
                if entry is None:
                    stack.pop()
                    os.close(fd)
                    continue
                count += 1
                if count > MAX_ENTRIES:
                    return total, True
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                except OSError:
                    self.incomplete = True
                    continue
                key = (st.st_dev, st.st_ino)
                if key not in seen:
                    seen.add(key)
                    total += st.st_blocks * 512
                if not stat.S_ISDIR(st.st_mode):
                    continue
                if len(stack) > MAX_DEPTH:
                    return total, True
                try:
                    child = os.open(entry.name, DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno not in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
                        self.incomplete = True  # unreadable (EACCES, EMFILE): not measured
                    continue
                stack.append((child, None))
        finally:
            for fd, _ in stack:
                os.close(fd)
        return total, self.incomplete


def unlink_entry(dir_fd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass


def _parts(rel: PurePosixPath) -> tuple[str, ...]:
    parts = tuple(p for p in rel.parts if p not in ("", "."))
    for part in parts:
        if part == ".." or "/" in part or "\x00" in part:
            raise BadRequest(f"invalid path component {part!r}", code="invalid_path")
    return parts


def _write_all(fd: int, data: memoryview) -> int:
    total = 0
    while total < len(data):
        total += os.write(fd, data[total:])
    return total
