"""Installing skills from archives: safe extraction, caps, atomic replace."""

from __future__ import annotations

import io
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest

from executor.errors import ExecutorError
from executor.skills import PackageLimits, SkillRepository, install_package, uninstall

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
