"""Whether the hard disk cap can work here, said at start-up: root, loop devices, a
volume the Docker engine sees (its mount namespace, or a shared mount), and a test
volume that refuses writes past its limit."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from .volumes import IMAGE, DiskCapUnavailable, MiB, create, hold, image_size, unescape_mountinfo, unmount


def probe(folder: Path) -> None:
    """Make, fill and remove a small volume in ``folder`` (an empty folder of the service):
    :class:`DiskCapUnavailable` naming what is missing when the hard cap cannot work here,
    and how to choose the soft cap instead."""
    try:
        _probe(folder)
    except DiskCapUnavailable as exc:
        raise DiskCapUnavailable(
            f"the hard disk cap (a file system per workspace) cannot be set up here: {exc.message}; or set "
            "SKILL_EXECUTOR_DISK_CAP=soft to accept the soft cap (polled: a fast writer can pass it before "
            "its run is stopped)"
        ) from None


def _probe(folder: Path) -> None:
    if os.geteuid() != 0:
        raise DiskCapUnavailable("the service does not run as root, which loop devices and mounts need")
    if not os.path.exists("/dev/loop-control"):
        raise DiskCapUnavailable("this system has no loop devices (/dev/loop-control is missing: modprobe loop)")
    problem = _hidden_from_engine(folder)
    if problem:
        raise DiskCapUnavailable(problem)
    image = folder / IMAGE
    try:
        create(folder, image_size(8 * MiB))
        try:
            allowed = hold(folder, 1 * MiB)
            written = _fill(folder / "probe", 4 * MiB)
        finally:
            unmount(folder)
    except DiskCapUnavailable:
        raise
    except OSError as exc:
        raise DiskCapUnavailable(
            f"a test volume could not be made ({exc.strerror or exc}): the kernel needs ext4 and loop devices"
        ) from None
    finally:
        try:
            os.unlink(image)
        except FileNotFoundError:
            pass
    if not (allowed >= 1 * MiB and written <= allowed):
        raise DiskCapUnavailable(f"a test volume limited to 1 MiB took {written} bytes")


def _fill(path: Path, size: int) -> int:
    """Write up to ``size`` bytes to a new file; what was written before it was refused."""
    written = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        chunk = b"\0" * (64 * 1024)
        while written < size:
            written += os.write(fd, chunk)
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
    finally:
        os.close(fd)
    return written


def _hidden_from_engine(folder: Path) -> str | None:
    """The engine resolves a bind mount's source in its own mount namespace: a volume
    mounted here reaches it when that is this process's namespace, or else through a
    shared mount (a service in a container).  Otherwise runs would get the empty folder
    beneath the volume."""
    ours = os.readlink("/proc/self/ns/mnt")
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if Path(f"/proc/{pid}/comm").read_text().strip() == "dockerd":
                    if os.readlink(f"/proc/{pid}/ns/mnt") == ours:
                        return None
                    break
            except OSError:
                continue
    best: tuple[int, str] = (-1, "")
    path = str(folder)
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as table:
        for line in table:
            fields = line.split(" ")
            point = unescape_mountinfo(fields[4])
            if (path == point or path.startswith(point.rstrip("/") + "/")) and len(point) > best[0]:
                best = (len(point), " ".join(fields[6 : fields.index("-")]))
    if "shared:" in best[1]:
        return None
    return (
        f"the Docker engine does not share this process's mount namespace and {folder} is not on a "
        "shared mount, so volumes mounted there would not reach it; mount the data folder with "
        "propagation rshared (see docker-compose.yml)"
    )
