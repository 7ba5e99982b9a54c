"""Installing skills from archives: safe extraction, caps, atomic and crash-safe replace."""

from __future__ import annotations

import bz2
import errno
import functools
import gzip
import io
import os
import platform
import signal
import stat
import struct
import subprocess
import sys
import tarfile
import time
import tracemalloc
import zipfile
import zlib
from pathlib import Path

import pytest

from skill_executor.errors import ExecutorError
from skill_executor.registry import PackageLimits, SkillRepository, discover, install_package, installdir, uninstall
from skill_executor.registry.installdir import leftovers, sweep

SKILL_MD = b"---\nname: packed\ndescription: A packaged skill.\n---\n# Packed\n"


def zip_bytes(entries: dict[str, bytes], *, symlinks: dict[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
        for name, target in (symlinks or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, target)
    return buf.getvalue()


def tar_bytes(entries: dict[str, bytes], *, extra: list[tarfile.TarInfo] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        for info in extra or []:
            tf.addfile(info)
    return buf.getvalue()


def test_install_zip_at_root(tmp_path: Path) -> None:
    result = install_package(zip_bytes({"SKILL.md": SKILL_MD, "scripts/run.sh": b"echo hi\n"}), tmp_path)
    assert result.skill.id == "packed" and not result.replaced
    assert (tmp_path / "packed" / "scripts" / "run.sh").read_bytes() == b"echo hi\n"
    assert [(f.path, f.kind) for f in result.files] == [("scripts/run.sh", "script")]
    assert SkillRepository([tmp_path]).get("packed").description == "A packaged skill."


def test_install_tar_gz_in_single_top_folder(tmp_path: Path) -> None:
    data = tar_bytes({"packed-1.0/SKILL.md": SKILL_MD, "packed-1.0/references/R.md": b"ref"})
    result = install_package(data, tmp_path)
    assert (tmp_path / "packed" / "references" / "R.md").read_text() == "ref"
    assert result.skill.path == tmp_path / "packed"
    assert not list(tmp_path.glob(".skill-executor-*"))


@pytest.mark.parametrize(
    "archive, message",
    [
        (lambda: zip_bytes({"../evil.txt": b"x", "SKILL.md": SKILL_MD}), "unsafe path"),
        (lambda: zip_bytes({"/abs/evil.txt": b"x", "SKILL.md": SKILL_MD}), "absolute"),
        (lambda: tar_bytes({"a/../../evil": b"x", "SKILL.md": SKILL_MD}), "unsafe path"),
        (lambda: zip_bytes({"SKILL.md": SKILL_MD}, symlinks={"link": "/etc/passwd"}), "symlink"),
        (lambda: zip_bytes({"README.md": b"no skill"}), "no SKILL.md"),
        (lambda: zip_bytes({"a/SKILL.md": SKILL_MD, "b/SKILL.md": SKILL_MD}), "exactly one skill"),
        (lambda: b"not an archive at all", "not a valid tar"),
        (lambda: zip_bytes({"SKILL.md": b"---\nname: x\n---\n"}), "cannot be loaded"),
    ],
)
def test_refused_archives(tmp_path: Path, archive, message: str) -> None:
    with pytest.raises(ExecutorError) as info:
        install_package(archive(), tmp_path / "root")
    assert message in info.value.message
    assert not (tmp_path / "evil.txt").exists() and not Path("/abs/evil.txt").exists()
    assert list((tmp_path / "root").iterdir()) == [] if (tmp_path / "root").exists() else True


def test_tar_links_and_devices_refused(tmp_path: Path) -> None:
    sym = tarfile.TarInfo("link")
    sym.type, sym.linkname = tarfile.SYMTYPE, "/etc/passwd"
    hard = tarfile.TarInfo("hard")
    hard.type, hard.linkname = tarfile.LNKTYPE, "SKILL.md"
    dev = tarfile.TarInfo("dev")
    dev.type = tarfile.CHRTYPE
    for info, word in [(sym, "link"), (hard, "link"), (dev, "special file")]:
        with pytest.raises(ExecutorError) as exc:
            install_package(tar_bytes({"SKILL.md": SKILL_MD}, extra=[info]), tmp_path)
        assert word in exc.value.message


def test_zip_bomb_is_stopped_while_decompressing(tmp_path: Path) -> None:
    bomb = zip_bytes({"SKILL.md": SKILL_MD, "bomb.bin": b"\0" * (50 * 1024 * 1024)})
    assert len(bomb) < 200 * 1024
    limits = PackageLimits(max_file_bytes=8 * 1024 * 1024, max_total_bytes=16 * 1024 * 1024)
    with pytest.raises(ExecutorError) as info:
        install_package(bomb, tmp_path, limits=limits)
    assert info.value.status == 413 and "bomb.bin" in info.value.message
    many = zip_bytes({"SKILL.md": SKILL_MD, **{f"f{i}": b"" for i in range(20)}})
    with pytest.raises(ExecutorError) as info:
        install_package(many, tmp_path, limits=PackageLimits(max_entries=10))
    assert "entries" in info.value.message
    total = zip_bytes({"SKILL.md": SKILL_MD, "a": b"1" * 600, "b": b"2" * 600})
    with pytest.raises(ExecutorError):
        install_package(total, tmp_path, limits=PackageLimits(max_total_bytes=1000))
    assert list(tmp_path.iterdir()) == []


def test_replace_is_atomic_and_failed_install_keeps_previous(tmp_path: Path) -> None:
    install_package(zip_bytes({"SKILL.md": SKILL_MD, "v1.txt": b"1"}), tmp_path)
    v2 = SKILL_MD.replace(b"A packaged skill.", b"Version two.")
    result = install_package(zip_bytes({"SKILL.md": v2, "v2.txt": b"2"}), tmp_path)
    assert result.replaced and (tmp_path / "packed" / "v2.txt").exists()
    assert not (tmp_path / "packed" / "v1.txt").exists()
    bad = zip_bytes({"SKILL.md": v2, "big": b"x" * 5000})
    with pytest.raises(ExecutorError):
        install_package(bad, tmp_path, limits=PackageLimits(max_file_bytes=100))
    assert SkillRepository([tmp_path]).get("packed").description == "Version two."
    with pytest.raises(ExecutorError) as info:
        install_package(zip_bytes({"SKILL.md": v2}), tmp_path, replace=False)
    assert info.value.status == 409


def test_strict_install_refuses_spec_violations(tmp_path: Path) -> None:
    data = zip_bytes({"SKILL.md": b"---\nname: packed\ndescription: d\nversion: 1\n---\n"})
    with pytest.raises(ExecutorError) as info:
        install_package(data, tmp_path, strict=True)
    assert info.value.code == "invalid_skill"
    assert install_package(data, tmp_path).skill.id == "packed"


def test_uninstall(tmp_path: Path) -> None:
    install_package(zip_bytes({"SKILL.md": SKILL_MD}), tmp_path)
    uninstall(tmp_path, "packed")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ExecutorError):
        uninstall(tmp_path, "../x")


# -- bombs and lies: every cap applies while unpacking, and quickly -----------------------

MiB = 1024 * 1024


def tar_header(name: str, size: int, kind: bytes = tarfile.REGTYPE) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.type = size, kind
    return info.tobuf(format=tarfile.GNU_FORMAT)


def gzip_of_zeros(head: bytes, zero_mib: int, tail: bytes = b"") -> bytes:
    """``head`` + ``zero_mib`` MiB of zeros + ``tail``, gzipped, without compressing the zeros
    one by one: after a full flush every MiB compresses to the same bytes."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    mib = bytes(MiB)
    start = deflate.compress(head) + deflate.flush(zlib.Z_FULL_FLUSH)
    block = deflate.compress(mib) + deflate.flush(zlib.Z_FULL_FLUSH)
    end = deflate.compress(tail) + deflate.flush()
    crc = zlib.crc32(head)
    for _ in range(zero_mib):
        crc = zlib.crc32(mib, crc)
    size = len(head) + zero_mib * MiB + len(tail)
    trailer = struct.pack("<LL", zlib.crc32(tail, crc), size & 0xFFFFFFFF)
    return b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" + start + block * zero_mib + end + trailer


@functools.cache
def bz2_eight_mib_of_zeros() -> bytes:
    return bz2.compress(bytes(8 * MiB))  # 48 bytes


def bz2_of_zeros(head: bytes, zero_mib: int) -> bytes:
    """The same in bzip2: ``head`` then concatenated streams of 8 MiB of zeros each."""
    return (bz2.compress(head) if head else b"") + bz2_eight_mib_of_zeros() * (zero_mib // 8)


def refused_fast(
    data: bytes, root: Path, *, status: int = 413, limits: PackageLimits = PackageLimits()
) -> ExecutorError:
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(ExecutorError) as info:
            install_package(data, root, limits=limits)
        elapsed = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert elapsed < 1.0, f"took {elapsed:.2f}s"
    assert peak < 16 * MiB, f"peak {peak} bytes"
    assert info.value.status == status, info.value.message
    if status == 413:
        assert info.value.code == "package_too_large"
    assert [p.name for p in root.iterdir()] == [] if root.exists() else True
    return info.value


def test_small_tar_gz_declaring_a_512_mib_member_is_refused_before_inflating(tmp_path: Path) -> None:
    skill = tar_header("SKILL.md", len(SKILL_MD)) + SKILL_MD + bytes(-len(SKILL_MD) % 512)
    bomb = gzip_of_zeros(skill + tar_header("big.bin", 512 * MiB), 512, bytes(1024))
    assert len(bomb) < 600 * 1024  # the 509 KiB
    error = refused_fast(bomb, tmp_path)
    assert "'big.bin' declares 536870912 bytes; the limit is 33554432" in error.message


def test_huge_members_that_are_never_written_are_refused_too(tmp_path: Path) -> None:
    """A folder entry or a global pax header with data is skipped by a reader, not free."""
    folder = gzip_of_zeros(tar_header("pkg/", 512 * MiB, tarfile.DIRTYPE), 512)
    assert "declares 536870912 bytes" in refused_fast(folder, tmp_path).message
    global_header = gzip_of_zeros(tar_header("pax_global_header", 512 * MiB, tarfile.XGLTYPE), 512)
    assert "meta header of 536870912 bytes" in refused_fast(global_header, tmp_path).message


def test_bz2_bomb_is_refused_by_what_it_produces(tmp_path: Path) -> None:
    # The header tells the truth, but a GiB of zeros in 1 KiB is not a skill.
    declared = bz2_of_zeros(tar_header("SKILL.md", 1024 * MiB), 1024)
    assert len(declared) < 8 * 1024
    assert "declares 1073741824 bytes" in refused_fast(declared, tmp_path).message
    # Honest small members, each under every cap: the compression ratio stops it.
    skill = tar_header("SKILL.md", len(SKILL_MD)) + SKILL_MD + bytes(-len(SKILL_MD) % 512)
    honest = bz2.compress(skill) + b"".join(bz2_of_zeros(tar_header(f"f{i}", 8 * MiB), 8) for i in range(3))
    assert len(honest) < 1024
    error = refused_fast(honest, tmp_path)
    assert "plus 100 times its own" in error.message
    # Data after the end of the archive is decompressed (to check the stream) and counted too.
    small = tar_bytes({"SKILL.md": SKILL_MD})
    trailing = bz2.compress(gzip.decompress(small)) + bz2_of_zeros(b"", 1024)
    assert "plus 100 times its own" in refused_fast(trailing, tmp_path).message


def test_zip_whose_header_lies_about_its_size(tmp_path: Path) -> None:
    honest = zip_bytes({"SKILL.md": SKILL_MD, "bomb.bin": bytes(50 * MiB)})
    listed = zipfile.ZipFile(io.BytesIO(honest)).getinfo("bomb.bin")

    def claim(size: int) -> bytes:
        """Rewrite bomb.bin's uncompressed size in its local header and the central directory."""
        data = bytearray(honest)
        struct.pack_into("<L", data, listed.header_offset + 22, size)
        central = honest.rfind(b"PK\x01\x02")  # bomb.bin was written last
        assert data[central : central + 4] == b"PK\x01\x02"
        struct.pack_into("<L", data, central + 24, size)
        return bytes(data)

    # Claims 1 KiB: the reader stops there, and the CRC of what it read is wrong.
    error = refused_fast(claim(1024), tmp_path, status=400)
    assert error.code == "invalid_package" and "bomb.bin" in error.message
    # Claims 4 GiB - 1: refused at once, nothing inflated.
    assert "declares 4294967295 bytes" in refused_fast(claim(0xFFFFFFFF), tmp_path).message
    # Claims its real size: stopped while inflating at the per-file cap.
    limits = PackageLimits(max_file_bytes=64 * MiB)
    assert "unpacks to more than" in refused_fast(honest, tmp_path, limits=limits).message


def test_zip_central_directory_and_methods_are_checked_first(tmp_path: Path) -> None:
    data = bytearray(zip_bytes({"SKILL.md": SKILL_MD}))
    struct.pack_into("<HH", data, len(data) - 22 + 8, 60000, 60000)  # entries on disk, entries
    assert "60000 entries" in refused_fast(bytes(data), tmp_path).message
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_BZIP2) as zf:
        zf.writestr("SKILL.md", SKILL_MD)
    error = refused_fast(buf.getvalue(), tmp_path, status=400)
    assert "compression method 12; only stored and deflate" in error.message


def test_pax_header_that_stalls_tarfile_is_refused_fast(tmp_path: Path) -> None:
    """Python's tarfile parses pax headers with regular expressions that take seconds on runs of digits."""
    digits = b"1" * 60000
    data = tar_header("././@PaxHeader", len(digits), tarfile.XHDTYPE) + digits + bytes(-len(digits) % 512)
    error = refused_fast(gzip.compress(data + tar_header("SKILL.md", 0) + bytes(1024)), tmp_path, status=400)
    assert "malformed pax header" in error.message


@pytest.mark.parametrize(
    "name, message",
    [
        ("a" * 300 + "/SKILL.md", "longer than 255 bytes"),
        ("/".join(["d" * 200] * 8) + "/SKILL.md", "longer than 1024 bytes"),
        ("SKILL.md/x" + "/.." * 3, "unsafe path"),
    ],
)
def test_long_or_unsafe_entry_paths_are_400(tmp_path: Path, name: str, message: str) -> None:
    for archive in (zip_bytes({name: b"x", "SKILL.md": SKILL_MD}), tar_bytes({name: b"x", "SKILL.md": SKILL_MD})):
        error = refused_fast(archive, tmp_path, status=400)
        assert message in error.message and len(error.message) < 600


def test_tar_names_that_are_not_utf8_and_sparse_files_are_refused(tmp_path: Path) -> None:
    bad = bytearray(tar_header("SKILL.md", 0))
    bad[0:8] = b"SKILL\xff.m"
    bad[148:156] = b" " * 8
    bad[148:156] = b"%06o\0 " % sum(bad)
    error = refused_fast(bytes(bad) + bytes(1024), tmp_path, status=400)
    assert "not valid UTF-8" in error.message
    sparse = tar_header("SKILL.md", 0, tarfile.GNUTYPE_SPARSE)
    assert "sparse" in refused_fast(sparse + bytes(1024), tmp_path, status=400).message


@pytest.mark.parametrize("mode", ["w:", "w:gz", "w:bz2", "w:xz"])
@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT])
def test_tar_formats_and_compressions_install(tmp_path: Path, mode: str, fmt: int) -> None:
    long_dir = "packed/references/" + "r" * 90  # over 100 bytes: pax path, GNU long name or ustar prefix
    entries = {"packed/SKILL.md": SKILL_MD, f"{long_dir}/notes.md": b"notes", "packed/scripts/run.sh": b"echo\n"}
    if fmt != tarfile.USTAR_FORMAT:
        entries["packed/references/ünï.md"] = "ü".encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode, format=fmt) as tf:  # type: ignore[call-overload]
        folder = tarfile.TarInfo("packed/references")
        folder.type = tarfile.DIRTYPE
        tf.addfile(folder)
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 1700000000.5
            tf.addfile(info, io.BytesIO(data))
    result = install_package(buf.getvalue(), tmp_path)
    root = tmp_path / "packed"
    assert (root / long_dir.removeprefix("packed/") / "notes.md").read_bytes() == b"notes"
    assert os.access(root / "scripts" / "run.sh", os.X_OK) and not os.access(root / "SKILL.md", os.X_OK)
    if fmt != tarfile.USTAR_FORMAT:
        assert (root / "references" / "ünï.md").read_text() == "ü"
    assert result.skill.id == "packed"


