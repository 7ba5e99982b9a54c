"""The host side of the sandbox: nothing a run leaves in its workspace can make the
service act outside it (issue: "the service never trusts a tree that a run can write").

Every test runs on every runtime (local, Docker per-run, Docker warm pool).  The
"victim" is a harmless folder of the test's own, standing for any host folder.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from pathlib import Path

import pytest

from skill_executor.core import Executor
from skill_executor.errors import ExecutorError
from skill_executor.runs.models import RunRequest, RunResult

from ..helpers import eventually, refused, run


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A host folder owned by root (mode 0700) holding a secret; no run may touch it."""
    path = tmp_path / "victim"
    path.mkdir(mode=0o700)
    secret = path / "secret.txt"
    secret.write_text("host secret\n")
    os.chmod(secret, 0o600)
    return path


def untouched(victim: Path) -> bool:
    st = os.stat(victim)
    names = sorted(os.listdir(victim))
    secret = os.stat(victim / "secret.txt")
    return (
        (st.st_uid, st.st_gid) == (os.getuid(), os.getgid())
        and stat.S_IMODE(st.st_mode) == 0o700
        and names == ["secret.txt"]
        and (secret.st_uid, stat.S_IMODE(secret.st_mode)) == (os.getuid(), 0o600)
        and (victim / "secret.txt").read_text() == "host secret\n"
    )


def test_planted_inputs_link_is_never_chowned_or_followed(executor: Executor, victim: Path) -> None:
    plant = f"rm -rf $WORK_DIR/inputs && ln -s {victim} $WORK_DIR/inputs"
    assert run(executor, session="s", command=plant).exit_code == 0
    assert run(executor, session="s", command="true").exit_code == 0
    assert untouched(victim)
    error = refused(executor, session="s", command="true", inputs=[{"from": "skill://math-tools/SKILL.md"}])
    assert error.status == 403 and error.code == "path_escape" and "inputs[0]" in error.message
    assert untouched(victim)


@pytest.mark.parametrize(
    "plant, target",
    [
        ("ln -s {victim} $WORK_DIR/d", "work/d/x.txt"),
        ("mkdir -p $WORK_DIR/a && ln -s {victim} $WORK_DIR/a/b", "work/a/b/c/x.txt"),
        ("ln -s {victim}/secret.txt $WORK_DIR/f", "work/f"),
        ("ln -s {victim}/new.txt $WORK_DIR/dangling", "work/dangling"),
    ],
)
def test_staging_never_writes_through_links(executor: Executor, victim: Path, plant: str, target: str) -> None:
    assert run(executor, session="s", command=plant.format(victim=victim)).exit_code == 0
    error = refused(
        executor, session="s", command="true", inputs=[{"from": "skill://math-tools/SKILL.md", "to": target}]
    )
    assert error.status in (403, 409) and error.code in ("path_escape", "target_conflict"), error.to_dict()
    assert untouched(victim)


def test_workspace_source_and_cwd_never_follow_links(executor: Executor, victim: Path) -> None:
    assert (
        run(
            executor, session="s", command=f"ln -s {victim} $WORK_DIR/v && ln -s {victim}/secret.txt $WORK_DIR/s"
        ).exit_code
        == 0
    )
    for source in ("workspace://work/v", "workspace://work/v/secret.txt", "workspace://work/s"):
        result_or_error: object
        try:
            result_or_error = run(
                executor,
                session="s",
                command="cat inputs/* 2>/dev/null; true",
                inputs=[{"from": source, "to": "inputs/copy"}],
            )
        except ExecutorError as exc:
            result_or_error = exc
        if isinstance(result_or_error, RunResult):
            assert "host secret" not in result_or_error.stdout
    assert refused(executor, session="s", command="pwd", cwd="$WORK_DIR/v").status in (400, 403)
    assert untouched(victim)


def test_collection_never_follows_links(executor: Executor, victim: Path) -> None:
    result = run(
        executor,
        command=f"ln -s {victim} out/v; ln -s {victim}/secret.txt out/s; mkdir out/d; ln -s {victim} out/d/deeper",
        outputs={"globs": ["out/**"]},
    )
    assert all("host secret" not in (f.content or "") for f in result.output_files)
    assert [f.name for f in result.output_files] == []
    assert untouched(victim)


SWAPPER = r"""
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
RENAME_EXCHANGE = 2
base = sys.argv[1]
os.makedirs(base + "/d", exist_ok=True)
open(base + "/d/x.txt", "w").write("run data\n")
os.symlink(sys.argv[2], base + "/link")
end = time.time() + float(sys.argv[3])
while time.time() < end:
    libc.syscall(316, -100, (base + "/d").encode(), -100, (base + "/link").encode(), RENAME_EXCHANGE)
"""


