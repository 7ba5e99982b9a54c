"""A worker's one writer of its runs' events and outcomes (:class:`EventWriter`): ordered
(a run's outcome is written after, or with, all its events), grouped (what arrived while
the last batch was written is the next batch, with one ``NOTIFY`` per run), and only for
runs this worker still holds (``status='running' AND worker_id=me``): a worker declared
lost writes nothing."""

from __future__ import annotations

import json
import logging
import queue as queues
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, select, update

from ...db import Database
from ...db.schema import run_events, runs
from ..handle import TERMINAL
from ..records import RunRecord
from ..status import FINAL
from . import events as ev

log = logging.getLogger(__name__)

#: How long a failed write waits before it is tried again (while the lease may hold).
RETRY_SECONDS = 0.5


@dataclass(slots=True)
class _Outcome:
    record: RunRecord
    #: The run's last events (its final status, then result or error): written with it.
    last: list[tuple[int, str, Any]]
    done: threading.Event = field(default_factory=threading.Event)


class EventWriter:
    """The worker's one writer of events and outcomes (ordered: a run's outcome is written
    after, or with, all its events)."""

    def __init__(self, database: Database, worker_id: str, lost: threading.Event) -> None:
        self.database = database
        self.worker_id = worker_id
        self.lost = lost
        self._queue: queues.SimpleQueue[tuple[str, int, str, Any] | _Outcome | None] = queues.SimpleQueue()
        self._lock = threading.Lock()
        self._last: dict[str, list[tuple[int, str, Any]]] = {}
        self._thread = threading.Thread(target=self._loop, name="run-events", daemon=True)
        self._thread.start()

    def sink(self, run_id: str) -> Any:
        def put(seq: int, kind: str, data: Any) -> None:
            if kind in TERMINAL or (kind == "status" and data in FINAL):
                with self._lock:  # held for the outcome's transaction
                    self._last.setdefault(run_id, []).append((seq, kind, data))
            else:
                self._queue.put((run_id, seq, kind, data))

        return put

    def outcome(self, record: RunRecord) -> None:
        with self._lock:
            last = self._last.pop(record.run_id, [])
        item = _Outcome(record, last)
        self._queue.put(item)
        item.done.wait()

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=5.0)

    def _loop(self) -> None:
        # Group commit: what arrived while the last batch was being written is the next
        # batch (no waiting for more: a lone event is written at once).
        while True:
            item = self._queue.get()
            batch = []
            while item is not None:
                batch.append(item)
                try:
                    item = self._queue.get_nowait()
                except queues.Empty:
                    break
            if batch:
                self._write(batch)
            if item is None:
                return

    def _write(self, batch: list[tuple[str, int, str, Any] | _Outcome]) -> None:
        while not self.lost.is_set():
            try:
                with self.database.write() as conn:
                    self._apply(conn, batch)
                break
            except Exception as exc:  # Postgres away: keep trying while the lease may hold
                log.warning("worker %s: writing %d event(s) failed (%s); retrying", self.worker_id, len(batch), exc)
                time.sleep(RETRY_SECONDS)
        for item in batch:
            if isinstance(item, _Outcome):
                item.done.set()

    def _apply(self, conn: Connection, batch: list[tuple[str, int, str, Any] | _Outcome]) -> None:
        ids = sorted({item.record.run_id if isinstance(item, _Outcome) else item[0] for item in batch})
        # Only runs this worker still holds (locked against a sweep meanwhile).
        held = set(
            conn.execute(
                select(runs.c.run_id)
                .where(runs.c.run_id.in_(ids), runs.c.status == "running", runs.c.worker_id == self.worker_id)
                .with_for_update()
            ).scalars()
        )
        now = time.time()
        rows: list[dict[str, Any]] = []
        touched: set[str] = set()
        for item in batch:
            events = [(item.record.run_id, *e) for e in item.last] if isinstance(item, _Outcome) else [item]
            for run_id, seq, kind, data in events:
                if run_id in held:
                    rows.append({"run_id": run_id, "seq": seq, "kind": kind, "data": json.dumps(data), "at": now})
                    touched.add(run_id)
        if rows:
            conn.execute(self.database.insert_ignore(run_events), rows)
        for run_id in sorted(touched):
            ev.notify(conn, ev.EVENTS_CHANNEL, run_id)
        for item in batch:
            if isinstance(item, _Outcome) and item.record.run_id in held:
                record = item.record
                values: dict[str, Any] = {"status": record.status, "updated_at": now, "events": record.events}
                if record.result is not None:
                    values["result"] = json.dumps(record.result)
                if record.error is not None:
                    values["error"] = json.dumps(record.error)
                conn.execute(update(runs).where(runs.c.run_id == record.run_id).values(**values))
                ev.notify(conn, ev.DONE_CHANNEL, record.run_id)
