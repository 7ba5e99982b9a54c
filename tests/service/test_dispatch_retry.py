"""A lost worker's running runs, on a real Postgres (no processes): ``interrupted``, never
re-executed, unless their request opts in with ``retry``; then queued again while attempts
are left, and never when the session they need is lost."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import insert, select, text, update

from skill_executor.db import Database
from skill_executor.db.migrate import upgrade
from skill_executor.db.schema import runs, session_leases, workers
from skill_executor.lifecycle.dispatch import events as ev
from skill_executor.lifecycle.dispatch import queue
from skill_executor.lifecycle.dispatch.membership import Membership
from skill_executor.lifecycle.dispatch.sweep import RETRIES_USED, SESSION_GONE, sweep
from skill_executor.runs.models import RunRequest
from skill_executor.lifecycle.records import RunStore

pytestmark = pytest.mark.usefixtures("postgres_server")


@pytest.fixture
def database(postgres_url: str) -> Iterator[Database]:
    found = Database(postgres_url)
    upgrade(found)
    yield found
    found.close()


def worker(database: Database, worker_id: str, *, lease: float) -> None:
    """A worker row whose lease ends ``lease`` seconds from now (negative: lost)."""
    with database.write() as conn:
        conn.execute(
            insert(workers).values(
                worker_id=worker_id,
                host="h",
                tiers='["default"]',
                capacity=1,
                started_at=time.time(),
                lease_until=time.time() + lease,
            )
        )


def running(database: Database, worker_id: str, *, attempt: int = 1, session: str | None = None, **more: Any) -> str:
    """A run ``worker_id`` claimed (its job fetched), as a worker's claim leaves it."""
    run_id = f"run-{time.monotonic_ns()}"
    request = RunRequest(skill="s", command="true", session=session, **more).model_dump(
        mode="json", exclude_defaults=True
    )

    def claimed(conn: Any) -> None:
        job = queue.defer(
            conn, run_id, queue=queue.tier_queue(queue.DEFAULT_TIER), lock=queue.session_lock("k", session)
        )
        conn.execute(text("UPDATE procrastinate_jobs SET status = 'doing' WHERE id = :j"), {"j": job})
        conn.execute(
            update(runs)
            .where(runs.c.run_id == run_id)
            .values(status="running", worker_id=worker_id, attempt=attempt, job_id=job)
        )
        ev.append(conn, run_id, [(1, "status", "queued"), (2, "status", "running")])
        if session:
            conn.execute(
                insert(session_leases).values(tenant="k", session=session, worker_id=worker_id, taken_at=time.time())
            )

    RunStore(database, instance="test").create(run_id, request, owner="k", also=claimed)
    return run_id


def state(database: Database, run_id: str) -> tuple[Any, ...]:
    with database.read() as conn:
        row = conn.execute(
            select(runs.c.status, runs.c.worker_id, runs.c.attempt, runs.c.error, runs.c.job_id).where(
                runs.c.run_id == run_id
            )
        ).one()
        job = conn.execute(
            text("SELECT status, queue_name, lock FROM procrastinate_jobs WHERE id = :j"), {"j": row.job_id}
        ).one()
        events = ev.after(conn, run_id, 0)
    return row.status, row.worker_id, row.attempt, json.loads(row.error) if row.error else None, tuple(job), events


def test_without_retry_a_lost_workers_run_ends_interrupted_and_is_never_queued_again(database: Database) -> None:
    worker(database, "w1", lease=-1)
    run_id = running(database, "w1")
    swept = sweep(database)
    assert swept.workers == ["w1"] and swept.interrupted == [run_id] and swept.requeued == []
    status, _, attempt, error, job, events = state(database, run_id)
    assert (status, attempt, job[0]) == ("failed", 1, "failed")
    assert error["code"] == "interrupted" and error["details"] == {"reason": "worker_lost", "attempt": 1}
    assert [e[1:] for e in events[-2:]] == [
        ("status", "failed"),
        ("error", {k: v for k, v in error.items() if k != "status"}),
    ]


def test_a_run_that_opts_in_is_queued_again_for_any_worker_with_its_events_going_on(database: Database) -> None:
    worker(database, "w1", lease=-1)
    run_id = running(database, "w1", retry=2)
    swept = sweep(database)
    assert swept.requeued == [run_id] and swept.interrupted == []
    status, holder, attempt, error, job, events = state(database, run_id)
    assert (status, holder, attempt, error) == ("queued", None, 1, None)
    assert job == ("todo", queue.tier_queue(queue.DEFAULT_TIER), None)
    assert events == [
        (1, "status", "queued"),
        (2, "status", "running"),
        (3, "retry", {"reason": "worker_lost", "attempt": 1, "retries_left": 1}),
        (4, "status", "queued"),
    ]
    with database.read() as conn:  # the old job ended: nothing of it runs again
        assert conn.execute(text("SELECT count(*) FROM procrastinate_jobs WHERE status = 'doing'")).scalar_one() == 0


