"""Memory, pids and CPU limits for a bwrap sandbox, where the host lets this process set
them: cgroup v1's ``memory``, ``pids`` and ``cpu`` hierarchies, written by a root service.

Each run gets a group of its own in each hierarchy (``<hierarchy>/skill-executor-bwrap/<run>``)
with Docker's limits (``DOCKER_MEMORY_BYTES`` with no swap, ``DOCKER_PIDS_LIMIT``,
``DOCKER_CPUS``); the sandbox's init joins them while bwrap holds it (before the command
starts), so everything of the run is in them.  An OOM kill in the group is read from
``memory.oom_control``.  The groups are removed once the run's processes are gone (an
empty group a crash left is removed at a later start, once it is a minute old).

Not done (the runtime says so in its health): cgroup v2 (a unified hierarchy, or a
delegated subtree for a service that is not root).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from ..config import Settings

log = logging.getLogger(__name__)

V1 = Path("/sys/fs/cgroup")
HIERARCHIES = ("memory", "pids", "cpu")
BASE = "skill-executor-bwrap"
#: Processes of bwrap's own in the group beside the run's (its init, the limits wrapper).
BWRAP_TASKS = 2
CPU_PERIOD_US = 100_000
#: How old an empty run group must be before a sweep removes it.
SWEEP_GRACE_SECONDS = 60.0


def available(root: Path = V1) -> str | None:
    """None when the v1 limits can be set here; else why not."""
    if os.geteuid() != 0:
        return "the service is not root (cgroup delegation is not used)"
    for name in HIERARCHIES:
        folder = root / name
        if not (folder / "cgroup.procs").is_file():
            return f"no cgroup v1 {name} hierarchy at {folder}"
        if not os.access(folder, os.W_OK):
            return f"{folder} is not writable"
    return None


def sweep(root: Path = V1, *, grace: float = SWEEP_GRACE_SECONDS) -> None:
    """Remove the run groups a crashed process left: empty ones (a group with processes
    cannot be removed) older than ``grace`` -- a live run's group is empty only for the
    moment between its making and its init joining it, and may be another process's."""
    now = time.time()
    for name in HIERARCHIES:
        base = root / name / BASE
        if not base.is_dir():
            continue
        for group in base.iterdir():
            try:
                if group.is_dir() and now - group.stat().st_mtime > grace:
                    group.rmdir()
            except OSError:
                pass


class RunGroups:
    """One run's groups: made with the limits, joined by the sandbox's init, removed after."""

    def __init__(self, settings: Settings, run_id: str, root: Path = V1) -> None:
        self.folders = [root / name / BASE / run_id for name in HIERARCHIES]
        memory, pids, cpu = self.folders
        try:
            for folder in self.folders:
                folder.mkdir(parents=True)
            _write(memory / "memory.limit_in_bytes", settings.docker_memory_bytes)
            if (memory / "memory.memsw.limit_in_bytes").exists():  # no swap: memory + swap = memory
                _write(memory / "memory.memsw.limit_in_bytes", settings.docker_memory_bytes)
            _write(pids / "pids.max", settings.docker_pids_limit + BWRAP_TASKS)
            _write(cpu / "cpu.cfs_period_us", CPU_PERIOD_US)
            _write(cpu / "cpu.cfs_quota_us", int(settings.docker_cpus * CPU_PERIOD_US))
        except BaseException:
            self.remove()
            raise

    def join(self, pid: int) -> None:
        """Move ``pid`` (held before it starts anything) into every group."""
        for folder in self.folders:
            _write(folder / "cgroup.procs", pid)

    def oom_killed(self) -> bool:
        try:
            text = (self.folders[0] / "memory.oom_control").read_text()
        except OSError:
            return False
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == "oom_kill":
                return parts[1] != "0"
        return False

    def remove(self, timeout: float = 5.0) -> None:
        """Remove the groups (their processes are gone; a group still busy is retried briefly)."""
        deadline = time.monotonic() + timeout
        for folder in self.folders:
            while True:
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if time.monotonic() >= deadline:
                        log.warning("could not remove the run's cgroup %s: %s", folder, exc)
                        break
                    time.sleep(0.01)


def _write(path: Path, value: int) -> None:
    with open(path, "w") as file:
        file.write(str(value))
