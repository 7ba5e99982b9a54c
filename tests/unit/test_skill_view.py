"""The skill as a run sees it: the same private copy on every runtime and path (per-run
container, warm pool, session, local), writable from the skill root while the
installed skill stays untouched; plus what published skills assume of their sandbox
(``localhost``, Unix sockets, a writable ``$HOME`` and ``/tmp``, ``scripts/`` importable,
the hosted products' ``/mnt/...`` paths on Docker)."""

from __future__ import annotations

import hashlib
import os
import zipfile
from pathlib import Path

import pytest

from skill_executor.core import Executor
from skill_executor.errors import ExecutorError
from skill_executor.runtimes.skillcopy import LINK_MIN_BYTES

from ..conftest import require_disk_cap
from ..helpers import leftover_runs, make_skill, run

SKILL = "view-probe"
SCRIPTS = 40  # .py files below scripts/
HELPER = "def z():\n    return 42\n"
MAIN = "from scripts.helper import z\n\nprint('main', z())\n"
UNPACK = """import os, sys, zipfile
src, dest = sys.argv[1], sys.argv[2]
os.makedirs(dest, exist_ok=True)
with zipfile.ZipFile(src) as z:
    z.extractall(dest)
print('unpacked', sorted(os.listdir(dest)))
"""
TEMPLATE = "print('template ran')\n"
PATHS = ["plain", "session"]


@pytest.fixture
def probe(extra_skills: Path) -> Path:
    """A skill shaped like the published document skills: nested scripts (a package
    without ``__init__.py``), templates, and one large asset (hard linked on Docker)."""
    skill = make_skill(extra_skills, SKILL, f"name: {SKILL}\ndescription: probes the skill view")
    (skill / "scripts/office").mkdir(parents=True)
    (skill / "scripts/helper.py").write_text(HELPER)
    (skill / "scripts/main.py").write_text(MAIN)
    (skill / "scripts/office/unpack.py").write_text(UNPACK)
    for i in range(SCRIPTS - 3):
        (skill / f"scripts/office/mod{i}.py").write_text(f"X = {i}\n")
    (skill / "templates").mkdir()
    (skill / "templates/x.py").write_text(TEMPLATE)
    with zipfile.ZipFile(skill / "doc.docx", "w") as doc:
        doc.writestr("word/document.xml", "<w:document/>")
        doc.writestr("[Content_Types].xml", "<Types/>")
    (skill / "assets").mkdir()
    (skill / "assets/big.bin").write_bytes(b"\0" * LINK_MIN_BYTES)
    os.chmod(skill / "assets/big.bin", 0o644)
    return skill


def digest(folder: Path) -> dict[str, tuple[str, int]]:
    """Every entry of a folder: content hash (or link target) and mode."""
    found = {}
    for path in sorted(folder.rglob("*")):
        st = path.lstat()
        if path.is_symlink():
            content = "->" + os.readlink(path)
        elif path.is_file():
            content = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            content = "dir"
        found[str(path.relative_to(folder))] = (content, st.st_mode)
    return found


def session_of(path: str) -> str | None:
    return "view" if path == "session" else None


def docker(executor: Executor) -> bool:
    return executor.runtime.name == "docker"


@pytest.mark.parametrize("path", PATHS)
def test_view_has_real_files_on_every_path(executor: Executor, probe: Path, path: str) -> None:
    result = run(
        executor,
        skill=SKILL,
        session=session_of(path),
        command="find scripts -name '*.py' | wc -l; find . -type l | sort; cd templates && python3 ../templates/x.py "
        "&& cd .. && cat ../$SKILL_NAME/scripts/helper.py | wc -l && du -sbL . --exclude=out --exclude=work "
        "--exclude=inputs | cut -f1",
    )
    lines = result.stdout.splitlines()
    assert result.exit_code == 0, result.stderr
    assert lines[0] == str(SCRIPTS)
    # Only the run's own folders are links; the skill's files are real.
    assert lines[1:4] == ["./inputs", "./out", "./work"]
    assert lines[4] == "template ran" and lines[5] == "2"
    installed = sum(p.stat().st_size for p in probe.rglob("*") if p.is_file())
    assert int(lines[6]) >= installed


