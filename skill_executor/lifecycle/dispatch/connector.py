"""procrastinate's Postgres connector, made to ride out a database restart.

procrastinate 3.10 lets one failed query end a worker's job loop (a fetch that meets a
connection closed by the restart), and its notification listener dies for good when it
cannot reconnect at once (its supervisor of side tasks is gone once the periodic deferrer,
unused here, returns): the worker then takes runs only by polling. Here:

* a query that fails because the connection failed is tried again, with backoff, for up to
  ``patience`` seconds (a worker's lease: past it the worker gives up anyway), then raises;
  other errors raise at once;
* the listener reconnects, with backoff, for as long as the worker lives, and wakes the job
  loop once it is back (jobs queued while it was away were not announced).

A retried query may repeat one whose reply was lost: a job fetched twice leaves the first
one ``doing`` with no run claimed, which the replicas' sweep queues again
(:func:`.queue.orphaned`); finishing a finished job raises, after its run's outcome is
recorded.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

import psycopg
from procrastinate import PsycopgConnector, connector, exceptions

log = logging.getLogger(__name__)

T = TypeVar("T")

FIRST_DELAY = 0.1
MAX_DELAY = 1.0


#: SQLSTATEs of a server going away (besides class 08, connection exceptions):
#: admin_shutdown, crash_shutdown, cannot_connect_now.
GONE_STATES = frozenset({"57P01", "57P02", "57P03"})


def connection_failed(exc: BaseException) -> bool:
    """Whether procrastinate's error is the connection's (the server went away, or cannot be
    reached, or the pool found none in time), not the query's (a statement timeout, a lock
    not available, a full disk: never tried again)."""
    cause = exc.__cause__ if isinstance(exc, exceptions.ConnectorException) else None
    if not isinstance(cause, psycopg.OperationalError):  # psycopg_pool's PoolTimeout is one (no SQLSTATE)
        return False
    state = cause.sqlstate
    return state is None or state.startswith("08") or state in GONE_STATES


class SteadyConnector(PsycopgConnector):
    def __init__(self, *, conninfo: str, patience: float) -> None:
        super().__init__(conninfo=conninfo)
        self.patience = patience

    async def _again(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        deadline = time.monotonic() + self.patience
        delay = FIRST_DELAY
        while True:
            try:
                return await call()
            except exceptions.ConnectorException as exc:
                if not connection_failed(exc) or time.monotonic() + delay > deadline:
                    raise
                log.warning("job queue: %s failed (%s); trying again", what, exc.__cause__)
            await asyncio.sleep(delay)
            delay = min(delay * 2, MAX_DELAY)

    async def execute_query_async(self, query: Any, **arguments: Any) -> None:
        await self._again("a query", lambda: super(SteadyConnector, self).execute_query_async(query, **arguments))

    async def execute_query_one_async(self, query: Any, **arguments: Any) -> dict[str, Any]:
        return await self._again(
            "a query", lambda: super(SteadyConnector, self).execute_query_one_async(query, **arguments)
        )

    async def execute_query_all_async(self, query: Any, **arguments: Any) -> list[dict[str, Any]]:
        return await self._again(
            "a query", lambda: super(SteadyConnector, self).execute_query_all_async(query, **arguments)
        )

    async def listen_notify(self, on_notification: connector.Notify, channels: Iterable[str]) -> None:
        channels = list(channels)
        delay = FIRST_DELAY
        while True:
            try:
                await super().listen_notify(on_notification=on_notification, channels=channels)
            except exceptions.ConnectorException as exc:
                if not connection_failed(exc):
                    raise
                log.warning("job queue: notifications lost (%s); reconnecting", exc.__cause__)
            await asyncio.sleep(delay)
            delay = min(delay * 2, MAX_DELAY)
            try:  # back only once the database answers; then the job loop looks at once
                await self._again("reconnecting", lambda: super(SteadyConnector, self).execute_query_async("SELECT 1"))
            except exceptions.ConnectorException:
                continue
            delay = FIRST_DELAY
            if channels:
                await on_notification(channel=channels[0], payload=json.dumps({"type": "job_inserted"}))
