"""Sessions: a persistent ``work/`` shared by the runs that name the same session.

A session belongs to the tenant (API key) whose run created it: its folder is
``<root>/sessions/<tenant>/<id>/`` holding ``work/``, ``pins.json`` (the artifact
versions pinned by ``pin: true`` inputs) and a lock file.  The same id used by two
keys names two unrelated sessions.

Runs of one session never overlap: :meth:`SessionStore.use` holds the session
exclusively (a thread lock within this process and an ``flock`` across processes
sharing the data folder).  A second run waits for the first to finish, at most for
its own timeout, and is then refused with ``session_busy`` (409).  Nothing on the
host ever reads or stages into a session's ``work/`` while a run of it executes.

A session expires after an idle TTL; :meth:`SessionStore.sweep` deletes expired
sessions that no run is holding.

Under the hard disk cap (``volume_bytes``) a session's ``work/`` is a volume of its own
(:mod:`.sessionvolume`; the image ``work.img`` beside it, in the session's folder, which no run
reaches) that holds at most ``volume_bytes``: mounted while a run holds the session, and
unmounted when it lets go.  A session made under one cap is refused under the other
(``session_disk_cap_mismatch``): its files are where the other cap cannot see them.
"""

from __future__ import annotations

import fcntl
import json
import logging
import math
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..access import check_tenant
from ..errors import BadRequest, Busy, Conflict, ExecutorError
from . import volumes
from .fs import Owner
from .remove import empty_tree, remove_tree
from .sessionvolume import attach_volume, release_stale_mounts
from .snapshots import SessionSnapshots

log = logging.getLogger(__name__)

SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")  # \Z: no "id\n"
_TOUCH = ".last_used"
_LOCK = ".lock"
#: How often a waiting run retries a session held by another process.
_POLL_SECONDS = 0.05


class SessionBusy(Conflict):
    code = "session_busy"


class SessionLimit(Busy):
    code = "session_limit"