@pytest.mark.parametrize("path", PATHS)
def test_relative_writes_from_skill_root_leave_installed_skill_unchanged(
    executor: Executor, probe: Path, path: str
) -> None:
    before = digest(probe)
    result = run(
        executor,
        skill=SKILL,
        session=session_of(path),
        command="set -e; python3 scripts/office/unpack.py doc.docx unpacked/; "
        "echo edited >> unpacked/word/document.xml; echo changed >> SKILL.md; echo new > scripts/new.py; "
        "rm scripts/helper.py; mkdir -p build/x && echo y > build/x/y; chmod +x scripts/main.py; "
        "rm -f assets/big.bin; echo replaced > assets/big.bin; cat assets/big.bin; "
        "tail -1 SKILL.md",
    )
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == ["unpacked ['[Content_Types].xml', 'word']", "replaced", "changed"]
    assert digest(probe) == before
    # The next run sees the installed skill again, not what the last one did to its copy.
    again = run(
        executor,
        skill=SKILL,
        session=session_of(path),
        command="ls; test -f scripts/helper.py && wc -c < assets/big.bin",
    )
    assert again.exit_code == 0 and "unpacked" not in again.stdout and "build" not in again.stdout
    assert again.stdout.splitlines()[-1] == str(LINK_MIN_BYTES)
    assert leftover_runs(executor) == []


@pytest.mark.parametrize("path", PATHS)
def test_paths_relative_to_run_folders_reach_the_skill(executor: Executor, probe: Path, path: str) -> None:
    """``out``, ``work`` and ``inputs`` are the run's folders, so their ``..`` is the
    workspace root: the skill's top-level entries are there too (as links)."""
    (probe / "scripts/tool.py").write_text("#!/usr/bin/env python3\nprint('tool ran')\n")
    os.chmod(probe / "scripts/tool.py", 0o644)  # published without the execute bit
    # The local runtime keeps a session's work/ in the session's folder on the host: there
    # its ``..`` is that folder (documented); everywhere else it is the workspace root.
    from_work = docker(executor) or path != "session"
    result = run(
        executor,
        skill=SKILL,
        session=session_of(path),
        command="set -e; (cd out && python3 ../templates/x.py); "
        + ("(cd work && python3 ../scripts/main.py); " if from_work else "echo 'main 42'; ")
        + "./scripts/tool.py; cd $WORKSPACE_DIR && test -d work && test -d out && ls -d scripts templates; "
        "touch $WORKSPACE_DIR/scripts/new.txt && test -f $SKILL_DIR/scripts/new.txt; "
        "(rm $WORKSPACE_DIR/templates 2>/dev/null && echo REMOVED) || echo kept",
    )
    assert result.exit_code == 0, result.stderr
    # In a container the root and its links are the service's: the run cannot change them.
    # (The local runtime runs as the service's user: nothing there is protected from it.)
    last = "kept" if docker(executor) else "REMOVED"
    assert result.stdout.splitlines() == ["template ran", "main 42", "tool ran", "scripts", "templates", last]
    assert os.stat(probe / "scripts/tool.py").st_mode & 0o111 == 0  # the installed file is untouched


@pytest.mark.parametrize("disk_cap", ["hard", "soft"])
def test_installed_skill_cannot_be_modified_through_a_hard_link(make_executor, probe: Path, disk_cap: str) -> None:  # type: ignore[no-untyped-def]
    require_disk_cap(disk_cap)
    executor = make_executor(disk_cap=disk_cap)
    if not docker(executor) and disk_cap == "soft":
        pytest.skip("the local runtime has no disk cap: one run is enough")
    before = digest(probe)
    big = probe / "assets/big.bin"
    result = run(
        executor,
        skill=SKILL,
        command="stat -c '%h %u' assets/big.bin; "
        "for attempt in 'echo x >> assets/big.bin' 'truncate -s 0 assets/big.bin' 'chmod 666 assets/big.bin' "
        "'touch -d 2001-01-01 assets/big.bin' "
        "\"python3 -c \\\"open('assets/big.bin', 'r+b').write(b'x')\\\"\" "
        "'ln assets/big.bin run-link && echo y >> run-link'; do "
        '(eval "$attempt") 2>/dev/null && echo "WROTE $attempt" || echo DENIED; done; true',
    )
    lines = result.stdout.splitlines()
    links, owner = lines[0].split()
    if docker(executor) and disk_cap == "soft":
        # A hard link to the installed file (no data copied), owned by the installer, not the run.
        assert int(links) >= 2 and owner == str(big.stat().st_uid) and owner != "1000"
        assert lines[1:] == ["DENIED"] * 6, result.stdout
    elif docker(executor):
        # Under the hard cap the workspace is a file system of its own, which no link to the
        # installed file can reach: the run gets a copy, its own to change.
        assert links == "1" and owner == "1000"
    else:
        # The local runtime copies everything: the run's file to change.
        assert links == "1"
    assert digest(probe) == before
    assert big.read_bytes() == b"\0" * LINK_MIN_BYTES


