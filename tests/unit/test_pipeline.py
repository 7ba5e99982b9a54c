"""The skill_run pipeline, written against the runtime interface (runs on every runtime)."""

from __future__ import annotations

import base64
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from skill_executor.core import Executor
from skill_executor.errors import ExecutorError
from skill_executor.runs.models import RunResult

from ..helpers import eventually, leftover_runs, make_skill, refused, run


def files(result: RunResult) -> dict[str, object]:
    return {f.name: f for f in result.output_files}


# -- basics ----------------------------------------------------------------------------


def test_fib_writes_to_out_from_skill_root(executor: Executor) -> None:
    result = run(executor, command="python3 scripts/fib.py 10 > out/fib.txt; echo done", output_files=["out/*.txt"])
    assert result.exit_code == 0 and result.stdout == "done\n" and not result.timed_out
    fib = files(result)["out/fib.txt"]
    assert fib.content == "\n".join(str(n) for n in [0, 1, 1, 2, 3, 5, 8, 13, 21, 34]) + "\n"
    assert fib.mime_type == "text/plain" and fib.encoding == "utf-8"
    assert fib.ref is None  # not saved: out/ ends with the run, so no ref (none that would not round-trip)
    assert fib.size_bytes == len(fib.content) and len(fib.sha256) == 64
    assert result.duration_ms > 0 and result.run_id
    assert leftover_runs(executor) == []


def test_nonzero_exit_is_a_normal_result(executor: Executor) -> None:
    result = run(executor, command="echo oops >&2; exit 3")
    assert result.exit_code == 3 and result.stderr == "oops\n" and not result.timed_out


def test_stdin_is_fed_and_closed_otherwise(executor: Executor) -> None:
    assert run(executor, command="cat", stdin="hello\n").stdout == "hello\n"
    assert run(executor, command="cat; echo end").stdout == "end\n"


