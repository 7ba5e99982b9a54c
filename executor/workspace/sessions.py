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
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..access import check_tenant
from ..errors import BadRequest, Conflict
from . import fs

SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")  # \Z: no "id\n"
_TOUCH = ".last_used"
_LOCK = ".lock"
#: How often a waiting run retries a session held by another process.
_POLL_SECONDS = 0.05


class SessionBusy(Conflict):
    code = "session_busy"


class SessionStore:
    def __init__(self, root: Path, ttl_seconds: float) -> None:
        self.root = root.resolve() / "sessions"
        self.root.mkdir(parents=True, exist_ok=True)
        self.ttl = ttl_seconds
        self._lock = threading.Lock()
        self._held: dict[Path, threading.Lock] = {}
        self._users: dict[Path, int] = {}

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
        with self._lock:
            lock = self._held.setdefault(directory, threading.Lock())
            self._users[directory] = self._users.get(directory, 0) + 1
        try:
            if not lock.acquire(timeout=max(0.0, wait)):
                raise self._busy(session, wait)
            try:
                directory.mkdir(parents=True, exist_ok=True)
                with self._flock(directory, deadline, session, wait):
                    (directory / "work").mkdir(exist_ok=True)
                    self._touch(directory)
                    try:
                        yield directory / "work"
                    finally:
                        self._touch(directory)
            finally:
                lock.release()
        finally:
            with self._lock:
                self._users[directory] -= 1
                if not self._users[directory]:
                    del self._users[directory]
                    del self._held[directory]

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
                    fs.remove_tree(entry)
                    continue
                if self._expire(entry, now):
                    removed.append(f"{tenant_dir.name}/{entry.name}")
        return removed

    def end(self, session: str, tenant: str) -> bool:
        """Delete a session now, whatever its age (not while a run holds it); False when it
        was not there or is in use."""
        entry = self.path(session, tenant)
        if not entry.is_dir() or entry.is_symlink():
            return False
        return self._expire(entry, math.inf)

    def _expire(self, entry: Path, now: float) -> bool:
        with self._lock:
            if entry in self._users:
                return False
            try:
                last = (entry / _TOUCH).stat().st_mtime
            except FileNotFoundError:
                last = entry.stat().st_mtime
            if now - last <= self.ttl:
                return False
            try:
                fd = os.open(entry / _LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            except OSError:
                return False
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return False  # another process runs it right now
                # Out of the way under the lock; removed (however large) outside it.
                doomed = entry.with_name(f".expired-{entry.name}-{time.monotonic_ns()}")
                os.rename(entry, doomed)
            finally:
                os.close(fd)
        fs.remove_tree(doomed)
        return True

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