# -- the install root: crash-safe replacement, the start-up sweep -------------------------------

REPO = Path(__file__).resolve().parent.parent.parent
V1 = zip_bytes({"SKILL.md": SKILL_MD, "v1.txt": b"1" * 4096, "scripts/run.sh": b"echo v1\n"})
V2 = zip_bytes({"SKILL.md": SKILL_MD.replace(b"A packaged skill.", b"Version two."), "v2.txt": b"2" * 4096})

#: Installs a package in a child process with crash points injected: ``kill-before`` dies
#: with SIGKILL once the new version is staged and validated (before it goes live),
#: ``kill-after`` right after the swap with the live version, and ``wait`` says ``staged``
#: on stdout at the first point and waits for a line on stdin before going on.
INSTALLER = """
import os, signal, sys
from pathlib import Path
from skill_executor.registry import package

root, archive, mode = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
go_live, exchange = package._go_live, package.exchange

def staged(*args, **kwargs):
    if mode == "kill-before":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "wait":
        print("staged", flush=True)
        sys.stdin.readline()
    return go_live(*args, **kwargs)

def swapped(staged, live):
    exchange(staged, live)
    if mode == "kill-after":
        os.kill(os.getpid(), signal.SIGKILL)

package._go_live, package.exchange = staged, swapped
package.install_package(archive.read_bytes(), root)
"""


