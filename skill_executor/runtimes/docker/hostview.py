"""A container seen from the host: its init process held by a pidfd, the processes and
OOM kills of its cgroups (cgroup v1 or v2, the cgroupfs or systemd driver), and whether
any process left in them may still run code.
"""

from __future__ import annotations

import os
import select
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .engine import Engine


class InitProcess:
    """A container's init process, held by a pidfd (so a reused pid is never signalled).

    On runc, killing it ends the container's PID namespace: the kernel kills every other
    process in it before the init's exit is reported, so once :meth:`kill` returns nothing
    of the container runs any more.  Not on gVisor: the engine's pid is the sandbox's, in
    the host's namespace, and the processes that run the command's code (its stubs) die
    after it (the caller waits for the container's cgroup to empty).
    """

    def __init__(self, pidfd: int) -> None:
        self.pidfd = pidfd

    @classmethod
    def of(cls, engine: Engine, container_id: str) -> InitProcess | None:
        """The init of a running container, or None when it cannot be held safely."""
        pid = engine.state(container_id).get("Pid")
        if not isinstance(pid, int) or pid <= 0:
            return None
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            return None
        try:
            # Opened after the look-up: make sure the pid still is this container's.
            if container_id not in Path(f"/proc/{pid}/cgroup").read_text():
                os.close(pidfd)
                return None
        except OSError:
            os.close(pidfd)
            return None
        return cls(pidfd)

    def kill(self, timeout: float = 5.0) -> bool:
        """SIGKILL the init and wait until it (and so its whole namespace) is gone."""
        try:
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        except ProcessLookupError:
            return True
        except OSError:
            return False
        poller = select.poll()  # not select(): descriptors past 1024 are fine
        poller.register(self.pidfd, select.POLLIN)
        return bool(poller.poll(timeout * 1000))

    def close(self) -> None:
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1


def container_processes(container_id: str) -> list[int] | None:
    """The processes in the container's cgroup, read from the host (cgroup v1 or v2, the
    cgroupfs or systemd driver); None when its cgroup is not found (or is gone)."""
    candidates = [
        Path(f"/sys/fs/cgroup/pids/docker/{container_id}/cgroup.procs"),
        Path(f"/sys/fs/cgroup/docker/{container_id}/cgroup.procs"),
        Path(f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/cgroup.procs"),
    ]
    for path in candidates:
        try:
            return [int(line) for line in path.read_text().split()]
        except FileNotFoundError:
            continue
        except (OSError, ValueError):
            return None
    return None


def oom_kills(container_id: str) -> int | None:
    """OOM kills in the container's memory cgroup (v1 or v2), read from the host."""
    candidates = [
        Path(f"/sys/fs/cgroup/memory/docker/{container_id}/memory.oom_control"),
        Path(f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/memory.events"),
    ]
    for path in candidates:
        try:
            for line in path.read_text().splitlines():
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return None


def emptied(container_id: str, timeout: float) -> bool:
    """Whether, within ``timeout`` seconds, no process left in the container's cgroup can
    run code again (False: its cgroup cannot be read)."""
    deadline = time.monotonic() + timeout
    pause = 0.0005
    while True:
        left = container_processes(container_id)
        if left is None:
            return False
        if not any(may_run(pid) for pid in left):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


#: ``PF_EXITING`` of a process's flags (``/proc/<pid>/stat``, field 9).
PF_EXITING = 0x4
SIGKILL_BIT = 1 << (signal.SIGKILL - 1)


def may_run(pid: int) -> bool:
    """Whether host process ``pid`` may still run code: a thread of it that is not a zombie,
    not exiting, and has no SIGKILL pending (taken before any return to user space); never
    gVisor's gofer (it serves the sandbox's files and runs none of the command's code; it
    ends once the sandbox is gone).  What cannot be judged from here (a pid of another
    namespace, /proc hidden) may run."""
    if pid <= 0:
        return True
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if f.read(11) == b"runsc-gofer":
                return False
        tasks = os.listdir(f"/proc/{pid}/task")
    except (FileNotFoundError, ProcessLookupError):
        return False  # gone
    except OSError:
        return True
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                status = f.read()
        except (FileNotFoundError, ProcessLookupError):
            continue  # that thread is gone
        except (OSError, IndexError):
            return True
        pending = 0
        for line in status.splitlines():
            if line.startswith(("SigPnd:", "ShdPnd:")):
                pending |= int(line.split()[1], 16)
        if not (fields[0] in ("Z", "X") or int(fields[6]) & PF_EXITING or pending & SIGKILL_BIT):
            return True
    return False
