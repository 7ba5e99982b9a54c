"""A warm pool of started, single-use run containers.

Each pool container is started ahead of time with the full hardening of a per-run
container and its *own* fresh, empty workspace mounted at ``/workspace``; its main
process is the launcher (``images/runner/launcher.c``), waiting on a Unix socket in
that workspace.  A run takes one container (or none, when the pool is empty: the
caller then starts a container of its own), uses it once, and the container is
destroyed.  Background threads keep the pool filled and retire containers that have
been idle for too long.

A filler may also *prepare* a container it started (``prepare``: the runtime stages a
copy of the skill the next run will likely want, where the container's user cannot
reach it); a run then takes a container prepared for its skill when there is one.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ...activity import Activity
from ...workers import Supervisor
from ...workspace.layout import LAUNCHER_SOCKET, WorkspaceManager
from ..skillcopy import StagedSkill
from .appear import wait_for
from .hostview import InitProcess

log = logging.getLogger(__name__)

READY_TIMEOUT = 20.0
#: How long closing waits for fillers in the middle of a start (they clean up after themselves).
CLOSE_WAIT_SECONDS = 3.0
#: Starts a warm container on a workspace folder; returns its id and its init process.
Start = Callable[[Path], tuple[str, InitProcess | None]]


@dataclass(slots=True)
class WarmContainer:
    id: str
    root: Path
    started_at: float
    #: The container's init, to end everything in it at once (None: only through the engine).
    init: InitProcess | None = None
    #: A copy of a skill made for this container's run ahead of it (see ``prepare``).
    staged: StagedSkill | None = None

    @property
    def socket(self) -> Path:
        return self.root / LAUNCHER_SOCKET


class WarmPool:
    def __init__(
        self,
        *,
        start: Start,
        discard: Callable[[WarmContainer], None],
        workspaces: WorkspaceManager,
        owner: tuple[int, int] | None,
        activity: Activity,
        supervisor: Supervisor,
        size: int,
        max_idle: float,
        prepare: Callable[[WarmContainer], None] | None = None,
    ) -> None:
        self._start_container = start
        self._prepare = prepare
        self._discard = discard
        self.workspaces = workspaces
        self.owner = owner
        self.activity = activity
        self.size = size
        self.max_idle = max_idle
        self._idle: deque[WarmContainer] = deque()
        self._starting = 0
        self._starting_ids: set[str] = set()  # started, not yet ready
        self._cond = threading.Condition()
        self._closed = False
        self.hits = 0
        self.misses = 0
        self._fillers = min(size, 2)
        self._filling = 0  # fillers inside a step right now
        for i in range(self._fillers):
            supervisor.loop(f"pool-fill-{i}", self._fill)

    def acquire(self, prefer: Callable[[WarmContainer], bool] | None = None) -> WarmContainer | None:
        """A ready container (the first one ``prefer`` likes, if any), or None at once
        when none is ready (never waits)."""
        with self._cond:
            if prefer is not None:
                for index, candidate in enumerate(self._idle):
                    if prefer(candidate):
                        if index:
                            del self._idle[index]
                            self._idle.appendleft(candidate)
                        break
            while self._idle:
                item = self._idle.popleft()
                self._cond.notify_all()
                if time.monotonic() - item.started_at <= self.max_idle and item.socket.exists():
                    self.hits += 1
                    return item
                self._discard(item)
            self.misses += 1
            self._cond.notify_all()
            return None

    def wait_ready(self, count: int | None = None, timeout: float = 60.0) -> bool:
        """Block until ``count`` (default: all) containers are idle; for tests and benchmarks."""
        want = self.size if count is None else count
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self._idle) < want:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def known(self) -> set[str]:
        """Ids of the containers the pool holds: idle, or started and not yet ready."""
        with self._cond:
            return {item.id for item in self._idle} | self._starting_ids

    def idle_roots(self) -> set[Path]:
        """The folders of the idle containers (their workspaces; a prepared copy is in one)."""
        with self._cond:
            return {item.root for item in self._idle}

    @property
    def idle(self) -> int:
        with self._cond:
            return len(self._idle)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            items = list(self._idle)
            self._idle.clear()
            self._cond.notify_all()
        # A filler still starting a container discards it itself when it sees the pool closed.
        deadline = time.monotonic() + CLOSE_WAIT_SECONDS
        with self._cond:
            while self._filling and time.monotonic() < deadline:
                self._cond.wait(0.1)
        for item in items:
            self._discard(item)

    # -- background filling -------------------------------------------------------------------

    def _fill(self) -> None:
        """One step of a filler (run over and over by the supervisor): wait until the
        pool needs a container, start one.  A failed start raises: the supervisor logs
        it once per cause and retries with backoff."""
        with self._cond:
            while not self._closed and len(self._idle) + self._starting >= self.size:
                self._retire_old()
                self._cond.wait(timeout=min(30.0, self.max_idle))
            if self._closed:
                return
            self._starting += 1
            self._filling += 1
            have = len(self._idle)
        item = None
        try:
            if have:
                # Still serving from the pool: start the replacement in a quiet moment.
                self.activity.wait_quiet(2.0)
            item = self._start()
        finally:
            with self._cond:
                self._starting -= 1
                self._filling -= 1
                if item is not None:
                    self._starting_ids.discard(item.id)
                    if self._closed:
                        self._discard(item)
                    else:
                        self._idle.append(item)
                self._cond.notify_all()

    def _retire_old(self) -> None:
        now = time.monotonic()
        while self._idle and now - self._idle[0].started_at > self.max_idle:
            item = self._idle.popleft()
            self._discard(item)

    def _start(self) -> WarmContainer | None:
        name = f"warm-{uuid.uuid4().hex[:16]}"
        root = self.workspaces.create_root(name, owner=self.owner)
        try:
            container_id, init = self._start_container(root)
        except BaseException:
            self.workspaces.discard(root)
            raise
        item = WarmContainer(container_id, root, time.monotonic(), init)
        with self._cond:
            self._starting_ids.add(container_id)
        try:
            # The launcher publishes its socket once it accepts (an inotify event, no polling).
            if not wait_for(item.socket, READY_TIMEOUT, stop=lambda: self._closed):
                if self._closed:
                    with self._cond:
                        self._starting_ids.discard(container_id)
                    self._discard(item)
                    return None
                self._discard(item)
                raise TimeoutError("the launcher did not come up")
        except TimeoutError:
            with self._cond:
                self._starting_ids.discard(container_id)
            raise
        except BaseException:  # the wait failed: the container and its folder go too
            with self._cond:
                self._starting_ids.discard(container_id)
            self._discard(item)
            raise
        if self._prepare is not None and not self._closed:
            try:
                self._prepare(item)
            except Exception as exc:  # the container is still good: a run copies its skill itself
                log.warning("preparing a warm container failed: %s", exc)
        return item
