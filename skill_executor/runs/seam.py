"""Where an accepted run goes: the seam between :class:`~skill_executor.runs.manager.RunManager`
and the dispatchers of :mod:`skill_executor.dispatch`.

A *local* dispatcher runs the run's body on this process's threads (the embedded service,
and a worker executing the runs it claimed). A *remote* one (an API replica over Postgres)
executes nothing: it queues the run in the transaction that records it, and learns how it
goes from the database (its events, its outcome), for runs of any replica.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from sqlalchemy import Connection

from .models import RunRequest
from .store import Status


class Dispatcher(Protocol):
    #: True: runs execute in other processes (workers); the database is the truth.
    remote: bool

    def start(self, body: Callable[[], None]) -> None:
        """Local: run ``body`` (the run, start to outcome) on this process's run threads."""
        ...

    def admit(self, conn: Connection) -> None:
        """Remote: refuse (``busy``) when the cluster holds as many runs as it takes; in the
        transaction that records the run."""
        ...

    def enqueue(self, conn: Connection, run_id: str, request: RunRequest, tenant: str) -> None:
        """Remote: queue the run, in the transaction that records it (committed = acknowledged)."""
        ...

    def cancel(self, run_id: str) -> Status | None:
        """Remote: ask the run to stop; its status now when that is final (a queued run is
        cancelled at once), else None (a running one is told through the database)."""
        ...

    def watch(self, run_id: str, *, outcome_only: bool = False) -> AbstractAsyncContextManager[asyncio.Event]:
        """Remote: an event set whenever the run may have new events or an outcome
        (``outcome_only``: an outcome); watch first, then clear it and look: nothing is
        missed in between."""
        ...

    def events_after(self, run_id: str, after: int) -> list[tuple[int, str, Any]]:
        """Remote: the run's recorded events with ids above ``after``, in order."""
        ...

    def events(self, run_id: str, after: int) -> AsyncIterator[tuple[int, str, Any]]:
        """Remote: the run's events after ``after`` as they are recorded, until its last."""
        ...

    def shutdown(self) -> None:
        """Stop taking runs and release the threads (running bodies are not waited for)."""
        ...
