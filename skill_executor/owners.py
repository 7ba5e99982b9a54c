"""Who owns a container or a workspace, true across PID namespaces, containers and hosts.

Two locks, both ``flock``s, which the kernel releases when their holder dies (however
it dies: a zombie holds none), and which work across PID and mount namespaces as long
as the file is the same (a bind-mounted data dir included):

* :class:`Lease` -- every process that makes containers or workspaces under a
  workspace root holds a lease file ``<root>/leases/<instance>`` for its lifetime.
  Its owner token ``lease:<root id>:<instance>`` labels its containers and workspaces
  (the ``lease:`` prefix makes an older version, which parsed ``host:pid:start``, take
  it for another host's and leave it alone).  A
  token is judged only by someone who shares the root (the root id says so): a held
  lease is alive; a lease that can be taken, or is gone, is dead, and its leftovers
  may go.  A token of another root (another data dir, another host, a legacy token)
  is never judged here: such containers are left to their deadline.
* :class:`DataDirClaim` -- the one service instance of a data dir
  (``<data>/instance.lock``); a second one is refused before it touches a record.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import stat
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path

from .errors import Conflict, ExecutorError

LEASES = "leases"
PREFIX = "lease"
ROOT_ID = "root-id"
CLAIM_FILE = "instance.lock"


class LeaseState(Enum):
    MINE = "mine"  # this lease's own
    ALIVE = "alive"  # another live holder of this root
    DEAD = "dead"  # of this root, holder gone: its leftovers may be removed
    FOREIGN = "foreign"  # not of this root: not ours to judge


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return False
        raise


def _root_id(leases: Path, name: str = ROOT_ID) -> str:
    """The root's id, created once (first writer wins, atomically)."""
    path = leases / name
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    tmp = leases / f".{name}.{uuid.uuid4().hex}"
    tmp.write_text(uuid.uuid4().hex[:16])
    try:
        os.link(tmp, path)  # fails when another process was first
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    return path.read_text().strip()


def parse(token: str) -> tuple[str, str]:
    """(root id, instance) of a lease token; ("", "") for anything else."""
    prefix, _, rest = token.partition(":")
    root_id, _, instance = rest.partition(":")
    if (
        prefix != PREFIX
        or not root_id
        or not instance
        or "/" in instance
        or instance.startswith(".")
        or instance == ROOT_ID
    ):
        return "", ""
    return root_id, instance


