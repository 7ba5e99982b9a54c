"""Runs as tracked jobs: submit (sync or async), observe live output, cancel.

The manager sits between a front end (the HTTP API) and :class:`SkillRunner`:

* everything that can be refused is refused in :meth:`RunManager.submit`, before the
  run is accepted, in one order for every front end (``POST /v1/runs``, tool calls):
  authorization (:mod:`skill_executor.access`), validation, admission (``busy``);
* each accepted run gets a record in the :class:`RunStore` and a thread;
* a :class:`RunHandle` carries the run's live events (stdout/stderr chunks, status,
  the final result) to any number of subscribers, thread-safely and asyncio-friendly;
* ``Idempotency-Key``: a retried submission with the same key (of the same API key)
  gets the first run -- looked up before anything else, so a replay is never refused
  for being busy or because the skill has gone since;
* every run belongs to the tenant of the principal that submitted it: reading,
  streaming and cancelling go through :func:`skill_executor.access.permit` (another key's
  run is "not found"; an admin's access is audited).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import heapq
import json
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

from .. import tracing
from ..access import Principal, audit_log, authorize_inputs, permit, resolve_tenant_audited
from ..errors import Busy, Conflict, ExecutorError, Forbidden, NotFound, Unavailable
from .handle import TERMINAL as TERMINAL
from .handle import Event as Event
from .handle import RunHandle as RunHandle
from .handle import terminal as terminal
from .limiter import Reservation
from .models import RunRequest, RunResult, SkillBundle
from .pipeline import SkillRunner, new_run_id
from .plan import RunPlan
from .seam import Dispatcher
from .store import (
    FINAL,
    PENDING,
    RunFilter,
    RunListing,
    RunRecord,
    RunStore,
    Status,
    decode_cursor,
    encode_cursor,
)

log = logging.getLogger(__name__)

T = TypeVar("T")
INTERNAL = {"code": "internal", "message": "the run failed inside the service", "status": 500}
#: Threads for the blocking steps the event loop hands over -- admission (SQLite writes,
#: which may wait for another process's lock), and reads and building large answers --
#: the service's own, so runs never hold the web server's pool, and a locked store delays
#: only admissions.
ADMISSION_THREADS = 4
IO_THREADS = 4
#: How long a wait for a run of a worker trusts the notifications before it looks itself.
REMOTE_POLL_SECONDS = 1.0
#: Run ids are ``new_run_id()``s; anything else (a 10k-character id) is simply unknown.
RUN_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


class ShuttingDown(Unavailable):
    """The service is shutting down: no new runs, and a run it had to cancel."""

    code = "shutting_down"


def shutdown_error(run_id: str | None = None) -> ShuttingDown:
    if run_id is None:
        return ShuttingDown("the service is shutting down; retry the request elsewhere or after it restarts")
    return ShuttingDown(
        "the service shut down before this run finished; the run was cancelled",
        details={"run_id": run_id, "status": "cancelled"},
    )


def fingerprint(request: RunRequest) -> str:
    canonical = json.dumps(request.model_dump(mode="json", by_alias=True), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def with_bundle_digest(request: RunRequest, checked: RunPlan) -> RunRequest:
    """A request with a bundle's data as it is recorded and dispatched: the skill's id and the
    bundle's digest (the archive is kept by :class:`~skill_executor.registry.bundles.BundleStore`,
    never in the run's record)."""
    if request.bundle is None:
        return request
    bundle = SkillBundle(digest=checked.skill.digest)
    return request.model_copy(update={"skill": request.skill or checked.skill.id, "bundle": bundle})


