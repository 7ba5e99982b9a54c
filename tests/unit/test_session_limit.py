"""A tenant keeps at most SESSIONS_PER_TENANT sessions: each may hold a session's disk
for the TTL, so without a bound one key could claim the host's disk by naming sessions."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from skill_executor.errors import ExecutorError
from skill_executor.workspace.sessions import SessionLimit, SessionStore


def test_a_new_session_past_the_limit_is_refused_an_old_one_is_not(tmp_path: Path) -> None:
    store = SessionStore(tmp_path, 3600, per_tenant=2)
    for name in ("a", "b"):
        with store.use(name, "t1", wait=1):
            pass
    with pytest.raises(SessionLimit) as refused, store.use("c", "t1", wait=1):
        pass
    assert refused.value.status == 429 and refused.value.code == "session_limit"
    assert refused.value.details == {"sessions": 2, "limit": 2}
    assert not (store.root / "t1" / "c").exists()  # nothing made for the refused one
    with store.use("a", "t1", wait=1):  # a kept session goes on
        pass
    with store.use("c", "t2", wait=1):  # another tenant has its own count
        pass
    assert store.end("a", "t1")
    with store.use("c", "t1", wait=1):  # a place freed by an end (or the TTL's sweep)
        pass


def test_two_new_sessions_at_once_cannot_both_take_the_last_place(tmp_path: Path) -> None:
    store = SessionStore(tmp_path, 3600, per_tenant=3)
    for name in ("a", "b"):
        with store.use(name, "t", wait=1):
            pass
    start = threading.Barrier(8)
    outcomes: list[str] = []

    def new(name: str) -> None:
        start.wait()
        try:
            with store.use(name, "t", wait=5):
                outcomes.append("ran")
        except ExecutorError as exc:
            outcomes.append(exc.code)

    threads = [threading.Thread(target=new, args=(f"n{i}",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["ran"] + ["session_limit"] * 7
    assert len([p for p in (store.root / "t").iterdir() if p.is_dir()]) == 3


def test_a_session_whose_start_failed_takes_no_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new session that fails to start (its volume cannot be made, say) is not kept:
    failing starts cannot use up the tenant's places until the TTL's sweep."""
    store = SessionStore(tmp_path, 3600, per_tenant=2)
    with store.use("kept", "t", wait=1):
        pass
    real_attach = store._attach
    failures = []

    def failing_attach(directory: Path, session: str) -> None:
        failures.append(session)
        raise OSError("no space left for the session's volume")

    monkeypatch.setattr(store, "_attach", failing_attach)
    for name in ("f1", "f2", "kept"):
        with pytest.raises(OSError), store.use(name, "t", wait=1):
            pass
    assert failures == ["f1", "f2", "kept"]
    # What the failed starts made is gone; a session that was there before stays.
    assert sorted(p.name for p in (store.root / "t").iterdir()) == ["kept"]
    monkeypatch.setattr(store, "_attach", real_attach)
    with store.use("new", "t", wait=1) as work:
        (work / "f").write_text("x")
    with pytest.raises(SessionLimit):
        with store.use("another", "t", wait=1):
            pass


def test_expired_sessions_take_no_place_before_the_sweep(tmp_path: Path) -> None:
    store = SessionStore(tmp_path, 60, per_tenant=2)
    for name in ("old", "recent"):
        with store.use(name, "t", wait=1) as work:
            (work / "data").write_text(name)
    long_ago = time.time() - 3600
    os.utime(store.root / "t" / "old" / ".last_used", (long_ago, long_ago))
    with store.use("new", "t", wait=1):  # the expired one made room
        pass
    assert sorted(p.name for p in (store.root / "t").iterdir()) == ["new", "recent"]
    with pytest.raises(SessionLimit), store.use("more", "t", wait=1):  # an idle but live one still counts
        pass
    with store.use("old", "u", wait=1):  # another tenant's expired sessions are not this one's business
        pass
    os.utime(store.root / "u" / "old" / ".last_used", (long_ago, long_ago))
    with pytest.raises(SessionLimit), store.use("more", "t", wait=1):
        pass
    assert (store.root / "u" / "old").is_dir()
