"""Where an accepted run goes: the one seam between the lifecycle (:class:`~skill_executor.
lifecycle.manager.RunManager`) and the two dispatches of :mod:`skill_executor.lifecycle.dispatch`.

Both are complete; the lifecycle never asks which one it has:

* **in process** (:class:`~skill_executor.lifecycle.dispatch.local.InProcess`): the run's body on this
  process's run threads, its live events in a :class:`RunHandle` (the embedded service, the
  CLI and a cluster worker);
* **queue** (:class:`~skill_executor.lifecycle.dispatch.postgres.QueueDispatch`): an API replica
  records and queues the run in one transaction, a worker executes it, and its events and
  outcome come back through the database.

The life of a run through the seam: :meth:`Dispatch.reserve` (refused ``busy`` when there
is no room), the record written with :meth:`Ticket.record` in its transaction,
:meth:`Dispatch.start`, then any number of :meth:`~Dispatch.current`,
:meth:`~Dispatch.wait`, :meth:`~Dispatch.events` and :meth:`~Dispatch.cancel` /
:meth:`~Dispatch.settle`, from any replica; :meth:`~Dispatch.drain` and
:meth:`~Dispatch.close` at the end.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

from sqlalchemy import Connection

from ..runs.models import RunRequest
from ..runs.plan import RunPlan
from .handle import RunHandle
from .records import RunRecord
from .status import Status

#: An event of a run's stream: its id (None for a status a poll saw between recorded
#: events), its kind and its data.
StreamEvent = tuple[int | None, str, Any]


class Ticket(Protocol):
    """A run's place, taken before its record is written."""

    def record(self, conn: Connection) -> None:
        """In the transaction that records the run: what the dispatch writes with it (the
        queue's job and its first event; nothing in process)."""
        ...

    def release(self) -> None:
        """The run was not recorded (or will never start): give the place back."""
        ...


class Dispatch(Protocol):
    def reserve(self, run_id: str, request: RunRequest, tenant: str) -> Ticket:
        """Take a place for a run about to be recorded, or refuse it (``busy``); the
        refusals that need the recording transaction (the cluster's capacity, a lost
        session) come from :meth:`Ticket.record`."""
        ...

    def start(self, ticket: Ticket, record: RunRecord, plan: RunPlan) -> RunHandle | None:
        """Start a recorded run: its live handle when it runs in this process, else None
        (a worker claims it from the queue)."""
        ...

    def current(self, record: RunRecord) -> RunRecord:
        """``record`` (as read from the store) with what only this dispatch knows: a run
        that has ended but whose outcome is still being written, ``running`` for a started run."""
        ...

    def handle(self, run_id: str) -> RunHandle | None:
        """The live view of a run executing in this process (None: none here)."""
        ...

    async def wait(self, record: RunRecord) -> RunRecord:
        """The run's final record (``shutting_down`` once this process stops waiting)."""
        ...

    def events(self, record: RunRecord, after: int) -> AsyncIterator[StreamEvent] | None:
        """The run's events after id ``after`` until its last; None when ``after`` names
        its last event already (nothing more will come)."""
        ...

    def cancel(self, record: RunRecord) -> RunHandle | None:
        """Ask a queued or running run to stop (``run_finished``: it ended meanwhile);
        its live handle when it runs here."""
        ...

    async def settle(self, record: RunRecord, handle: RunHandle | None, timeout: float) -> tuple[Status, bool]:
        """After :meth:`cancel`: wait up to ``timeout`` for the run to stop; its status and
        whether that is final."""
        ...

    def running(self) -> list[str]:
        """The ids of the runs executing in this process."""
        ...

    async def drain(self, grace: float, settle: float) -> None:
        """Take no more runs; give those of this process ``grace`` seconds, then cancel
        them (``shutting_down``) and wait up to ``settle`` for them to wind up."""
        ...

    def close(self, timeout: float) -> None:
        """Cancel what still runs here, wait up to ``timeout`` for the outcomes to be
        recorded, and release the threads."""
        ...