class RunManager:
    def __init__(
        self,
        runner: SkillRunner,
        store: RunStore,
        *,
        dispatcher: Dispatcher,
        on_finish: Callable[[RunRecord], None] | None = None,
        recover: bool = True,
        approval_timeout: float = 3600.0,
        max_pending: int = 100,
    ) -> None:
        """``dispatcher``: where accepted runs go (:mod:`skill_executor.dispatch`);
        ``recover``: mark this instance's runs left unfinished by its previous process
        failed (the embedded service; in a cluster, lost workers are swept instead)."""
        self.runner = runner
        self.store = store
        self.dispatcher = dispatcher
        self.on_finish = on_finish
        #: how long a run held for approval waits (SKILL_EXECUTOR_APPROVAL_TIMEOUT_SECONDS)
        self.approval_timeout = approval_timeout
        #: how many runs one key may have held at once (SKILL_EXECUTOR_MAX_PENDING_APPROVALS)
        self.max_pending = max_pending
        #: (deadline, run id) of the runs this process held for approval: one thread expires them
        self._deadlines: list[tuple[float, str]] = []
        self._expiry: threading.Thread | None = None
        self._wake_expiry = threading.Condition()
        self._handles: dict[str, RunHandle] = {}
        self._lock = threading.Lock()
        self._closing = False
        self._admission = concurrent.futures.ThreadPoolExecutor(
            max_workers=ADMISSION_THREADS, thread_name_prefix="run-admit"
        )
        self._io = concurrent.futures.ThreadPoolExecutor(max_workers=IO_THREADS, thread_name_prefix="run-io")
        interrupted = store.fail_interrupted() if recover else 0
        if interrupted:
            log.warning("marked %d run(s) interrupted by a restart as failed", interrupted)
        expired = self.expire_overdue() if recover else 0
        if expired:
            log.warning("%d run(s) held for approval expired while the service was down", expired)

    @property
    def remote(self) -> bool:
        """Whether runs execute in other processes (an API replica of a cluster)."""
        return self.dispatcher.remote

    @property
    def closing(self) -> bool:
        """True once a shutdown began: no new runs are accepted."""
        return self._closing

    async def offload(self, fn: Callable[..., T], *args: Any) -> T:
        """Run blocking ``fn(*args)`` on the manager's own threads, off the event loop
        (never on the web server's thread pool, which its synchronous routes need)."""
        return await asyncio.get_running_loop().run_in_executor(self._io, fn, *args)

    async def submit_async(
        self,
        request: RunRequest,
        *,
        principal: Principal,
        idempotency_key: str | None = None,
    ) -> tuple[RunRecord, RunHandle | None, bool]:
        """:meth:`submit` for an event loop: on the manager's admission threads."""
        return await asyncio.get_running_loop().run_in_executor(
            self._admission, lambda: self.submit(request, principal=principal, idempotency_key=idempotency_key)
        )

    def submit(
        self,
        request: RunRequest,
        *,
        principal: Principal,
        idempotency_key: str | None = None,
        hold: bool = True,
    ) -> tuple[RunRecord, RunHandle | None, bool]:
        """Accept a run of ``principal``; returns (record, live handle or None, whether
        this is a replay).  Blocking (SQLite, the skill catalog): call it off the event
        loop (:meth:`submit_async`).  ``hold``: a run the policy holds for approval waits
        for one (recorded ``pending_approval``); False: it is refused (no one can approve
        it where the caller waits, :meth:`run`).

        Order: an Idempotency-Key already used by this principal answers with its run
        (same request) or 409 (another request) before anything else; then shutdown
        (503 ``shutting_down``), authorization, validation and admission.
        """
        fingerprinted = (idempotency_key, fingerprint(request)) if idempotency_key else None
        if fingerprinted is not None:
            replay = self._replay(principal.id, *fingerprinted)
            if replay is not None:
                return replay
        if self._closing:
            raise shutdown_error()
        run_id = new_run_id()
        root = tracing.start(
            "skill_run", run_id=run_id, skill=request.skill, session=request.session, tenant=principal.id
        )
        try:
            with tracing.within(root), tracing.span("admission"):
                accepted = self._admit(request, principal, fingerprinted, run_id, root, hold)
        except BaseException as exc:
            tracing.end(root, exc)
            raise
        if accepted[2] or accepted[0].run_id != run_id:  # another request's run (a replay)
            tracing.end(root)
        else:
            accepted[0].root = root
        return accepted

    def run(self, request: RunRequest, *, principal: Principal, idempotency_key: str | None = None) -> RunResult:
        """Submit a run and wait for its result, for callers without an event loop (the CLI's
        ``run``, the doctor's probe, the skill-test local backend): the same refusals, record,
        idempotency and audit as ``POST /v1/runs``.  A run the policy would hold is refused
        (:meth:`submit`'s ``hold``); its error is raised as the :class:`ExecutorError` it was."""
        record, handle, _ = self.submit(request, principal=principal, idempotency_key=idempotency_key, hold=False)
        try:
            if handle is not None:
                record = handle.future.result()
            while record.status not in FINAL:  # a replay of a run still under way elsewhere
                if self._closing:
                    raise shutdown_error()
                time.sleep(0.2)
                record = self.reload(record)
        finally:
            self.answered(record)
        return self.result(record)

    def answered(self, record: RunRecord) -> None:
        """A front end has answered for ``record`` (from :meth:`submit`): the run's root
        span ends (what executes it may go on; it continues the trace)."""
        root, record.root = record.root, None
        tracing.end(root)

    def _admit(
        self,
        request: RunRequest,
        principal: Principal,
        fingerprinted: tuple[str, str] | None,
        run_id: str,
        root: Any,
        hold: bool,
    ) -> tuple[RunRecord, RunHandle | None, bool]:
        """Authorization, validation, admission and the run's record (the ``admission`` span)."""
        trace = (tracing.traceparent(root), tracing.trace_id(root))
        authorize_inputs(principal, (i.from_ for i in request.inputs))
        checked = self.runner.validate(request, tenant=principal.id)
        request = with_bundle_digest(request, checked)
        decision = checked.decision
        if decision.approval != "never":
            # a bundle's code is its sender's: its programs are never remembered (nor the installed skill's used)
            approved = set() if checked.bundled else self.store.approved_programs(principal.id, checked.skill.id)
            if decision.needs_approval(approved):
                if not hold:
                    raise decision.held_locally()
                return self._hold(request, principal.id, fingerprinted, run_id, trace, checked)
        if self.dispatcher.remote:
            return self._enqueue(request, principal.id, fingerprinted, run_id, trace)
        reservation = self.runner.limiter.reserve()
        payload = request.model_dump(mode="json", by_alias=True, exclude_defaults=True)
        try:
            record = self.store.create(
                run_id, payload, owner=principal.id, idempotency=fingerprinted, traceparent=trace[0], trace_id=trace[1]
            )
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
        handle.publish("status", "queued")
        with self._lock:
            closing = self._closing
            if not closing:
                self._handles[run_id] = handle
        if closing:  # the shutdown began while this run was being admitted
            reservation.release()
            error = shutdown_error(run_id)
            self.store.update(run_id, "cancelled", error={**error.to_dict()["error"], "status": error.status})
            raise error
        self.dispatcher.start(lambda: self._execute(request, handle, reservation, checked, principal.id))
        return record, handle, False

    def _hold(
        self,
        request: RunRequest,
        owner: str,
        fingerprinted: tuple[str, str] | None,
        run_id: str,
        trace: tuple[str | None, str | None],
        checked: RunPlan,
    ) -> tuple[RunRecord, RunHandle | None, bool]:
        """Record a run held for approval (pending_approval): nothing else of it exists (no
        place, no workspace, no container) until it is approved (:meth:`decide`).  A key holds
        at most :attr:`max_pending` runs (they take no run slot; near-simultaneous holds may
        pass it by a few)."""
        if fingerprinted is None or self.store.idempotent(owner, fingerprinted[0]) is None:
            full = self.store.pending_count(owner) >= self.max_pending
            if full and (self.expire_overdue(owner) == 0 or self.store.pending_count(owner) >= self.max_pending):
                raise Busy(
                    f"this key has {self.max_pending} runs waiting for approval, the most it may have; "
                    "decide or cancel one",
                    code="too_many_pending_approvals",
                    details={"max_pending_approvals": self.max_pending},
                )
        payload = request.model_dump(mode="json", by_alias=True, exclude_defaults=True)
        try:
            record = self.store.create(
                run_id,
                payload,
                owner=owner,
                idempotency=fingerprinted,
                traceparent=trace[0],
                trace_id=trace[1],
                status=PENDING,
            )
        except Conflict as exc:
            if fingerprinted is None or exc.code not in ("idempotent_replay", "idempotency_key_reused"):
                raise
            replay = self._replay(owner, *fingerprinted)
            if replay is None:  # pragma: no cover - a claimed key is never released
                raise
            return replay
        decision = checked.decision
        audit_log.warning(
            "run %s held for approval by policy rule %s",
            run_id,
            decision.rule,
            extra={
                "audit": True,
                "action": "run.approval_requested",
                "run_id": run_id,
                "tenant": owner,
                "rule": decision.rule,
                "programs": list(decision.programs),
            },
        )
        with self._wake_expiry:
            heapq.heappush(self._deadlines, (record.created_at + self.approval_timeout, run_id))
            if self._expiry is None:
                self._expiry = threading.Thread(target=self._expire_held, name="run-approval-expiry", daemon=True)
                self._expiry.start()
            self._wake_expiry.notify()
        return record, None, False

    def _expire_held(self) -> None:
        """The one thread that ends this process's held runs at their deadlines (a run decided
        meanwhile is left as it is; another replica's reads expire what this one misses)."""
        while True:
            with self._wake_expiry:
                while not self._closing and (not self._deadlines or self._deadlines[0][0] > time.time()):
                    wait = self._deadlines[0][0] - time.time() if self._deadlines else None
                    self._wake_expiry.wait(wait)
                if self._closing:
                    return
                _, run_id = heapq.heappop(self._deadlines)
            try:
                self._expire(self.store.get(run_id))
            except Exception:  # the next read expires it
                log.exception("expiring run %s held for approval failed", run_id)

    def _expire(self, record: RunRecord) -> RunRecord:
        """A run held for approval past the timeout ends failed (``approval_expired``)."""
        if record.status != PENDING or time.time() < record.created_at + self.approval_timeout:
            return record
        error = self._error(
            ExecutorError(
                f"run {record.run_id!r} waited for approval longer than {self.approval_timeout:g} s; nothing ran",
                code="approval_expired",
                details={"run_id": record.run_id},
            )
        )
        if self.store.decide(
            record, "failed", decision="expire", decided_by="timeout", via="timeout", programs=[], error=error
        ):
            audit_log.warning(
                "run %s expired waiting for approval",
                record.run_id,
                extra={"audit": True, "action": "run.approval", "run_id": record.run_id, "decision": "expire"},
            )
        return self.store.get(record.run_id)

    def expire_overdue(self, owner: str | None = None) -> int:
        """End every run held for approval past the timeout (of ``owner``'s); how many."""
        ended = 0
        for run_id in self.store.overdue(time.time() - self.approval_timeout, owner):
            ended += self._expire(self.store.get(run_id)).status != PENDING
        return ended

    def decide(
        self,
        run_id: str,
        who: Principal,
        decision: str,
        reason: str | None = None,
        *,
        via: str = "rest",
    ) -> tuple[RunRecord, RunHandle | None]:
        """Approve or reject a run held for approval (``decision``: approve or reject), as
        ``who``: the run's own key (unless its rule says ``approver: admin``) or an admin key
        (another key's run: audited).  Approved, it is queued as any run; rejected, it ends
        failed (``approval_rejected``).  Either is recorded (the audit record).  Blocking."""
        record = self._expire(self.get(run_id, who, action="run.approve"))
        if record.status != PENDING:
            raise Conflict(
                f"run {run_id!r} is not waiting for approval ({record.status})",
                code="approval_not_pending",
                details={"run_id": run_id, "status": record.status},
            )
        request = RunRequest.model_validate(record.request)
        try:
            checked = self.runner.validate(request, tenant=record.owner)  # the policy as it is now
        except ExecutorError as exc:  # denied (or the skill went) since: it ends with that error
            if self.store.decide(
                record,
                "failed",
                decision="reject",
                decided_by=who.id,
                via=via,
                programs=[],
                reason=exc.message,
                error=self._error(exc),
            ):
                audit_log.warning(
                    "run %s: reject (%s) on %s by %s",
                    run_id,
                    exc.code,
                    decision,
                    who.id,
                    extra={
                        "audit": True,
                        "action": "run.approval",
                        "run_id": run_id,
                        "tenant": record.owner,
                        "who": who.id,
                        "admin": who.admin,
                        "decision": "reject",
                        "via": via,
                        "reason": exc.message,
                        "rule": (exc.details or {}).get("rule"),
                        "programs": [],
                    },
                )
            raise
        policy = checked.decision
        if policy.approver == "admin" and not who.admin:
            raise Forbidden(
                f"policy rule {policy.rule!r} lets only an admin key decide on run {run_id!r}",
                code="approval_forbidden",
                details={"run_id": run_id, "rule": policy.rule},
            )
        programs = list(policy.programs)
        # a bundle's decisions are recorded apart: on-first-use never reads them as the installed skill's
        skill = f"bundle:{record.skill}" if checked.bundled else None
        audit = {
            "audit": True,
            "action": "run.approval",
            "run_id": run_id,
            "tenant": record.owner,
            "who": who.id,
            "admin": who.admin,
            "decision": decision,
            "via": via,
            "reason": reason,
            "rule": policy.rule,
            "programs": programs,
        }
        handle: RunHandle | None = None
        if decision == "reject":
            error = self._error(
                Forbidden(
                    f"run {run_id!r} was rejected" + (f": {reason}" if reason else "") + "; nothing ran",
                    code="approval_rejected",
                    details={"run_id": run_id, "rule": policy.rule, "reason": reason},
                )
            )
            decided = self.store.decide(
                record,
                "failed",
                decision="reject",
                decided_by=who.id,
                via=via,
                programs=programs,
                reason=reason,
                error=error,
                skill=skill,
            )
        elif self.dispatcher.remote:
            request = with_bundle_digest(request, checked)

            def queue(conn: Any) -> None:
                self.dispatcher.admit(conn)
                self.dispatcher.enqueue(conn, run_id, request, record.owner)

            decided = self.store.decide(
                record,
                "queued",
                decision="approve",
                decided_by=who.id,
                via=via,
                programs=programs,
                reason=reason,
                also=queue,
                skill=skill,
            )
        else:
            reservation = self.runner.limiter.reserve()  # busy: 429, and the run stays pending
            try:
                decided = self.store.decide(
                    record,
                    "queued",
                    decision="approve",
                    decided_by=who.id,
                    via=via,
                    programs=programs,
                    reason=reason,
                    skill=skill,
                )
            except BaseException:
                reservation.release()
                raise
            if not decided:
                reservation.release()
            else:
                record = replace(record, status="queued")
                handle = RunHandle(run_id, record)
                handle.publish("status", "queued")
                with self._lock:
                    self._handles[run_id] = handle
                self.dispatcher.start(lambda: self._execute(request, handle, reservation, checked, record.owner))
        if not decided:
            raise Conflict(
                f"run {run_id!r} is not waiting for approval (decided meanwhile)",
                code="approval_not_pending",
                details={"run_id": run_id},
            )
        audit_log.warning("run %s: %s by %s", run_id, decision, who.id, extra=audit)
        return self._current(run_id), handle

    def _enqueue(
        self,
        request: RunRequest,
        owner: str,
        fingerprinted: tuple[str, str] | None,
        run_id: str,
        trace: tuple[str | None, str | None],
    ) -> tuple[RunRecord, RunHandle | None, bool]:
        """Record and queue a run for the workers in one transaction (remote dispatch), with
        the traceparent its worker continues from."""
        payload = request.model_dump(mode="json", by_alias=True, exclude_defaults=True)

        def queue(conn: Any) -> None:
            self.dispatcher.admit(conn)
            self.dispatcher.enqueue(conn, run_id, request, owner)

        try:
            record = self.store.create(
                run_id,
                payload,
                owner=owner,
                idempotency=fingerprinted,
                also=queue,
                traceparent=trace[0],
                trace_id=trace[1],
            )
        except Conflict as exc:
            if fingerprinted is None or exc.code not in ("idempotent_replay", "idempotency_key_reused"):
                raise  # a refusal of the dispatcher's (session_lost)
            replay = self._replay(owner, *fingerprinted)
            if replay is None:  # pragma: no cover - a claimed key is never released
                raise
            return replay
        log.info("run %s queued", run_id, extra={"run_id": run_id})
        return record, None, False

    def run_claimed(
        self,
        record: RunRecord,
        *,
        history: list[tuple[str, Any]],
        sink: Callable[[int, str, Any], None],
        outcome: Callable[[RunRecord], None],
    ) -> RunHandle:
        """A worker's: execute a run another process accepted and this one claimed.
        ``history``: its events recorded before the claim (``status queued``; a retried
        run's earlier attempts too), then ``status running``, which the claim recorded.
        Every later event goes to ``sink``, its outcome to ``outcome`` (never to the store
        directly)."""
        with tracing.under(record.traceparent):
            return self._start_claimed(record, history, sink, outcome)

    def _start_claimed(
        self,
        record: RunRecord,
        history: list[tuple[str, Any]],
        sink: Callable[[int, str, Any], None],
        outcome: Callable[[RunRecord], None],
    ) -> RunHandle:
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
            checked = self.runner.validate(request, tenant=record.owner)
            reservation = self.runner.limiter.reserve()
        except ExecutorError as exc:
            self._finish(handle, "failed", None, self._error(exc))
            return handle
        except Exception:
            log.exception("run %s could not start", run_id)
            self._finish(handle, "failed", None, INTERNAL)
            return handle
        self.dispatcher.start(lambda: self._execute(request, handle, reservation, checked, record.owner))
        return handle

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
        self, request: RunRequest, handle: RunHandle, reservation: Reservation, checked: RunPlan, tenant: str
    ) -> None:
        # in the run's trace: its queue wait, its run's spans and every log line meanwhile
        with tracing.under(handle.record.traceparent):
            self._execute_traced(request, handle, reservation, checked, tenant)

    def _execute_traced(
        self, request: RunRequest, handle: RunHandle, reservation: Reservation, checked: RunPlan, tenant: str
    ) -> None:
        # "running" lives in memory (get() reports it); only the outcome is written.
        # A record left "queued" by a crash is marked failed at the next start.
        run_id = handle.run_id
        final: tuple[Status, dict[str, Any] | None, dict[str, Any] | None] = ("failed", None, INTERNAL)

        def listener(stream: str, chunk: bytes) -> None:
            handle.publish(stream, chunk.decode("utf-8", "replace"))

        try:
            started = reservation.acquire(handle.cancel)
            tracing.past("queue_wait", handle.record.created_at, time.time())  # until a claim and a slot
            if not started:  # cancelled while queued: nothing ran
                final = self._cancelled_before_start(handle, request, checked)
                return
            handle.started = True
            if handle.events[-1] != ("status", "running"):  # a worker's claim announced it already
                handle.publish("status", "running")
            result: RunResult = self.runner.run(
                request,
                run_id=run_id,
                listener=listener,
                cancel=handle.cancel,
                reservation=reservation,
                checked=checked,
                tenant=tenant,
            )
            body = result.model_dump(mode="json")
            if handle.cancel.is_set():
                by_shutdown = handle.reason == "shutdown"
                final = ("cancelled", body, self._error(shutdown_error(run_id)) if by_shutdown else None)
            else:
                final = ("completed", body, None)
        except ExecutorError as exc:
            final = ("failed", None, self._error(exc))
        except Exception:  # never leave a record unfinished
            log.exception("run %s failed unexpectedly", run_id)
        finally:
            reservation.release()
            self._finish(handle, *final)

    @staticmethod
    def _error(exc: ExecutorError) -> dict[str, Any]:
        """An error as recorded: its body plus the HTTP status a waiting client gets."""
        return {**exc.to_dict()["error"], "status": exc.status}

    def _cancelled_before_start(
        self, handle: RunHandle, request: RunRequest, checked: RunPlan
    ) -> tuple[Status, dict[str, Any] | None, dict[str, Any] | None]:
        if handle.reason == "shutdown":
            return "cancelled", None, self._error(shutdown_error(handle.run_id))
        result = RunResult(
            run_id=handle.run_id,
            skill=checked.skill.id,
            session=request.session,
            warnings=["the run was cancelled before it started"],
        )
        return "cancelled", result.model_dump(mode="json"), None

    def _finish(
        self, handle: RunHandle, status: Status, body: dict[str, Any] | None, error: dict[str, Any] | None
    ) -> None:
        """Publish the final status and the last event, wake waiters, then record the outcome.

        ``on_finish`` (the metrics) runs first, so what it records is visible to a client
        as soon as it has its answer.  Waiters are answered before the store write (off
        the answer's path); until the write is done the handle stays registered and
        :meth:`_current` answers from it, so a client that reads the run right after its
        answer sees the outcome.
        """
        run_id = handle.run_id
        record = replace(handle.record, status=status, result=body, error=error, updated_at=time.time())
        with handle._lock:
            record.events = len(handle.events) + 2  # + the final status and the last event
        if self.on_finish is not None:
            try:
                self.on_finish(record)
            except Exception:
                log.exception("on_finish hook failed")
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

    def handle(self, run_id: str) -> RunHandle | None:
        """The live view of a run of this process (no authorization: use after :meth:`get`)."""
        with self._lock:
            return self._handles.get(run_id)

    def _current(self, run_id: str) -> RunRecord:
        if not RUN_ID.match(run_id):
            raise NotFound(f"no run {run_id[:128]!r}", code="run_not_found")
        handle = self.handle(run_id)
        if handle is not None and handle.future.done():  # finished; its record is being written
            return replace(handle.future.result())
        record = self.store.get(run_id)
        if record.status == PENDING:
            record = self._expire(record)
        if handle is not None and handle.started and record.status == "queued":
            record.status = "running"
        return record

    def get(self, run_id: str, who: Principal, *, action: str = "run.read") -> RunRecord:
        """A run's record, if ``who`` may see it (another key's run is "not found")."""
        record = self._current(run_id)
        permit(who, record.owner, action=action, target=run_id, what=f"run {run_id!r}", code="run_not_found")
        return record

    def listing(
        self,
        who: Principal,
        filters: RunFilter = RunFilter(),
        *,
        limit: int,
        cursor: str | None = None,
        owner: str | None = None,
    ) -> tuple[list[RunListing], str | None]:
        """A page of the runs of ``who``'s key (an admin: of ``owner``'s, audited), newest
        first, and the cursor of the next page (None: this is the last)."""
        tenant = resolve_tenant_audited(who, owner, action="run.list", target="*")
        self.expire_overdue(tenant)  # a listing never shows a run pending past its deadline
        after = decode_cursor(cursor) if cursor is not None else None
        with self._lock:
            running = {run_id for run_id, h in self._handles.items() if h.started and not h.future.done()}
        page = self.store.listing(tenant, filters, limit=limit + 1, after=after, running=running)
        if len(page) > limit:
            return page[:limit], encode_cursor(page[limit - 1])
        return page, None

    def reload(self, record: RunRecord) -> RunRecord:
        """The current state of a record the caller already got through :meth:`get`."""
        return self._current(record.run_id)

    def cancel(self, run_id: str, who: Principal) -> RunHandle | None:
        """Ask a run to stop; its live handle when it runs in this process (await
        :meth:`settle`), None when it runs elsewhere (:meth:`cancel_and_settle`)."""
        record = self.get(run_id, who, action="run.cancel")
        if record.status in FINAL:
            raise Conflict(f"run {run_id!r} has already ended ({record.status})", code="run_finished")
        if record.status == PENDING:  # nothing started: it ends here, wherever it was held
            note = RunResult(
                run_id=run_id,
                skill=record.skill,
                session=record.session,
                warnings=["the run was cancelled while it waited for approval; nothing ran"],
            )
            if self.store.decide(
                record,
                "cancelled",
                decision="cancel",
                decided_by=who.id,
                via="cancel",
                programs=[],
                result=note.model_dump(mode="json"),
            ):
                audit_log.warning(
                    "run %s: cancel by %s",
                    run_id,
                    who.id,
                    extra={
                        "audit": True,
                        "action": "run.approval",
                        "run_id": run_id,
                        "tenant": record.owner,
                        "who": who.id,
                        "admin": who.admin,
                        "decision": "cancel",
                        "via": "cancel",
                    },
                )
                return None
            record = self.store.get(run_id)
            if record.status in FINAL:
                raise Conflict(f"run {run_id!r} has already ended ({record.status})", code="run_finished")
        if self.dispatcher.remote:
            if self.dispatcher.cancel(run_id) is None and self.store.get(run_id).status in FINAL:
                raise Conflict(f"run {run_id!r} has already ended", code="run_finished")
            return None
        handle = self.handle(run_id)
        if handle is None:
            if self.store.get(run_id).status in FINAL:  # it ended a moment ago
                raise Conflict(f"run {run_id!r} has already ended", code="run_finished")
            raise Conflict(f"run {run_id!r} is not running in this process", code="run_not_active")
        self._cancel(handle, "request")
        return handle

    async def cancel_and_settle(self, run_id: str, who: Principal, timeout: float) -> tuple[Status, bool]:
        """Cancel a run wherever it runs and wait up to ``timeout`` for it to stop: its
        status and whether that is final."""
        handle = await self.offload(self.cancel, run_id, who)
        if handle is not None:
            final = await self.settle(handle, timeout)
            if final is not None:
                return final.status, True
            return ("running" if handle.started else "queued"), False
        if not self.dispatcher.remote:  # a run held for approval: cancelled in its record
            record = await self.offload(self.store.get, run_id)
            return record.status, record.status in FINAL
        deadline = time.monotonic() + timeout
        async with self.dispatcher.watch(run_id, outcome_only=True) as wake:
            while True:
                wake.clear()
                record = await self.offload(self.store.get, run_id)
                left = deadline - time.monotonic()
                if record.status in FINAL or left <= 0:
                    return record.status, record.status in FINAL
                await _woken(wake, min(left, REMOTE_POLL_SECONDS))

    def cancel_local(self, run_id: str, reason: str) -> bool:
        """A worker's: stop a run of this process that was cancelled elsewhere (or whose
        lease went); whether it runs here."""
        handle = self.handle(run_id)
        if handle is None:
            return False
        self._cancel(handle, reason)
        return True

    def running(self) -> list[str]:
        """The ids of the runs this process executes now."""
        with self._lock:
            return list(self._handles)

    def _cancel(self, handle: RunHandle, reason: str) -> None:
        if not handle.cancel.is_set():
            handle.reason = reason
            handle.cancel.set()
        self.runner.limiter.wake()  # a queued run stops waiting for a slot

    @staticmethod
    async def settle(handle: RunHandle, timeout: float) -> RunRecord | None:
        """The final record of ``handle``'s run, or None if it has not ended within ``timeout``."""
        try:
            return await asyncio.wait_for(handle.wait(), timeout)
        except TimeoutError:
            return None

    async def wait(self, record: RunRecord, handle: RunHandle | None) -> RunRecord:
        """The final record of a run (polls the store, off the event loop, for runs of
        another process; refused with ``shutting_down`` once this one shuts down)."""
        if handle is not None:
            return await handle.wait()
        if self.dispatcher.remote:  # woken by the run's outcome, wherever it runs
            async with self.dispatcher.watch(record.run_id, outcome_only=True) as wake:
                while True:
                    wake.clear()  # then look: an outcome recorded from now on wakes us
                    record = await self.offload(self.reload, record)
                    if record.status in FINAL:
                        return record
                    if self._closing:
                        raise shutdown_error()
                    await _woken(wake, REMOTE_POLL_SECONDS)
        while record.status not in FINAL:
            if self._closing:
                raise shutdown_error()
            await asyncio.sleep(0.2)
            record = await self.offload(self.reload, record)
        return record

    @staticmethod
    def result(record: RunRecord) -> RunResult:
        """A finished run's result, or the error it ended with raised as the
        :class:`ExecutorError` it was (``shutting_down`` as :class:`ShuttingDown`)."""
        kind, body = terminal(record)
        if kind == "error" or record.result is None:
            error = dict(record.error or {"code": "error", "message": "the run failed"})
            cls = ShuttingDown if error.get("code") == ShuttingDown.code else ExecutorError
            raise cls(
                error.get("message", "the run failed"),
                code=error.get("code", "error"),
                status=int(error.get("status", 500)),
                details=error.get("details"),
            )
        return RunResult.model_validate(body)

    # -- shutdown --------------------------------------------------------------------------

    def _begin_shutdown(self) -> list[RunHandle]:
        with self._lock:
            self._closing = True
            handles = list(self._handles.values())
        with self._wake_expiry:  # the expiry thread ends
            self._wake_expiry.notify()
        return handles

    async def drain(self, grace: float, *, settle: float = 5.0) -> None:
        """Shut down gracefully: accept no new run, give the runs in flight up to
        ``grace`` seconds to finish, then cancel the rest (their records end
        ``cancelled`` with the ``shutting_down`` error, which their waiting clients get)
        and wait up to ``settle`` seconds for them to wind up.  Idempotent."""
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

    def shutdown(self, timeout: float = 15.0) -> None:
        """Cancel every run of this process and wait for them to clean up (blocking; after
        :meth:`drain` there is nothing left to wait for)."""
        handles = self._begin_shutdown()
        for handle in handles:
            self._cancel(handle, "shutdown")
        deadline = time.monotonic() + timeout
        concurrent.futures.wait([h.future for h in handles], timeout=timeout)
        for handle in handles:  # and their outcomes are in the store
            handle.recorded.wait(max(0.0, deadline - time.monotonic()))
        self.dispatcher.shutdown()
        self._admission.shutdown(wait=False, cancel_futures=True)
        self._io.shutdown(wait=False, cancel_futures=True)


async def _woken(wake: asyncio.Event, timeout: float) -> None:
    """Until ``wake`` is set, or ``timeout`` seconds."""
    try:
        await asyncio.wait_for(wake.wait(), timeout)
    except TimeoutError:
        pass
