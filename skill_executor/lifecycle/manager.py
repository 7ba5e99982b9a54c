"""The front door of every run: :class:`RunManager` submits (sync or async), reads,
lists, streams, cancels and waits for runs, and decides on held ones.

Every way a run starts comes through here: ``POST /v1/runs``, tool calls, MCP (both
transports), sessions' runs, ``skill-executor run`` and ``test`` (local backend), the
doctor's probe. What can refuse a run is :mod:`.admission`'s, in one order; runs held for
approval are :mod:`.approvals`'; where an accepted run executes is its
:class:`~skill_executor.lifecycle.seam.Dispatch`'s (in this process, or queued for a
cluster's workers): the manager never asks which.

Every run belongs to the tenant of the principal that submitted it: reading, streaming and
cancelling go through :func:`skill_executor.access.permit` (another key's run is "not
found"; an admin's access is audited).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import re
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any, TypeVar

from .. import tracing
from ..access import Principal, audit_log, permit, resolve_tenant_audited
from ..errors import Conflict, ExecutorError, NotFound
from ..runs.models import RunRequest, RunResult
from ..runs.pipeline import SkillRunner
from ..runs.plan import RunPlan
from . import outcomes
from .admission import Accepted, Admission, plan_of
from .approvals import Approvals
from .figures import EgressFigures, RunFigures
from .handle import RunHandle
from .hosts import HostApprovals
from .listing import RunFilter, RunListing, decode_cursor, encode_cursor
from .records import RunRecord, RunStore
from .seam import Dispatch, StreamEvent
from .status import FINAL, PENDING, Status

log = logging.getLogger(__name__)

T = TypeVar("T")
#: Threads for the blocking steps the event loop hands over -- admission (SQLite writes,
#: which may wait for another process's lock), and reads and building large answers --
#: the manager's own, so runs never hold the web server's pool, and a locked store delays
#: only admissions.
ADMISSION_THREADS = 4
IO_THREADS = 4
#: Run ids are ``new_run_id()``s; anything else (a 10k-character id) is simply unknown.
RUN_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


class RunManager:
    def __init__(
        self,
        runner: SkillRunner,
        store: RunStore,
        *,
        dispatch: Dispatch,
        figures: RunFigures,
        recover: bool = True,
        approval_timeout: float = 3600.0,
        max_pending: int = 100,
    ) -> None:
        """``dispatch``: where accepted runs go (:mod:`skill_executor.lifecycle.dispatch`);
        ``figures``: what the runs it executes add up to (what the metrics read);
        ``recover``: mark this instance's runs left unfinished by its previous process
        failed (the embedded service; in a cluster, lost workers are swept instead)."""
        self.runner = runner
        self.store = store
        self.dispatch = dispatch
        self.figures = figures
        self.approvals = Approvals(store, timeout=approval_timeout, max_pending=max_pending)
        #: what the egress gateway of this process saw (the service counts its events here)
        self.egress_figures = EgressFigures()
        #: hosts held for approval by the egress gateway (a rule's ask); the embedded service's
        #: runner holds its runs' there (``SkillRunner.host_desk``)
        self.hosts = HostApprovals(
            store.database,
            timeout=runner.settings.egress_ask_timeout_seconds,
            max_pending=runner.settings.egress_max_pending_asks,
            figures=self.egress_figures,
        )
        self.admission = Admission(runner, store, dispatch, self.approvals)
        self._admission_pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=ADMISSION_THREADS, thread_name_prefix="run-admit"
        )
        self._io = concurrent.futures.ThreadPoolExecutor(max_workers=IO_THREADS, thread_name_prefix="run-io")
        interrupted = store.fail_interrupted() if recover else 0
        if interrupted:
            log.warning("marked %d run(s) interrupted by a restart as failed", interrupted)
        expired = self.approvals.expire_overdue() if recover else 0
        if expired:
            log.warning("%d run(s) held for approval expired while the service was down", expired)

    @property
    def closing(self) -> bool:
        """True once a shutdown began: no new runs are accepted."""
        return self.admission.closing

    async def offload(self, fn: Callable[..., T], *args: Any) -> T:
        """Run blocking ``fn(*args)`` on the manager's own threads, off the event loop
        (never on the web server's thread pool, which its synchronous routes need)."""
        return await asyncio.get_running_loop().run_in_executor(self._io, fn, *args)

    # -- submitting -------------------------------------------------------------------------

    def submit(
        self,
        request: RunRequest,
        *,
        principal: Principal,
        idempotency_key: str | None = None,
        hold: bool = True,
    ) -> Accepted:
        """Accept a run of ``principal`` (:mod:`.admission` refuses, in its order); returns
        (record, live handle or None, whether this is a replay).  Blocking (SQLite, the
        skill catalog): call it off the event loop (:meth:`submit_async`).  ``hold``: a run
        the policy holds for approval waits for one (recorded ``pending_approval``); False:
        it is refused (no one can approve it where the caller waits, :meth:`run`)."""
        return self.admission.submit(request, principal, idempotency_key, hold)

    async def submit_async(
        self, request: RunRequest, *, principal: Principal, idempotency_key: str | None = None
    ) -> Accepted:
        """:meth:`submit` for an event loop: on the manager's admission threads."""
        return await asyncio.get_running_loop().run_in_executor(
            self._admission_pool, lambda: self.submit(request, principal=principal, idempotency_key=idempotency_key)
        )

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
                if self.closing:
                    raise outcomes.shutdown_error()
                time.sleep(0.2)
                record = self.reload(record)
        finally:
            self.answered(record)
        return outcomes.result(record)

    @staticmethod
    def answered(record: RunRecord) -> None:
        """A front end has answered for ``record`` (from :meth:`submit`): the run's root
        span ends (what executes it may go on; it continues the trace)."""
        root, record.root = record.root, None
        tracing.end(root)

    # -- reading ----------------------------------------------------------------------------

    def _current(self, run_id: str) -> RunRecord:
        if not RUN_ID.match(run_id):
            raise NotFound(f"no run {run_id[:128]!r}", code="run_not_found")
        handle = self.dispatch.handle(run_id)
        if handle is not None and handle.future.done():  # finished; its record is being written
            return replace(handle.future.result())
        record = self.store.get(run_id)
        if record.status == PENDING:
            record = self.approvals.expire(record)
        return self.dispatch.current(record)

    def get(self, run_id: str, who: Principal, *, action: str = "run.read") -> RunRecord:
        """A run's record, if ``who`` may see it (another key's run is "not found")."""
        record = self._current(run_id)
        permit(who, record.owner, action=action, target=run_id, what=f"run {run_id!r}", code="run_not_found")
        return record

    def reload(self, record: RunRecord) -> RunRecord:
        """The current state of a record the caller already got through :meth:`get`."""
        return self._current(record.run_id)

    def handle(self, run_id: str) -> RunHandle | None:
        """The live view of a run of this process (no authorization: use after :meth:`get`)."""
        return self.dispatch.handle(run_id)

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
        self.approvals.expire_overdue(tenant)  # a listing never shows a run pending past its deadline
        after = decode_cursor(cursor) if cursor is not None else None
        running = set(self.dispatch.running())
        page = self.store.listing(tenant, filters, limit=limit + 1, after=after, running=running)
        if len(page) > limit:
            return page[:limit], encode_cursor(page[limit - 1])
        return page, None

    def events(self, record: RunRecord, after: int) -> AsyncIterator[StreamEvent] | None:
        """A run's events after id ``after`` until its last (None: nothing more will come);
        blocking to start (use :meth:`offload`), then an async stream."""
        return self.dispatch.events(record, after)

    async def wait(self, record: RunRecord, handle: RunHandle | None) -> RunRecord:
        """The final record of a run, wherever it runs (``shutting_down`` once this
        process shuts down)."""
        if handle is not None:
            return await handle.wait()
        if self.closing and record.status not in FINAL:
            raise outcomes.shutdown_error()
        return await self.dispatch.wait(record)

    @staticmethod
    def result(record: RunRecord) -> RunResult:
        """A finished run's result, or the error it ended with raised as the
        :class:`ExecutorError` it was (``shutting_down`` as :class:`ShuttingDown`)."""
        return outcomes.result(record)

    # -- cancelling -------------------------------------------------------------------------

    def cancel(self, run_id: str, who: Principal) -> RunHandle | None:
        """Ask a run to stop; its live handle when it runs in this process (await
        :meth:`settle`), None when it runs elsewhere or was only held."""
        record = self.get(run_id, who, action="run.cancel")
        if record.status in FINAL:
            raise Conflict(f"run {run_id!r} has already ended ({record.status})", code="run_finished")
        if record.status == PENDING:  # nothing started: it ends here, wherever it was held
            if self.approvals.cancel(record, who):
                return None
            record = self.store.get(run_id)
            if record.status in FINAL:
                raise Conflict(f"run {run_id!r} has already ended ({record.status})", code="run_finished")
        return self.dispatch.cancel(record)

    async def cancel_and_settle(self, run_id: str, who: Principal, timeout: float) -> tuple[Status, bool]:
        """Cancel a run wherever it runs and wait up to ``timeout`` for it to stop: its
        status and whether that is final."""
        handle = await self.offload(self.cancel, run_id, who)
        record = await self.offload(self.store.get, run_id)
        if handle is None and record.status in FINAL:  # held (or queued) and ended at once
            return record.status, True
        return await self.dispatch.settle(record, handle, timeout)

    @staticmethod
    async def settle(handle: RunHandle, timeout: float) -> RunRecord | None:
        """The final record of ``handle``'s run, or None if it has not ended within ``timeout``."""
        try:
            return await asyncio.wait_for(handle.wait(), timeout)
        except TimeoutError:
            return None

    # -- approvals --------------------------------------------------------------------------

    def held_for(self, record: RunRecord) -> RunPlan:
        """What a held run waits for: its plan under the policy as it is now (the rule that
        holds it, who may decide, the programs it starts). Blocking."""
        return plan_of(self.runner, record)

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
        (another key's run: audited).  Approved, it is dispatched as any run; rejected, it
        ends failed (``approval_rejected``).  Either is recorded (the audit record).  Blocking."""
        record = self.approvals.expire(self.get(run_id, who, action="run.approve"))
        if record.status != PENDING:
            raise Conflict(
                f"run {run_id!r} is not waiting for approval ({record.status})",
                code="approval_not_pending",
                details={"run_id": run_id, "status": record.status},
            )
        try:
            plan = plan_of(self.runner, record)  # the policy as it is now
        except ExecutorError as exc:  # denied (or the skill went) since: it ends with that error
            self.approvals.refused(record, who, exc, decision, via)
            raise
        verdict = self.approvals.judge(record, plan, who, decision, reason, via)
        handle: RunHandle | None = None
        if decision == "reject":
            decided = self.approvals.reject(record, verdict, who, reason, via)
        else:
            request = RunRequest.model_validate(record.request)
            ticket = self.dispatch.reserve(run_id, request, record.owner)  # busy: 429, the run stays held
            try:
                decided = self.store.decide(
                    record,
                    "queued",
                    decision="approve",
                    decided_by=who.id,
                    via=via,
                    programs=verdict.programs,
                    reason=reason,
                    also=ticket.record,
                    skill=verdict.skill,
                )
            except BaseException:
                ticket.release()
                raise
            if not decided:
                ticket.release()
            else:
                handle = self.dispatch.start(ticket, replace(record, status="queued"), plan)
        if not decided:
            raise Conflict(
                f"run {run_id!r} is not waiting for approval (decided meanwhile)",
                code="approval_not_pending",
                details={"run_id": run_id},
            )
        audit_log.warning("run %s: %s by %s", run_id, decision, who.id, extra=verdict.audit)
        return self._current(run_id), handle

    # -- shutdown ---------------------------------------------------------------------------

    async def drain(self, grace: float, *, settle: float = 5.0) -> None:
        """Shut down gracefully: accept no new run, give the runs in flight up to
        ``grace`` seconds to finish, then cancel the rest (their records end
        ``cancelled`` with the ``shutting_down`` error, which their waiting clients get)
        and wait up to ``settle`` seconds for them to wind up.  Idempotent."""
        self.admission.closing = True
        self.approvals.close()
        self.hosts.close()  # held requests are refused: the runs in flight go on without waiting
        await self.dispatch.drain(grace, settle)

    def shutdown(self, timeout: float = 15.0) -> None:
        """Cancel every run of this process and wait for them to clean up (blocking; after
        :meth:`drain` there is nothing left to wait for)."""
        self.admission.closing = True
        self.approvals.close()
        self.hosts.close()
        self.dispatch.close(timeout)
        self._admission_pool.shutdown(wait=False, cancel_futures=True)
        self._io.shutdown(wait=False, cancel_futures=True)