def test_environment_is_clean_and_complete(executor: Executor, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKILL_EXECUTOR_SECRET_TOKEN", "s3cr3t")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "leak-me")
    fresh = Executor.from_settings(executor.settings, executor.runtime)
    try:
        result = run(fresh, command="env", env={"GREETING": "hi there"})
    finally:
        fresh.close(runtime=False)  # the runtime is shared and closed by the fixture
    env = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    assert "s3cr3t" not in result.stdout and "leak-me" not in result.stdout
    for name in (
        "WORKSPACE_DIR",
        "SKILLS_DIR",
        "SKILL_DIR",
        "SKILL_NAME",
        "WORK_DIR",
        "OUTPUT_DIR",
        "RUN_DIR",
        "HOME",
        "TMPDIR",
        "PATH",
    ):
        assert name in env, name
    assert env["GREETING"] == "hi there" and env["SKILL_NAME"] == "math-tools"
    assert env["SKILL_DIR"] == env["SKILLS_DIR"] + "/math-tools"
    assert env["OUTPUT_DIR"] == env["WORKSPACE_DIR"] + "/out"
    assert env["PWD"] == env["SKILL_DIR"]


@pytest.mark.parametrize(
    "name", ["LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "BASH_ENV", "ENV", "OUTPUT_DIR", "1BAD", "A-B"]
)
def test_env_names_refused(executor: Executor, name: str) -> None:
    error = refused(executor, command="true", env={name: "x"})
    assert error.status in (400, 403) and name in error.message


def test_env_variables_visible_in_skill_paths(executor: Executor) -> None:
    result = run(
        executor,
        command='cd "$WORK_DIR" && echo a > a.txt && cd "$SKILL_DIR" && cat work/a.txt inputs/../a.txt && ls "$SKILLS_DIR"',
    )
    assert result.stdout == "a\na\nmath-tools\n", result.stderr


def test_unknown_skill_is_404_case_insensitive_match(executor: Executor) -> None:
    assert refused(executor, skill="nope", command="true").status == 404
    assert run(executor, skill="MATH-TOOLS", command="echo ok").stdout == "ok\n"


def test_timeout_above_maximum_refused(executor: Executor) -> None:
    error = refused(executor, command="true", timeout=10_000)
    assert error.code == "timeout_too_large"


def test_skill_files_are_read_only_and_source_untouched(executor: Executor) -> None:
    source = Path(executor.repository.get("math-tools").path)
    before = {p: p.read_bytes() for p in source.rglob("*") if p.is_file()}
    result = run(
        executor,
        command="echo pwned > scripts/fib.py; echo x > SKILL.md; rm -f scripts/stats.py; echo new > scripts/new.py; true",
    )
    assert result.exit_code == 0
    after = {p: p.read_bytes() for p in source.rglob("*") if p.is_file()}
    assert after == before


def test_skill_symlink_does_not_pull_host_files(executor: Executor, extra_skills: Path, tmp_path: Path) -> None:
    secret = tmp_path / "host-secret.txt"
    secret.write_text("host secret")
    skill = make_skill(extra_skills, "linky", "name: linky\ndescription: d")
    (skill / "leak.txt").symlink_to(secret)
    (skill / "ok.txt").write_text("fine")
    result = run(executor, skill="linky", command="cat ok.txt; cat leak.txt 2>/dev/null || echo no-leak")
    assert result.stdout == "fineno-leak\n"
    assert "host secret" not in result.stdout


# -- cwd ---------------------------------------------------------------------------------


def test_cwd_variants(executor: Executor) -> None:
    assert run(executor, command="pwd", cwd="scripts").stdout.rstrip().endswith("/skills/math-tools/scripts")
    assert run(executor, command="pwd", cwd="$WORK_DIR").stdout.rstrip().endswith("/work")
    assert run(executor, command="pwd", cwd="${OUTPUT_DIR}").stdout.rstrip().endswith("/out")
    assert run(executor, command="pwd", cwd="$WORKSPACE_DIR/work/inputs").stdout.rstrip().endswith("/work/inputs")
    assert run(executor, command="pwd", cwd="inputs").stdout.rstrip().endswith("/work/inputs")


@pytest.mark.parametrize("cwd", ["../..", "/etc", "scripts/../../..", "$WORK_DIR/../..", "$OUTPUT_DIRX", "missing-dir"])
def test_cwd_refused(executor: Executor, cwd: str) -> None:
    error = refused(executor, command="pwd", cwd=cwd)
    assert 400 <= error.status < 500


# -- inputs ------------------------------------------------------------------------------


def test_artifact_input_latest_and_version(executor: Executor) -> None:
    executor.artifacts.put("data/numbers.txt", b"1 2 3\n")
    executor.artifacts.put("data/numbers.txt", b"10 20 30 40\n")
    latest = run(
        executor,
        command="python3 scripts/stats.py inputs/numbers.txt out/stats.json && cat inputs/numbers.txt",
        inputs=[{"from": "artifact://data/numbers.txt"}],
        output_files=["out/stats.json"],
    )
    assert latest.stdout.endswith("10 20 30 40\n"), latest.stderr
    stats = files(latest)["out/stats.json"]
    assert stats.mime_type == "application/json" and json.loads(stats.content)["count"] == 4
    first = run(executor, command="cat inputs/x", inputs=[{"from": "artifact://data/numbers.txt@1", "to": "inputs/x"}])
    assert first.stdout == "1 2 3\n"
    assert refused(executor, command="true", inputs=[{"from": "artifact://data/numbers.txt@9"}]).status == 404
    assert refused(executor, command="true", inputs=[{"from": "artifact://missing"}]).status == 404


def test_skill_input_file_and_folder(executor: Executor) -> None:
    result = run(
        executor,
        command="ls inputs; ls work/refs; head -c 5 inputs/sample.csv",
        inputs=[
            {"from": "skill://csv-report/assets/sample.csv"},
            {"from": "skill://math-tools/references", "to": "work/refs"},
        ],
    )
    assert result.stdout == "sample.csv\nREFERENCE.md\nregio", result.stderr


def test_workspace_input_and_session_sharing(executor: Executor) -> None:
    first = run(executor, session="s1", command="echo persisted > work/note.txt; echo temp > out/o.txt")
    assert first.exit_code == 0
    second = run(
        executor,
        session="s1",
        command="cat work/note.txt; ls out | wc -l; cat inputs/note.txt",
        inputs=[{"from": "workspace://work/note.txt"}],
    )
    assert second.stdout == "persisted\n0\npersisted\n", second.stderr
    other = run(executor, session="s2", command="cat work/note.txt 2>/dev/null || echo absent")
    assert other.stdout == "absent\n"
    assert first.run_id != second.run_id


def test_session_ttl_expiry(make_executor) -> None:  # type: ignore[no-untyped-def]
    executor = make_executor(session_ttl_seconds=0.5)
    run(executor, session="old", command="echo x > work/x")
    sessions = executor.runner.sessions
    assert sessions.sweep() == []  # still fresh
    time.sleep(0.7)
    assert sessions.sweep() == ["local/old"]
    assert not sessions.path("old", "local").exists()
    assert run(executor, session="old", command="ls work | grep -c x || true").stdout == "0\n"


def test_session_in_use_is_not_swept(make_executor) -> None:  # type: ignore[no-untyped-def]
    executor = make_executor(session_ttl_seconds=0.0)
    with executor.runner.sessions.use("busy", "local", wait=0):
        assert executor.runner.sessions.sweep(now=time.time() + 100) == []
    assert executor.runner.sessions.sweep(now=time.time() + 100) == ["local/busy"]


def test_host_input_needs_allow_list(make_executor, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "data.txt").write_text("host data")
    (allowed / "escape").symlink_to("/etc/hostname")
    closed = make_executor()
    error = refused(closed, command="true", inputs=[{"from": "host:///etc/passwd"}])
    assert error.status == 403 and "inputs[0]" in error.message
    opened = make_executor(allowed_host_roots=[allowed])
    ok = run(opened, command="cat inputs/data.txt", inputs=[{"from": f"host://{allowed}/data.txt"}])
    assert ok.stdout == "host data"
    for source in ["host:///etc/passwd", f"host://{allowed}/escape", f"host://{allowed}/../x"]:
        assert refused(opened, command="true", inputs=[{"from": source}]).status in (400, 403), source
    assert refused(opened, command="true", inputs=[{"from": f"host://{allowed}/missing"}]).status == 404


@pytest.mark.parametrize(
    "spec, status",
    [
        ({"from": "skill://math-tools/scripts/fib.py", "to": "../../x"}, 400),
        ({"from": "skill://math-tools/scripts/fib.py", "to": "/etc/x"}, 400),
        ({"from": "skill://math-tools/scripts/fib.py", "to": "skills/math-tools/x"}, 403),
        ({"from": "skill://math-tools/scripts/fib.py", "to": ".skill/x"}, 403),
        ({"from": "workspace://../x"}, 400),
        ({"from": "workspace://work/missing"}, 404),
        ({"from": "skill://math-tools/../csv-report/SKILL.md"}, 400),
        ({"from": "skill://nope/x"}, 404),
        ({"from": "ftp://example/x"}, 400),
        ({"from": "/etc/passwd"}, 400),
    ],
)
def test_input_refusals(executor: Executor, spec: dict[str, str], status: int) -> None:
    error = refused(executor, command="true", inputs=[spec])
    assert error.status == status, error.message
    assert "inputs[0]" in error.message
    assert leftover_runs(executor) == []


def test_symlinked_skill_source_leaving_its_root_refused(
    executor: Executor, extra_skills: Path, tmp_path: Path
) -> None:
    (tmp_path / "outside.txt").write_text("outside")
    skill = make_skill(extra_skills, "links", "name: links\ndescription: d")
    (skill / "out-link").symlink_to(tmp_path / "outside.txt")
    error = refused(executor, skill="links", command="true", inputs=[{"from": "skill://links/out-link"}])
    assert error.status == 403


def test_session_symlink_in_work_cannot_redirect_staging(executor: Executor, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    run(executor, session="evil", command=f"ln -s {victim} work/trap; ln -s {victim}/f work/file-trap")
    for to in ["work/trap/f", "work/file-trap"]:
        error = refused(
            executor, session="evil", command="true", inputs=[{"from": "skill://math-tools/SKILL.md", "to": to}]
        )
        assert error.status == 403
    assert list(victim.iterdir()) == []
    error = refused(executor, session="evil", command="true", inputs=[{"from": "workspace://work/trap"}])
    assert error.status == 403


def test_link_mode_is_read_only_copy(executor: Executor) -> None:
    executor.artifacts.put("ro.txt", b"original")
    result = run(
        executor,
        session="ro",
        command="cat inputs/ro.txt; echo changed > inputs/ro.txt 2>/dev/null; cat work/inputs/d/fib.py | head -c 2",
        inputs=[
            {"from": "artifact://ro.txt", "mode": "link"},
            {"from": "skill://math-tools/scripts", "to": "inputs/d", "mode": "link"},
        ],
    )
    assert result.stdout.startswith("original")
    assert executor.artifacts.read("ro.txt")[1] == b"original"
    assert (executor.repository.get("math-tools").path / "scripts" / "fib.py").read_text().startswith("#!")


def test_staged_size_cap(make_executor) -> None:  # type: ignore[no-untyped-def]
    executor = make_executor(max_staged_bytes=1000)
    executor.artifacts.put("big", b"x" * 600)
    error = refused(
        executor, command="true", inputs=[{"from": "artifact://big"}, {"from": "artifact://big", "to": "inputs/b2"}]
    )
    assert error.status == 413 and "inputs[1]" in error.message


def test_pin_reuses_first_version_in_session(executor: Executor) -> None:
    executor.artifacts.put("cfg", b"v1")
    first = run(executor, session="p", command="cat inputs/cfg", inputs=[{"from": "artifact://cfg", "pin": True}])
    executor.artifacts.put("cfg", b"v2")
    pinned = run(executor, session="p", command="cat inputs/cfg", inputs=[{"from": "artifact://cfg", "pin": True}])
    unpinned = run(executor, session="p", command="cat inputs/cfg", inputs=[{"from": "artifact://cfg"}])
    fresh = run(executor, session="q", command="cat inputs/cfg", inputs=[{"from": "artifact://cfg", "pin": True}])
    assert (first.stdout, pinned.stdout, unpinned.stdout, fresh.stdout) == ("v1", "v1", "v2", "v2")


# -- outputs -----------------------------------------------------------------------------


def test_glob_normalisation(executor: Executor) -> None:
    command = "mkdir -p out/a/b work/w; echo 1 > out/top.txt; echo 2 > out/a/b/deep.txt; echo 3 > work/w/x.txt"
    for globs, expected in [
        (["$OUTPUT_DIR/*.txt"], ["out/top.txt"]),
        (["${OUTPUT_DIR}/**/*.txt"], ["out/a/b/deep.txt", "out/top.txt"]),
        (["$WORK_DIR/**"], ["work/w/x.txt"]),
        (["$WORKSPACE_DIR/out/a/**"], ["out/a/b/deep.txt"]),
        (["out"], ["out/a/b/deep.txt", "out/top.txt"]),
        (["./out/top.txt", "out/top.txt"], ["out/top.txt"]),
        (["**/*.txt"], ["out/a/b/deep.txt", "out/top.txt", "work/w/x.txt"]),
    ]:
        result = run(executor, command=command, outputs={"globs": globs})
        assert sorted(files(result)) == expected, globs
    with pytest.raises(ExecutorError):
        run(executor, command="true", output_files=["$OUTPUT_DIRX/a"])
    with pytest.raises(ExecutorError):
        run(executor, command="true", output_files=["../x"])


def test_output_symlinks_never_followed(executor: Executor) -> None:
    result = run(
        executor,
        command="ln -s /etc/passwd out/passwd; ln -s ../work out/worklink; echo ok > work/real.txt; echo f > out/real.txt",
        output_files=["out/**"],
    )
    assert sorted(files(result)) == ["out/real.txt"]
    assert any("out/passwd" in w and "link" in w for w in result.warnings)
    assert "root:" not in json.dumps(result.model_dump())


def test_caps(executor: Executor) -> None:
    command = "for i in $(seq 1 5); do head -c 1000 /dev/zero | tr '\\0' a > out/f$i.txt; done"
    few = run(executor, command=command, outputs={"globs": ["out/*"], "max_files": 3})
    assert sorted(files(few)) == ["out/f1.txt", "out/f2.txt", "out/f3.txt"] and "max_files" in few.limits_hit
    small = run(executor, command=command, outputs={"globs": ["out/*"], "max_file_bytes": 100})
    assert all(f.truncated and len(f.content) == 100 and f.size_bytes == 1000 for f in small.output_files)
    assert small.limits_hit == ["max_file_bytes"]
    total = run(executor, command=command, outputs={"globs": ["out/*"], "max_total_bytes": 2500})
    sizes = [len(f.content or "") for f in total.output_files]
    assert sizes == [1000, 1000, 500, 0, 0] and "max_total_bytes" in total.limits_hit
    legacy = run(executor, command="head -c 5000000 /dev/zero > out/big.bin", output_files=["out/*"])
    assert legacy.output_files[0].truncated and "max_file_bytes" in legacy.limits_hit
    error = refused(executor, command="true", outputs={"globs": ["out/*"], "max_files": 10**6})
    assert error.code == "output_caps"


def test_stdout_cap_and_flood_is_bounded(make_executor) -> None:  # type: ignore[no-untyped-def]
    executor = make_executor(stdout_max_bytes=1000)
    result = run(executor, command="head -c 1073741824 /dev/zero; echo done >&2", timeout=120)
    assert len(result.stdout) == 1000 and result.stdout_truncated and result.stderr == "done\n"
    assert "stdout_max_bytes" in result.limits_hit


def test_mime_refinement(executor: Executor) -> None:
    command = (
        "echo '{\"a\": 1}' > out/d.json; printf 'a,b\\n1,2\\n' > out/t.csv; printf '# T\\n\\ntext\\n' > out/r.md; "
        "printf '<svg xmlns=\"http://www.w3.org/2000/svg\"></svg>' > out/i.svg; echo plain > out/p.txt; "
        "printf '\\x89PNG\\r\\n\\x1a\\n\\0\\0\\0\\rIHDR\\0\\0\\0\\1\\0\\0\\0\\1\\x08\\x02\\0\\0\\0' > out/img.png; "
        "printf 'not really\\0json' > out/bin.json; echo 'int main(){}' > out/notes.md"
    )
    result = run(executor, command=command, outputs={"globs": ["out/*"], "inline_binary": True})
    types = {f.name: f.mime_type for f in result.output_files}
    assert types == {
        "out/bin.json": "application/octet-stream",
        "out/d.json": "application/json",
        "out/i.svg": "image/svg+xml",
        "out/img.png": "image/png",
        "out/notes.md": "text/markdown",
        "out/p.txt": "text/plain",
        "out/r.md": "text/markdown",
        "out/t.csv": "text/csv",
    }
    png = files(result)["out/img.png"]
    assert png.encoding == "base64" and base64.b64decode(png.content).startswith(b"\x89PNG")
    plain = run(executor, command=command, outputs={"globs": ["out/img.png"]})
    assert plain.output_files[0].content is None and plain.output_files[0].encoding is None


def test_empty_outputs_of_failed_command_dropped(executor: Executor) -> None:
    result = run(executor, command="touch out/empty.txt; echo x > out/full.txt; exit 1", output_files=["out/*"])
    assert list(files(result)) == ["out/full.txt"]
    assert any("empty" in w for w in result.warnings)
    ok = run(executor, command="touch out/empty.txt", output_files=["out/*"])
    assert list(files(ok)) == ["out/empty.txt"]


def test_save_as_artifacts_and_name_template(executor: Executor) -> None:
    legacy = run(
        executor,
        command="python3 scripts/fib.py 5 > out/fib.txt",
        output_files=["out/fib.txt"],
        save_as_artifacts=True,
        omit_inline_content=True,
        artifact_prefix="runs/",
    )
    saved = legacy.artifact_files[0]
    assert (saved.name, saved.version, saved.ref) == ("runs/out/fib.txt", 1, "artifact://runs/out/fib.txt@1")
    assert legacy.output_files[0].content is None and legacy.output_files[0].ref == saved.ref
    info, data = executor.artifacts.read("runs/out/fib.txt")
    assert data == b"0\n1\n1\n2\n3\n" and info.mime_type == "text/plain" and info.run_id == legacy.run_id
    templated = run(
        executor,
        command="echo 1 > out/a.txt",
        session="t",
        outputs={"globs": ["out/*.txt"], "save": True, "name_template": "{session}/{stem}-v{ext}"},
    )
    assert templated.artifact_files[0].name == "t/a-v.txt"
    assert refused(executor, command="true", outputs={"name_template": "{nope}"}).code == "invalid_name_template"


# -- timeouts and process trees --------------------------------------------------------------


def test_timeout_kills_process_tree(executor: Executor) -> None:
    started = time.monotonic()
    # A distinctive duration, so the check below finds this run's processes and no others.
    result = run(executor, command="echo started; sleep 100.0417 & sleep 100.0417; wait", timeout=2)
    elapsed = time.monotonic() - started
    assert result.timed_out and result.stdout == "started\n"
    assert 2.0 <= result.duration_ms / 1000 < 3.0
    assert elapsed < 3.0 + 1.5  # within 1 s of the deadline, plus set-up
    assert "timeout" in result.limits_hit
    assert not _sleepers_left("100.0417")


def test_output_flood_still_meets_its_deadline(executor: Executor) -> None:
    started = time.monotonic()
    result = run(executor, command="yes", timeout=2)
    assert result.timed_out and result.stdout_truncated and result.stdout.startswith("y\ny\n")
    assert time.monotonic() - started < 2 + 1.5 + 1.0


def test_background_leftovers_are_killed_after_exit(executor: Executor) -> None:
    started = time.monotonic()
    result = run(executor, command="(sleep 77.0417 &) ; echo quick")
    assert result.stdout == "quick\n" and time.monotonic() - started < 5
    assert not _sleepers_left("77.0417")


def _sleepers_left(arg: str) -> bool:
    """True when a ``sleep ARG`` process still exists anywhere on the host (containers
    included) once the kill had time to land (polled: a loaded machine reaps late)."""
    return not eventually(lambda: not _sleeper_exists(arg), timeout=10)


def _sleeper_exists(arg: str) -> bool:
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if cmd[:2] == [b"sleep", arg.encode()]:
                return True
    return False


# -- artifacts ---------------------------------------------------------------------------------


def test_artifact_versions_under_concurrent_saves(executor: Executor) -> None:
    store = executor.artifacts
    with ThreadPoolExecutor(max_workers=20) as pool:
        infos = list(pool.map(lambda i: store.put("shared/name", f"content {i}".encode()), range(20)))
    assert sorted(i.version for i in infos) == list(range(1, 21))
    assert [v.version for v in store.versions("shared/name")] == list(range(1, 21))
    by_version = {i.version: i for i in infos}
    for version, info in by_version.items():
        assert store.read("shared/name", version)[1] == f"content {infos.index(info)}".encode()


# -- signals and concurrency -------------------------------------------------------------------


def test_signals_are_reported(executor: Executor) -> None:
    result = run(executor, command="kill -TERM $$")
    assert result.exit_code == 143 and result.signal == "SIGTERM" and not result.timed_out


def test_busy_when_slots_and_queue_are_full(make_executor) -> None:  # type: ignore[no-untyped-def]
    import threading

    executor = make_executor(max_concurrent_runs=1, max_queued_runs=1)
    results: list[RunResult] = []
    first = threading.Thread(target=lambda: results.append(run(executor, command="sleep 1.5; echo first")))
    first.start()
    while executor.runner.limiter.running == 0:
        time.sleep(0.01)
    queued = threading.Thread(target=lambda: results.append(run(executor, command="echo queued")))
    queued.start()
    while executor.runner.limiter.waiting == 0:
        time.sleep(0.01)
    error = refused(executor, command="echo third")
    assert error.status == 429 and error.code == "busy" and "retry" in error.message
    first.join()
    queued.join()
    assert sorted(r.stdout for r in results) == ["first\n", "queued\n"]


def test_workspaces_of_dead_processes_are_swept(tmp_path: Path) -> None:
    from skill_executor.workspace.layout import OWNER_FILE, WorkspaceManager

    manager = WorkspaceManager(tmp_path)
    neighbour = WorkspaceManager(tmp_path)  # another live process sharing the root
    theirs = neighbour.create("theirs", "math-tools")
    mine = manager.create("mine", "math-tools")
    dead = manager.runs / "dead"
    dead.mkdir()
    (dead / OWNER_FILE).write_text(f"lease:{manager.lease.root_id}:crashed0")  # a lease that is gone
    (dead / "out").mkdir(mode=0o555)
    orphan = manager.runs / "no-owner-file"
    orphan.mkdir()
    young = manager.runs / "being-made"  # no owner file yet: a live process may be creating it
    young.mkdir()
    old = time.time() - 3600
    os.utime(orphan, (old, old))
    assert manager.sweep() == ["dead", "no-owner-file"]
    assert mine.root.exists() and young.exists() and not dead.exists() and not orphan.exists()
    assert theirs.root.exists()
    neighbour.lease.release()  # it ends (cleanly, leaving its workspace behind): now a leftover
    assert manager.sweep() == ["theirs"]


def test_remove_tree_tolerates_a_concurrent_remover(tmp_path: Path) -> None:
    import threading

    from skill_executor.workspace.remove import remove_tree

    for round_ in range(15):
        tree = tmp_path / f"t{round_}"
        for d in range(40):
            (tree / f"d{d}" / "sub").mkdir(parents=True)
            (tree / f"d{d}" / "sub" / "f").write_text("x")
        barrier = threading.Barrier(6)
        errors: list[BaseException] = []

        def remove() -> None:
            barrier.wait()
            try:
                remove_tree(tree)
            except BaseException as exc:  # noqa: BLE001 - the assertion below reports it
                errors.append(exc)

        threads = [threading.Thread(target=remove) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == [] and not tree.exists()
