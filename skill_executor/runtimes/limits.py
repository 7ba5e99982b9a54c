"""The limits a run is held to while it executes, the same on every runtime:
deadline, cancellation and the disk cap, plus how exit statuses name signals.

:class:`Guard` is checked on every pass of a runtime's wait loop (also while output
floods in, so a flood still meets its deadline).  The disk cap comes in two kinds:

* :class:`VolumeCap` (hard, the default): the run's workspace and its session's
  ``work/`` are volumes of their own (:mod:`skill_executor.workspace.volumes`); the run's is
  set, when the command starts, to take what the run may add (the session's holds the
  session's cap), so the file system refuses every write past it (``ENOSPC``).  The
  run goes on (or fails on its own); a check is a ``statvfs``.
* :class:`DiskCap` (soft, ``SKILL_EXECUTOR_DISK_CAP=soft``): what the run added to its
  folders, and its session's ``work/`` against the session's own cap, measured by
  walking the run's files through :mod:`skill_executor.workspace.fs`; a run past a cap is
  stopped.  One measurement costs at most a fifth of a core (measurements are spaced
  by four times their own duration); a fast writer passes the cap between two.
"""

from __future__ import annotations

import signal as signals
import threading
import time
from pathlib import Path

from ..config import Settings
from ..workspace import volumes
from ..workspace.fs import MAX_DEPTH, MAX_ENTRIES, Tree
from ..workspace.layout import Workspace

#: Least seconds between two measurements of a run's disk use.
DISK_POLL_SECONDS = 0.2


def workspace_volume_bytes(settings: Settings) -> int | None:
    """The size of a run's volume under the hard disk cap (None: the soft cap): room for
    the skill copy, the inputs and stdin, which the service puts in first, and for the
    cap itself, which is set when the command starts.  Sparse: only what is written costs."""
    if settings.disk_cap != "hard":
        return None
    room = settings.max_staged_bytes + settings.max_stdin_bytes + volumes.SKILL_ROOM
    return volumes.image_size(settings.docker_disk_bytes + volumes.SLACK + room)


def describe_disk_cap(settings: Settings) -> tuple[bool, str]:
    """The disk cap in force, for ``/healthz``."""
    if settings.disk_cap == "hard":
        return True, (
            f"hard: each workspace is a file system of its own that refuses writes past "
            f"{settings.docker_disk_bytes} bytes per run (sessions' work/: {settings.session_disk_bytes})"
        )
    return True, (
        f"soft (SKILL_EXECUTOR_DISK_CAP=soft): {settings.docker_disk_bytes} bytes per run, measured every "
        f"{DISK_POLL_SECONDS} s; a fast writer can pass it before its run is stopped"
    )


def signal_name(code: int | None) -> str | None:
    """The signal behind an exit status of 128+N, if N is one."""
    if code is None or not 128 < code < 128 + 65:
        return None
    try:
        return signals.Signals(code - 128).name
    except ValueError:
        return None


class DiskCap:
    """What a run may add to its folders (and its session's ``work/`` may hold), polled."""

    #: A run past the cap is stopped (nothing else stops its writes).
    stops_run = True

    def __init__(self, workspace: Workspace, limit: int, session_limit: int | None) -> None:
        self.workspace = workspace
        self.limit = limit
        self.session_limit = session_limit
        self.roots = [workspace.root]
        if workspace.root not in workspace.work.parents:
            self.roots.append(workspace.work)  # a session's work lives elsewhere
        self.baseline = 0
        self.baseline = self.usage()[0]

    def usage(self) -> tuple[int, bool]:
        """(bytes in the run's folders, whether a cap is already passed)."""
        total = 0
        for root in self.roots:
            with Tree(root) as tree:
                used, unmeasurable = tree.usage()
            if unmeasurable:
                return total, True
            if self.session_limit is not None and root == self.workspace.work and used >= self.session_limit:
                return total + used, True
            total += used
        return total, total - self.baseline >= self.limit

    def check(self) -> bool:
        """Is a cap passed now?"""
        return self.usage()[1]

    def reached(self, exit_code: int | None = None) -> bool:
        """A file stopped at the ``fsize`` cap, or a cap is passed now."""
        return exit_code == 128 + signals.SIGXFSZ or self.check()

    def warning(self) -> str:
        return (
            f"the run reached a disk cap (the run's {self.limit} bytes, its session's work/, more than "
            f"{MAX_ENTRIES} files, or folders nested deeper than {MAX_DEPTH}): writes past it failed or the "
            "run was stopped"
        )


class VolumeCap:
    """The hard cap: the run's volume takes what the run may add, from now on (set when
    it is made: right before the command starts), a session's what the session may hold.

    A cap counts as reached once what is left is within :data:`~volumes.SLACK` (the run
    added its cap); writes fail from :data:`~volumes.SLACK` past it.  A session that is
    full when the run starts counts only if it still is at the end (the run may be the
    one that makes room)."""

    stops_run = False

    def __init__(self, workspace: Workspace, limit: int, session_limit: int | None) -> None:
        self.limit = limit
        self.session_limit = session_limit
        self.root = workspace.root
        try:
            volumes.hold(self.root, limit + volumes.SLACK)
        except OSError as exc:
            raise volumes.unavailable(exc) from None
        self.session: Path | None = None
        self.session_was_full = False
        if session_limit is not None and workspace.work != workspace.root / "work":
            self.session = workspace.work  # the session's: held to its cap when it was mounted
            self.session_was_full = self._full(self.session)

    @staticmethod
    def _full(volume: Path) -> bool:
        return volumes.full(volume, volumes.SLACK)

    def check(self) -> bool:
        return self._full(self.root) or (
            self.session is not None and not self.session_was_full and self._full(self.session)
        )

    def reached(self, exit_code: int | None = None) -> bool:
        return (
            exit_code == 128 + signals.SIGXFSZ
            or self._full(self.root)
            or (self.session is not None and self._full(self.session))
        )

    def warning(self) -> str:
        session = f", or its session's work/ {self.session_limit}" if self.session_limit is not None else ""
        return (
            f"the run reached its disk cap (what it adds to its workspace: {self.limit} bytes{session}; or "
            "as many files as its file system holds): writes past it failed (No space left on device)"
        )


Cap = DiskCap | VolumeCap


class Guard:
    """Deadline, cancellation and (optionally) the disk cap of one executing run."""

    def __init__(self, *, started: float, timeout: float, cancel: threading.Event | None, disk: Cap | None) -> None:
        self.deadline = started + timeout
        self.cancel = cancel
        self.disk = disk
        self.next_disk = started + DISK_POLL_SECONDS if disk is not None else float("inf")
        self.timed_out = self.cancelled = self.disk_hit = False

    def wait_time(self) -> float:
        """Seconds until the next check is due."""
        wait = min(self.deadline, self.next_disk) - time.monotonic()
        if self.cancel is not None:
            wait = min(wait, 0.05)
        return max(0.0, wait)

    def breached(self) -> bool:
        now = time.monotonic()
        if now >= self.deadline:
            self.timed_out = True
        elif self.cancel is not None and self.cancel.is_set():
            self.cancelled = True
        elif self.disk is not None and now >= self.next_disk:
            self.disk_hit = self.disk_hit or self.disk.check()
            done = time.monotonic()
            self.next_disk = done + max(DISK_POLL_SECONDS, 4 * (done - now))
        return self.timed_out or self.cancelled or (self.disk_hit and self.disk is not None and self.disk.stops_run)