def test_a_run_whose_retries_are_used_up_ends_interrupted_saying_so(database: Database) -> None:
    worker(database, "w1", lease=-1)
    run_id = running(database, "w1", attempt=2, retry=1)
    sweep(database)
    status, _, attempt, error, _, _ = state(database, run_id)
    assert (status, attempt) == ("failed", 2)
    assert error["code"] == "interrupted" and error["message"] == RETRIES_USED
    assert error["details"] == {"reason": "worker_lost", "attempt": 2, "retry": 1}


def test_a_session_run_is_not_retried_when_the_sessions_files_died_with_the_worker(database: Database) -> None:
    worker(database, "w1", lease=-1)
    run_id = running(database, "w1", session="s", retry=3)
    sweep(database, moving=False)
    status, _, _, error, _, _ = state(database, run_id)
    assert status == "failed" and error["code"] == "interrupted" and error["message"] == SESSION_GONE


def test_a_session_run_is_retried_where_the_session_moves(database: Database) -> None:
    worker(database, "w1", lease=-1)
    run_id = running(database, "w1", session="s", retry=1)
    sweep(database, moving=True)
    status, holder, _, _, job, _ = state(database, run_id)
    assert (status, holder) == ("queued", None)
    assert job == ("todo", queue.tier_queue(queue.DEFAULT_TIER), queue.session_lock("k", "s"))
    with database.read() as conn:  # the session is free for whichever worker runs it next
        assert conn.execute(select(session_leases)).all() == []


def test_a_live_workers_runs_are_left_alone(database: Database) -> None:
    worker(database, "w1", lease=60)
    run_id = running(database, "w1", retry=1)
    assert sweep(database).workers == []
    assert state(database, run_id)[:3] == ("running", "w1", 1)


def test_a_worker_restarted_on_its_data_dir_queues_its_retryable_runs_again(database: Database) -> None:
    worker(database, "w1", lease=60)
    kept = running(database, "w1", session="s", retry=1)
    lost = running(database, "w1")
    member = Membership(database, "w1", tiers=["default"], capacity=1, lease=20, heartbeat=5)
    assert member.register() == [lost]
    assert state(database, kept)[:2] == ("queued", None)
    assert state(database, lost)[0] == "failed"
    with database.read() as conn:  # its session (files on its disk) is still its
        assert conn.execute(select(session_leases.c.worker_id)).scalars().all() == ["w1"]


def test_retry_is_bounded_and_never_negative() -> None:
    from pydantic import ValidationError

    for bad in (-1, 6, "x"):
        with pytest.raises(ValidationError):
            RunRequest(skill="s", command="true", retry=bad)


# -- waiting for a worker -----------------------------------------------------------------


def queued(database: Database, *, age: float) -> str:
    """A run queued ``age`` seconds ago (its job waiting)."""
    run_id = f"run-{time.monotonic_ns()}"
    request = RunRequest(skill="s", command="true").model_dump(mode="json", exclude_defaults=True)

    def deferred(conn: Any) -> None:
        job = queue.defer(conn, run_id, queue=queue.tier_queue(queue.DEFAULT_TIER), lock=None)
        conn.execute(update(runs).where(runs.c.run_id == run_id).values(job_id=job, updated_at=time.time() - age))
        ev.append(conn, run_id, [(1, "status", "queued")])

    RunStore(database, instance="test").create(run_id, request, owner="k", also=deferred)
    return run_id


def test_a_run_no_worker_takes_in_time_ends_queue_timeout_and_never_starts(database: Database) -> None:
    old, fresh = queued(database, age=700), queued(database, age=5)
    swept = sweep(database, queue_timeout=600)
    assert swept.expired == [old]
    status, _, _, error, job, events = state(database, old)
    assert status == "failed" and error["code"] == "queue_timeout" and error["status"] == 503
    assert job[0] == "cancelled"  # no worker can fetch it any more
    assert [e[1:] for e in events] == [
        ("status", "queued"),
        ("status", "failed"),
        ("error", {k: v for k, v in error.items() if k != "status"}),
    ]
    assert state(database, fresh)[0] == "queued" and state(database, fresh)[4][0] == "todo"
    assert sweep(database).expired == []  # no timeout given: nothing expires


