"""Housekeeping steps aside for runs, and for an HTTP answer until it is sent."""

from __future__ import annotations

import threading
import time
import warnings
from pathlib import Path

from skill_executor.activity import Activity
from skill_executor.config import Settings

from ..conftest import SKILLS
from ..helpers import eventually


def test_a_hold_keeps_housekeeping_waiting_until_released_once() -> None:
    activity = Activity()
    hold = activity.hold()
    done = threading.Event()
    waiter = threading.Thread(target=lambda: (activity.wait_quiet(10.0), done.set()))
    waiter.start()
    assert not done.wait(0.3)  # held: housekeeping waits
    hold.release()
    assert done.wait(5.0)
    hold.release()  # idempotent: the count never goes below zero
    with activity.running():
        started = time.monotonic()
        activity.wait_quiet(0.2)  # a run in progress: waits, but no longer than max_wait
        assert time.monotonic() - started >= 0.2
    waiter.join()
    assert activity._active == 0


def test_the_run_route_releases_its_hold_whatever_the_answer(tmp_path: Path) -> None:
    from skill_executor.api.app import create_app

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # starlette's TestClient warns about its httpx use
        from starlette.testclient import TestClient

        settings = Settings(
            runtime="local", skills_dirs=[SKILLS], data_dir=tmp_path / "data", skills_refresh_seconds=0.0
        )
        app = create_app(settings)
        client = TestClient(app, base_url="http://127.0.0.1", client=("127.0.0.1", 50000))
    with client:
        activity = app.state.executor.runtime.activity
        answered = client.post("/v1/runs", json={"skill": "math-tools", "command": "echo hi"})
        assert answered.status_code == 200 and answered.json()["stdout"] == "hi\n"
        refused = client.post("/v1/runs", json={"skill": "no-such-skill", "command": "true"})
        assert refused.status_code == 404
        accepted = client.post("/v1/runs?wait=false", json={"skill": "math-tools", "command": "true"})
        assert accepted.status_code == 202
        assert eventually(lambda: activity._active == 0, timeout=10)