def installer(root: Path, archive: bytes, mode: str, tmp_path: Path) -> subprocess.Popen[str]:
    path = tmp_path / f"package-{mode}.zip"
    path.write_bytes(archive)
    return subprocess.Popen(
        [sys.executable, "-c", INSTALLER, str(root), str(path), mode],
        cwd=REPO,
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("mode, survivor", [("kill-before", V1), ("kill-after", V2)])
def test_a_crash_during_a_replacement_leaves_one_complete_version_and_start_up_sweeps(
    tmp_path: Path, mode: str, survivor: bytes
) -> None:
    root = tmp_path / "installed"
    install_package(V1, root)
    expected_root = tmp_path / "expected"
    install_package(survivor, expected_root)
    child = installer(root, V2, mode, tmp_path)
    _, err = child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL, err
    # The skill is one whole version; the staging folder (holding the other one) is left over ...
    assert tree(root / "packed") == tree(expected_root / "packed")
    left = leftovers(root)
    assert len(left) == 1 and (left[0] / "packed" / "SKILL.md").exists()
    # ... and is never a skill, even though it holds a complete one.
    assert discover([root]) == [root.resolve() / "packed"]
    # The next start-up removes it.
    repository = SkillRepository([], install_root=root)
    assert leftovers(root) == [] and [p.name for p in root.iterdir()] == ["packed"]
    assert repository.get("packed").path == root.resolve() / "packed"
    assert tree(root / "packed") == tree(expected_root / "packed")


def test_a_crash_during_a_first_install_leaves_nothing_after_the_sweep(tmp_path: Path) -> None:
    root = tmp_path / "installed"
    child = installer(root, V1, "kill-before", tmp_path)
    child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL
    # A first install has no live version to swap with: the crash came while staging ...
    assert [p.name.startswith(".skill-executor-") for p in root.iterdir()] == [True]
    assert SkillRepository([], install_root=root).list() == []
    assert list(root.iterdir()) == []


def test_the_sweep_spares_a_live_install_in_another_process(tmp_path: Path) -> None:
    root = tmp_path / "installed"
    install_package(V1, root)
    dead = installer(root, V2, "kill-before", tmp_path)
    dead.communicate(timeout=60)
    (crashed,) = leftovers(root)
    live = installer(root, V2, "wait", tmp_path)
    try:
        assert live.stdout is not None and live.stdout.readline() == "staged\n"
        (staged,) = [p for p in leftovers(root) if p != crashed]
        snapshot = tree(staged)
        repository = SkillRepository([], install_root=root)  # a start-up while the install is in progress
        assert leftovers(root) == [staged] and tree(staged) == snapshot
        assert repository.get("packed").description == "A packaged skill."
        assert sweep(root) == []
    finally:
        _, err = live.communicate("go\n", timeout=60)
    assert live.returncode == 0, err
    assert leftovers(root) == [] and [p.name for p in root.iterdir()] == ["packed"]
    assert repository.reload().by_id["packed"].description == "Version two."


def test_a_replacement_is_refused_where_folders_cannot_be_swapped(tmp_path: Path, monkeypatch) -> None:
    root = tmp_path / "installed"
    install_package(V1, root)
    before = tree(root / "packed")

    def unsupported(src: Path, dst: Path, flags: int) -> None:
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))

    monkeypatch.setattr(installdir, "_renameat2", unsupported)
    with pytest.raises(ExecutorError) as info:
        install_package(V2, root)
    assert info.value.code == "atomic_replace_unsupported" and info.value.status == 503
    assert "cannot swap folders atomically" in info.value.message
    assert tree(root / "packed") == before and [p.name for p in root.iterdir()] == ["packed"]
    # A first install needs no swap.
    assert install_package(zip_bytes({"SKILL.md": SKILL_MD.replace(b"packed", b"other")}), root).skill.id == "other"


