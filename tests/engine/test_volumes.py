"""skill_executor/workspace/volumes.py on its own (root, no engine): a volume refuses writes
past what it was set to take, root's included; one image is never two file systems;
what it mounts must be the service's own image."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from skill_executor.workspace import volumeprobe, volumes

from ..conftest import require_disk_cap

MiB = 1024 * 1024


@pytest.fixture(autouse=True)
def _hard_cap_possible() -> None:
    require_disk_cap("hard")


@pytest.fixture
def volume(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "vol"
    folder.mkdir()
    volumes.create(folder, volumes.image_size(64 * MiB))
    try:
        yield folder
    finally:
        volumes.unmount(folder)


def fill(path: Path, most: int) -> tuple[int, int]:
    """Write zeros to a new file until refused (or ``most``): (bytes written, errno)."""
    written, code = 0, 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        while written < most:
            written += os.write(fd, b"\0" * (256 * 1024))
        os.fsync(fd)
    except OSError as exc:
        code = exc.errno or 0
    finally:
        os.close(fd)
    return written, code


def test_a_volume_takes_exactly_what_it_was_set_to_then_enospc(volume: Path) -> None:
    assert fill(volume / "before", 8 * MiB) == (8 * MiB, 0)
    assert volumes.hold(volume, 16 * MiB) == 16 * MiB
    written, code = fill(volume / "after", 64 * MiB)  # root, too: reserved clusters bind everyone
    assert code == errno.ENOSPC and written == 16 * MiB
    assert volumes.free(volume) == 0
    os.unlink(volume / "after")
    assert volumes.free(volume) == 16 * MiB  # room made is room again
    st = os.statvfs(volume)
    held = (st.f_blocks - st.f_bfree) * st.f_frsize  # the 8 MiB file, and the folders' blocks
    assert 8 * MiB <= held < 8 * MiB + 64 * 1024
    assert volumes.hold_total(volume, 10 * MiB) == 10 * MiB - held  # all files together: 10 MiB
    written, code = fill(volume / "total", 64 * MiB)
    # A write is refused whole when what it needs is not there (the last 256 KiB chunk here).
    assert code == errno.ENOSPC and 10 * MiB - held - 256 * 1024 < written <= 10 * MiB - held


def test_a_session_volume_is_mounted_again_through_its_still_attached_device(tmp_path: Path) -> None:
    """An image whose loop device is still attached (its file system alive in a container
    that has not quite gone) is mounted through that device: the same file system, never a
    second one writing the same blocks."""
    image = tmp_path / "work.img"
    volumes.make(image, volumes.image_size(8 * MiB))
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    volumes.mount(image, first)
    try:
        (first / "note").write_text("one")
        holder = os.open(first / "note", os.O_RDONLY)  # keeps the file system alive after the unmount
        volumes.unmount(first)
        try:
            volumes.mount(image, second)
            try:
                assert (second / "note").read_text() == "one"
                assert os.fstat(holder).st_dev == os.stat(second).st_dev  # the same file system
            finally:
                volumes.unmount(second)
        finally:
            os.close(holder)
    finally:
        volumes.unmount(first)


@pytest.mark.parametrize("kind", ["link", "hardlink", "foreign"])
def test_only_the_services_own_image_is_mounted(tmp_path: Path, kind: str) -> None:
    real = tmp_path / "real.img"
    volumes.make(real, volumes.image_size(8 * MiB))
    image = tmp_path / "work.img"
    if kind == "link":
        image.symlink_to(real)
    elif kind == "hardlink":
        os.link(real, image)
    else:
        os.rename(real, image)
        os.chown(image, 1000, 1000)  # written by someone else
    target = tmp_path / "mnt"
    target.mkdir()
    with pytest.raises(OSError) as refused:
        volumes.mount(image, target)
    assert refused.value.errno in (errno.ELOOP, errno.EPERM)
    assert not volumes.mounted(target)


def test_unmount_and_mounts_under(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    assert volumes.unmount(plain) is False and volumes.unmount(tmp_path / "missing") is False
    spaced = tmp_path / "a folder\twith\\odd names"
    spaced.mkdir()
    volumes.create(spaced, volumes.image_size(8 * MiB))
    try:
        assert volumes.mounts_under(tmp_path) == [spaced]
        assert volumes.mounted(spaced)
    finally:
        assert volumes.unmount(spaced) is True
    assert volumes.mounts_under(tmp_path) == []


def test_mounted_nosuid_nodev(volume: Path) -> None:
    options = subprocess.run(["findmnt", "-no", "OPTIONS", str(volume)], capture_output=True, text=True).stdout
    assert {"nosuid", "nodev"} <= set(options.strip().split(","))


def test_probe_passes_here(tmp_path: Path) -> None:
    volumeprobe.probe(tmp_path)
    assert volumes.mounts_under(tmp_path) == [] and os.listdir(tmp_path) == []
