"""The runtime seam's contract (``Runtime.claim(plan) -> Box``, ``Box.start(spec) -> Process``),
written once and run against every box there is: local, bwrap, Docker cold and warm, on runc
and gVisor, and agent-sandbox pods (the real SDK against tests/fakekube.py, each pod our in-pod
server in a container of the runner image).

The box is driven directly where the contract is the box's (streamed output, stdin,
exit statuses, single use, release), and through the one runtime-neutral driver
(:class:`~skill_executor.runs.sandbox.RunSandbox`) where it is the pair's (the deadline
keeps partial output and kills the group, cancel, caps).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

import pytest

from skill_executor.core import Executor
from skill_executor.errors import ExecutorError
from skill_executor.outputs.collect import CollectLimits, collect
from skill_executor.runs.sandbox import STAGED_TOPS, RunSandbox
from skill_executor.runtimes.base import Box, BoxEntry, BoxVerdict, Command, Process, ProcessSpec, SandboxPlan
from skill_executor.workspace.layout import Workspace, WorkspaceManager, environment
from skill_executor.workspace.staging import Stager

from ..helpers import leftover_runs

#: Runtimes that promise to end a run's processes that left its process group (setsid):
#: a container ends with its command. The local runtime kills the group only (documented).
#: A single-use pod's server kills every process of the pod once the run's has exited (``--container``).
#: A bwrap sandbox ends with its PID namespace's init.
KILLS_ESCAPEES = {"docker", "docker-pool", "docker-runsc", "docker-pool-runsc", "agent-sandbox", "bwrap"}


def claim(executor: Executor, run_id: str) -> Box:
    """A box with the run's folders in it, as the pipeline's staging leaves it (``put``: a
    box that does not share the workspace gets it copied in; for the others, nothing)."""
    box = executor.runtime.claim(SandboxPlan(run_id, executor.repository.get("math-tools")))
    try:
        box.put(STAGED_TOPS)
    except BaseException:
        box.release()
        raise
    return box


def spec(box: Box, text: str, stdin: bytes | None = None) -> ProcessSpec:
    cwd = box.root
    return ProcessSpec(["bash", "-c", text], cwd, {**environment(box.root, "math-tools"), "PWD": cwd}, stdin, 20.0)


def drive(box: Box, text: str, stdin: bytes | None = None) -> tuple[bytes, bytes, int | None]:
    """Start, read every event to the end (within a generous bound), wait."""
    process = box.start(spec(box, text, stdin))
    out, err = bytearray(), bytearray()
    bound = time.monotonic() + 60
    while not process.ended and time.monotonic() < bound:
        for name, chunk in process.events(1.0):
            (out if name == "stdout" else err).extend(chunk)
    assert process.ended, "the process's output never ended"
    return bytes(out), bytes(err), process.wait()


def command(sandbox: RunSandbox, text: str, **fields: object) -> Command:
    cwd = sandbox.root
    values: dict[str, object] = {
        "command": text,
        "cwd": cwd,
        "env": {**environment(sandbox.root, "math-tools"), "PWD": cwd},
        "stdin": None,
        "timeout": 20.0,
        "stdout_max": 4096,
        "stderr_max": 4096,
    }
    values.update(fields)
    return Command(**values)  # type: ignore[arg-type]


def out_file(box: Box, name: str) -> bytes | None:
    with box.workspace.tree("out") as tree:
        if tree.lstat(PurePosixPath(name), what="output") is None:
            return None
    return (box.workspace.root / "out" / name).read_bytes()


def test_output_streams_in_order_per_stream_while_the_process_runs(executor: Executor) -> None:
    box = claim(executor, "seam-stream")
    try:
        process = box.start(spec(box, "seq 1 3000; echo first >&2; sleep 1; echo second >&2"))
        err = bytearray()
        out = bytearray()
        seen_running = False
        while not process.ended:
            for name, chunk in process.events(5.0):
                (out if name == "stdout" else err).extend(chunk)
                if bytes(err) == b"first\n" and not process.ended:
                    seen_running = True  # streamed: it arrived while the process still ran
        assert process.wait() == 0
        assert bytes(out) == "".join(f"{i}\n" for i in range(1, 3001)).encode()
        assert bytes(err) == b"first\nsecond\n" and seen_running
    finally:
        box.release()


def test_stdin_goes_in_whole_and_no_stdin_is_eof(executor: Executor) -> None:
    data = bytes(range(256)) * 4096  # 1 MiB, every byte value
    box = claim(executor, "seam-stdin")
    try:
        out, _, code = drive(box, "f=$(mktemp); cat > $f; sha256sum < $f; wc -c < $f; rm $f", stdin=data)
        assert code == 0
        assert out.split()[0].decode() == hashlib.sha256(data).hexdigest() and out.split()[-1] == b"1048576"
    finally:
        box.release()
    box = claim(executor, "seam-no-stdin")
    try:
        assert drive(box, "cat; echo done") == (b"done\n", b"", 0)  # EOF at once, not a hang
    finally:
        box.release()


@pytest.mark.parametrize("text, code", [("exit 7", 7), ("kill -TERM $$", 143), ("kill -KILL $$", 137)])
def test_exit_statuses_and_signals_come_through(executor: Executor, text: str, code: int) -> None:
    box = claim(executor, f"seam-exit-{code}")
    try:
        assert drive(box, text)[2] == code
    finally:
        box.release()


def test_a_box_is_single_use_and_release_is_idempotent(executor: Executor) -> None:
    box = claim(executor, "seam-once")
    drive(box, "true")
    with pytest.raises(ExecutorError) as refused:
        box.start(spec(box, "echo again"))
    assert refused.value.code == "internal"
    box.release()
    box.release()
    executor.runtime.settle()
    assert leftover_runs(executor) == []


def test_files_put_in_are_seen_and_files_written_come_back(executor: Executor) -> None:
    box = claim(executor, "seam-files")
    try:
        with box.workspace.tree("work") as tree:
            tree.write(PurePosixPath("inputs/in.txt"), b"staged\n", owner=executor.runtime.owner, what="input")
        box.put(["work"])
        _, _, code = drive(box, "cat work/inputs/in.txt > out/copy.txt; mkdir out/sub")
        assert code == 0
        box.get("out", 1 << 20)
        assert out_file(box, "copy.txt") == b"staged\n"
        entries = {e.name: (e.kind, e.size) for e in box.list("out")}
        assert entries == {"copy.txt": ("file", 7), "sub": ("directory", 0)}
    finally:
        box.release()


def test_the_deadline_keeps_partial_output_and_kills_the_group(executor: Executor) -> None:
    with RunSandbox(claim(executor, "seam-deadline")) as sandbox:
        started = time.monotonic()
        result = sandbox.execute(
            command(sandbox, "(sleep 3; echo late > out/late.txt) & echo partial; echo half >&2; sleep 60", timeout=1.0)
        )
        assert time.monotonic() - started < 15
        assert result.timed_out and result.exit_code == 137 and result.signal == "SIGKILL"
        assert (result.stdout, result.stderr) == (b"partial\n", b"half\n")
        time.sleep(3.5)  # the background writer would have written by now
        sandbox.box.get("out", 1 << 20)  # from a box that does not share the workspace
        assert out_file(sandbox.box, "late.txt") is None


def test_a_leftover_in_its_own_session_is_ended_where_promised(executor: Executor, runtime_name: str) -> None:
    """The escapee makes itself a session first (``out/ready``), so the group kill at the
    command's exit cannot be what ends it; on the local runtime, which does not promise
    this, it is seen to live on (so the check can tell)."""
    escape = (
        "setsid bash -c 'echo > out/ready; sleep 2; echo late > out/late.txt' </dev/null >/dev/null 2>&1 & "
        "while [ ! -e out/ready ]; do sleep 0.05; done; echo ok"
    )
    with RunSandbox(claim(executor, "seam-setsid")) as sandbox:
        result = sandbox.execute(command(sandbox, escape))
        assert result.exit_code == 0 and result.stdout == b"ok\n"
        time.sleep(3)
        sandbox.box.get("out", 1 << 20)  # from a box that does not share the workspace
        late = out_file(sandbox.box, "late.txt")
        if runtime_name in KILLS_ESCAPEES:
            assert late is None
        else:
            bound = time.monotonic() + 30
            while late is None and time.monotonic() < bound:  # lives on: let it end before the release
                time.sleep(0.2)
                late = out_file(sandbox.box, "late.txt")
            assert late == b"late\n"


def test_cancel_stops_it_keeping_what_it_printed(executor: Executor) -> None:
    with RunSandbox(claim(executor, "seam-cancel")) as sandbox:
        cancel = threading.Event()
        heard: list[bytes] = []

        def listener(name: str, chunk: bytes) -> None:
            heard.append(chunk)
            cancel.set()  # cancel once it has said something

        result = sandbox.execute(command(sandbox, "echo started; sleep 60", cancel=cancel, listener=listener))
        assert result.cancelled and not result.timed_out and result.exit_code == 137
        assert result.stdout == b"started\n" and heard == [b"started\n"]


def test_output_caps_hold_and_a_flood_meets_its_deadline(executor: Executor) -> None:
    with RunSandbox(claim(executor, "seam-caps")) as sandbox:
        heard = bytearray()
        result = sandbox.execute(
            command(
                sandbox,
                "yes | head -c 5000000; yes err | head -c 300000 >&2; yes",
                stdout_max=100,
                stderr_max=8,
                timeout=2.0,
                listener=lambda name, chunk: heard.extend(chunk) if name == "stdout" else None,
            )
        )
        assert result.timed_out and result.stdout == b"y\n" * 50 and result.stdout_truncated
        assert result.stderr == b"err\nerr\n" and result.stderr_truncated
        assert bytes(heard) == result.stdout  # the listener hears only what is kept
    executor.runtime.settle()
    assert leftover_runs(executor) == []


class FarBox:
    """A box whose command does not see the service's folder (a pod's, say), as far as
    the driver can tell: its files are a dict, and it records what is copied in and out
    (pure logic, no process)."""

    shared = False
    root = "/workspace"

    def __init__(self, workspace: Workspace, files: dict[str, bytes], *, lies: dict[str, int] | None = None) -> None:
        self.workspace = workspace
        self.files = files
        self.lies = lies or {}  # path -> the size its listing claims
        self.warnings: list[str] = []
        self.calls: list[tuple[str, str]] = []
        self.released = 0

    def put(self, tops: Sequence[str]) -> None:
        self.calls += [("put", top) for top in tops]

    def get(self, top: str, limit: int) -> int:
        raise AssertionError("collection reads what it needs, never whole folders")

    def list(self, folder: str) -> list[BoxEntry]:
        entries: dict[str, BoxEntry] = {}
        for path, data in self.files.items():
            if not path.startswith(folder + "/"):
                continue
            rest = path[len(folder) + 1 :]
            name, _, below = rest.partition("/")
            if below:
                entries[name] = BoxEntry(name, 0, "directory")
            else:
                entries[name] = BoxEntry(name, self.lies.get(path, len(data)), "file")
        return list(entries.values())

    def read(self, path: str, limit: int) -> bytes:
        self.calls.append(("read", f"{path}:{limit}"))
        return self.files[path][:limit]

    def start(self, spec: ProcessSpec) -> Process:
        raise AssertionError("not started here")

    def verdict(self) -> BoxVerdict:
        return BoxVerdict()

    def release(self) -> None:
        self.released += 1


FAR_FILES = {
    "out/a.txt": b"a" * 60,
    "out/b.txt": b"b" * 60,
    "out/c.bin": bytes(range(256)) * 4,
    "out/d/e.txt": b"deep\n",
    "out/empty.txt": b"",
    "work/inputs/big.csv": b"x" * 5000,  # staged, not asked for: never read back
    "work/note.md": b"# note\n",
}


@pytest.mark.parametrize(
    "globs, limits",
    [
        (["out/**", "work/*.md"], CollectLimits(max_files=10, max_file_bytes=100, max_total_bytes=150)),
        (["out/*"], CollectLimits(max_files=2, max_file_bytes=1000, max_total_bytes=10_000)),
        (["**"], CollectLimits(max_files=100, max_file_bytes=10, max_total_bytes=25)),
    ],
)
def test_a_far_box_collects_exactly_what_a_shared_one_does_reading_only_that(
    tmp_path: Path, globs: list[str], limits: CollectLimits
) -> None:
    manager = WorkspaceManager(tmp_path / "ws", instance="far")
    near = manager.create("near-1", "math-tools")  # the same files, where collect reads them itself
    for path, data in FAR_FILES.items():
        top, _, below = path.partition("/")
        with near.tree(top) as tree:
            tree.write(PurePosixPath(below), data, owner=None)
    expected = collect(near, globs, limits, failed=False)
    box = FarBox(manager.create("far-1", "math-tools"), dict(FAR_FILES))
    stager = Stager(None, None, None, max_bytes=1 << 20)  # type: ignore[arg-type]
    with RunSandbox(box) as sandbox:
        sandbox.stage(stager, [])
        assert box.calls == [("put", "skills"), ("put", "work"), ("put", "run")]
        got = sandbox.collect(globs, limits, failed=False)
    shape = [(f.name, f.size, f.truncated, f.data, f.sha256, f.mime_type) for f in got.files]
    assert shape == [(f.name, f.size, f.truncated, f.data, f.sha256, f.mime_type) for f in expected.files]
    assert got.limits_hit == expected.limits_hit
    read = sum(int(call.rsplit(":", 1)[1]) for kind, call in box.calls if kind == "read")
    assert read == sum(len(f.data) for f in got.files) <= limits.max_total_bytes  # nothing more came over
    if globs != ["**"]:  # a staged input nobody asked for is never read back
        assert not any("big.csv" in call for _, call in box.calls)
    assert box.released == 1
    for workspace in (near, box.workspace):
        manager.discard(workspace.root)
    manager.close()


def test_a_far_box_agrees_with_collect_on_what_it_drops(tmp_path: Path) -> None:
    """An empty file of a failed command is dropped by collect: it must not use up a place
    (nor bytes) of the files brought back, or a later file would come back as a hole."""
    files = {"out/a.log": b"", **{f"out/b{i}": bytes([65 + i]) * 10 for i in range(10)}}
    limits = CollectLimits(max_files=10, max_file_bytes=100, max_total_bytes=95)
    manager = WorkspaceManager(tmp_path / "ws", instance="far")
    near = manager.create("near-2", "math-tools")
    for path, data in files.items():
        with near.tree("out") as tree:
            tree.write(PurePosixPath(path.split("/", 1)[1]), data, owner=None)
    expected = collect(near, ["out/*"], limits, failed=True)
    box = FarBox(manager.create("far-3", "math-tools"), dict(files))
    with RunSandbox(box) as sandbox:
        got = sandbox.collect(["out/*"], limits, failed=True)
    shape = [(f.name, f.size, f.truncated, f.data, f.sha256) for f in got.files]
    assert shape == [(f.name, f.size, f.truncated, f.data, f.sha256) for f in expected.files]
    assert got.limits_hit == expected.limits_hit and any("empty" in w for w in got.warnings)
    assert all(set(f.data) <= {65 + i for i in range(10)} for f in got.files)  # never a hole's zeros
    for workspace in (near, box.workspace):
        manager.discard(workspace.root)
    manager.close()


def test_a_far_box_that_lies_or_plants_names_cannot_steer_collection(tmp_path: Path) -> None:
    manager = WorkspaceManager(tmp_path / "ws", instance="far")
    files = {"out/short.txt": b"abc", "out/../escape": b"x", "out/ok.txt": b"ok", "out/\ud800": b"s"}
    box = FarBox(manager.create("far-2", "math-tools"), files, lies={"out/short.txt": 50})
    with RunSandbox(box) as sandbox:
        got = sandbox.collect(
            ["out/**"], CollectLimits(max_files=10, max_file_bytes=100, max_total_bytes=1000), failed=False
        )
    assert [(f.name, f.size, f.data) for f in got.files] == [("out/ok.txt", 2, b"ok"), ("out/short.txt", 3, b"abc")]
    assert any("'..'" in w for w in got.warnings) and any("changed while" in w for w in got.warnings)
    assert list((tmp_path / "ws").rglob("escape")) == []
    manager.discard(box.workspace.root)
    manager.close()