@pytest.mark.parametrize("path", PATHS)
def test_scripts_importable_from_skill_root(executor: Executor, probe: Path, path: str) -> None:
    result = run(
        executor,
        skill=SKILL,
        session=session_of(path),
        command="python3 -m scripts.main && python3 -c 'from scripts.helper import z; print(z())' "
        "&& python3 -c 'import scripts.office.mod7 as m; print(m.X)' "
        # a snippet SKILL.md tells the agent to run from the skill root, importing a helper by bare name
        "&& python3 -c 'from helper import z; print(z())' && cd out && python3 -c 'import helper; print(helper.z())'",
    )
    assert result.stdout == "main 42\n42\n7\n42\n42\n", result.stderr


def test_localhost_unix_sockets_home_and_tmp(executor: Executor) -> None:
    script = (
        "import os, socket, threading\n"
        "print(sorted({a[4][0] for a in socket.getaddrinfo('localhost', 80)}))\n"
        "srv = socket.create_server(('localhost', 0)); port = srv.getsockname()[1]\n"
        "threading.Thread(target=lambda: srv.accept()[0].sendall(b'tcp ok'), daemon=True).start()\n"
        "print(socket.create_connection(('localhost', port)).recv(10).decode())\n"
        "for d in (os.environ['TMPDIR'], '/tmp'):\n"
        "    os.chdir(d); path = f'probe-{os.getpid()}.sock'  # relative: a host TMPDIR may be long\n"
        "    u = socket.socket(socket.AF_UNIX); u.bind(path); u.listen()\n"
        "    c = socket.socket(socket.AF_UNIX); c.connect(path); u.accept()[0].sendall(b'unix ok')\n"
        "    print(c.recv(10).decode()); os.unlink(path)\n"
        "a, b = socket.socketpair(); a.sendall(b'pair ok'); print(b.recv(10).decode())\n"
    )
    result = run(
        executor,
        command='python3 -c "$PROBE" && echo h > ~/.probe && cat ~/.probe && echo t > /tmp/probe-$$ '
        "&& cat /tmp/probe-$$ && rm /tmp/probe-$$ && getent hosts localhost | head -1 | wc -l",
        env={"PROBE": script},
    )
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert set(eval(lines[0])) <= {"127.0.0.1", "::1"} and lines[0] != "[]"  # noqa: S307 -- our own output
    assert lines[1:] == ["tcp ok", "unix ok", "unix ok", "pair ok", "h", "t", "1"]


@pytest.mark.parametrize("path", PATHS)
def test_hosted_paths_on_docker(executor: Executor, probe: Path, path: str) -> None:
    if not docker(executor):
        pytest.skip("the local runtime shares the host's file system: it provides no /mnt/... paths")
    result = run(
        executor,
        skill=SKILL,
        session=session_of(path),
        inputs=[{"from": f"skill://{SKILL}/templates/x.py", "to": "inputs/up.py"}],
        command="set -e; head -2 /mnt/skills/public/view-probe/SKILL.md | tail -1; "
        "cd /mnt/skills/user/view-probe && python3 -m scripts.main; "
        "echo report > /mnt/user-data/outputs/report.txt; echo data > /mnt/data/d.txt; "
        "python3 /mnt/user-data/uploads/up.py; cat $WORK_DIR/d.txt; echo made > unpacked.txt",
        output_files=["out/*.txt"],
    )
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == [f"name: {SKILL}", "main 42", "template ran", "data"]
    assert {f.name: f.content for f in result.output_files} == {"out/report.txt": "report\n"}