def test_sessions_are_serialised_so_a_swap_race_cannot_run_against_staging(executor: Executor, victim: Path) -> None:
    """Run A swaps work/d with a link to the victim in a loop; run B of the same session
    stages into and collects from work/d meanwhile.  B must wait for A (sessions are
    serialised), and nothing may ever touch the victim."""
    assert run(executor, session="race", command=f"cat > $WORK_DIR/swap.py <<'EOF'\n{SWAPPER}\nEOF").exit_code == 0
    results: dict[str, RunResult] = {}

    def swapper() -> None:
        results["a"] = run(
            executor,
            session="race",
            timeout=20,
            command=f"python3 $WORK_DIR/swap.py $WORK_DIR {victim} 2.5; echo A-done $(date +%s.%N)",
        )

    thread = threading.Thread(target=swapper)
    thread.start()
    time.sleep(1.0)
    outcomes = []
    for _ in range(3):
        try:
            b = run(
                executor,
                session="race",
                timeout=20,
                command="echo B-start $(date +%s.%N)",
                inputs=[{"from": "skill://math-tools/SKILL.md", "to": "work/d/staged.md"}],
                outputs={"globs": ["work/d/**", "work/link/**"]},
            )
            outcomes.append(b)
        except ExecutorError as exc:
            outcomes.append(exc)
    thread.join()
    a = results["a"]
    assert a.exit_code == 0, a.stderr
    a_done = float(a.stdout.split()[-1])
    for outcome in outcomes:
        if isinstance(outcome, RunResult):
            assert float(outcome.stdout.split()[-1]) >= a_done, "a run of the session overlapped another"
            assert all("host secret" not in (f.content or "") for f in outcome.output_files)
        else:
            assert outcome.code in ("path_escape", "target_conflict"), outcome.to_dict()
    assert untouched(victim)


def test_a_second_run_of_a_busy_session_is_refused_after_its_timeout(executor: Executor) -> None:
    first = threading.Thread(
        target=run, args=(executor,), kwargs={"session": "busy", "command": "touch $WORK_DIR/started; sleep 3"}
    )
    first.start()
    assert eventually(lambda: (executor.runner.sessions.path("busy", "local") / "work" / "started").exists())
    started = time.monotonic()
    error = refused(executor, session="busy", command="true", timeout=1)
    waited = time.monotonic() - started
    first.join()
    assert error.status == 409 and error.code == "session_busy" and waited >= 0.9
    assert run(executor, session="busy", command="echo free").stdout == "free\n"


def test_leftover_processes_cannot_race_collection(executor: Executor, victim: Path) -> None:
    """A command that leaves a swapping process behind and exits at once: its outputs are
    collected only once nothing of the run is alive."""
    command = (
        f"cat > $RUN_DIR/swap.py <<'EOF'\n{SWAPPER}\nEOF\n"
        f"setsid python3 $RUN_DIR/swap.py $OUTPUT_DIR {victim} 30 >/dev/null 2>&1 < /dev/null & sleep 0.5; exit 0"
    )
    if executor.runtime.name == "local":
        pytest.skip("the local runtime isolates nothing: a process may outlive its run there (documented)")
    for _ in range(3):
        result = run(executor, command=command, outputs={"globs": ["out/**"]})
        assert all("host secret" not in (f.content or "") for f in result.output_files)
    assert untouched(victim)


def test_special_and_sparse_outputs_cost_nothing(executor: Executor) -> None:
    started = time.monotonic()
    result = run(
        executor,
        command="mkfifo out/fifo && test -p out/fifo && echo fifo; for i in $(seq 10); do truncate -s 1G out/sparse$i; done",
        outputs={"globs": ["out/*"], "max_total_bytes": 16},
    )
    assert time.monotonic() - started < 20
    names = [f.name for f in result.output_files]
    assert result.stdout == "fifo\n" and "out/fifo" not in names
    # Skipped with a warning; under gVisor a run's FIFO exists only in the sandbox's kernel,
    # so no special file reaches the host at all.
    gvisor = getattr(getattr(executor.runtime, "engine", None), "gvisor", False)
    assert any("not a regular file" in w for w in result.warnings) != gvisor, result.warnings
    assert len(names) == 10 and sum(len(f.content or "") for f in result.output_files) <= 16
    assert all(f.truncated and f.sha256 is None for f in result.output_files if f.size_bytes > 16)
    assert "max_total_bytes" in result.limits_hit


def test_deep_trees_are_a_normal_result_and_are_cleaned_up(executor: Executor) -> None:
    command = "d=out; for i in $(seq 3000); do d=$d/d; done; mkdir -p $d 2>/dev/null || python3 -c \"import os\nos.chdir('out')\nfor i in range(3000):\n os.mkdir('d'); os.chdir('d')\"; echo made"
    result = run(executor, command=command, outputs={"globs": ["out/**"]})
    assert result.exit_code == 0 or result.disk_limit_hit, (result.exit_code, result.stderr[-500:])
    executor.runner.settle()
    assert run(executor, command="echo again").stdout == "again\n"  # the cleaner is alive