def test_a_run_fetched_by_a_worker_is_left_to_its_claim(database: Database) -> None:
    run_id = queued(database, age=700)
    with database.write() as conn:
        conn.execute(text("UPDATE procrastinate_jobs SET status = 'doing' WHERE args->>'run_id' = :r"), {"r": run_id})
    assert sweep(database, queue_timeout=600).expired == []
    assert state(database, run_id)[0] == "queued"


def dispatcher(database: Database) -> Any:
    from skill_executor.lifecycle.dispatch.postgres import QueueDispatch

    return QueueDispatch(database, RunStore(database, instance="test"), queued_allowance=1)


def test_admission_counts_only_live_workers_and_refuses_when_there_is_none(database: Database) -> None:
    from skill_executor.lifecycle.dispatch.postgres import NoWorkers
    from skill_executor.errors import Busy

    admit = dispatcher(database).admit
    with pytest.raises(NoWorkers) as caught, database.write() as conn:
        admit(conn)
    assert caught.value.status == 503 and caught.value.code == "no_workers" and caught.value.retry_after
    worker(database, "dead", lease=-1)  # a lost worker's capacity is no capacity
    with pytest.raises(NoWorkers), database.write() as conn:
        admit(conn)
    worker(database, "w1", lease=60)  # capacity 1, allowance 1: two runs may wait or run
    queued(database, age=0)
    queued(database, age=0)
    with database.write() as conn:
        admit(conn)
    queued(database, age=0)
    with pytest.raises(Busy), database.write() as conn:
        admit(conn)


def test_the_sessions_quota_holds_across_the_cluster(database: Database) -> None:
    """SESSIONS_PER_TENANT counts a tenant's live sessions (a run within the TTL) on every
    worker: a new one past it is refused before it is queued; a live one goes on; idle ones
    (past the TTL) and other tenants' do not count."""
    from skill_executor.lifecycle.dispatch.postgres import QueueDispatch
    from skill_executor.workspace.sessions import SessionLimit

    dispatch = QueueDispatch(
        database, RunStore(database, instance="test"), queued_allowance=100, sessions_per_tenant=2, session_ttl=60
    )
    worker(database, "w1", lease=60)
    store = RunStore(database, instance="test")

    def submit(session: str, tenant: str = "k", age: float = 0) -> str:
        run_id = f"run-{time.monotonic_ns()}"
        request = RunRequest(skill="s", command="true", session=session)

        def queued(conn: Any) -> None:
            dispatch.enqueue(conn, run_id, request, tenant)
            conn.execute(update(runs).where(runs.c.run_id == run_id).values(updated_at=time.time() - age))

        store.create(run_id, request.model_dump(mode="json", exclude_defaults=True), owner=tenant, also=queued)
        return run_id

    submit("old", age=120)  # idle past the TTL: not counted
    submit("a")
    submit("b")
    with pytest.raises(SessionLimit) as caught:
        submit("c")
    assert caught.value.status == 429 and caught.value.details == {"sessions": 2, "limit": 2}
    with database.read() as conn:  # refused before anything was recorded
        assert conn.execute(select(runs.c.run_id).where(runs.c.session == "c")).first() is None
    submit("a")  # a live session goes on
    submit("c", tenant="other")  # another tenant's quota is its own


# -- order, cancellation, races (found in review) -----------------------------------------


def queued_on(database: Database, target: str, session: str) -> str:
    """A run of session ``session`` queued on ``target`` behind the session's lock."""
    run_id = f"run-{time.monotonic_ns()}"
    request = RunRequest(skill="s", command="true", session=session).model_dump(mode="json", exclude_defaults=True)

    def deferred(conn: Any) -> None:
        job = queue.defer(conn, run_id, queue=target, lock=queue.session_lock("k", session))
        conn.execute(update(runs).where(runs.c.run_id == run_id).values(job_id=job))
        ev.append(conn, run_id, [(1, "status", "queued")])

    RunStore(database, instance="test").create(run_id, request, owner="k", also=deferred)
    return run_id


def fetch(database: Database, queues: list[str]) -> str | None:
    """The run of the job a worker listening on ``queues`` gets next (procrastinate's fetch)."""
    with database.write() as conn:
        found = conn.execute(
            text("SELECT (procrastinate_fetch_job_v2(:q, NULL)).args->>'run_id'"), {"q": queues}
        ).scalar_one_or_none()
    return str(found) if found is not None else None


