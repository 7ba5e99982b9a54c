"""A skill's copy made ahead of its run (skill_executor/runtimes/skillcopy.py ``stage``/``matches``):
used only while the installed skill is exactly as it was when copied."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from skill_executor.runtimes.skillcopy import LINK_MIN_BYTES, stage

RUN_USER = (1000, 1000)


@pytest.fixture
def skill(tmp_path: Path) -> Path:
    if os.getuid() != 0:
        pytest.skip("the copy's hard links need a source the run's user does not own (run as root)")
    source = tmp_path / "installed" / "big-skill"
    (source / "assets").mkdir(parents=True)
    (source / "SKILL.md").write_text("---\nname: big-skill\ndescription: d\n---\nBody.\n")
    (source / "assets" / "model.bin").write_bytes(b"\0" * (2 * LINK_MIN_BYTES))
    (source / "small.txt").write_text("one\n")
    for path in (source / "assets" / "model.bin", source / "small.txt", source / "SKILL.md"):
        os.chmod(path, 0o644)
    return source


def prepared(tmp_path: Path, source: Path, name: str = "stage"):  # type: ignore[no-untyped-def]
    folder = tmp_path / name
    folder.mkdir()
    return stage(folder, "big-skill", source, RUN_USER)


def test_a_copy_with_hard_linked_files_still_matches(tmp_path: Path, skill: Path) -> None:
    """Hard-linking a large file (and removing the link again) changes its ctime, not the file."""
    copy = prepared(tmp_path, skill)
    linked = copy.folder / "big-skill" / "assets" / "model.bin"
    assert linked.stat().st_ino == (skill / "assets" / "model.bin").stat().st_ino  # hard linked
    assert copy.matches("big-skill", skill)
    other = prepared(tmp_path, skill, "another")  # another copy links the same file again
    os.unlink(other.folder / "big-skill" / "assets" / "model.bin")
    assert copy.matches("big-skill", skill)


@pytest.mark.parametrize("change", ["edit", "replace", "add", "remove", "chmod", "chown"])
def test_any_change_to_the_installed_skill_is_seen(tmp_path: Path, skill: Path, change: str) -> None:
    copy = prepared(tmp_path, skill)
    time.sleep(0.01)
    target = skill / "small.txt"
    if change == "edit":
        with open(target, "r+") as f:  # same size, in place
            f.write("two\n")
    elif change == "replace":
        (skill / "new.txt").write_text("one\n")
        os.replace(skill / "new.txt", target)
    elif change == "add":
        (skill / "assets" / "extra.txt").write_text("x")
    elif change == "remove":
        target.unlink()
    elif change == "chmod":
        os.chmod(target, 0o755)
    else:
        os.chown(target, 1234, 1234)
    assert not copy.matches("big-skill", skill)


def test_another_skill_or_folder_never_matches(tmp_path: Path, skill: Path) -> None:
    copy = prepared(tmp_path, skill)
    assert not copy.matches("other-skill", skill)
    twin = tmp_path / "twin"
    os.rename(skill, twin)  # the same files, another folder
    assert not copy.matches("big-skill", twin)
