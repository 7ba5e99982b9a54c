"""Who owns a container or a workspace: a token that outlives a crash.

A token names this host, this process and the process's start time, so a later
process can tell a leftover of a dead owner (safe to remove) from one of a live
owner sharing the same engine or data directory (not ours to touch).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path


def _start_time(pid: int | str) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def owner_token() -> str:
    """``host:pid:start-time`` of the current process."""
    return f"{socket.gethostname()}:{os.getpid()}:{_start_time(os.getpid()) or 0}"


def owner_alive(token: str) -> bool:
    """False when ``token`` names a process of this host that no longer exists."""
    try:
        host, pid, start = token.rsplit(":", 2)
    except ValueError:
        return False
    if host != socket.gethostname():
        return True  # another host's process: not ours to judge
    return _start_time(pid) == start
