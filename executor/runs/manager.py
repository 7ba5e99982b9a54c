"""Runs as tracked jobs: submit (sync or async), observe live output, cancel.

The manager sits between a front end (the HTTP API) and :class:`SkillRunner`:

* everything that can be refused is refused in :meth:`RunManager.submit`, before the
  run is accepted, in one order for every front end (``POST /v1/runs``, tool calls):
  authorization (:mod:`executor.access`), validation, admission (``busy``);
* each accepted run gets a record in the :class:`RunStore` and a thread;
* a :class:`RunHandle` carries the run's live events (stdout/stderr chunks, status,
  the final result) to any number of subscribers, thread-safely and asyncio-friendly;
* ``Idempotency-Key``: a retried submission with the same key (of the same API key)
  gets the first run -- looked up before anything else, so a replay is never refused
  for being busy or because the skill has gone since;
* every run belongs to the tenant of the principal that submitted it: reading,
  streaming and cancelling go through :func:`executor.access.permit` (another key's
  run is "not found"; an admin's access is audited).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import logging
import re
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ..access import Principal, authorize_inputs, permit
from ..errors import Conflict, ExecutorError, NotFound
from .models import RunRequest, RunResult
from .pipeline import SkillRunner, new_run_id
from .plan import RunPlan
from .store import FINAL, RunRecord, RunStore, Status

log = logging.getLogger(__name__)

Event = tuple[str, Any]
#: Run ids are ``new_run_id()``s; anything else (a 10k-character id) is simply unknown.
RUN_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


@dataclass(eq=False)
class RunHandle:
    """Live view of one run in this process."""

    run_id: str
    record: RunRecord
    started: bool = False
    cancel: threading.Event = field(default_factory=threading.Event)
    future: concurrent.futures.Future[RunRecord] = field(default_factory=concurrent.futures.Future)
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
        principal: Principal,
        idempotency_key: str | None = None,
    ) -> tuple[RunRecord, RunHandle | None, bool]:
        """Accept a run of ``principal``; returns (record, live handle or None, whether
        this is a replay).  Blocking (SQLite, the skill catalog): call it off the event loop.

        Order: an Idempotency-Key already used by this principal answers with its run
        (same request) or 409 (another request) before anything else; then
        authorization, validation and admission.
        """
        fingerprinted = (idempotency_key, fingerprint(request)) if idempotency_key else None
        if fingerprinted is not None:
            replay = self._replay(principal.id, *fingerprinted)
            if replay is not None:
                return replay
        authorize_inputs(principal, (i.from_ for i in request.inputs))
        checked = self.runner.validate(request)
        reservation = self.runner.limiter.reserve()
        run_id = new_run_id()
        payload = request.model_dump(mode="json", by_alias=True, exclude_defaults=True)
        try:
            record = self.store.create(run_id, payload, owner=principal.id, idempotency=fingerprinted)
        except Conflict:
            # Another request with this key claimed it between the lookup and now.
            reservation.release()
            assert fingerprinted is not None
            replay = self._replay(principal.id, *fingerprinted)
            if replay is None:  # pragma: no cover - a claimed key is never released
                raise
            return replay
        except BaseException:
            reservation.release()
            raise
        handle = RunHandle(run_id, record)
        with self._lock:
            self._handles[run_id] = handle
        self._workers.submit(self._execute, request, handle, reservation, checked, principal.id)
        return record, handle, False

    def _replay(self, owner: str, key: str, fingerprint: str) -> tuple[RunRecord, RunHandle | None, bool] | None:
        found = self.store.idempotent(owner, key)
        if found is None:
            return None
        run_id, first = found
        if first != fingerprint:
            raise Conflict(
                "this Idempotency-Key was used for a different request",
                code="idempotency_key_reused",
                details={"run_id": run_id},
            )
        return self._current(run_id), self.handle(run_id), True

    def _execute(
        self, request: RunRequest, handle: RunHandle, reservation: Any, checked: RunPlan, tenant: str
    ) -> None:
        # "running" lives in memory (get() reports it); only the outcome is written.
        # A record left "queued" by a crash is marked failed at the next start.
        run_id = handle.run_id
        handle.started = True
        handle.publish("status", "running")
        final: tuple[Status, dict[str, Any] | None, dict[str, Any] | None] = ("failed", None, None)

        def listener(stream: str, chunk: bytes) -> None:
            handle.publish(stream, chunk.decode("utf-8", "replace"))

        try:
            result: RunResult = self.runner.run(
                request, run_id=run_id, listener=listener, cancel=handle.cancel, reservation=reservation,
                checked=checked, tenant=tenant,
            )
            final = ("cancelled" if handle.cancel.is_set() else "completed", result.model_dump(mode="json"), None)
        except ExecutorError as exc:
            refusal: dict[str, Any] = exc.to_dict()["error"]
            refusal["status"] = exc.status
            final = ("failed", None, refusal)
        except Exception:  # never leave a record unfinished
            log.exception("run %s failed unexpectedly", run_id)
            internal = {"code": "internal", "message": "the run failed inside the service", "status": 500}
            final = ("failed", None, internal)
        finally:
            status, body, error = final
            self.store.update(run_id, status, result=body, error=error)
            record = replace(handle.record, status=status, result=body, error=error, updated_at=time.time())
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
        """The live view of a run of this process (no authorization: use after :meth:`get`)."""
        with self._lock:
            return self._handles.get(run_id)

    def _current(self, run_id: str) -> RunRecord:
        if not RUN_ID.match(run_id):
            raise NotFound(f"no run {run_id[:128]!r}", code="run_not_found")
        handle = self.handle(run_id)
        record = self.store.get(run_id)
        if handle is not None and handle.started and record.status == "queued":
            record.status = "running"
        return record

    def get(self, run_id: str, who: Principal, *, action: str = "run.read") -> RunRecord:
        """A run's record, if ``who`` may see it (another key's run is "not found")."""
        record = self._current(run_id)
        permit(who, record.owner, action=action, target=run_id, what=f"run {run_id!r}", code="run_not_found")
        return record

    def reload(self, record: RunRecord) -> RunRecord:
        """The current state of a record the caller already got through :meth:`get`."""
        return self._current(record.run_id)

    def cancel(self, run_id: str, who: Principal) -> RunRecord:
        record = self.get(run_id, who, action="run.cancel")
        if record.status in FINAL:
            raise Conflict(f"run {run_id!r} has already ended ({record.status})", code="run_finished")
        handle = self.handle(run_id)
        if handle is None:
            raise Conflict(f"run {run_id!r} is not running in this process", code="run_not_active")
        handle.cancel.set()
        return record

    async def wait(self, record: RunRecord, handle: RunHandle | None) -> RunRecord:
        """The final record of a run (polls the store, off the event loop, for runs of
        another process)."""
        if handle is not None:
            return await handle.wait()
        while record.status not in FINAL:
            await asyncio.sleep(0.2)
            record = await asyncio.to_thread(self.reload, record)
        return record

    @staticmethod
    def result(record: RunRecord) -> RunResult:
        """A finished run's result, or its refusal raised as the :class:`ExecutorError` it was."""
        if record.status == "failed" or record.result is None:
            error = dict(record.error or {"code": "error", "message": "the run failed"})
            raise ExecutorError(
                error.get("message", "the run failed"),
                code=error.get("code", "error"),
                status=int(error.get("status", 500)),
                details=error.get("details"),
            )
        return RunResult.model_validate(record.result)

    def shutdown(self, timeout: float = 15.0) -> None:
        """Cancel every run of this process and wait for them to clean up."""
        with self._lock:
            handles = list(self._handles.values())
        for handle in handles:
            handle.cancel.set()
        concurrent.futures.wait([h.future for h in handles], timeout=timeout)
        self._workers.shutdown(wait=False, cancel_futures=True)
