"""In-process dispatch: a run's body on this process's run threads (the embedded service,
and a worker executing the runs it claimed). Exactly today's path: no database in between."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from sqlalchemy import Connection

from ..runs.models import RunRequest
from ..runs.store import Status


class LocalDispatcher:
    remote = False

    def __init__(self, threads: int) -> None:
        """``threads``: one per admissible run (executing or queued); threads are reused."""
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="run")

    def start(self, body: Callable[[], None]) -> None:
        self._pool.submit(body)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- remote only: never called on a local dispatcher -----------------------------------

    def admit(self, conn: Connection) -> None:
        raise NotImplementedError

    def enqueue(self, conn: Connection, run_id: str, request: RunRequest, tenant: str) -> None:
        raise NotImplementedError

    def cancel(self, run_id: str) -> Status | None:
        raise NotImplementedError

    def watch(self, run_id: str, *, outcome_only: bool = False) -> AbstractAsyncContextManager[asyncio.Event]:
        raise NotImplementedError

    def events_after(self, run_id: str, after: int) -> list[tuple[int, str, Any]]:
        raise NotImplementedError

    def events(self, run_id: str, after: int) -> AsyncIterator[tuple[int, str, Any]]:
        raise NotImplementedError