def test_a_retried_session_run_goes_before_the_sessions_later_runs_after_a_restart(database: Database) -> None:
    worker(database, "w1", lease=60)
    first = running(database, "w1", session="s", retry=1)
    queued_on(database, queue.worker_queue("w1"), "s")  # the session's next run, waiting for the lock
    Membership(database, "w1", tiers=["default"], capacity=1, lease=20, heartbeat=5).register()
    assert fetch(database, [queue.tier_queue("default"), queue.worker_queue("w1")]) == first


def test_a_retried_session_run_goes_before_the_sessions_later_runs_after_a_sweep(database: Database) -> None:
    worker(database, "w1", lease=-1)
    first = running(database, "w1", session="s", retry=1)
    second = queued_on(database, queue.worker_queue("w1"), "s")
    third = queued_on(database, queue.worker_queue("w1"), "s")
    sweep(database, moving=True)
    order = []
    for _ in range(3):
        got = fetch(database, [queue.tier_queue("default")])
        assert got is not None
        order.append(got)
        with database.write() as conn:  # that job is done: the lock frees for the next
            conn.execute(
                text("UPDATE procrastinate_jobs SET status = 'succeeded' WHERE args->>'run_id' = :r"), {"r": got}
            )
    assert order == [first, second, third]


def test_a_run_asked_to_stop_is_not_retried_when_its_worker_is_lost(database: Database) -> None:
    from skill_executor.lifecycle.dispatch.sweep import CANCELLED_LOST

    worker(database, "w1", lease=-1)
    run_id = running(database, "w1", retry=2)
    with database.write() as conn:
        conn.execute(update(runs).where(runs.c.run_id == run_id).values(cancel_requested=True))
    swept = sweep(database, moving=True, queue_timeout=600)
    assert swept.requeued == [] and swept.interrupted == [run_id]
    status, _, _, error, job, events = state(database, run_id)
    assert status == "cancelled" and error["message"] == CANCELLED_LOST and job[0] == "failed"
    assert not any(kind == "retry" for _, kind, _ in events)


def test_two_runs_of_one_new_session_at_once_are_one_session_for_the_quota(database: Database) -> None:
    import threading

    from skill_executor.lifecycle.dispatch.postgres import QueueDispatch

    dispatch = QueueDispatch(
        database, RunStore(database, instance="test"), queued_allowance=100, sessions_per_tenant=1, session_ttl=60
    )
    other = Database(database.url.render_as_string(hide_password=False))
    worker(database, "w1", lease=60)
    inside, go = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def submit(db: Database, hold: bool) -> None:
        run_id = f"run-{time.monotonic_ns()}"
        request = RunRequest(skill="s", command="true", session="x")

        def queued(conn: Any) -> None:
            dispatch.enqueue(conn, run_id, request, "k")
            if hold:
                inside.set()
                go.wait(10)

        try:
            body = request.model_dump(mode="json", exclude_defaults=True)
            RunStore(db, instance="test").create(run_id, body, owner="k", also=queued)
        except BaseException as exc:
            errors.append(exc)

    first = threading.Thread(target=submit, args=(database, True))
    first.start()
    assert inside.wait(10)
    second = threading.Thread(target=submit, args=(other, False))
    second.start()
    time.sleep(0.5)  # the second has looked for the session and waits on the tenant's lock
    go.set()
    first.join()
    second.join()
    other.close()
    assert errors == []


def test_a_session_run_waiting_behind_its_sessions_long_run_does_not_expire(database: Database) -> None:
    worker(database, "w1", lease=60)
    running(database, "w1", session="s")
    behind = queued_on(database, queue.worker_queue("w1"), "s")
    with database.write() as conn:
        conn.execute(update(runs).where(runs.c.run_id == behind).values(updated_at=time.time() - 700))
    assert sweep(database, queue_timeout=600).expired == []
    assert state(database, behind)[0] == "queued"


def test_a_job_fetched_by_a_worker_that_died_before_its_claim_is_queued_again(database: Database) -> None:
    run_id = queued(database, age=0)
    assert fetch(database, [queue.tier_queue("default")]) == run_id  # fetched, never claimed
    assert sweep(database, stuck_after=60).requeued == []  # just fetched: its claim may come
    with database.write() as conn:  # ... fetched long ago
        conn.execute(text("UPDATE procrastinate_events SET at = now() - interval '5 minutes' WHERE type = 'started'"))
    assert sweep(database, stuck_after=60).requeued == [run_id]
    status, _, _, _, job, _ = state(database, run_id)
    assert status == "queued" and job[0] == "todo"
    assert fetch(database, [queue.tier_queue("default")]) == run_id
