"""Sessions: a persistent ``work/`` shared by the runs that name the same session.

Each session is ``<root>/sessions/<id>/`` holding ``work/`` and ``pins.json`` (the
artifact versions pinned by ``pin: true`` inputs).  A session expires after an idle
TTL; :meth:`SessionStore.sweep` deletes expired ones that no run is using.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import BadRequest
from .layout import remove_tree

SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_TOUCH = ".last_used"


class SessionStore:
    def __init__(self, root: Path, ttl_seconds: float) -> None:
        self.root = root.resolve() / "sessions"
        self.root.mkdir(parents=True, exist_ok=True)
        self.ttl = ttl_seconds
        self._lock = threading.Lock()
        self._active: Counter[str] = Counter()

    def path(self, session: str) -> Path:
        if not SESSION_ID.match(session):
            raise BadRequest(f"invalid session id {session!r}", code="invalid_session")
        return self.root / session

    @contextmanager
    def use(self, session: str) -> Iterator[Path]:
        """Hold a session for the duration of a run; yields its ``work/`` dir."""
        directory = self.path(session)
        with self._lock:
            self._active[session] += 1
            (directory / "work").mkdir(parents=True, exist_ok=True)
            self._touch(directory)
        try:
            yield directory / "work"
        finally:
            with self._lock:
                self._touch(directory)
                self._active[session] -= 1
                if not self._active[session]:
                    del self._active[session]

    def _touch(self, directory: Path) -> None:
        marker = directory / _TOUCH
        marker.touch()
        os.utime(marker)

    def sweep(self, now: float | None = None) -> list[str]:
        """Delete sessions idle for longer than the TTL and not in use; return their ids."""
        now = time.time() if now is None else now
        removed = []
        for entry in sorted(self.root.iterdir()):
            if not entry.is_dir():
                continue
            with self._lock:
                if self._active.get(entry.name):
                    continue
                try:
                    last = (entry / _TOUCH).stat().st_mtime
                except FileNotFoundError:
                    last = entry.stat().st_mtime
                if now - last <= self.ttl:
                    continue
                remove_tree(entry)
            removed.append(entry.name)
        return removed

    # -- artifact pins -----------------------------------------------------------------

    def pinned(self, session: str, artifact: str) -> int | None:
        return self._pins(session).get(artifact)

    def pin(self, session: str, artifact: str, version: int) -> int:
        """Record the first pinned version of ``artifact``; returns the one in force."""
        with self._lock:
            pins = self._pins(session)
            if artifact not in pins:
                pins[artifact] = version
                target = self.path(session) / "pins.json"
                tmp = target.with_suffix(".tmp")
                tmp.write_text(json.dumps(pins))
                os.replace(tmp, target)
            return pins[artifact]

    def _pins(self, session: str) -> dict[str, int]:
        try:
            return json.loads((self.path(session) / "pins.json").read_text())
        except (FileNotFoundError, ValueError):
            return {}
