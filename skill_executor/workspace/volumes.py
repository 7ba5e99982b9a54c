"""The hard disk cap: a run's workspace, and a session's ``work/``, each on a file system of its own.

A *volume* is a sparse image file holding an ext4 file system (``mkfs.ext4``: no journal,
no blocks reserved for root), attached to a loop device that clears itself once its
last mount is gone, and mounted ``nosuid,nodev`` on the folder it serves.  What it may
hold is set with ext4's reserved clusters (``/sys/fs/ext4/<device>/reserved_clusters``),
which no data allocation may take -- root's neither: :func:`hold` sets them so that
exactly so many more bytes are free, and a write past that fails with ``ENOSPC`` when it
is made.  Setting it costs a ``statvfs`` and one small write (microseconds), so a run's
limit is set right before its command starts, once its skill copy and inputs are in.

Why not project quotas on one volume: they need the kernel's quota formats (ext4:
``CONFIG_QFMT_V2``; XFS: ``CONFIG_XFS_QUOTA``), which kernels do not all have (the one
this was built on has neither); a volume needs only loop devices and ext4.

An image is only ever written by the kernel's ext4 (runs see the mounted file system,
never the image), and lives where no run reaches (a folder of the service, hidden under
the mount or beside it), so the kernel never mounts bytes a run wrote.

Everything here needs root (``CAP_SYS_ADMIN``: loop devices, mounts, sysfs);
:func:`.volumeprobe.probe` says at start-up whether it works, and why not.  Loop devices
themselves are :mod:`.loopdev`'s.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import stat
import subprocess
import threading
import time
from pathlib import Path

from ..errors import ExecutorError
from .loopdev import LOOP_MAJOR, attach, attached

MiB = 1024 * 1024
#: How far past its cap a volume takes writes: a run's result says it reached its cap
#: once it added the cap, and its writes fail from this far past it (so telling the two
#: apart does not depend on how the last write was cut; a single file meets its
#: ``fsize`` limit, the cap, first).
SLACK = 1 * MiB
#: The image of a run's volume, in the workspace folder under its own mount.
IMAGE = ".volume"
#: Room for the run's skill copy in its volume (beside the cap and the inputs).
SKILL_ROOM = 1024 * MiB
BLOCK = 4096
#: One inode (256 bytes of inode table, written as files are made) per this many bytes.
BYTES_PER_INODE = 16384
_MKFS_SEARCH = "/usr/local/sbin:/usr/sbin:/sbin:/usr/local/bin:/usr/bin:/bin"

_MS_NOSUID, _MS_NODEV, _MS_NOATIME = 2, 4, 1024
_MNT_DETACH, _UMOUNT_NOFOLLOW = 2, 8

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


class DiskCapUnavailable(ExecutorError):
    """The hard disk cap cannot be set up here (the service refuses to start)."""

    code = "disk_cap_unavailable"
    status = 503


def image_size(holds: int) -> int:
    """An image size whose file system can hold ``holds`` bytes of files (ext4 keeps
    about 2 % for inode tables and bitmaps; the image is sparse: unused space costs nothing)."""
    return (holds + holds // 25 + 16 * MiB + BLOCK - 1) // BLOCK * BLOCK


def make(image: Path, size: int) -> None:
    """Create the sparse image ``image`` (a new file) of ``size`` bytes holding an empty ext4.

    ``mkfs.ext4`` runs once per size and process: its output (the blocks it wrote, about
    2 MiB, the rest a hole) is kept and written into each new image of that size, which
    costs well under a millisecond instead of a process (all such volumes share the
    file system's UUID, which nothing here looks at)."""
    blocks = _template(image.parent, size)
    fd = os.open(image, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.ftruncate(fd, size)
        for offset, data in blocks:
            view = memoryview(data)
            while view:
                view = view[os.pwrite(fd, view, offset + len(data) - len(view)) :]
    finally:
        os.close(fd)


_templates: dict[int, list[tuple[int, bytes]]] = {}
_templates_lock = threading.Lock()


def _template(folder: Path, size: int) -> list[tuple[int, bytes]]:
    """The blocks ``mkfs.ext4`` writes for an image of ``size`` bytes (made in ``folder``, once)."""
    with _templates_lock:
        if size in _templates:
            return _templates[size]
        scratch = folder / f".mkfs-{os.getpid()}-{time.monotonic_ns()}"
        fd = os.open(scratch, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(fd, size)
            _mkfs(scratch)
            blocks, offset = [], 0
            while True:
                try:
                    offset = os.lseek(fd, offset, os.SEEK_DATA)
                except OSError as exc:
                    if exc.errno == errno.ENXIO:
                        break  # no data past here
                    raise
                end = os.lseek(fd, offset, os.SEEK_HOLE)
                blocks.append((offset, os.pread(fd, end - offset, offset)))
                offset = end
        finally:
            os.close(fd)
            os.unlink(scratch)
        _templates[size] = blocks
        return blocks


def _mkfs(image: Path) -> None:
    mkfs = shutil.which("mkfs.ext4", path=f"{os.environ.get('PATH', '')}:{_MKFS_SEARCH}")
    if mkfs is None:
        raise DiskCapUnavailable("mkfs.ext4 is not installed (the e2fsprogs package)")
    argv = [
        mkfs,
        "-q",
        "-F",
        "-b",
        str(BLOCK),
        "-i",
        str(BYTES_PER_INODE),
        "-I",
        "256",
        "-m",
        "0",
        "-O",
        "^has_journal",
        "-E",
        "root_owner=0:0",
        str(image),
    ]
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
    if done.returncode:
        raise OSError(errno.EIO, f"mkfs.ext4 failed: {(done.stderr or done.stdout).strip()[:300]}")


def mount(image: Path, target: Path, *, fresh: bool = False) -> None:
    """Mount the volume ``image`` on the folder ``target``.  An image used before (a
    session's) is mounted through the loop device still attached to it, if any (its file
    system alive in a container that has not quite gone yet): one file system per image,
    never two; a ``fresh`` one cannot have one."""
    fd = os.open(image, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_nlink != 1:
            raise OSError(errno.EPERM, f"{image} is not a volume image of this service")
        for attempt in range(20):
            device = None if fresh else attached(st)
            if device is not None:
                try:
                    if _mount(device, target):
                        return
                except OSError as exc:
                    # The device is being cleared (the last container that held it just went):
                    # reading its super block fails meanwhile.  Wait until it is gone, then
                    # attach anew -- never a second device while this one lives.
                    if exc.errno != errno.EIO:
                        raise
                time.sleep(min(0.5, 0.02 * (attempt + 1)))
                continue
            device, held = attach(fd, image)
            try:  # held open until mounted: the device clears itself on its last close
                if _mount(device, target):
                    return
            finally:
                os.close(held)
        raise OSError(errno.EBUSY, f"could not mount {image}: its loop device kept going away")
    finally:
        os.close(fd)


def create(folder: Path, size: int) -> None:
    """Make a volume of ``size`` bytes for ``folder`` (a new, empty folder of the service)
    and mount it there; its image stays in ``folder``, hidden under the mount.
    ``DiskCapUnavailable`` (503) when it cannot be made (the caller removes ``folder``)."""
    image = folder / IMAGE
    try:
        make(image, size)
        mount(image, folder, fresh=True)
        tidy(folder)
    except OSError as exc:
        raise unavailable(exc) from None


def unavailable(exc: OSError) -> DiskCapUnavailable:
    return DiskCapUnavailable(f"a volume for the hard disk cap could not be made: {exc.strerror or exc}")


def tidy(target: Path) -> None:
    """Remove mkfs's empty ``lost+found`` from a fresh volume (a run's root holds only the layout)."""
    try:
        os.rmdir(target / "lost+found")
    except OSError:
        pass  # absent, or not mkfs's empty folder: left alone


def unmount(target: Path) -> bool:
    """Detach the volume mounted on ``target``; False when nothing was.  Lazy: a container
    that still holds it keeps it until it goes (then its loop device clears itself)."""
    if not mounted(target):
        return False
    if _libc.umount2(os.fsencode(target), _MNT_DETACH | _UMOUNT_NOFOLLOW) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOENT, errno.ENOTDIR):
        return False
    raise OSError(code, f"unmounting {target}: {os.strerror(code)}")


def mounted(target: Path) -> bool:
    """Is a volume mounted on ``target``?"""
    try:
        return os.lstat(target).st_dev != os.lstat(target.parent).st_dev
    except FileNotFoundError:
        return False


def mounts_under(root: Path) -> list[Path]:
    """The mount points strictly below ``root`` (from this process's mount table)."""
    prefix = f"{str(root).rstrip('/')}/"
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as table:
        for line in table:
            point = unescape_mountinfo(line.split(" ", 5)[4])
            if point.startswith(prefix):
                found.append(Path(point))
    return sorted(found, key=lambda p: len(p.parts), reverse=True)  # the deepest first


def free(target: Path) -> int:
    """Bytes that can still be written on the volume at ``target``."""
    st = os.statvfs(target)
    return st.f_bavail * st.f_frsize


def full(target: Path, within: int) -> bool:
    """Is the volume at ``target`` within ``within`` bytes of its limit, or out of files?"""
    st = os.statvfs(target)
    return st.f_bavail * st.f_frsize <= within or st.f_favail == 0


def hold(target: Path, more: int) -> int:
    """Let the volume at ``target`` take at most ``more`` bytes beyond what it holds now
    (less when it has no more room); returns what it may take."""
    st = os.statvfs(target)
    return _reserve(target, st.f_bfree - -(-more // st.f_frsize), st.f_blocks)


def hold_total(target: Path, total: int) -> int:
    """Let the volume at ``target`` hold at most ``total`` bytes of files in all; returns
    what it may still take."""
    st = os.statvfs(target)
    return _reserve(target, st.f_blocks - -(-total // st.f_frsize), st.f_blocks)


def _reserve(target: Path, clusters: int, blocks: int) -> int:
    """Set the volume's reserved clusters (clamped to what ext4 accepts); what it may still take."""
    sysfs = Path("/sys/fs/ext4") / _device_name(target) / "reserved_clusters"
    sysfs.write_text(str(max(0, min(clusters, blocks - 1))))
    return free(target)


def _device_name(target: Path) -> str:
    dev = os.stat(target).st_dev
    if os.major(dev) != LOOP_MAJOR:
        raise OSError(errno.ENODEV, f"{target} is not a volume (a loop device's file system)")
    return f"loop{os.minor(dev)}"


def unescape_mountinfo(text: str) -> str:
    """mountinfo's octal escapes (``\\040`` for a space)."""
    if "\\" not in text:
        return text
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and text[i + 1 : i + 4].isdigit():
            out.append(chr(int(text[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _mount(device: str, target: Path) -> bool:
    """Mount ``device`` on ``target``; False when the device went away meanwhile."""
    # discard: blocks ext4 frees are punched out of the image at once, so freeing space in
    # scattered pieces cannot grow the image on the host past what the volume holds.
    flags = _MS_NOSUID | _MS_NODEV | _MS_NOATIME
    if _libc.mount(device.encode(), os.fsencode(target), b"ext4", flags, b"discard") == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENXIO, errno.ENODEV):
        return False
    raise OSError(code, f"mounting {device} on {target}: {os.strerror(code)}")
