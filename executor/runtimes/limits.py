"""The limits a run is held to while it executes, the same on every runtime:
deadline, cancellation and the disk cap, plus how exit statuses name signals.

:class:`Guard` is checked on every pass of a runtime's wait loop (also while output
floods in, so a flood still meets its deadline).  The disk cap counts what the run
added to its folders, and a session's ``work/`` against the session's own cap; one
measurement walks the run's files through :mod:`executor.workspace.fs` and costs at
most a fifth of a core (measurements are spaced by four times their own duration).
"""

from __future__ import annotations

import signal as signals
import threading
import time

from ..workspace.fs import MAX_DEPTH, MAX_ENTRIES, Tree
from ..workspace.layout import Workspace

#: Least seconds between two measurements of a run's disk use.
DISK_POLL_SECONDS = 0.2


def signal_name(code: int | None) -> str | None:
    """The signal behind an exit status of 128+N, if N is one."""
    if code is None or not 128 < code < 128 + 65:
        return None
    try:
        return signals.Signals(code - 128).name
    except ValueError:
        return None


class DiskCap:
    """What a run may add to its folders (and its session's ``work/`` may hold)."""

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

    def reached(self, exit_code: int | None = None) -> bool:
        """A file stopped at the ``fsize`` cap, or a cap is passed now."""
        return exit_code == 128 + signals.SIGXFSZ or self.usage()[1]

    def warning(self) -> str:
        return (
            f"the run reached a disk cap (the run's {self.limit} bytes, its session's work/, more than "
            f"{MAX_ENTRIES} files, or folders nested deeper than {MAX_DEPTH}): writes past it failed or the "
            "run was stopped"
        )


class Guard:
    """Deadline, cancellation and (optionally) the disk cap of one executing run."""

    def __init__(
        self, *, started: float, timeout: float, cancel: threading.Event | None, disk: DiskCap | None
    ) -> None:
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
            self.disk_hit = self.disk.usage()[1]
            done = time.monotonic()
            self.next_disk = done + max(DISK_POLL_SECONDS, 4 * (done - now))
        return self.timed_out or self.cancelled or self.disk_hit