class Lease:
    """This process's lease on a workspace root; see the module's docstring."""

    def __init__(self, root: Path, instance: str | None = None) -> None:
        self.dir = root / LEASES
        self.dir.mkdir(parents=True, exist_ok=True)
        self.root_id = _root_id(self.dir)
        self.instance = instance or uuid.uuid4().hex[:16]
        if (
            not self.instance.replace("-", "").isalnum()
            or len(self.instance) > 64
            or self.instance == ROOT_ID
            or self.instance.startswith("-")
        ):
            raise ExecutorError(f"invalid instance id {self.instance!r} (letters, digits and '-', at most 64)")
        self.token = f"{PREFIX}:{self.root_id}:{self.instance}"
        self.path = self.dir / self.instance
        # Locked before it is visible under its name: a lease is never seen unlocked while alive.
        self._fd: int | None = None
        tmp = self.dir / f".{self.instance}.{uuid.uuid4().hex}"
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, json.dumps(_holder()).encode())
        try:
            os.link(tmp, self.path)
        except FileExistsError:
            os.close(fd)
            fd = self._take_over(root)  # a fixed instance id whose last holder died
        finally:
            tmp.unlink()
        self._fd = fd

    def _take_over(self, root: Path) -> int:
        """The lease file of a dead holder of this instance id, locked for us."""
        for _ in range(3):
            fd = _open_lease(self.path)
            if fd is None:
                try:  # reclaimed meanwhile: publish ours again
                    fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
                except FileExistsError:
                    continue
            if not _try_lock(fd):
                os.close(fd)
                break  # held: its holder lives
            if _same_file(fd, self.path):
                os.ftruncate(fd, 0)
                os.pwrite(fd, json.dumps(_holder()).encode(), 0)
                return fd
            os.close(fd)  # unlinked by a reclaimer meanwhile: once more
        raise Conflict(
            f"instance id {self.instance!r} is in use by a live process under {root}", code="instance_in_use"
        )

    def judge(self, token: str) -> LeaseState:
        """What ``token`` (a container's or a workspace's owner) is to this lease."""
        if token == self.token and self._fd is not None:
            return LeaseState.MINE
        root_id, instance = parse(token)
        if root_id != self.root_id or not instance:
            return LeaseState.FOREIGN
        try:
            fd = _open_lease(self.dir / instance)
        except OSError:
            return LeaseState.ALIVE  # cannot tell: the safe answer
        if fd is None:
            return LeaseState.DEAD
        try:
            return LeaseState.DEAD if _try_lock(fd) else LeaseState.ALIVE
        except OSError:
            return LeaseState.ALIVE
        finally:
            os.close(fd)  # closing drops the probe's lock at once

    @contextmanager
    def reclaim(self, token: str) -> Iterator[bool]:
        """Hold a dead owner's lease while its leftovers are removed; True when this
        caller should remove them (nobody else is, and the owner is dead).  The lease
        file goes afterwards, unless the body failed (the next sweep retries)."""
        _, instance = parse(token)
        if self.judge(token) is not LeaseState.DEAD:
            yield False
            return
        path = self.dir / instance
        try:
            fd = _open_lease(path)
        except OSError:
            yield False
            return
        if fd is None:
            yield True  # already reclaimed by someone: what is left is ours to remove
            return
        try:
            if not _try_lock(fd):
                yield False  # another sweeper holds it right now
                return
            yield True
            if _same_file(fd, path):  # not taken over meanwhile by a new holder of that id
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
        finally:
            os.close(fd)

    def dead_leases(self) -> list[str]:
        """Tokens of this root's leases whose holders are gone."""
        tokens = []
        for entry in sorted(os.listdir(self.dir)):
            token = f"{PREFIX}:{self.root_id}:{entry}"
            if parse(token)[1] and token != self.token and self.judge(token) is LeaseState.DEAD:
                tokens.append(token)
        return tokens

    def release(self) -> None:
        """Give the lease up (at a clean close, after everything of it is gone)."""
        if self._fd is None:
            return
        try:
            if _same_file(self._fd, self.path):
                os.unlink(self.path)
        except FileNotFoundError:
            pass
        os.close(self._fd)
        self._fd = None


def _open_lease(path: Path) -> int | None:
    """A lease file opened for a lock probe; None when there is none.  Anything but a
    regular file (a link, a FIFO, a folder) raises OSError: not a lease."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a lease file", str(path))
    return fd


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def _holder() -> dict[str, object]:
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def data_dir_id(data_dir: Path) -> str:
    """The data dir's stable id (made once, first writer wins): which service instance a
    run record belongs to, so a start marks only its own predecessor's runs interrupted,
    never those of another instance sharing the database."""
    data_dir.mkdir(parents=True, exist_ok=True)
    return _root_id(data_dir, "instance-id")


class DataDirClaim:
    """The one service instance of a data dir, held until :meth:`release` (or death)."""

    def __init__(self, data_dir: Path) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        self.path = data_dir / CLAIM_FILE
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        if not _try_lock(fd):
            try:
                holder = json.loads(os.read(fd, 4096) or b"{}")
            except ValueError:
                holder = {}
            finally:
                os.close(fd)
            who = ", ".join(f"{k} {holder[k]}" for k in ("pid", "host", "since") if k in holder)
            raise Conflict(
                f"the data dir {data_dir} is in use by another skill-executor service"
                + (f" ({who})" if who else "")
                + "; stop that one, or give this one its own SKILL_EXECUTOR_DATA_DIR",
                code="data_dir_in_use",
            )
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(_holder()).encode(), 0)
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
