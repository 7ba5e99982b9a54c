"""Runs as tracked jobs: submit (sync or async), observe live output, cancel.

The manager sits between a front end (the HTTP API) and :class:`SkillRunner`:

* everything that can be refused is refused in :meth:`RunManager.submit`, before the
  run is accepted (validation errors, ``busy``);
* each accepted run gets a record in the :class:`RunStore` and a thread;
* a :class:`RunHandle` carries the run's live events (stdout/stderr chunks, status,
  the final result) to any number of subscribers, thread-safely and asyncio-friendly;
* ``Idempotency-Key``: a retried submission with the same key gets the first run.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import Conflict, ExecutorError
from .models import RunRequest, RunResult
from .pipeline import SkillRunner, new_run_id
from .plan import RunPlan
from .store import FINAL, RunRecord, RunStore

log = logging.getLogger(__name__)

Event = tuple[str, Any]


@dataclass(eq=False)
class RunHandle:
    """Live view of one run in this process."""

    run_id: str
    record: RunRecord | None = None
    started: bool = False
    cancel: threading.Event = field(default_factory=threading.Event)
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)
    events: list[Event] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = field(default_factory=list)

    def publish(self, kind: str, data: Any) -> None:
        with self._lock:
            self.events.append((kind, data))
            waiters = list(self._waiters)
        for loop, event in waiters:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # the subscriber's loop is gone
                pass

    async def stream(self) -> AsyncIterator[Event]:
        """Every event from the start, then new ones as they come, until the run ends."""
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()
        entry = (loop, wake)
        with self._lock:
            self._waiters.append(entry)
        try:
            offset = 0
            while True:
                wake.clear()
                with self._lock:
                    batch = self.events[offset:]
                offset += len(batch)
                for item in batch:
                    yield item
                    if item[0] in ("result", "error"):
                        return
                await wake.wait()
        finally:
            with self._lock:
                self._waiters.remove(entry)

    async def wait(self) -> RunRecord:
        return await asyncio.wrap_future(self.future)


def fingerprint(request: RunRequest) -> str:
    canonical = json.dumps(request.model_dump(mode="json", by_alias=True), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


class RunManager:
    def __init__(
        self,
        runner: SkillRunner,
        store: RunStore,
        *,
        on_finish: Callable[[RunRecord], None] | None = None,
    ) -> None:
        self.runner = runner
        self.store = store
        self.on_finish = on_finish
        self._handles: dict[str, RunHandle] = {}
        self._lock = threading.Lock()
        # One worker per admissible run (executing or queued): threads are reused.
        limiter = runner.limiter
        self._workers = concurrent.futures.ThreadPoolExecutor(
            max_workers=limiter.slots + limiter.queue, thread_name_prefix="run"
        )
        interrupted = store.fail_interrupted()
        if interrupted:
            log.warning("marked %d run(s) interrupted by a restart as failed", interrupted)

    def submit(
        self,
        request: RunRequest,
        *,
        principal: str | None = None,
        idempotency_key: str | None = None,
    ) -> tuple[RunRecord, RunHandle | None, bool]:
        """Accept a run; returns (record, live handle or None, whether this is a replay)."""
        checked = self.runner.validate(request)
        reservation = self.runner.limiter.reserve()
        run_id = new_run_id()
        payload = request.model_dump(mode="json", by_alias=True, exclude_defaults=True)
        try:
            record = self.store.create(
                run_id,
                payload,
                principal=principal,
                idempotency=(idempotency_key, fingerprint(request)) if idempotency_key else None,
            )
        except Conflict as exc:
            reservation.release()
            if exc.code != "idempotent_replay":
                raise Conflict(
                    "this Idempotency-Key was used for a different request",
                    code="idempotency_key_reused",
                    details=exc.details,
                ) from None
            first = exc.details["run_id"]
            return self.store.get(first), self.handle(first), True
        except BaseException:
            reservation.release()
            raise
        handle = RunHandle(run_id, record)
        with self._lock:
            self._handles[run_id] = handle
        self._workers.submit(self._execute, request, handle, reservation, checked)
        return record, handle, False

    def _execute(self, request: RunRequest, handle: RunHandle, reservation: Any, checked: RunPlan) -> None:
        # "running" lives in memory (get() reports it); only the outcome is written.
        # A record left "queued" by a crash is marked failed at the next start.
        run_id = handle.run_id
        handle.started = True
        handle.publish("status", "running")
        final: tuple[str, dict[str, Any] | None, dict[str, Any] | None] = ("failed", None, None)

        def listener(stream: str, chunk: bytes) -> None:
            handle.publish(stream, chunk.decode("utf-8", "replace"))

        try:
            result: RunResult = self.runner.run(
                request, run_id=run_id, listener=listener, cancel=handle.cancel, reservation=reservation,
                checked=checked,
            )
            body = result.model_dump(mode="json")
            final = ("cancelled" if handle.cancel.is_set() else "completed", body, None)
        except ExecutorError as exc:
            error = exc.to_dict()["error"]
            error["status"] = exc.status
            final = ("failed", None, error)
        except Exception:  # never leave a record unfinished
            log.exception("run %s failed unexpectedly", run_id)
            final = ("failed", None, {"code": "internal", "message": "the run failed inside the service", "status": 500})
        finally:
            status, body, error = final
            self.store.update(run_id, status, result=body, error=error)  # type: ignore[arg-type]
            record = replace(handle.record, status=status, result=body, error=error, updated_at=time.time())  # type: ignore[arg-type]
            handle.publish("result" if body is not None else "error", body if body is not None else error)
            with self._lock:
                self._handles.pop(run_id, None)
            handle.future.set_result(record)
            if self.on_finish is not None:
                try:
                    self.on_finish(record)
                except Exception:
                    log.exception("on_finish hook failed")

    def handle(self, run_id: str) -> RunHandle | None:
        with self._lock:
            return self._handles.get(run_id)

    def get(self, run_id: str) -> RunRecord:
        handle = self.handle(run_id)
        record = self.store.get(run_id)
        if handle is not None and handle.started and record.status == "queued":
            record.status = "running"
        return record

    def cancel(self, run_id: str) -> RunRecord:
        record = self.store.get(run_id)
        if record.status in FINAL:
            raise Conflict(f"run {run_id!r} has already ended ({record.status})", code="run_finished")
        handle = self.handle(run_id)
        if handle is None:
            raise Conflict(f"run {run_id!r} is not running in this process", code="run_not_active")
        handle.cancel.set()
        return record

    async def wait(self, record: RunRecord, handle: RunHandle | None) -> RunRecord:
        """The final record of a run (polls the store for runs of another process)."""
        if handle is not None:
            return await handle.wait()
        while record.status not in FINAL:
            await asyncio.sleep(0.2)
            record = self.store.get(record.run_id)
        return record

    def shutdown(self, timeout: float = 15.0) -> None:
        """Cancel every run of this process and wait for them to clean up."""
        with self._lock:
            handles = list(self._handles.values())
        for handle in handles:
            handle.cancel.set()
        concurrent.futures.wait([h.future for h in handles], timeout=timeout)
        self._workers.shutdown(wait=False, cancel_futures=True)
