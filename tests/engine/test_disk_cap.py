"""The hard disk cap, attacked on a real engine (runc and gVisor, per-run and warm).

The outside attack that found the polled cap soft: six parallel ``dd`` writers reached
1,056 MiB under a 256 MiB cap before the poller stopped the run.  Here the same writers
go at a run's ``out/``, its skill copy, a session's ``work/``, and several runs at once;
the bytes on the host are read from each volume's image once its run is over (an image
only grows: nothing gives blocks back to the host before it is removed, so what it holds
then is the most it ever held).  Every write past the cap fails, the run goes on, its
result says ``disk_limit_hit`` and what it wrote is collected.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from skill_executor.access import LOCAL_TENANT
from skill_executor.core import Executor
from skill_executor.errors import ExecutorError
from skill_executor.runs.models import RunRequest, RunResult
from skill_executor.workspace import volumes
from skill_executor.workspace.volumes import SLACK

from ..conftest import HARDENING_RUNTIMES, REPO, SKILLS, make_settings, require_disk_cap, require_runtime
from ..helpers import eventually

MiB = 1024 * 1024
CAP = 64 * MiB
#: What a volume's image holds beyond the files: the file system's own bookkeeping (the
#: superblock, group descriptors, bitmaps and inode-table blocks it touched) and the
#: skill copy of the test skill; measured ~1 MiB.
METADATA = 3 * MiB
SIX_WRITERS = (
    "for i in 1 2 3 4 5 6; do dd if=/dev/zero of={dir}/d$i bs=1M count=200 2>>/tmp/dd.err & done; "
    "wait; grep -c 'No space left' /tmp/dd.err; echo done"
)


@pytest.fixture(autouse=True)
def _hard_cap_possible() -> None:
    require_disk_cap("hard")


def request(**fields: Any) -> RunRequest:
    fields.setdefault("skill", "math-tools")
    fields.setdefault("timeout", 120)
    return RunRequest.model_validate(fields)


class Measured:
    """Wraps a runtime's folder removal: each run volume's host bytes (its image's
    allocated blocks), read once it is unmounted, right before it is removed."""

    def __init__(self, executor: Executor) -> None:
        self.bytes: dict[str, int] = {}
        workspaces = executor.runtime.workspaces
        original = workspaces.discard

        def discard(root: Path) -> None:
            if volumes.mounted(root):
                os.sync()
                volumes.unmount(root)
                self.bytes[root.name] = (root / volumes.IMAGE).stat().st_blocks * 512
            original(root)

        workspaces.discard = discard  # type: ignore[method-assign]

    def runs(self, executor: Executor) -> dict[str, int]:
        """Host bytes of the volumes of runs (not of unused warm containers)."""
        executor.runner.settle()
        pool = getattr(executor.runtime, "pool", None)
        idle = {root.name for root in pool.idle_roots()} if pool is not None else set()
        return {name: size for name, size in self.bytes.items() if name not in idle}


@pytest.fixture(params=HARDENING_RUNTIMES)
def make_capped(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., tuple[Executor, Measured]]]:
    require_runtime(request.param)
    made: list[Executor] = []

    def factory(**overrides: object) -> tuple[Executor, Measured]:
        overrides.setdefault("docker_disk_bytes", CAP)
        executor = Executor.from_settings(make_settings(tmp_path, request.param, **overrides))
        made.append(executor)
        measured = Measured(executor)
        pool = getattr(executor.runtime, "pool", None)
        if pool is not None:
            assert pool.wait_ready()
        return executor, measured

    yield factory
    for executor in made:
        executor.close()
        assert list(executor.runner.workspaces.runs.iterdir()) == [], "workspaces left behind"
        assert volumes.mounts_under(executor.settings.data_dir.resolve()) == [], "volumes left mounted"


def only_run(measured: Measured, executor: Executor) -> int:
    sizes = eventually(lambda: measured.runs(executor))
    assert len(sizes) == 1, sizes
    return next(iter(sizes.values()))


@pytest.mark.parametrize("target", ["$OUTPUT_DIR", "$SKILL_DIR/scratch"])
def test_six_parallel_writers_never_pass_the_cap(make_capped, target: str) -> None:  # type: ignore[no-untyped-def]
    executor, measured = make_capped()
    command = f"mkdir -p {target} && " + SIX_WRITERS.format(dir=target)
    result = executor.runner.run(request(command=command, outputs={"globs": ["out/*"]}))
    assert result.exit_code == 0 and result.stdout.splitlines()[-1] == "done", (result.stdout, result.stderr)
    assert int(result.stdout.splitlines()[0]) >= 1, (result.stdout, result.stderr)  # writers got ENOSPC ...
    assert result.disk_limit_hit and "disk" in result.limits_hit  # ... and the result says so
    assert any("disk cap" in w for w in result.warnings)
    host = only_run(measured, executor)
    assert host <= CAP + SLACK + METADATA, host / MiB
    if target == "$OUTPUT_DIR":  # what was written is collected
        kept = sum(f.size_bytes for f in result.output_files)
        assert CAP <= kept <= CAP + SLACK, kept / MiB


def test_session_work_holds_its_cap_across_runs_and_stays_usable(make_capped) -> None:  # type: ignore[no-untyped-def]
    executor, _ = make_capped(session_disk_bytes=CAP, docker_disk_bytes=4 * CAP)
    image = executor.runner.sessions.path("capped", LOCAL_TENANT) / "work.img"

    def session_run(command: str) -> RunResult:
        return executor.runner.run(request(session="capped", command=command))

    first = session_run("head -c 40M /dev/zero > $WORK_DIR/first; echo ok")
    assert first.stdout == "ok\n" and not first.disk_limit_hit
    second = session_run(SIX_WRITERS.format(dir="$WORK_DIR") + "; du -sm $WORK_DIR")
    assert "done" in second.stdout and second.disk_limit_hit and "disk" in second.limits_hit
    assert int(second.stdout.splitlines()[0]) >= 1
    os.sync()
    assert image.stat().st_blocks * 512 <= CAP + SLACK + METADATA
    # The session is not broken: the next run finds its files, makes room and writes again.
    third = session_run(
        "test -f $WORK_DIR/first && rm $WORK_DIR/d* && head -c 10M /dev/zero > $WORK_DIR/again && echo usable"
    )
    assert third.stdout == "usable\n" and not third.disk_limit_hit, (third.stdout, third.stderr)
    # Inputs count against the session's cap: more than it has room for is a clean refusal.
    executor.artifacts.put("big.bin", b"\0" * (CAP // 2))
    with pytest.raises(ExecutorError) as refused:
        executor.runner.run(
            request(session="capped", command="true", inputs=[{"from": "artifact://big.bin", "to": "work/big.bin"}])
        )
    assert refused.value.code == "disk_full" and refused.value.status == 413, refused.value.to_dict()
    # (cd DIR && ls): gVisor 20221219's ls cannot stat a named path (see test_docker).
    assert session_run("cd $WORK_DIR && ls | sort | tr '\\n' ' '").stdout == "again first inputs "


def test_concurrent_runs_each_stop_at_their_own_cap(make_capped) -> None:  # type: ignore[no-untyped-def]
    executor, measured = make_capped(max_concurrent_runs=3, pool_size=3)
    with ThreadPoolExecutor(max_workers=3) as workers:
        results = list(
            workers.map(
                lambda _: executor.runner.run(
                    request(command=SIX_WRITERS.format(dir="$OUTPUT_DIR"), outputs={"globs": ["out/*"]})
                ),
                range(3),
            )
        )
    for result in results:
        assert result.disk_limit_hit and result.stdout.endswith("done\n"), (result.stdout, result.stderr)
        assert CAP <= sum(f.size_bytes for f in result.output_files) <= CAP + SLACK
    sizes = eventually(lambda: len(measured.runs(executor)) == 3 and measured.runs(executor))
    assert sizes and all(size <= CAP + SLACK + METADATA for size in sizes.values()), sizes


def test_inputs_and_the_skill_copy_do_not_count_against_the_cap(make_capped) -> None:  # type: ignore[no-untyped-def]
    executor, _ = make_capped()
    executor.artifacts.put("input.bin", b"\1" * (CAP // 2))
    result = executor.runner.run(
        request(
            command="dd if=/dev/zero of=out/x bs=1M count=200 2>/dev/null; test -s work/inputs/input.bin && echo staged",
            inputs=[{"from": "artifact://input.bin"}],
            outputs={"globs": ["out/x"]},
        )
    )
    assert result.stdout == "staged\n" and result.disk_limit_hit
    written = result.output_files[0].size_bytes
    assert CAP <= written <= CAP + SLACK, written / MiB  # the whole cap, whatever was staged before


def test_files_unlinked_while_open_still_count(make_capped) -> None:  # type: ignore[no-untyped-def]
    """The soft cap could not see files the run unlinked and kept writing (each up to the
    ``fsize`` limit): the file system counts their blocks until they are closed.  (The
    run holds them a moment: one that frees its space before the next check, every 0.2 s,
    is held to the cap all the same, but its result may not say so.)"""
    executor, measured = make_capped()
    writer = (
        "import os, time\nn = 0\nfor i in range(4):\n    fd = os.open(f'out/hidden{i}', os.O_CREAT | os.O_WRONLY)\n"
        "    os.unlink(f'out/hidden{i}')\n    try:\n        while True:\n            n += os.write(fd, bytes(1 << 20))\n"
        "    except OSError as e:\n        print(e.strerror)\nprint(n >> 20)\ntime.sleep(0.6)\n"
    )
    result = executor.runner.run(request(command=f'python3 -c "{writer}"'))
    *reasons, written = result.stdout.splitlines()
    assert reasons[-1] == "No space left on device", (result.stdout, result.stderr)
    assert CAP >> 20 <= int(written) <= (CAP + SLACK) >> 20
    assert result.disk_limit_hit
    assert only_run(measured, executor) <= CAP + SLACK + METADATA


# -- start-up, health, leftovers -------------------------------------------------------------


def test_health_names_the_disk_cap_in_force(tmp_path: Path) -> None:
    require_runtime("docker")
    for kind in ("hard", "soft"):
        (tmp_path / kind).mkdir()
        executor = Executor.from_settings(make_settings(tmp_path / kind, "docker", disk_cap=kind))
        try:
            ok, detail = executor.runtime.health()["disk_cap"]
            assert ok and detail.split(" ")[0].rstrip(":") == kind, detail
        finally:
            executor.close()


REFUSED = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from skill_executor.config import Settings
    from skill_executor.errors import ExecutorError
    from skill_executor.runtimes.docker import DockerRuntime
    try:
        runtime = DockerRuntime(Settings(data_dir=Path(sys.argv[1]), pool_size=0), wait_for_engine=True)
    except ExecutorError as exc:
        print(json.dumps(exc.to_dict()))
    else:
        print("started")
        runtime.close()
""")


