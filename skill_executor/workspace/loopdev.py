"""Loop devices for the volumes: finding the one still attached to an image, and
attaching a free one (``LOOP_CONFIGURE``, or ``LOOP_SET_FD`` then the flags before Linux
5.8) that clears itself once its last user is gone.  Needs root."""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import struct
from pathlib import Path

LOOP_MAJOR = 7
_LOOP_CTL_GET_FREE = 0x4C82
_LOOP_SET_FD = 0x4C00
_LOOP_SET_STATUS64 = 0x4C04
_LOOP_GET_STATUS64 = 0x4C05
_LOOP_CONFIGURE = 0x4C0A
_LO_FLAGS_AUTOCLEAR = 4
_INFO64 = struct.Struct("=QQQQQIIII64s64s32sQQ")  # struct loop_info64


def attached(image: os.stat_result) -> str | None:
    """The loop device still attached to this image (same file), if any."""
    try:
        names = os.listdir("/sys/block")
    except OSError:
        return None
    for name in names:
        if not name.startswith("loop"):
            continue
        try:
            fd = os.open(f"/dev/{name}", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            info = _INFO64.unpack(fcntl.ioctl(fd, _LOOP_GET_STATUS64, bytes(_INFO64.size)))
        except OSError:
            continue  # not attached
        finally:
            os.close(fd)
        if (info[0], info[1]) == (image.st_dev, image.st_ino):
            return f"/dev/{name}"
    return None


def attach(image_fd: int, image: Path) -> tuple[str, int]:
    """A free loop device attached to the open image, and a descriptor of it: the device
    clears itself on its last close (while mounted, the mount holds it)."""
    control = os.open("/dev/loop-control", os.O_RDWR | os.O_CLOEXEC)
    try:
        for _ in range(100):
            number = fcntl.ioctl(control, _LOOP_CTL_GET_FREE)
            device = f"/dev/loop{number}"
            if not os.path.exists(device):  # a container's /dev holds only the devices it started with
                os.mknod(device, 0o600 | stat.S_IFBLK, os.makedev(LOOP_MAJOR, number))
            fd = os.open(device, os.O_RDWR | os.O_CLOEXEC)
            try:
                _configure(fd, image_fd, os.fsencode(image)[-63:])
            except OSError as exc:
                os.close(fd)
                if exc.errno == errno.EBUSY:
                    continue  # taken by someone else meanwhile: another one
                raise
            except BaseException:
                os.close(fd)
                raise
            return device, fd
        raise OSError(errno.EBUSY, "no free loop device")
    finally:
        os.close(control)


def _configure(fd: int, image_fd: int, name: bytes) -> None:
    info = _INFO64.pack(0, 0, 0, 0, 0, 0, 0, 0, _LO_FLAGS_AUTOCLEAR, name, b"", b"", 0, 0)
    try:
        fcntl.ioctl(fd, _LOOP_CONFIGURE, struct.pack("=II", image_fd, 0) + info + bytes(64))
        return
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTTY):
            raise
    # Before Linux 5.8: attach, then set the flags.
    fcntl.ioctl(fd, _LOOP_SET_FD, image_fd)
    fcntl.ioctl(fd, _LOOP_SET_STATUS64, info)
