"""Run records in the service's database: status, request, result, and idempotency keys.

Records survive a restart.  A run still ``queued`` or ``running`` when a new process
opens the store was interrupted by that restart; :meth:`RunStore.fail_interrupted`
marks it ``failed`` with the reason, so no record is left "running" forever.
``events`` is the number of Server-Sent Events the run's live stream had, so a finished
run's stream can give its last events the same ids (``Last-Event-ID``).

Every record has an ``owner``: the tenant (API key id, :mod:`skill_executor.access`) that
made it.  Idempotency keys are per owner.

:meth:`RunStore.listing` pages through one owner's runs, newest first, by keyset (created_at,
run_id): a page never skips or repeats a run however many are added meanwhile, and costs
the same on page 1000 as on page 1 (index ``ix_runs_owner_created``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import ColumnElement, Connection, and_, func, insert, literal, not_, or_, select, true, tuple_, update
from sqlalchemy.exc import IntegrityError

from ..access import LOCAL_TENANT
from ..db import Database
from ..db.schema import idempotency as idempotency_keys
from ..db.schema import run_approvals, runs
from ..errors import Conflict, NotFound
from .listing import RunFilter, RunListing
from .status import PENDING, Status


@dataclass(slots=True)
class RunRecord:
    run_id: str
    status: Status
    skill: str
    session: str | None
    created_at: float
    updated_at: float
    request: dict[str, Any]
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    #: The tenant (API key id) the run belongs to.
    owner: str = LOCAL_TENANT
    #: How many events the run's live stream had (None: not recorded, e.g. interrupted).
    events: int | None = None
    #: The run's trace (None while tracing is off): its id, and the traceparent of its root
    #: span, which the process that executes it continues from.
    trace_id: str | None = None
    traceparent: str | None = None
    #: In the process that admitted the run (not stored): its open root span, ended when the
    #: front end has answered (:meth:`~skill_executor.lifecycle.manager.RunManager.answered`).
    root: Any = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "status": self.status,
            "skill": self.skill,
            "session": self.session,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "request": self.request,
            "result": self.result,
            "error": self.error,
            "owner": self.owner,
            "trace_id": self.trace_id,
        }


def _status_is(status: str, running: Collection[str]) -> ColumnElement[bool]:
    """Records say ``queued`` until a run of the embedded service ends ("running" lives in
    memory): ``running`` names this process's started runs."""
    started = runs.c.run_id.in_(list(running)) if running else None
    if status == "running" and started is not None:
        return or_(runs.c.status == "running", and_(runs.c.status == "queued", started))
    if status == "queued" and started is not None:
        return and_(runs.c.status == "queued", not_(started))
    return runs.c.status == status