class SessionStore:
    def __init__(
        self,
        root: Path,
        ttl_seconds: float,
        *,
        volume_bytes: int | None = None,
        per_tenant: int | None = None,
        snapshots: SessionSnapshots | None = None,
        owner: Owner = None,
    ) -> None:
        self.root = root.resolve() / "sessions"
        self.root.mkdir(parents=True, exist_ok=True)
        self.ttl = ttl_seconds
        self.volume_bytes = volume_bytes
        #: The most sessions one tenant may keep at once (None: no bound).
        self.per_tenant = per_tenant
        #: Where sessions' work/ is kept between workers (None: only on this machine's disk).
        self.snapshots = snapshots
        #: Who owns what a restore writes into work/ (the runs' user).
        self.owner = owner
        self._lock = threading.Lock()
        self._held: dict[Path, threading.Lock] = {}
        self._users: dict[Path, int] = {}
        #: Sessions whose processes hold their work/ (:meth:`hold`): mounted, never expired.
        self._hosted: dict[Path, int] = {}
        #: Called with (session, tenant) when a session is ended (its processes end first).
        self.on_end: list[Callable[[str, str], None]] = []
        #: Called with (session, tenant) after an idle session expired (:meth:`sweep`).
        self.on_expired: list[Callable[[str, str], None]] = []
        #: What a run of a session should be told of its work/ (a restore from an older snapshot).
        self._notes: dict[Path, list[str]] = {}
        #: Session volumes (a mount and a loop device each) a crashed process left, released at start.
        self.released_volumes = 0
        self.release_mounts()

    def path(self, session: str, tenant: str) -> Path:
        if not SESSION_ID.match(session):
            raise BadRequest(f"invalid session id {session!r}", code="invalid_session")
        return self.root / check_tenant(tenant) / session

    @contextmanager
    def use(self, session: str, tenant: str, *, wait: float) -> Iterator[Path]:
        """Hold a session exclusively for a run; yields its ``work/`` dir.

        Waits up to ``wait`` seconds for a run of the same session to finish, then
        raises :class:`SessionBusy`.
        """
        directory = self.path(session, tenant)
        deadline = time.monotonic() + max(0.0, wait)
        expired: list[Path] = []
        with self._lock:
            made = self._admit(directory, session, expired)
            lock = self._held.setdefault(directory, threading.Lock())
            self._users[directory] = self._users.get(directory, 0) + 1
        try:
            for doomed in expired:  # outside the store's lock (a sweep removes any left)
                remove_tree(doomed)
            if not lock.acquire(timeout=max(0.0, wait)):
                raise self._busy(session, wait)
            try:
                directory.mkdir(parents=True, exist_ok=True)
                with self._flock(directory, deadline, session, wait):
                    work = directory / "work"
                    try:
                        work.mkdir(exist_ok=True)
                        self._attach(directory, session)
                        if self.snapshots is not None:
                            self._catch_up(directory, work, session, tenant, made)
                        self._touch(directory)
                    except BaseException:
                        if made:  # a session that never started keeps no place
                            self._discard(directory)
                        raise
                    try:
                        yield work
                    finally:
                        self._touch(directory)
                        if directory not in self._hosted:
                            volumes.unmount(work)
            finally:
                lock.release()
        finally:
            with self._lock:
                self._users[directory] -= 1
                if not self._users[directory]:
                    del self._users[directory]
                    del self._held[directory]

    def hold(self, session: str, tenant: str, *, wait: float) -> Path:
        """Keep a session's ``work/`` for its processes until :meth:`release`: made (and
        under the hard cap mounted) as for a run, then left so, and never expired, while
        runs of the session come and go.  Its ``work/``."""
        with self.use(session, tenant, wait=wait) as work, self._lock:
            self._hosted[work.parent] = self._hosted.get(work.parent, 0) + 1
        return work

    def release(self, session: str, tenant: str) -> None:
        """Undo one :meth:`hold`; the last one unmounts the volume (unless a run holds it)."""
        directory = self.path(session, tenant)
        with self._lock:
            left = self._hosted.get(directory, 0) - 1
            if left > 0:
                self._hosted[directory] = left
                return
            self._hosted.pop(directory, None)
            if directory in self._users:
                return  # the run unmounts it as it lets go
            volumes.unmount(directory / "work")
        self._touch(directory)

    def touch(self, session: str, tenant: str) -> None:
        """Mark a session used now (its processes' activity keeps it from expiring)."""
        directory = self.path(session, tenant)
        if directory.is_dir():
            self._touch(directory)

    def _admit(self, directory: Path, session: str, expired: list[Path]) -> bool:
        """A new session of a tenant that keeps ``per_tenant`` already is refused (429
        ``session_limit``): each keeps up to ``session_disk_bytes`` for the TTL.  The
        tenant's sessions idle past the TTL do not count: at the limit they are set aside
        first (appended to ``expired``, for the caller to remove outside the lock), not left
        for the next sweep.  Called under the store's lock, and the new session's folder
        is made here, so two new sessions at once cannot both take the last place.  True
        when the folder is new (made here): :meth:`use` removes it again if the session
        does not start."""
        if directory.is_dir():
            return False
        if self.per_tenant is None:
            directory.mkdir(parents=True, exist_ok=True)
            return True
        kept = self._sessions(directory.parent)
        if len(kept) >= self.per_tenant:
            now = time.time()
            for entry in kept:
                doomed = self._set_aside(entry, now)
                if doomed is not None:
                    expired.append(doomed)
            kept = self._sessions(directory.parent)
        if len(kept) >= self.per_tenant:
            raise SessionLimit(
                f"cannot start session {session!r}: this tenant keeps {len(kept)} sessions, the most allowed "
                f"(SKILL_EXECUTOR_SESSIONS_PER_TENANT); reuse one, or wait for idle ones to expire",
                details={"sessions": len(kept), "limit": self.per_tenant},
            )
        directory.mkdir(parents=True, exist_ok=True)
        return True

    @staticmethod
    def _sessions(tenant_dir: Path) -> list[Path]:
        """The tenant's session folders (not those set aside to be removed)."""
        try:
            with os.scandir(tenant_dir) as entries:
                return [
                    Path(entry.path)
                    for entry in entries
                    if entry.is_dir(follow_symlinks=False) and SESSION_ID.match(entry.name)
                ]
        except FileNotFoundError:
            return []

    def _discard(self, directory: Path) -> None:
        """Remove a session folder :meth:`_admit` made for a start that failed (called
        holding its flock), unless another run in this process is waiting for it."""
        with self._lock:
            if self._users.get(directory) != 1:
                return
            volumes.unmount(directory / "work")
            doomed = directory.with_name(f".expired-{directory.name}-{time.monotonic_ns()}")
            os.rename(directory, doomed)
        remove_tree(doomed)

    @contextmanager
    def _flock(self, directory: Path, deadline: float, session: str, wait: float) -> Iterator[None]:
        fd = os.open(directory / _LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise self._busy(session, wait) from None
                    time.sleep(_POLL_SECONDS)
            yield
        finally:
            os.close(fd)  # releases the flock

    def _attach(self, directory: Path, session: str) -> None:
        """Under the hard cap, mount the session's volume on its ``work/`` (made on first
        use); refuse a session made under the other cap."""
        if directory in self._hosted:
            return  # its processes keep it as it is (mounted under the hard cap)
        attach_volume(directory, session, self.volume_bytes)

    def release_mounts(self) -> int:
        """Unmount session volumes left mounted by a process that died holding them (their
        session's lock is free); those of live holders stay.  How many it unmounted."""
        released = release_stale_mounts(self.root, _LOCK)
        if released:
            log.warning("start-up: unmounted %d session volume(s) a crashed process left mounted", released)
        self.released_volumes = released
        return released

    @staticmethod
    def _busy(session: str, wait: float) -> SessionBusy:
        return SessionBusy(
            f"session {session!r} is busy: another run of it did not finish within {wait:g}s",
            details={"session": session},
        )

    def _touch(self, directory: Path) -> None:
        marker = directory / _TOUCH
        marker.touch()
        os.utime(marker)

    def sweep(self, now: float | None = None) -> list[str]:
        """Delete sessions idle for longer than the TTL and not in use; return ``tenant/id``s."""
        now = time.time() if now is None else now
        removed = []
        for tenant_dir in sorted(self.root.iterdir()):
            if not tenant_dir.is_dir() or tenant_dir.is_symlink():
                continue
            for entry in sorted(tenant_dir.iterdir()):
                if not entry.is_dir() or entry.is_symlink():
                    continue
                if entry.name.startswith(".expired-"):  # left by a sweep that crashed
                    volumes.unmount(entry / "work")
                    remove_tree(entry)
                    continue
                if self._expire(entry, now):
                    removed.append(f"{tenant_dir.name}/{entry.name}")
                    for hook in self.on_expired:
                        try:
                            hook(entry.name, tenant_dir.name)
                        except Exception:  # the sweep goes on
                            log.exception("session %s: a hook of its expiry failed", entry.name)
        return removed

    def _catch_up(self, directory: Path, work: Path, session: str, tenant: str, made: bool) -> None:
        """Make ``work/`` the session's newest snapshot when this machine's copy is not it
        (new here, or left behind while another worker ran the session)."""
        assert self.snapshots is not None
        latest = self.snapshots.latest(check_tenant(tenant), session)
        if latest is None or (not made and self.snapshots.held(directory) == latest):
            return
        if not made:
            empty_tree(work)
        self.snapshots.restore(check_tenant(tenant), session, work, self.owner, sha=latest)
        why = self.snapshots.unkept(check_tenant(tenant), session)
        if why is not None:
            log.warning("session %s: restored from a snapshot older than its last run: %s", session, why)
            note = (
                "the session's work/ was restored on this worker from an older snapshot: the files of its "
                f"last run(s) on the worker it left could not be kept ({why})"
            )
            with self._lock:
                self._notes.setdefault(directory, []).append(note)

    def notes(self, work: Path) -> list[str]:
        """What the run holding ``work`` should be told of it (once)."""
        with self._lock:
            return self._notes.pop(work.parent, [])

    def keep(self, session: str, tenant: str, work: Path) -> str | None:
        """Snapshot the session's ``work/`` (held by the caller's :meth:`use`) when sessions
        are kept in the object store; a warning for the run's result when that failed."""
        if self.snapshots is None:
            return None
        try:
            self.snapshots.take(check_tenant(tenant), session, work, work.parent)
        except ExecutorError as exc:
            log.error("session %s: snapshot failed: %s", session, exc.message)
            return f"the session's work/ could not be kept for other workers ({exc.code}): {exc.message}"
        except Exception as exc:  # never masks the run's own outcome: reported, not raised
            log.exception("session %s: snapshot failed", session)
            return f"the session's work/ could not be kept for other workers: {exc}"
        return None

    def end(self, session: str, tenant: str) -> bool:
        """Delete a session now, whatever its age (not while a run holds it); False when it
        was not there or is in use."""
        entry = self.path(session, tenant)
        for hook in self.on_end:
            hook(session, tenant)
        if self.snapshots is not None:
            self.snapshots.forget(check_tenant(tenant), session)
        if not entry.is_dir() or entry.is_symlink():
            return False
        return self._expire(entry, math.inf)

    def _expire(self, entry: Path, now: float) -> bool:
        with self._lock:
            doomed = self._set_aside(entry, now)
        if doomed is None:
            return False
        remove_tree(doomed)
        return True

    def _set_aside(self, entry: Path, now: float) -> Path | None:
        """Under the store's lock: move ``entry`` out of the way (to be removed, however
        large, outside the lock) if it is idle past the TTL and no run holds it; where to."""
        if entry in self._users or entry in self._hosted:
            return None
        try:
            try:
                last = (entry / _TOUCH).stat().st_mtime
            except FileNotFoundError:
                last = entry.stat().st_mtime
        except FileNotFoundError:
            return None  # set aside by another process sharing the folder
        if now - last <= self.ttl:
            return None
        try:
            fd = os.open(entry / _LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError:
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return None  # another process runs it right now
            volumes.unmount(entry / "work")  # left by a process that died holding it
            doomed = entry.with_name(f".expired-{entry.name}-{time.monotonic_ns()}")
            try:
                os.rename(entry, doomed)
            except FileNotFoundError:
                return None  # set aside by another process between the open and the flock
            return doomed
        finally:
            os.close(fd)

    # -- artifact pins -----------------------------------------------------------------

    def pinned(self, session: str, tenant: str, artifact: str) -> int | None:
        return self._pins(session, tenant).get(artifact)

    def pin(self, session: str, tenant: str, artifact: str, version: int) -> int:
        """Record the first pinned version of ``artifact``; returns the one in force."""
        with self._lock:
            pins = self._pins(session, tenant)
            if artifact not in pins:
                pins[artifact] = version
                target = self.path(session, tenant) / "pins.json"
                tmp = target.with_suffix(".tmp")
                tmp.write_text(json.dumps(pins))
                os.replace(tmp, target)
            return pins[artifact]

    def _pins(self, session: str, tenant: str) -> dict[str, int]:
        try:
            pins = json.loads((self.path(session, tenant) / "pins.json").read_text())
        except (FileNotFoundError, ValueError):
            return {}
        return pins if isinstance(pins, dict) else {}
