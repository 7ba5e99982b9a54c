"""In-process dispatch (:class:`InProcess`): a run's body on this process's run threads,
its live events in a :class:`~skill_executor.lifecycle.handle.RunHandle`. The embedded
service, the CLI, and a cluster worker executing the runs it claimed all use it.

A run holds a place with the :class:`~skill_executor.runs.limiter.RunLimiter` from
:meth:`InProcess.reserve` (``busy`` when there is none) to its outcome; "running" lives in
memory (:meth:`InProcess.current` reports it), only the outcome is written: a record left
``queued`` by a crash is marked failed at the next start.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Connection

from ... import tracing
from ...errors import Conflict, ExecutorError
from ...runs.limiter import Reservation, RunLimiter
from ...runs.models import RunRequest, RunResult
from ...runs.pipeline import SkillRunner
from ...runs.plan import RunPlan
from ..figures import RunFigures
from ..handle import RunHandle, terminal
from ..outcomes import INTERNAL, error_body, not_started, shutdown_error
from ..records import RunRecord, RunStore
from ..seam import StreamEvent, Ticket
from ..status import FINAL, Status

log = logging.getLogger(__name__)

#: How often a wait for (or a stream of) a run of another process looks at its record.
POLL_SECONDS = 0.2

Final = tuple[Status, dict[str, Any] | None, dict[str, Any] | None]


@dataclass(slots=True)
class Place:
    """A run's place with the limiter (:class:`~skill_executor.lifecycle.seam.Ticket`)."""

    reservation: Reservation
    request: RunRequest

    def record(self, conn: Connection) -> None:
        pass  # nothing is queued: the run starts on this process's threads

    def release(self) -> None:
        self.reservation.release()


