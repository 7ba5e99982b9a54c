"""Discovery, the cached repository, progressive disclosure layers and search."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import skills_ref

from skill_executor.errors import ExecutorError, NotFound
from skill_executor.registry import SkillRepository, discover
from skill_executor.skills import docs, inventory, load_skill, read_file, render_text, render_xml

from ..helpers import make_skill

REPO_SKILLS = Path(__file__).resolve().parent.parent.parent / "skills"


def skill(root: Path, name: str, description: str = "d", extra: str = "") -> Path:
    return make_skill(root, name, f"name: {name.rsplit('/', 1)[-1]}\ndescription: {description}\n{extra}")


def test_discovery_depth_dot_dirs_and_skips(tmp_path: Path) -> None:
    skill(tmp_path, "top")
    skill(tmp_path, ".curated/curated-one")
    skill(tmp_path, ".system/sys")
    skill(tmp_path, "a/b/c/d/e/deep6")  # depth 6
    skill(tmp_path, "a/b/c/d/e/f/deep7")  # depth 7: too deep
    skill(tmp_path, ".git/in-git")
    skill(tmp_path, "node_modules/in-nm")
    skill(tmp_path, "x/__pycache__/in-pyc")
    names = [p.name for p in discover([tmp_path])]
    assert names == ["curated-one", "sys", "deep6", "top"]


def test_symlinked_dirs_are_not_followed_out_of_the_root(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    skill(outside, "secret")
    skill(root, "inside")
    (root / "escape").symlink_to(outside, target_is_directory=True)
    (root / "alias").symlink_to(root / "inside", target_is_directory=True)
    (root / "loop").symlink_to(root, target_is_directory=True)
    found = [p.name for p in discover([root])]
    assert "secret" not in found
    assert found.count("inside") == 1 and "alias" in found


def test_duplicate_names_root_order_then_path_order(tmp_path: Path) -> None:
    first, second = tmp_path / "r1", tmp_path / "r2"
    skill(second, "dup", "from second root")
    skill(first, "z/dup", "from first root, later path")
    skill(first, "a/dup", "from first root, earlier path")
    repo = SkillRepository([first, second])
    chosen = repo.get("dup")
    assert chosen.description == "from first root, earlier path"
    assert [d.code for d in chosen.warnings].count("duplicate-name") == 2
    assert len(repo.list()) == 1


def test_get_is_case_insensitive_and_404s(tmp_path: Path) -> None:
    skill(tmp_path, "pdf-tools")
    repo = SkillRepository([tmp_path])
    assert repo.get("PDF-Tools").id == "pdf-tools"
    with pytest.raises(NotFound) as info:
        repo.get("nope")
    assert info.value.code == "skill_not_found" and info.value.status == 404


def test_cache_reparses_only_changed_files(tmp_path: Path) -> None:
    d = skill(tmp_path, "demo", "old")
    repo = SkillRepository([tmp_path], refresh_interval=3600)
    first = repo.get("demo")
    assert repo.reload().by_id["demo"] is first  # unchanged: same object, not re-read
    (d / "SKILL.md").write_text("---\nname: demo\ndescription: new text\n---\n")
    st = (d / "SKILL.md").stat()
    os.utime(d / "SKILL.md", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert repo.get("demo").description == "old"  # snapshot until refresh
    assert repo.reload().by_id["demo"].description == "new text"


def test_cache_refreshes_after_interval_in_the_background(tmp_path: Path) -> None:
    repo = SkillRepository([tmp_path], refresh_interval=0.05)
    assert repo.list() == []
    skill(tmp_path, "late")
    time.sleep(0.1)
    assert repo.list() == []  # stale snapshot served at once; a rescan starts
    deadline = time.monotonic() + 5
    while not repo.list() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [s.id for s in repo.list()] == ["late"]


def test_interval_zero_rescans_synchronously(tmp_path: Path) -> None:
    repo = SkillRepository([tmp_path], refresh_interval=0)
    assert repo.list() == []
    skill(tmp_path, "now")
    assert [s.id for s in repo.list()] == ["now"]


def test_rejected_and_hidden(tmp_path: Path) -> None:
    make_skill(tmp_path, "broken", "name: broken")
    skill(tmp_path, "hidden", extra="disable-model-invocation: true")
    skill(tmp_path, "shown")
    repo = SkillRepository([tmp_path])
    assert [s.id for s in repo.list()] == ["shown"]
    assert [s.id for s in repo.list(include_hidden=True)] == ["hidden", "shown"]
    assert repo.get("hidden").id == "hidden"
    rejected = repo.catalog.rejected
    assert len(rejected) == 1 and rejected[0].to_dict()["errors"][0]["code"] == "description-missing"


@pytest.mark.parametrize(
    "frontmatter",
    [
        "name: plain\ndescription: Simple text.",
        'name: esc\ndescription: "Uses <tags> & \'quotes\' \\"double\\""',
        "name: block\ndescription: |\n  Line one\n  Line two\n",
        "name: fold\ndescription: >\n  Folded\n  text\n",
        "name: uni\ndescription: Ünïcödé — ok ✓",
        "name: typed\ndescription: 1.0",
    ],
)
def test_xml_is_byte_identical_to_skills_ref(tmp_path: Path, frontmatter: str) -> None:
    name = frontmatter.split("\n", 1)[0].split(": ", 1)[1]
    d = make_skill(tmp_path, name, frontmatter)
    ours = render_xml([load_skill(d)])
    assert ours == skills_ref.to_prompt([d])


def test_xml_multiple_and_empty_match_skills_ref(tmp_path: Path) -> None:
    a, b = skill(tmp_path, "aaa"), make_skill(tmp_path, "bbb", "name: bbb\ndescription: x", filename="skill.md")
    link = tmp_path / "link-to-a"
    link.symlink_to(a, target_is_directory=True)
    skills = [load_skill(b), load_skill(a), load_skill(link)]
    assert render_xml(skills) == skills_ref.to_prompt([b, a, link])
    assert render_xml([]) == skills_ref.to_prompt([])
    assert all(REPO_SKILLS.iterdir())
    shipped = sorted(p for p in REPO_SKILLS.iterdir() if p.is_dir())
    assert render_xml([load_skill(p) for p in shipped]) == skills_ref.to_prompt(shipped)


def test_text_overview_and_token_estimates(tmp_path: Path) -> None:
    s = load_skill(skill(tmp_path, "demo", '"Does   a\\nthing."'))
    assert render_text([s]) == "- demo: Does a thing."
    assert s.overview_tokens == -(-len("demo: Does   a\nthing.") // 4)
    assert s.body_tokens == 2  # "# Body" -> 6 chars -> 2


def test_inventory_and_docs(tmp_path: Path) -> None:
    d = skill(tmp_path, "demo")
    for rel, size in {
        "scripts/run.py": 10,
        "references/REF.md": 20,
        "assets/logo.png": 30,
        "guide.md": 5,
        "notes/extra.txt": 7,
        "data.bin": 3,
        ".git/config": 1,
    }.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_bytes(b"x" * size)
    (d / "link.md").symlink_to("/etc/hostname")
    s = load_skill(d)
    files = {f.path: (f.size, f.kind) for f in inventory(s)}
    assert files == {
        "assets/logo.png": (30, "asset"),
        "data.bin": (3, "other"),
        "guide.md": (5, "doc"),
        "notes/extra.txt": (7, "doc"),
        "references/REF.md": (20, "reference"),
        "scripts/run.py": (10, "script"),
    }
    assert [f.path for f in docs(inventory(s))] == ["guide.md", "notes/extra.txt", "references/REF.md"]


def test_read_file_path_safety(tmp_path: Path) -> None:
    d = skill(tmp_path / "root", "demo")
    (tmp_path / "secret.txt").write_text("top secret")
    (d / "ok.md").write_text("hello")
    (d / "escape.md").symlink_to(tmp_path / "secret.txt")
    (d / "dirlink").symlink_to(tmp_path, target_is_directory=True)
    (d / "inner.md").symlink_to(d / "ok.md")
    s = load_skill(d)
    assert read_file(s, "ok.md").text == "hello"
    assert read_file(s, "./inner.md").text == "hello"
    for bad in ["/etc/passwd", "../secret.txt", "sub/../../secret.txt", "escape.md", "dirlink/secret.txt", "a\x00b"]:
        with pytest.raises(ExecutorError) as info:
            read_file(s, bad)
        assert info.value.status in (400, 403), bad
    with pytest.raises(NotFound):
        read_file(s, "missing.md")


def test_read_file_caps_and_binary(tmp_path: Path) -> None:
    d = skill(tmp_path, "demo")
    (d / "big.txt").write_text("é" * 100)
    (d / "bin.dat").write_bytes(b"\x89PNG\x00\x01")
    s = load_skill(d)
    big = read_file(s, "big.txt", max_bytes=51)
    assert big.truncated and big.size == 200 and len(big.data) == 51
    assert big.is_text and big.text == "é" * 25
    binary = read_file(s, "bin.dat")
    assert not binary.is_text and binary.text is None and binary.data == b"\x89PNG\x00\x01"


def test_search_ranks_name_hits_higher(tmp_path: Path) -> None:
    skill(tmp_path, "pdf-tools", "Extract text and tables from documents.")
    skill(tmp_path, "doc-helper", "Works with PDF files among many other document kinds and formats.")
    skill(tmp_path, "csv-report", "Summarise CSV data.")
    repo = SkillRepository([tmp_path])
    hits = repo.search("pdf")
    assert [h.skill.id for h in hits] == ["pdf-tools", "doc-helper"]
    assert hits[0].score > hits[1].score > 0
    assert repo.search("csv data")[0].skill.id == "csv-report"
    assert repo.search("") == [] and repo.search("zzz") == []
    assert len(repo.search("pdf", limit=1)) == 1