class RunStore:
    """``instance``: the id of the service instance whose runs these are (its data dir's,
    :func:`skill_executor.owners.data_dir_id`): records name it, and a start marks only
    its own interrupted."""

    def __init__(self, database: Database, *, instance: str) -> None:
        self.database = database
        self.instance = instance

    def idempotent(self, owner: str, key: str) -> tuple[str, str] | None:
        """(run_id, fingerprint) of the run ``owner`` made with Idempotency-Key ``key``."""
        with self.database.read() as conn:
            row = conn.execute(
                select(idempotency_keys.c.run_id, idempotency_keys.c.fingerprint).where(
                    idempotency_keys.c.owner == owner, idempotency_keys.c.key == key
                )
            ).first()
        return (row[0], row[1]) if row is not None else None

    def create(
        self,
        run_id: str,
        request: dict[str, Any],
        *,
        owner: str,
        idempotency: tuple[str, str] | None = None,
        also: Callable[[Connection], None] | None = None,
        traceparent: str | None = None,
        trace_id: str | None = None,
        status: Status = "queued",
    ) -> RunRecord:
        """Insert a queued run (or one held for approval: ``status`` pending_approval) of
        ``owner``; with ``idempotency=(key, fingerprint)``
        claim the key (per owner) too, in the same transaction, and run ``also`` in it
        after the insert (a dispatcher queues the run there). ``traceparent``, ``trace_id``:
        the run's trace (:mod:`skill_executor.tracing`), recorded with it.

        Raises :class:`~skill_executor.errors.Conflict` with ``details.run_id`` when the key
        is already taken (the caller then serves that run instead).
        """
        now = time.time()
        skill, session = request.get("skill", ""), request.get("session")
        try:
            with self.database.write() as conn:
                if idempotency is not None:
                    key, fingerprint = idempotency
                    conn.execute(
                        insert(idempotency_keys).values(
                            owner=owner, key=key, fingerprint=fingerprint, run_id=run_id, created_at=now
                        )
                    )
                conn.execute(
                    insert(runs).values(
                        run_id=run_id,
                        status=status,
                        skill=skill,
                        session=session,
                        created_at=now,
                        updated_at=now,
                        request=json.dumps(request),
                        owner=owner,
                        instance=self.instance,
                        trace_id=trace_id,
                        traceparent=traceparent,
                    )
                )
                if also is not None:
                    also(conn)
        except IntegrityError:
            if idempotency is None:
                raise
            found = self.idempotent(owner, idempotency[0])
            if found is None:  # pragma: no cover - a claimed key is never released
                raise
            raise Conflict(
                "this Idempotency-Key was already used",
                code="idempotency_key_reused" if found[1] != idempotency[1] else "idempotent_replay",
                details={"run_id": found[0]},
            ) from None
        return RunRecord(
            run_id, status, skill, session, now, now, request, owner=owner, trace_id=trace_id, traceparent=traceparent
        )

    def update(
        self,
        run_id: str,
        status: Status,
        *,
        result: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
        events: int | None = None,
    ) -> None:
        values: dict[str, Any] = {"status": status, "updated_at": time.time()}
        if result is not None:
            values["result"] = json.dumps(result)
        if error is not None:
            values["error"] = json.dumps(error)
        if events is not None:
            values["events"] = events
        with self.database.write() as conn:
            conn.execute(update(runs).where(runs.c.run_id == run_id).values(**values))

    def decide(
        self,
        record: RunRecord,
        status: Status,
        *,
        decision: str,
        decided_by: str,
        via: str,
        programs: list[str],
        reason: str | None = None,
        error: dict[str, Any] | None = None,
        result: dict[str, Any] | None = None,
        also: Callable[[Connection], None] | None = None,
        skill: str | None = None,
    ) -> bool:
        """End a run's wait for approval: move it from pending_approval to ``status`` and record
        the decision (the audit record), in one transaction with ``also`` (a dispatcher queues it
        there); ``skill``: the record's skill when not the run's (``bundle:<name>``).  False when
        it was not pending any more (another replica decided first)."""
        now = time.time()
        values: dict[str, Any] = {"status": status, "updated_at": now}
        if error is not None:
            values["error"] = json.dumps(error)
        if result is not None:
            values["result"] = json.dumps(result)
        with self.database.write() as conn:
            cursor = conn.execute(
                update(runs).where(runs.c.run_id == record.run_id, runs.c.status == PENDING).values(**values)
            )
            if cursor.rowcount != 1:
                return False
            conn.execute(
                insert(run_approvals).values(
                    run_id=record.run_id,
                    owner=record.owner,
                    skill=(skill or record.skill).lower(),
                    programs=json.dumps(programs),
                    decision=decision,
                    decided_by=decided_by,
                    via=via,
                    reason=reason,
                    decided_at=now,
                )
            )
            if also is not None:
                also(conn)
        return True

    def overdue(self, created_before: float, owner: str | None = None) -> list[str]:
        """The ids of runs held for approval since before ``created_before`` (of ``owner``'s)."""
        where = [runs.c.status == PENDING, runs.c.created_at < created_before]
        if owner is not None:
            where.append(runs.c.owner == owner)
        with self.database.read() as conn:
            return [row[0] for row in conn.execute(select(runs.c.run_id).where(*where)).all()]

    def pending_count(self, owner: str) -> int:
        """How many runs of ``owner``'s wait for approval."""
        with self.database.read() as conn:
            return int(
                conn.execute(
                    select(func.count()).select_from(runs).where(runs.c.owner == owner, runs.c.status == PENDING)
                ).scalar_one()
            )

    def approved_programs(self, owner: str, skill: str) -> set[str]:
        """The programs approved before in runs of ``owner``'s of ``skill`` (``on-first-use``)."""
        with self.database.read() as conn:
            rows = conn.execute(
                select(run_approvals.c.programs).where(
                    run_approvals.c.owner == owner,
                    run_approvals.c.skill == skill.lower(),
                    run_approvals.c.decision == "approve",
                )
            ).all()
        return {program for row in rows for program in json.loads(row[0])}

    def approval(self, run_id: str) -> dict[str, Any] | None:
        """The decision recorded on a run held for approval (None: none yet)."""
        with self.database.read() as conn:
            row = conn.execute(select(run_approvals).where(run_approvals.c.run_id == run_id)).first()
        if row is None:
            return None
        return {
            "decision": row.decision,
            "decided_by": row.decided_by,
            "via": row.via,
            "reason": row.reason,
            "decided_at": row.decided_at,
            "programs": json.loads(row.programs),
        }

    def get(self, run_id: str) -> RunRecord:
        with self.database.read() as conn:
            row = conn.execute(select(runs).where(runs.c.run_id == run_id)).first()
        if row is None:
            raise NotFound(f"no run {run_id!r}", code="run_not_found")
        return RunRecord(
            run_id=row.run_id,
            status=row.status,
            skill=row.skill,
            session=row.session,
            created_at=row.created_at,
            updated_at=row.updated_at,
            request=json.loads(row.request),
            result=json.loads(row.result) if row.result else None,
            error=json.loads(row.error) if row.error else None,
            owner=row.owner or LOCAL_TENANT,
            events=row.events,
            trace_id=row.trace_id,
            traceparent=row.traceparent,
        )

    def listing(
        self,
        owner: str,
        filters: RunFilter = RunFilter(),
        *,
        limit: int,
        after: tuple[float, str] | None = None,
        running: Collection[str] = (),
    ) -> list[RunListing]:
        """Up to ``limit`` of ``owner``'s runs that match ``filters``, newest first (ties by
        run id), from just after the position ``after`` (a cursor's).  ``running``: the
        runs of this process that have started (their records still say queued)."""
        where: list[ColumnElement[bool]] = [runs.c.owner == owner]
        if filters.skill is not None:
            name = filters.skill.lower()
            where.append(
                or_(func.lower(runs.c.skill) == name, func.lower(runs.c.skill).startswith(f"{name}@", autoescape=True))
            )
        if filters.statuses:
            where.append(or_(*(_status_is(s, running) for s in filters.statuses)))
        if filters.session is not None:
            where.append(runs.c.session == filters.session)
        if filters.created_after is not None:
            where.append(runs.c.created_at >= filters.created_after)
        if filters.created_before is not None:
            where.append(runs.c.created_at < filters.created_before)
        if after is not None:
            created_at, run_id = after
            # a row value: one range of the index on SQLite and Postgres alike
            where.append(tuple_(runs.c.created_at, runs.c.run_id) < tuple_(literal(created_at), literal(run_id)))
        query = (
            select(
                runs.c.run_id,
                runs.c.status,
                runs.c.skill,
                runs.c.session,
                runs.c.created_at,
                runs.c.updated_at,
                runs.c.owner,
                runs.c.trace_id,
                runs.c.error,
            )
            .where(and_(true(), *where))
            .order_by(runs.c.created_at.desc(), runs.c.run_id.desc())
            .limit(limit)
        )
        with self.database.read() as conn:
            rows = conn.execute(query).all()
        return [
            RunListing(
                run_id=row.run_id,
                status="running" if row.status == "queued" and row.run_id in running else row.status,
                skill=row.skill,
                session=row.session,
                created_at=row.created_at,
                updated_at=row.updated_at,
                owner=row.owner,
                trace_id=row.trace_id,
                error=json.loads(row.error) if row.error else None,
            )
            for row in rows
        ]

    def fail_interrupted(self) -> int:
        """Mark this instance's runs left queued/running by its previous process as failed
        (records from before instances were recorded count as this one's)."""
        error = json.dumps({"code": "interrupted", "message": "the service restarted while this run was in progress"})
        with self.database.write() as conn:
            cursor = conn.execute(
                update(runs)
                .where(
                    runs.c.status.in_(("queued", "running")),
                    or_(runs.c.instance == self.instance, runs.c.instance.is_(None)),
                )
                .values(status="failed", error=error, updated_at=time.time())
            )
        return int(cursor.rowcount)

    def writable(self, timeout: float = 2.0) -> bool:
        """Whether a write succeeds within ``timeout`` seconds (a health check must not
        wait out a 30 s lock held by another process)."""
        return self.database.writable(timeout)