class InProcess:
    def __init__(
        self,
        runner: SkillRunner,
        store: RunStore,
        *,
        limiter: RunLimiter,
        figures: RunFigures,
    ) -> None:
        """``limiter``: the places runs take (one thread per place, executing or queued);
        ``figures``: count every run's final record before any waiter gets its answer."""
        self.runner = runner
        self.store = store
        self.limiter = limiter
        self.figures = figures
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=limiter.slots + limiter.queue, thread_name_prefix="run"
        )
        self._handles: dict[str, RunHandle] = {}
        self._lock = threading.Lock()
        self._closing = False

    # -- admission --------------------------------------------------------------------------

    def reserve(self, run_id: str, request: RunRequest, tenant: str) -> Place:
        if self._closing:
            raise shutdown_error()
        return Place(self.limiter.reserve(), request)

    def start(self, ticket: Ticket, record: RunRecord, plan: RunPlan) -> RunHandle:
        assert isinstance(ticket, Place), "a place of this dispatch's"
        handle = RunHandle(record.run_id, record)
        handle.publish("status", "queued")
        with self._lock:
            closing = self._closing
            if not closing:
                self._handles[record.run_id] = handle
        if closing:  # the shutdown began while this run was being admitted
            ticket.release()
            error = shutdown_error(record.run_id)
            self.store.update(record.run_id, "cancelled", error=error_body(error))
            raise error
        self._pool.submit(self._execute, ticket.request, handle, ticket.reservation, plan, record.owner)
        return handle

    def execute_claimed(
        self,
        record: RunRecord,
        *,
        history: list[tuple[str, Any]],
        sink: Callable[[int, str, Any], None],
        outcome: Callable[[RunRecord], None],
    ) -> RunHandle:
        """A worker's: execute a run another process admitted and this one claimed.
        ``history``: its events recorded before the claim (``status queued``; a retried
        run's earlier attempts too), then ``status running``, which the claim recorded.
        Every later event goes to ``sink``, its outcome to ``outcome`` (never to the store
        directly). The run is planned here (its skill as this worker holds it, the policy
        as it is now: a rule changed since admission still refuses it)."""
        with tracing.under(record.traceparent):
            run_id = record.run_id
            handle = RunHandle(run_id, record)
            handle.events += [*history, ("status", "running")]
            handle.sink, handle.outcome = sink, outcome
            with self._lock:
                self._handles[run_id] = handle
            try:
                request = RunRequest.model_validate(record.request)
                if self._closing:
                    raise shutdown_error()
                plan = self.runner.validate(request, tenant=record.owner)
                reservation = self.limiter.reserve()
            except ExecutorError as exc:
                self._finish(handle, "failed", None, error_body(exc))
                return handle
            except Exception:
                log.exception("run %s could not start", run_id)
                self._finish(handle, "failed", None, INTERNAL)
                return handle
            self._pool.submit(self._execute, request, handle, reservation, plan, record.owner)
            return handle

    # -- the run ----------------------------------------------------------------------------

    def _execute(
        self, request: RunRequest, handle: RunHandle, reservation: Reservation, plan: RunPlan, tenant: str
    ) -> None:
        # in the run's trace: its queue wait, its run's spans and every log line meanwhile
        with tracing.under(handle.record.traceparent):
            self._execute_traced(request, handle, reservation, plan, tenant)

    def _execute_traced(
        self, request: RunRequest, handle: RunHandle, reservation: Reservation, plan: RunPlan, tenant: str
    ) -> None:
        run_id = handle.run_id
        final: Final = ("failed", None, INTERNAL)

        def listener(stream: str, chunk: bytes) -> None:
            handle.publish(stream, chunk.decode("utf-8", "replace"))

        def egress(request: dict[str, Any]) -> None:  # a request through the egress gateway
            handle.publish("egress", request)

        try:
            started = reservation.acquire(handle.cancel)
            tracing.past("queue_wait", handle.record.created_at, time.time())  # until a claim and a slot
            if not started:  # cancelled while queued: nothing ran
                final = self._cancelled_before_start(handle, request, plan)
                return
            handle.started = True
            if handle.events[-1] != ("status", "running"):  # a worker's claim announced it already
                handle.publish("status", "running")
            result: RunResult = self.runner.execute(
                plan,
                request,
                run_id=run_id,
                listener=listener,
                cancel=handle.cancel,
                tenant=tenant,
                egress_listener=egress,
            )
            body = result.model_dump(mode="json")
            if handle.cancel.is_set():
                by_shutdown = handle.reason == "shutdown"
                final = ("cancelled", body, error_body(shutdown_error(run_id)) if by_shutdown else None)
            else:
                final = ("completed", body, None)
        except ExecutorError as exc:
            final = ("failed", None, error_body(exc))
        except Exception:  # never leave a record unfinished
            log.exception("run %s failed unexpectedly", run_id)
        finally:
            reservation.release()
            self._finish(handle, *final)

    @staticmethod
    def _cancelled_before_start(handle: RunHandle, request: RunRequest, plan: RunPlan) -> Final:
        if handle.reason == "shutdown":
            return "cancelled", None, error_body(shutdown_error(handle.run_id))
        why = "the run was cancelled before it started"
        return "cancelled", not_started(handle.run_id, plan.skill.id, request.session, why), None

    def _finish(
        self, handle: RunHandle, status: Status, body: dict[str, Any] | None, error: dict[str, Any] | None
    ) -> None:
        """Publish the final status and the last event, wake waiters, then record the outcome.

        The figures (what the metrics read) count it first, so it is visible to a client
        as soon as it has its answer.  Waiters are answered before the store write (off
        the answer's path); until the write is done the handle stays registered and
        :meth:`current` answers from it, so a client that reads the run right after its
        answer sees the outcome.
        """
        run_id = handle.run_id
        record = replace(handle.record, status=status, result=body, error=error, updated_at=time.time())
        with handle._lock:
            record.events = len(handle.events) + 2  # + the final status and the last event
        try:
            self.figures.finished(record)
        except Exception:
            log.exception("counting run %s failed", run_id)
        handle.publish("status", status)
        handle.publish(*terminal(record))
        handle.future.set_result(record)
        try:
            if handle.outcome is not None:
                handle.outcome(record)
            else:
                self.store.update(run_id, status, result=body, error=error, events=record.events)
        except Exception:  # the record stays "queued" and is marked interrupted at the next start
            log.exception("recording the outcome of run %s failed", run_id)
        finally:
            with self._lock:
                self._handles.pop(run_id, None)
            handle.recorded.set()

    # -- reading ----------------------------------------------------------------------------

    def handle(self, run_id: str) -> RunHandle | None:
        with self._lock:
            return self._handles.get(run_id)

    def current(self, record: RunRecord) -> RunRecord:
        handle = self.handle(record.run_id)
        if handle is None:
            return record
        if handle.future.done():  # finished; its record is being written
            return replace(handle.future.result())
        if handle.started and record.status == "queued":
            return replace(record, status="running")
        return record

    def _reload(self, record: RunRecord) -> RunRecord:
        return self.current(self.store.get(record.run_id))

    async def wait(self, record: RunRecord) -> RunRecord:
        handle = self.handle(record.run_id)
        if handle is not None:
            return await handle.wait()
        # a run of another process on this data dir (the CLI's, say): its record is polled
        loop = asyncio.get_running_loop()
        while record.status not in FINAL:
            if self._closing:
                raise shutdown_error()
            await asyncio.sleep(POLL_SECONDS)
            record = await loop.run_in_executor(None, self._reload, record)
        return record

    def events(self, record: RunRecord, after: int) -> AsyncIterator[StreamEvent] | None:
        handle = self.handle(record.run_id)
        if handle is not None and handle.future.done() and not handle.future.cancelled():  # ended
            record, handle = handle.future.result(), None
        if handle is None and record.status not in FINAL:
            record = self._reload(record)  # it may have ended a moment ago
        if handle is None and record.status in FINAL and record.events is not None and after >= record.events:
            return None
        return handle.stream(after) if handle is not None else self._recorded(record, after)

    async def _recorded(self, record: RunRecord, after: int) -> AsyncIterator[StreamEvent]:
        """A run with no live view here: one that has ended, or one of another process
        (polled until it ends, or until this process shuts down)."""
        loop = asyncio.get_running_loop()
        status = None
        while record.status not in FINAL:
            if record.status != status:
                status = record.status
                yield None, "status", status
            if self._closing:
                yield None, "error", shutdown_error().to_dict()["error"]
                return
            await asyncio.sleep(POLL_SECONDS)
            record = await loop.run_in_executor(None, self._reload, record)
        kind, body = terminal(record)
        count = record.events
        # The last two events carry the ids the live stream gave them, when it was recorded.
        for event_id, event, data in ((count - 1 if count else None, "status", record.status), (count, kind, body)):
            if event_id is None or event_id > after:
                yield event_id, event, data

    # -- cancel -----------------------------------------------------------------------------

    def cancel(self, record: RunRecord) -> RunHandle:
        handle = self.handle(record.run_id)
        if handle is None:
            if self.store.get(record.run_id).status in FINAL:  # it ended a moment ago
                raise Conflict(f"run {record.run_id!r} has already ended", code="run_finished")
            raise Conflict(f"run {record.run_id!r} is not running in this process", code="run_not_active")
        self._cancel(handle, "request")
        return handle

    async def settle(self, record: RunRecord, handle: RunHandle | None, timeout: float) -> tuple[Status, bool]:
        if handle is None:
            return record.status, record.status in FINAL
        try:
            final = await asyncio.wait_for(handle.wait(), timeout)
        except TimeoutError:
            return ("running" if handle.started else "queued"), False
        return final.status, True

    def cancel_local(self, run_id: str, reason: str) -> bool:
        """A worker's: stop a run of this process that was cancelled elsewhere (or whose
        lease went); whether it runs here."""
        handle = self.handle(run_id)
        if handle is None:
            return False
        self._cancel(handle, reason)
        return True

    def running(self) -> list[str]:
        with self._lock:
            return list(self._handles)

    def _cancel(self, handle: RunHandle, reason: str) -> None:
        if not handle.cancel.is_set():
            handle.reason = reason
            handle.cancel.set()
        self.limiter.wake()  # a queued run stops waiting for a slot

    # -- shutdown ---------------------------------------------------------------------------

    def _begin_shutdown(self) -> list[RunHandle]:
        with self._lock:
            self._closing = True
            return list(self._handles.values())

    async def drain(self, grace: float, settle: float) -> None:
        handles = self._begin_shutdown()
        if not handles:
            return
        waits = [asyncio.ensure_future(h.wait()) for h in handles]
        log.info("shutdown: waiting up to %.1f s for %d run(s) in flight", grace, len(handles))
        _, pending = await asyncio.wait(waits, timeout=max(0.0, grace))
        if pending:
            log.warning("shutdown: cancelling %d run(s) still in flight after %.1f s", len(pending), grace)
            for handle in self._begin_shutdown():
                self._cancel(handle, "shutdown")
            _, pending = await asyncio.wait(pending, timeout=settle)
            for wait in pending:
                wait.cancel()
            if pending:
                log.error("shutdown: %d cancelled run(s) did not wind up within %.1f s", len(pending), settle)

    def close(self, timeout: float) -> None:
        handles = self._begin_shutdown()
        for handle in handles:
            self._cancel(handle, "shutdown")
        deadline = time.monotonic() + timeout
        concurrent.futures.wait([h.future for h in handles], timeout=timeout)
        for handle in handles:  # and their outcomes are in the store
            handle.recorded.wait(max(0.0, deadline - time.monotonic()))
        self._pool.shutdown(wait=False, cancel_futures=True)
