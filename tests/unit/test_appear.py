"""Waiting for the warm launcher's socket by inotify (skill_executor/runtimes/docker/appear.py)."""

from __future__ import annotations

import os
import resource
import threading
import time
from pathlib import Path

import pytest

from skill_executor.runtimes.docker import appear
from skill_executor.runtimes.docker.appear import wait_for


def later(seconds: float, action: object) -> threading.Timer:
    timer = threading.Timer(seconds, action)  # type: ignore[arg-type]
    timer.start()
    return timer


def test_a_rename_or_a_link_into_the_folder_wakes_the_wait_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the safety look pushed past the timeout: only the event can end the wait in time
    # (whatever the host's load; a wall-clock bound here failed on a loaded host)
    monkeypatch.setattr(appear, "LOOK_SECONDS", 60.0)
    target = tmp_path / "sock"
    (tmp_path / "sock.tmp").write_text("")
    later(0.1, lambda: os.rename(tmp_path / "sock.tmp", target))
    started = time.monotonic()
    assert wait_for(target, 5.0)
    assert time.monotonic() - started < 4.0  # without the event the next look is at 5 s

    link = tmp_path / "link"
    later(0.1, lambda: os.symlink("sock.tmp-gone", link))  # a dangling link counts: gVisor publishes one
    assert wait_for(link, 5.0)


def test_an_entry_made_before_the_wait_is_seen(tmp_path: Path) -> None:
    (tmp_path / "there").write_text("")
    assert wait_for(tmp_path / "there", 0.0)


def test_timeout_and_stop_end_the_wait(tmp_path: Path) -> None:
    started = time.monotonic()
    assert not wait_for(tmp_path / "never", 0.3)
    assert 0.3 <= time.monotonic() - started < 1.0
    stop = threading.Event()
    later(0.1, stop.set)
    started = time.monotonic()
    assert not wait_for(tmp_path / "never", 30.0, stop=stop.is_set)
    assert time.monotonic() - started < 1.0


def test_descriptors_past_1024_and_no_watch_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Many open descriptors (the service raises its limit) must not break the wait; without
    an inotify watch (instances or watches used up) it polls, and still sees the entry."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2048:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(2048, hard), hard))
        if min(2048, hard) < 1200:
            pytest.skip("cannot open 1,100 descriptors here")
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        later(0.05, lambda: (tmp_path / "a").write_text(""))
        assert wait_for(tmp_path / "a", 5.0)
    finally:
        for fd in held:
            os.close(fd)

    def no_watch(folder: Path) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(appear, "_watch", no_watch)
    later(0.05, lambda: (tmp_path / "b").write_text(""))
    assert wait_for(tmp_path / "b", 5.0)
    assert not wait_for(tmp_path / "never", 0.1)