def test_exchange_through_the_raw_system_call(tmp_path: Path, monkeypatch) -> None:
    """Where the C library has no ``renameat2`` wrapper, the system call is made by number."""
    if installdir._SYSCALL_RENAMEAT2.get(platform.machine()) is None:
        pytest.skip(f"no renameat2 number known for {platform.machine()}")
    libc = installdir._libc

    class NoWrapper:
        syscall = libc.syscall if libc is not None else None

    monkeypatch.setattr(installdir, "_libc", NoWrapper())
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "from-a").touch()
    (tmp_path / "b").mkdir()
    installdir.exchange(tmp_path / "a", tmp_path / "b")
    assert os.listdir(tmp_path / "b") == ["from-a"] and os.listdir(tmp_path / "a") == []
    with pytest.raises(FileNotFoundError):
        installdir.exchange(tmp_path / "a", tmp_path / "missing")


def test_removal_leaves_no_staging_folder_and_refuses_what_is_not_installed(tmp_path: Path) -> None:
    install_package(V1, tmp_path)
    with pytest.raises(ExecutorError) as info:
        uninstall(tmp_path, "nope")
    assert info.value.status == 404
    uninstall(tmp_path, "packed")
    assert list(tmp_path.iterdir()) == []


def test_the_install_root_defaults_to_the_data_dir(tmp_path: Path) -> None:
    from skill_executor.config import Settings

    settings = Settings(skills_dirs=[tmp_path / "shipped"], data_dir=tmp_path / "data")
    assert settings.install_root == tmp_path / "data" / "skills"
    assert settings.skill_roots == [tmp_path / "shipped", tmp_path / "data" / "skills"]
    assert Settings(data_dir=tmp_path, install_dir=tmp_path / "mine").install_root == tmp_path / "mine"
