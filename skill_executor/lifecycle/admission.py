"""Where a run is refused: the one admission every run goes through, whichever door it
came by (HTTP, tools, MCP, sessions' runs, ``skill-executor run`` and ``test``, the
doctor's probe), in one order:

1. an ``Idempotency-Key`` this key used already answers with its run (same request) or
   409 ``idempotency_key_reused`` (another request), before anything else: a replay is
   never refused for being busy, or because the skill has gone since;
2. shutdown (503 ``shutting_down``);
3. authorization of the request's inputs (:func:`~skill_executor.access.authorize_inputs`);
4. an inline bundle is checked and installed (it is then named by its digest);
5. validation and the command policy (:meth:`SkillRunner.validate`: every 4xx of a bad request,
   ``command_denied``, the run's network (``network_not_allowed``: a request's ``network`` asking
   more than its rule's ``egress`` allows, or where none applies), ``policy_unenforceable``,
   ``egress_unavailable`` (a rule with ``egress``, and no egress gateway));
6. a run the policy holds: ``too_many_pending_approvals``, or refused where no one can
   approve it (``approval_required`` for the CLI);
7. the dispatch's place (``busy``; in a cluster, in the transaction that records the run:
   ``no_workers``, ``busy``, ``session_lost``, ``session_limit``).

A cluster worker refuses nothing of this again: it plans the run it claimed
(:meth:`~skill_executor.lifecycle.dispatch.local.InProcess.execute_claimed`), and a policy changed
since still ends it failed.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from .. import tracing
from ..access import Principal, authorize_inputs
from ..errors import Conflict
from ..registry.bundles import BundleStore, decode_bundle
from ..runs.models import RunRequest, SkillBundle
from ..runs.pipeline import SkillRunner, new_run_id
from ..runs.plan import RunPlan
from .approvals import Approvals
from .handle import RunHandle
from .outcomes import shutdown_error
from .records import RunRecord, RunStore
from .seam import Dispatch
from .status import PENDING

#: What an admission answers: the run's record, its live handle (None: it runs elsewhere or
#: is held), and whether this is a replay of an earlier submission.
Accepted = tuple[RunRecord, RunHandle | None, bool]


def fingerprint(request: RunRequest) -> str:
    canonical = json.dumps(request.model_dump(mode="json", by_alias=True), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def installed(request: RunRequest, bundles: BundleStore | None, tenant: str, max_bytes: int) -> RunRequest:
    """``request`` with its inline bundle checked and installed for ``tenant`` (once per
    digest), named by its digest and its skill's id: the run is recorded and dispatched so (the
    archive is kept by the :class:`BundleStore`, never in the run's record)."""
    bundle = request.bundle
    if bundle is None or bundle.data is None or bundles is None:
        return request
    skill = bundles.add(tenant, decode_bundle(bundle.data, max_bytes=max_bytes))
    return request.model_copy(update={"skill": request.skill or skill.id, "bundle": SkillBundle(digest=skill.digest)})


@dataclass(slots=True)
class Admission:
    runner: SkillRunner
    store: RunStore
    dispatch: Dispatch
    approvals: Approvals
    #: A shutdown began: no new run is admitted (``shutting_down``).
    closing: bool = False

    def submit(self, request: RunRequest, principal: Principal, idempotency_key: str | None, hold: bool) -> Accepted:
        fingerprinted = (idempotency_key, fingerprint(request)) if idempotency_key else None
        if fingerprinted is not None:
            replay = self.replay(principal.id, *fingerprinted)
            if replay is not None:
                return replay
        if self.closing:
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

    def _admit(
        self,
        request: RunRequest,
        principal: Principal,
        fingerprinted: tuple[str, str] | None,
        run_id: str,
        root: Any,
        hold: bool,
    ) -> Accepted:
        tenant = principal.id
        trace = (tracing.traceparent(root), tracing.trace_id(root))
        authorize_inputs(principal, [i.from_ for i in request.inputs])
        settings = self.runner.settings
        request = installed(request, self.runner.bundles, tenant, settings.skill_upload_max_bytes)
        plan = self.runner.validate(request, tenant=tenant)
        held = False
        decision = plan.decision
        if decision.approval != "never":
            # a bundle's code is its sender's: its programs are never remembered (nor the installed skill's used)
            approved = set() if plan.bundled else self.store.approved_programs(tenant, plan.skill.id)
            held = decision.needs_approval(approved)
            if held and not hold:
                raise decision.held_locally()
            if held:
                self.approvals.make_room(tenant, fingerprinted[0] if fingerprinted else None)
        ticket = None if held else self.dispatch.reserve(run_id, request, tenant)
        payload = request.model_dump(mode="json", by_alias=True, exclude_defaults=True)
        try:
            record = self.store.create(
                run_id,
                payload,
                owner=tenant,
                idempotency=fingerprinted,
                also=ticket.record if ticket is not None else None,
                traceparent=trace[0],
                trace_id=trace[1],
                status=PENDING if held else "queued",
            )
        except Conflict as exc:
            if ticket is not None:
                ticket.release()
            if fingerprinted is None or exc.code not in ("idempotent_replay", "idempotency_key_reused"):
                raise  # a refusal of the dispatch's (session_lost, ...)
            # Another request with this key claimed it between the lookup and now.
            replay = self.replay(tenant, *fingerprinted)
            if replay is None:  # pragma: no cover - a claimed key is never released
                raise
            return replay
        except BaseException:
            if ticket is not None:
                ticket.release()
            raise
        if ticket is None:
            self.approvals.held(record, plan)
            return record, None, False
        return record, self.dispatch.start(ticket, record, plan), False

    def replay(self, owner: str, key: str, fingerprint: str) -> Accepted | None:
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
        record = self.store.get(run_id)
        if record.status == PENDING:
            record = self.approvals.expire(record)
        return self.dispatch.current(record), self.dispatch.handle(run_id), True


def plan_of(runner: SkillRunner, record: RunRecord) -> RunPlan:
    """A held run's plan under the policy as it is now (its request as recorded)."""
    return runner.validate(RunRequest.model_validate(record.request), tenant=record.owner)