def test_without_root_the_service_refuses_to_start_unless_soft_is_chosen() -> None:
    """No silent fallback: where the hard cap cannot be set up (here: not root) the runtime
    does not start, and says how to choose the soft cap; chosen, it starts (and waits for an
    engine it cannot reach as this user)."""
    home = Path(tempfile.mkdtemp(prefix="se-not-root-"))  # pytest's own temp folders are root's alone
    try:
        os.chmod(home, 0o755)
        data = home / "data"
        data.mkdir()
        os.chown(data, 1000, 1000)
        as_user = [
            "setpriv",
            "--reuid",
            "1000",
            "--regid",
            "1000",
            "--clear-groups",
            sys.executable,
            "-c",
            REFUSED,
            str(data),
        ]
        env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), "HOME": str(home)}
        refused = subprocess.run(as_user, env=env, capture_output=True, text=True, timeout=60)
        assert refused.stdout.startswith("{"), refused.stdout + refused.stderr
        error = json.loads(refused.stdout)["error"]
        assert error["code"] == "disk_cap_unavailable"
        assert "not run as root" in error["message"] and "SKILL_EXECUTOR_DISK_CAP=soft" in error["message"]
        soft = subprocess.run(
            as_user, env={**env, "SKILL_EXECUTOR_DISK_CAP": "soft"}, capture_output=True, text=True, timeout=60
        )
        assert soft.stdout.strip() == "started", soft.stdout + soft.stderr
    finally:
        shutil.rmtree(home)


