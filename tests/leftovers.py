"""The session-end check: the run left no container, workspace, volume, loop device,
process or Postgres server behind (``tests/conftest.py`` calls :func:`find` from ``pytest_sessionfinish``).

Everything the tests make lives below the session's base temp folder (with xdist, each
worker's ``popen-gw<N>/`` folder is inside the controller's), so only this session's own
leftovers count: other checkouts sharing the engine and the machine are never judged.
Effects that follow an answer (a container's removal, a device clearing itself, a server
exiting) are polled for a while, never judged at once.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from . import pgserver
from .helpers import eventually

#: How long effects that follow the last test may take to settle.
SETTLE_SECONDS = 15.0
#: Where the tests' data dirs are: ``<base>/<test>/data`` alone, ``<base>/popen-gw<N>/<test>/data`` under xdist.
DATA_DIRS = ("*/data", "popen-gw*/*/data")
#: Where ``tests/pgserver.py`` records the servers it starts (one file each: the server's folder).
RECORDS = (f"{pgserver.RECORDS}/*", f"popen-gw*/{pgserver.RECORDS}/*")


def _lease_roots(base: Path, leases: str, root_id: str) -> list[Path]:
    """Every ``<leases>/<root_id>`` file under ``base``, found by a walk that passes over what
    vanishes while it looks (a folder a janitor is still removing: ``Path.glob`` raises)."""
    found: list[Path] = []
    for folder, _dirs, files in os.walk(base, onerror=lambda _: None):
        if os.path.basename(folder) == leases and root_id in files:
            found.append(Path(folder) / root_id)
    return found


def containers(base: Path, engine: str = "unix:///var/run/docker.sock") -> list[str]:
    """Managed containers whose owner lease is rooted in this session's temp folders (on
    the main engine, or on ``engine``: a second one, ``tests/engines.py``)."""
    import docker

    from skill_executor.owners import LEASES, ROOT_ID, parse
    from skill_executor.runtimes.docker import LABEL_MANAGED, LABEL_OWNER

    roots = {path.read_text().strip() for path in _lease_roots(base, LEASES, ROOT_ID)}
    if not roots:
        return []
    client = docker.DockerClient(base_url=engine, version="auto", timeout=30)
    try:
        listed = client.api.containers(all=True, filters={"label": f"{LABEL_MANAGED}=1"})
    finally:
        client.close()
    return [
        f"container {c['Id'][:12]} ({c.get('Status', '?')}, owner {c['Labels'].get(LABEL_OWNER, '')})"
        for c in listed
        if parse(c["Labels"].get(LABEL_OWNER, ""))[0] in roots
    ]


def workspaces(base: Path) -> list[str]:
    # pytest's ``<name>current`` links name a test folder twice: each run once, by its real path.
    return sorted(
        {
            f"workspace {run.resolve()}"
            for pattern in DATA_DIRS
            for runs in base.glob(f"{pattern}/workspaces/runs")
            for run in runs.iterdir()
        }
    )


def volumes(base: Path) -> list[str]:
    """Mounts (hard disk cap volumes) below the base, and loop devices backed by a file there."""
    from skill_executor.workspace.volumes import mounts_under

    found = [f"mount {path}" for path in mounts_under(base)]
    for name in os.listdir("/sys/block"):
        try:
            with open(f"/sys/block/{name}/loop/backing_file") as backing:
                path = backing.read().strip()
        except OSError:
            continue
        if path.startswith(f"{base}/"):
            found.append(f"loop device {name}: {path}")
    return found


def processes(base: Path) -> list[str]:
    """Processes (a server, a CLI, a skill run on the local runtime) whose command line
    names a path below the base; this process and its ancestors excluded."""
    return naming(f"{base}/")


def postgres(base: Path) -> list[str]:
    """The Postgres servers the session's fixtures started (``tests/pgserver.py`` records
    each one's folder, which is outside the base: the server runs as another user):
    a process still running on that folder, or the folder still there."""
    found = []
    for pattern in RECORDS:
        for record in base.glob(pattern):
            folder = record.read_text().strip()
            found += naming(f"{folder}/")
            if os.path.lexists(folder):
                found.append(f"Postgres folder {folder}")
    return found


def naming(path: str) -> list[str]:
    """Processes whose command line names something below ``path`` (ending in ``/``);
    this process and its ancestors excluded."""
    mine = {os.getpid()}
    pid = os.getpid()
    while pid > 1:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                pid = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        mine.add(pid)
    needle = path.encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in mine:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if needle in cmdline:
            shown = cmdline.replace(b"\0", b" ").decode(errors="replace")[:300]
            found.append(f"process {entry}: {shown}")
    return found


def find(base: Path, *, engine: bool) -> list[str]:
    """Everything the session left below ``base`` once effects had time to settle
    (containers only when an engine is usable: without one none could be made)."""
    base = base.resolve()
    checks: list[Callable[[Path], list[str]]] = [workspaces, volumes, processes, postgres]
    if engine:
        checks.insert(0, containers)
    left: list[str] = []
    for check in checks:
        eventually(lambda check=check: not check(base), timeout=SETTLE_SECONDS, interval=0.5)  # type: ignore[misc]
        left += check(base)
    return left