@pytest.mark.parametrize("path", PATHS)
def test_files_written_in_the_skill_folder_are_collected_by_their_path_there(
    executor: Executor, probe: Path, path: str
) -> None:
    """Scripts save charts, JSON and configs where they run (the skill folder, the default
    working directory): globs reach them by their path there; the skill's own files are not
    outputs unless the run changed them; what no glob collected, and a glob that matched
    nothing, are named in the warnings."""
    result = run(
        executor,
        skill=SKILL,
        session=session_of(path),
        command="set -e; printf png > chart.png; mkdir -p results && echo '{}' > results/a.json; "
        "echo new > scripts/new.py; echo changed >> scripts/helper.py; echo o > out/o.txt; "
        "echo notes > notes.md; cd templates && echo t > made-here.txt",
        output_files=["*.png", "results/*.json", "scripts/*.py", "out/*", "*.csv"],
    )
    assert result.exit_code == 0, result.stderr
    collected = {f.name: f.content for f in result.output_files}
    assert collected == {
        "chart.png": "png",
        "results/a.json": "{}\n",
        "scripts/helper.py": HELPER + "changed\n",
        "scripts/new.py": "new\n",
        "out/o.txt": "o\n",
    }
    assert "output glob '*.csv' matched no file" in result.warnings
    missed = [w for w in result.warnings if "no output glob matched" in w]
    assert len(missed) == 1 and "2 file(s)" in missed[0]
    assert "'notes.md'" in missed[0] and "'templates/made-here.txt'" in missed[0]
    assert digest(probe)["scripts/helper.py"][0] == hashlib.sha256(HELPER.encode()).hexdigest()


@pytest.mark.parametrize("path", PATHS)
def test_sibling_skills_are_beside_the_skill_read_only(
    executor: Executor, extra_skills: Path, probe: Path, path: str
) -> None:
    """A skill that refers to another as ``../<name>/`` (as obra's skills do) finds it there,
    and a run may ask for others (``with_skills``); they are read-only, the installed
    skills untouched, and the hosted products' /mnt/skills paths show them too on Docker."""
    make_skill(
        extra_skills,
        "writing-plans",
        "name: writing-plans\ndescription: plans",
        body="Before this, follow ../brainstorming/SKILL.md and ../no-such-skill/x.md.\n",
    )
    brainstorming = make_skill(extra_skills, "brainstorming", "name: brainstorming\ndescription: ideas")
    (brainstorming / "template.md").write_text("# Ideas\n")
    (brainstorming / "big.bin").write_bytes(b"\0" * LINK_MIN_BYTES)  # hard linked, never written through
    os.chmod(brainstorming / "big.bin", 0o644)
    before = digest(brainstorming)
    result = run(
        executor,
        skill="writing-plans",
        session=session_of(path),
        with_skills=[SKILL],
        command="cat ../brainstorming/template.md; ls $SKILLS_DIR | sort | tr '\\n' ' '; echo; "
        f"test -f ../{SKILL}/scripts/helper.py && echo probe-there; "
        "wc -c < ../brainstorming/big.bin; "
        "echo x >> ../brainstorming/template.md 2>/dev/null || echo read-only; "
        "echo x >> ../brainstorming/big.bin 2>/dev/null || echo big-read-only; "
        "touch ../brainstorming/new 2>/dev/null || echo no-new-files",
    )
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "# Ideas"
    assert lines[1].split() == ["brainstorming", SKILL, "writing-plans"]
    assert lines[2:4] == ["probe-there", str(LINK_MIN_BYTES)]
    if executor.runtime.name != "local":  # the local runtime runs as this process's user: no boundary
        assert lines[4:] == ["read-only", "big-read-only", "no-new-files"]
    assert digest(brainstorming) == before
    if docker(executor):
        hosted = run(executor, skill="writing-plans", command="cat /mnt/skills/public/brainstorming/template.md")
        assert hosted.stdout == "# Ideas\n"
    # A sibling named in the command (`./render-graphs.js ../some-skill`, as obra's
    # writing-skills tells an agent) is brought too; others are not.
    named = run(
        executor,
        skill=SKILL,
        session=session_of(path),
        command="cat ../brainstorming/template.md; ls $SKILLS_DIR | sort | tr '\\n' ' '",
    )
    assert named.stdout.splitlines() == ["# Ideas", f"brainstorming {SKILL} "], named.stderr
    refused = pytest.raises(ExecutorError)
    with refused as info:
        run(executor, skill="writing-plans", with_skills=["no-such-skill"], command="true")
    assert info.value.code == "skill_not_found"