CRASHER = textwrap.dedent("""
    import sys, threading
    from pathlib import Path
    from skill_executor.config import Settings
    from skill_executor.core import Executor
    from skill_executor.runs.models import RunRequest
    settings = Settings(data_dir=Path(sys.argv[1]), skills_dirs=[Path(sys.argv[2])], pool_size=2,
                        skills_refresh_seconds=0, docker_disk_bytes=64 << 20, session_disk_bytes=64 << 20)
    executor = Executor.from_settings(settings)
    for fields in ({"session": "left"}, {}):
        request = RunRequest(skill="math-tools", command="head -c 10M /dev/zero > $WORK_DIR/x; sleep 600",
                             timeout=600, **fields)
        threading.Thread(target=executor.runner.run, args=(request,), daemon=True).start()
    print("running", flush=True)
    threading.Event().wait()
""")


def test_volumes_left_by_a_killed_service_are_swept_at_the_next_start(tmp_path: Path) -> None:
    """``kill -9`` in the middle of a session run and a warm run: its volumes (the warm
    containers', the runs', the session's work/) stay mounted; the next start on the same
    data dir removes the dead owner's containers, then unmounts and removes its volumes."""
    require_runtime("docker")
    data = tmp_path / "data"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [sys.executable, "-c", CRASHER, str(data), str(SKILLS)], env=env, stdout=subprocess.PIPE, text=True
    )
    root = data.resolve()
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "running"
        # Two warm containers' volumes, two runs', the session's; the runs are writing.
        assert eventually(lambda: len(volumes.mounts_under(root)) >= 5, timeout=60), volumes.mounts_under(root)
        time.sleep(1.0)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    left = volumes.mounts_under(root)
    assert len(left) >= 5 and any(p.name == "work" for p in left), left
    executor = Executor.from_settings(make_settings(tmp_path, "docker", pool_size=0))
    try:
        assert volumes.mounts_under(root) == []
        assert eventually(lambda: not _loops_under(root), timeout=30), _loops_under(root)
        assert list(executor.runner.workspaces.runs.iterdir()) == []
        # The session's files are still there for its next run.
        again = executor.runner.run(request(session="left", command="du -m $WORK_DIR/x | cut -f1"))
        assert again.stdout == "10\n", (again.stdout, again.stderr)
    finally:
        executor.close()
    assert volumes.mounts_under(root) == []


