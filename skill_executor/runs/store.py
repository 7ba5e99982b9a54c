"""Run records in the service's database: status, request, result, and idempotency keys.

Records survive a restart.  A run still ``queued`` or ``running`` when a new process
opens the store was interrupted by that restart; :meth:`RunStore.fail_interrupted`
marks it ``failed`` with the reason, so no record is left "running" forever.
``events`` is the number of Server-Sent Events the run's live stream had, so a finished
run's stream can give its last events the same ids (``Last-Event-ID``).

Every record has an ``owner``: the tenant (API key id, :mod:`skill_executor.access`) that
made it.  Idempotency keys are per owner.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from sqlalchemy import Connection, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from ..access import LOCAL_TENANT
from ..db import Database
from ..db.schema import idempotency as idempotency_keys
from ..db.schema import runs
from ..errors import Conflict, NotFound

Status = Literal["queued", "running", "completed", "failed", "cancelled"]
FINAL: frozenset[str] = frozenset({"completed", "failed", "cancelled"})


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
    #: front end has answered (:meth:`~skill_executor.runs.manager.RunManager.answered`).
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
    ) -> RunRecord:
        """Insert a queued run of ``owner``; with ``idempotency=(key, fingerprint)``
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
                        status="queued",
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
            run_id, "queued", skill, session, now, now, request, owner=owner, trace_id=trace_id, traceparent=traceparent
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