def test_undecodable_output_names_are_skipped_with_a_warning(executor: Executor) -> None:
    result = run(executor, command="touch out/$'\\xff\\xfe.txt' out/ok.txt", outputs={"globs": ["out/*"]})
    assert [f.name for f in result.output_files] == ["out/ok.txt"]
    assert any("not UTF-8" in w for w in result.warnings)
    result.model_dump_json()  # the result serialises as JSON


@pytest.mark.parametrize(
    "fields, code",
    [
        ({"inputs": [{"from": "skill://math-tools/SKILL.md", "to": "run/.launcher.sock"}]}, "reserved_path"),
        ({"inputs": [{"from": "skill://math-tools/SKILL.md", "to": "out/" + "a" * 5000}]}, "invalid_path"),
        ({"inputs": [{"from": "skill://math-tools/SKILL.md", "to": "out/" + "b" * 300}]}, "invalid_path"),
        ({"inputs": [{"from": "workspace://" + "c/" * 3000}]}, "invalid_path"),
        ({"cwd": "d" * 5000}, "invalid_path"),
        ({"env": {"BIG": "x" * (2 * 1024 * 1024)}}, "env_too_large"),
        ({"env": {"LD_PRELOAD": "/x.so"}}, "env_refused"),
        ({"cwd": "no-such-folder"}, "invalid_cwd"),
    ],
)
def test_bad_client_input_is_a_clean_refusal_on_every_path(executor: Executor, fields: dict, code: str) -> None:
    error = refused(executor, command="true", **fields)
    assert error.code == code and 400 <= error.status < 500, error.to_dict()


def test_session_work_has_a_disk_cap_across_runs(make_executor) -> None:  # type: ignore[no-untyped-def]
    executor = make_executor(session_disk_bytes=3 * 1024 * 1024)
    if executor.runtime.name == "local":
        pytest.skip("the local runtime enforces no disk caps (development only)")
    first = run(executor, session="cap", command="head -c 2M /dev/urandom > $WORK_DIR/a; echo ok")
    assert first.exit_code == 0 and not first.disk_limit_hit
    second = run(executor, session="cap", command="head -c 2M /dev/urandom > $WORK_DIR/b; sleep 2; echo ok")
    assert second.disk_limit_hit and "disk" in second.limits_hit


def test_tenants_do_not_share_sessions_or_artifacts(executor: Executor) -> None:
    runner = executor.runner
    executor.artifacts.put("mine.txt", b"tenant a's data", tenant="aaaa")
    request = RunRequest.model_validate({"skill": "math-tools", "session": "same", "command": "echo a > $WORK_DIR/who"})
    runner.run(request, tenant="aaaa")
    peek = RunRequest.model_validate(
        {"skill": "math-tools", "session": "same", "command": "cat $WORK_DIR/who 2>&1 || true"}
    )
    assert "a" != runner.run(peek, tenant="bbbb").stdout.strip()
    assert runner.run(peek, tenant="aaaa").stdout.strip() == "a"
    steal = RunRequest.model_validate(
        {"skill": "math-tools", "command": "cat inputs/mine.txt", "inputs": [{"from": "artifact://mine.txt"}]}
    )
    with pytest.raises(ExecutorError) as info:
        runner.run(steal, tenant="bbbb")
    assert info.value.status == 404
    assert runner.run(steal, tenant="aaaa").stdout == "tenant a's data"


def test_staging_cannot_multiply_entries(executor: Executor) -> None:
    """Copies between the writable roots grow a tree fast: the whole request has one
    entry budget, so a handful of inputs cannot make the service create millions."""
    made = run(
        executor,
        session="grow",
        command="mkdir -p $WORK_DIR/seed && cd $WORK_DIR/seed && mkdir -p d{1..100}/e{1..130} && echo made",
    )
    assert made.stdout == "made\n"
    inputs = [{"from": "workspace://work/seed", "to": f"out/copy{i}"} for i in range(6)]
    error = refused(executor, session="grow", command="true", inputs=inputs)
    assert error.code == "inputs_too_large" and error.status == 413, error.to_dict()


def test_collection_holds_only_what_it_returns(executor: Executor) -> None:
    command = (
        "python3 -c \"import os\nos.chdir('out')\nfor i in range(40):\n os.mkdir('d'*200); os.chdir('d'*200)\n"
        "for i in range(50): open(f'f{i}', 'w').write('x')\"; touch out/a.txt"
    )
    result = run(executor, command=command, outputs={"globs": ["out/**"], "max_files": 5})
    names = [f.name for f in result.output_files]
    assert names == ["out/a.txt"], names  # the deep ones are longer than a path may be
    assert any("longer than 4096 bytes" in w for w in result.warnings)


def test_lone_surrogates_are_a_clean_refusal(executor: Executor) -> None:
    for fields in (
        {"cwd": "out/\ud800"},
        {"stdin": "\udcff"},
        {"env": {"A": "\ud800"}},
        {"inputs": [{"from": "workspace://work/\ud800"}]},
    ):
        error = refused(executor, command="true", **fields)
        assert error.status == 400 and error.code == "invalid_text", error.to_dict()