def _loops_under(root: Path) -> list[str]:
    """Loop devices whose backing file is below ``root``."""
    found = []
    for name in os.listdir("/sys/block"):
        try:
            backing = Path(f"/sys/block/{name}/loop/backing_file").read_text().strip()
        except OSError:
            continue
        if backing.startswith(f"{root}/"):
            found.append(f"{name}: {backing}")
    return found


@pytest.mark.parametrize("runtime", ["docker", "docker-pool"])
def test_files_past_what_the_volume_holds_are_refused_and_reported(tmp_path: Path, runtime: str) -> None:
    """Empty files take no blocks, but inodes: a run that makes files until none are left
    gets ENOSPC for the next one, and its result says it reached its cap."""
    require_runtime(runtime)
    executor = Executor.from_settings(
        make_settings(tmp_path, runtime, docker_disk_bytes=16 * MiB, max_staged_bytes=16 * MiB)
    )
    try:
        maker = (
            "import os\nn = 0\ntry:\n    while True:\n        os.close(os.open(f'out/f{n}', os.O_CREAT | os.O_WRONLY))"
            "\n        n += 1\nexcept OSError as e:\n    print(n, e.strerror)\n"
        )
        result = executor.runner.run(request(command=f'python3 -c "{maker}"'))
        count, _, reason = result.stdout.strip().partition(" ")
        assert reason == "No space left on device" and int(count) > 10_000, (result.stdout, result.stderr)
        assert result.disk_limit_hit
    finally:
        executor.close()


PUNCHER = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
MiB = 1 << 20
for r in range(12):
    fd = os.open(f"{os.environ['OUTPUT_DIR']}/f{r}", os.O_RDWR | os.O_CREAT)
    try:
        for off in range(0, 48 * MiB, MiB):
            os.pwrite(fd, b"z" * MiB, off)
        os.fsync(fd)
        for off in range(0, 48 * MiB, MiB):  # free all but one block of every MiB
            libc.fallocate(fd, 3, ctypes.c_long(off + 4096), ctypes.c_long(MiB - 4096))
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
print("done")
"""


def test_freeing_space_in_scattered_pieces_does_not_grow_the_image(make_capped) -> None:  # type: ignore[no-untyped-def]
    """Blocks a run frees are punched out of its image (the volume is mounted with discard):
    keeping one block in every MiB made ext4 write to untouched parts of the image, which
    grew on the host to ~17x the cap while the run's file system showed a few MiB used."""
    executor, measured = make_capped()
    result = executor.runner.run(request(command=f"python3 - <<'EOF'\n{PUNCHER}\nEOF"))
    assert result.stdout.strip().endswith("done"), (result.stdout, result.stderr)
    host = only_run(measured, executor)
    assert host <= CAP + SLACK + METADATA, host / MiB


def test_a_session_may_use_the_name_lost_and_found(make_capped) -> None:  # type: ignore[no-untyped-def]
    """mkfs's empty lost+found is removed from a new volume only: a session that later made
    its own (a folder with files, or a file) keeps working."""
    executor, _ = make_capped(session_disk_bytes=CAP)
    first = executor.runner.run(request(session="lf", command="mkdir -p $WORK_DIR/lost+found/x && echo ok"))
    assert first.stdout == "ok\n", (first.stdout, first.stderr)
    again = executor.runner.run(request(session="lf", command="cd $WORK_DIR/lost+found && ls && echo again"))
    assert again.stdout == "x\nagain\n", (again.stdout, again.stderr)
