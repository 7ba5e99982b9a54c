"""The ``skill-executor skills`` command-line contract, through the real entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import skills_ref

from ..helpers import make_skill

REPO = Path(__file__).resolve().parent.parent.parent


def cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = None
    if env is not None:
        environment = {k: v for k, v in os.environ.items() if not k.startswith("SKILL_EXECUTOR_")} | env
    return subprocess.run(
        [sys.executable, "-m", "skill_executor.cli.main", *args],
        capture_output=True,
        text=True,
        cwd=cwd or REPO,
        env=environment,
    )


def test_validate_json_strict_and_tolerant(tmp_path: Path) -> None:
    good = make_skill(tmp_path, "good", "name: good\ndescription: d")
    loose = make_skill(tmp_path, "loose", "name: loose\ndescription: d\nversion: 2")
    broken = make_skill(tmp_path, "broken", "name: broken")
    strict = cli("skills", "validate", "--strict", "--json", str(good), str(loose / "SKILL.md"), str(broken))
    assert strict.returncode == 1
    rows = json.loads(strict.stdout)
    assert [r["valid"] for r in rows] == [True, False, False]
    assert rows[0] == {"path": str(good), "name": "good", "valid": True, "errors": [], "warnings": []}
    assert rows[1]["errors"][0]["code"] == "unknown-field" and rows[1]["name"] == "loose"
    assert rows[2]["name"] is None and rows[2]["errors"][0]["code"] == "description-missing"
    tolerant = cli("skills", "validate", "--json", str(good), str(loose))
    assert tolerant.returncode == 0
    assert json.loads(tolerant.stdout)[1]["warnings"][0]["code"] == "unknown-field"


def test_validate_usage_errors_and_dash_paths(tmp_path: Path) -> None:
    assert cli("skills", "validate").returncode == 2
    assert cli("skills", "validate", "--bogus", "x").returncode == 2
    dashed = make_skill(tmp_path, "-dash", "name: dash\ndescription: d")
    result = cli("skills", "validate", "--json", "--", "-dash", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)[0]["path"] == "-dash"
    assert dashed.exists()


def test_list_json(tmp_path: Path) -> None:
    make_skill(tmp_path, "one", "name: one\ndescription: first")
    make_skill(tmp_path, "two", "name: Two\ndescription: second")
    make_skill(tmp_path, "bad", "name: bad")
    out = json.loads(cli("skills", "list", "--root", str(tmp_path), "--json").stdout)
    assert [(s["name"], s["id"]) for s in out["skills"]] == [("one", "one"), ("Two", "two")]
    assert out["skills"][0]["path"] == str(tmp_path / "one") and out["skills"][0]["warnings"] == []
    assert out["skills"][1]["warnings"][0]["code"] == "name-format"
    assert out["rejected"] == [
        {
            "path": str(tmp_path / "bad"),
            "errors": [{"code": "description-missing", "message": "the required key 'description' is missing"}],
        }
    ]


def test_prompt_matches_skills_ref_cli_output(tmp_path: Path) -> None:
    a = make_skill(tmp_path, "alpha", "name: alpha\ndescription: A & B <c>")
    b = make_skill(tmp_path, "beta", "name: beta\ndescription: |\n  multi\n  line\n")
    result = cli("skills", "prompt", str(b), str(a / "SKILL.md"))
    assert result.returncode == 0
    assert result.stdout == skills_ref.to_prompt([b, a]) + "\n"
    text = cli("skills", "prompt", "--format", "text", str(a))
    assert text.stdout == "- alpha: A & B <c>\n"


def test_show_search_install(tmp_path: Path) -> None:
    data = {"SKILL_EXECUTOR_DATA_DIR": str(tmp_path / "data")}  # never ./data of the checkout
    shown = json.loads(cli("skills", "show", "MATH-TOOLS", "--root", "skills", env=data).stdout)
    assert shown["id"] == "math-tools" and "Fibonacci" in shown["body"]
    assert "references/REFERENCE.md" in shown["docs"]
    assert {
        "path": "scripts/fib.py",
        "size": (REPO / "skills/math-tools/scripts/fib.py").stat().st_size,
        "kind": "script",
    } in shown["files"]
    hits = json.loads(cli("skills", "search", "csv chart", "--root", "skills", env=data).stdout)
    assert hits[0]["id"] == "csv-report"
    missing = cli("skills", "show", "nope", "--root", "skills", env=data)
    assert missing.returncode == 2 and "skill_not_found" in missing.stderr

    import zipfile

    package = tmp_path / "pkg.zip"
    with zipfile.ZipFile(package, "w") as zf:
        zf.writestr("SKILL.md", "---\nname: zipped\ndescription: z\n---\n")
    root = tmp_path / "installed"
    out = cli("skills", "install", str(package), "--root", str(root), env=data)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["id"] == "zipped" and (root / "zipped" / "SKILL.md").exists()
    package.write_bytes(b"junk")
    assert cli("skills", "install", str(package), "--root", str(root), env=data).returncode == 1


def _package(path: Path, name: str, description: str = "z") -> Path:
    import zipfile

    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("SKILL.md", f"---\nname: {name}\ndescription: {description}\n---\n")
    return path


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_install_goes_to_the_install_root_and_never_into_the_skills_dirs(tmp_path: Path) -> None:
    data, shipped_root = tmp_path / "data", tmp_path / "shipped"
    make_skill(shipped_root, "example", "name: example\ndescription: shipped")
    env = {"SKILL_EXECUTOR_DATA_DIR": str(data), "SKILL_EXECUTOR_SKILLS_DIRS": str(shipped_root)}
    shipped = _snapshot(shipped_root)
    out = cli("skills", "install", str(_package(tmp_path / "a.zip", "zipped")), env=env)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["path"] == str(data / "skills" / "zipped")
    # A leftover of a crashed install is swept when the next install starts.
    (data / "skills" / ".skill-executor-0123456789abcdef").mkdir()
    (data / "skills" / ".skill-executor-0123456789abcdef" / "junk").write_bytes(b"x" * 1024)
    again = cli("skills", "install", str(_package(tmp_path / "b.zip", "zipped", "v2")), env=env)
    assert again.returncode == 0 and json.loads(again.stdout)["replaced"]
    assert sorted(p.name for p in (data / "skills").iterdir()) == ["zipped"]
    # The skills dirs are read-only: no install into them, and no install shadowing what they ship.
    for root in (shipped_root, tmp_path):
        into = cli("skills", "install", str(_package(tmp_path / "c.zip", "other")), "--root", str(root), env=env)
        assert into.returncode == 1 and "install_root_overlaps" in into.stderr
    shadow = cli("skills", "install", str(_package(tmp_path / "d.zip", "example")), env=env)
    assert shadow.returncode == 1 and "shadows_read_only_skill" in shadow.stderr
    assert f"read-only root {shipped_root}" in shadow.stderr
    assert _snapshot(shipped_root) == shipped and not (tmp_path / "other").exists()
