"""A run's events and outcome in the database, and the notifications that wake readers.

Events are rows of ``run_events`` numbered from 1 (the SSE ids); every write that adds
events or ends a run sends ``NOTIFY`` with the run's id only (payloads are ids, never
data: readers fetch the rows), delivered when the transaction commits.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, insert, select, text, update

from ...db.schema import run_events, runs
from ...runs.models import RunResult

#: Channels: new events of a run; a run ended; a run is asked to stop.
EVENTS_CHANNEL = "run_events"
DONE_CHANNEL = "run_done"
CANCEL_CHANNEL = "run_cancel"


def notify(conn: Connection, channel: str, run_id: str) -> None:
    conn.execute(text("SELECT pg_notify(:channel, :id)"), {"channel": channel, "id": run_id})


def append(conn: Connection, run_id: str, events: Iterable[tuple[int, str, Any]]) -> int:
    """Record events ``(seq, kind, data)``; how many."""
    now = time.time()
    rows = [
        {"run_id": run_id, "seq": seq, "kind": kind, "data": json.dumps(data), "at": now} for seq, kind, data in events
    ]
    if rows:
        conn.execute(insert(run_events), rows)
    return len(rows)


def last_seq(conn: Connection, run_id: str) -> int:
    found = conn.execute(
        select(run_events.c.seq).where(run_events.c.run_id == run_id).order_by(run_events.c.seq.desc()).limit(1)
    ).scalar_one_or_none()
    return int(found or 0)


def after(conn: Connection, run_id: str, seq: int) -> list[tuple[int, str, Any]]:
    rows = conn.execute(
        select(run_events.c.seq, run_events.c.kind, run_events.c.data)
        .where(run_events.c.run_id == run_id, run_events.c.seq > seq)
        .order_by(run_events.c.seq)
    ).all()
    return [(int(r[0]), r[1], json.loads(r[2])) for r in rows]


def end(
    conn: Connection,
    run_id: str,
    status: str,
    *,
    result: dict[str, Any] | None,
    error: dict[str, Any] | None,
    only_if: Any = None,
) -> bool:
    """End a run that has not ended: its record, its last two events (the final status,
    then ``result`` or ``error``) and the ``run_done`` notification, in ``conn``'s
    transaction. ``only_if``: a further condition on the row (a worker's claim). Whether
    it ended it (False: it had ended already, or the condition failed)."""
    condition = runs.c.status.in_(("queued", "running"))
    if only_if is not None:
        condition = condition & only_if
    seq = last_seq(conn, run_id)
    values: dict[str, Any] = {"status": status, "updated_at": time.time(), "events": seq + 2}
    if result is not None:
        values["result"] = json.dumps(result)
    if error is not None:
        values["error"] = json.dumps(error)
    done = conn.execute(update(runs).where(runs.c.run_id == run_id, condition).values(**values)).rowcount
    if not done:
        return False
    if error is not None and status != "completed":
        last: tuple[str, Any] = ("error", {k: v for k, v in error.items() if k != "status"})
    else:
        last = ("result", result or {})
    append(conn, run_id, [(seq + 1, "status", status), (seq + 2, *last)])
    notify(conn, DONE_CHANNEL, run_id)
    return True


def not_started(run_id: str, skill: str, session: str | None) -> dict[str, Any]:
    """The result of a run cancelled before it started (as the embedded service gives it)."""
    result = RunResult(
        run_id=run_id, skill=skill, session=session, warnings=["the run was cancelled before it started"]
    )
    return result.model_dump(mode="json")
