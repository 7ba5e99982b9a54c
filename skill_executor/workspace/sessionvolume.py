"""A session's ``work/`` under the hard disk cap: a volume of its own (:mod:`.volumes`),
its image ``work.img`` beside ``work/`` in the session's folder (which no run reaches),
mounted while the session is held; and the session volumes a crashed process left
mounted, released at start.  A session made under one cap is refused under the other
(``session_disk_cap_mismatch``): its files are where the other cap cannot see them.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from ..errors import Conflict
from . import volumes

#: A session's volume under the hard disk cap, beside its ``work/``.
VOLUME_IMAGE = "work.img"


def attach_volume(directory: Path, session: str, volume_bytes: int | None) -> None:
    """Under the hard cap (``volume_bytes``), mount the session's volume on its ``work/``
    (made on first use); refuse a session made under the other cap."""
    work, image = directory / "work", directory / VOLUME_IMAGE
    volumes.unmount(work)  # left by a process that died holding the session
    if volume_bytes is None:
        if image.exists():
            raise _mismatch(session, "the hard disk cap (SKILL_EXECUTOR_DISK_CAP=hard)")
        return
    fresh = not image.exists()
    if fresh:
        with os.scandir(work) as entries:
            made_soft = any(entries)
        if made_soft:
            raise _mismatch(session, "the soft disk cap (SKILL_EXECUTOR_DISK_CAP=soft)")
    try:
        if fresh:
            try:
                volumes.make(image, volumes.image_size(volume_bytes + volumes.SLACK))
            except BaseException:
                image.unlink(missing_ok=True)
                raise
        volumes.mount(image, work, fresh=fresh)
    except OSError as exc:
        raise volumes.unavailable(exc) from None
    try:
        if fresh:  # later, lost+found is the session's own business (a run may have used the name)
            volumes.tidy(work)
        volumes.hold_total(work, volume_bytes + volumes.SLACK)
    except BaseException as exc:
        volumes.unmount(work)
        if isinstance(exc, OSError):
            raise volumes.unavailable(exc) from None
        raise


def _mismatch(session: str, made: str) -> Conflict:
    return Conflict(
        f"session {session!r} was made under {made}, which is not in force now: its work/ cannot be "
        "used; end the session (or let it expire) and start a new one",
        code="session_disk_cap_mismatch",
        details={"session": session},
    )


def release_stale_mounts(root: Path, lock_name: str) -> int:
    """Unmount the session volumes under ``root`` whose session's lock (``lock_name`` in
    its folder) is free: left mounted by a process that died holding them; those of live
    holders stay.  How many it unmounted."""
    released = 0
    for point in volumes.mounts_under(root):
        directory = point.parent
        if point.name != "work":
            continue
        try:
            fd = os.open(directory / lock_name, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            released += volumes.unmount(point)  # no lock file: no run can hold it
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue  # a live run holds it
        else:
            released += volumes.unmount(point)
        finally:
            os.close(fd)
    return released
