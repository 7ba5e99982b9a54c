"""One LISTEN connection per process: wakes whoever waits on a run when its events or
its outcome are recorded (by any process).

Notifications carry run ids only; a woken reader queries the rows itself, so a
notification lost while the connection was down costs nothing: after every (re)connect
every waiter is woken to catch up. A connection that goes silent is found by a ``SELECT 1``
every :data:`PING_SECONDS`; readers also look again on their own after a timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psycopg

from .events import DONE_CHANNEL, EVENTS_CHANNEL

log = logging.getLogger(__name__)

PING_SECONDS = 10.0
RECONNECT_SECONDS = 0.5


class Hub:
    def __init__(self, conninfo: str, channels: tuple[str, ...] = (EVENTS_CHANNEL, DONE_CHANNEL)) -> None:
        self.conninfo = conninfo
        self.channels = channels
        self._waiters: dict[str, set[tuple[asyncio.Event, bool]]] = {}
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Called with each notification's payload (a worker's cancel listener).
        self.on_notify: list[Callable[[str, str], None]] = []

    def start(self) -> None:
        """Listen (on the running loop) from now on."""
        self._ensure()

    def _ensure(self) -> None:
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._loop is not loop:
            self._loop = loop
            self._task = loop.create_task(self._listen(), name="dispatch-hub")

    @contextlib.asynccontextmanager
    async def watching(self, run_id: str, *, outcome_only: bool = False) -> AsyncIterator[asyncio.Event]:
        """An event set whenever ``run_id`` may have changed (clear it before looking);
        ``outcome_only``: only when it may have ended (not for each new event)."""
        self._ensure()
        wake = asyncio.Event()
        entry = (wake, outcome_only)
        self._waiters.setdefault(run_id, set()).add(entry)
        try:
            yield wake
        finally:
            found = self._waiters.get(run_id)
            if found is not None:
                found.discard(entry)
                if not found:
                    del self._waiters[run_id]

    def _wake(self, run_id: str | None, channel: str | None = None) -> None:
        """Wake ``run_id``'s waiters (None: everyone's, to catch up) for a notification on
        ``channel`` (None: any)."""
        targets = self._waiters.values() if run_id is None else [self._waiters.get(run_id, set())]
        for waiters in list(targets):
            for wake, outcome_only in list(waiters):
                if not (outcome_only and channel == EVENTS_CHANNEL):
                    wake.set()

    async def _listen(self) -> None:
        import psycopg  # the cluster extra, imported when a hub starts

        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self.conninfo,
                    autocommit=True,
                    keepalives=1,
                    keepalives_idle=10,
                    application_name="skill-executor-hub",
                )
            except psycopg.OperationalError as exc:
                log.warning("dispatch hub: cannot connect: %s", str(exc).strip())
                await asyncio.sleep(RECONNECT_SECONDS)
                continue
            try:
                async with conn:
                    for channel in self.channels:
                        await conn.execute(f"LISTEN {channel}")
                    self._wake(None)  # catch up: what was notified while we were away is lost
                    await self._pump(conn)
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                log.warning("dispatch hub: connection lost (%s); reconnecting", str(exc).strip())
                await asyncio.sleep(RECONNECT_SECONDS)

    async def _pump(self, conn: psycopg.AsyncConnection[object]) -> None:
        while True:
            async for note in conn.notifies(timeout=PING_SECONDS):
                self._wake(note.payload, note.channel)
                for callback in self.on_notify:
                    callback(note.channel, note.payload)
            await conn.execute("SELECT 1")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
