"""The one runtime-neutral sandbox: what the pipeline needs, over any runtime's :class:`Box`.

:class:`RunSandbox` stages, executes and collects for every runtime alike:

* ``stage`` -- the inputs into the box's ``workspace`` (:class:`~skill_executor.workspace.staging.Stager`),
  then, for a box that does not share that folder, ``put`` into the box;
* ``execute`` -- start the command, read its output into bounded buffers (and the
  listener, only what is kept) as it streams, check the deadline, cancellation and the
  disk cap on every pass (also while output floods in), and on a breach kill the whole
  process group and keep reading for at most :data:`KILL_GRACE_SECONDS`: output up to
  the kill is kept.  Then ``wait``: nothing of the run is alive once it returns;
* ``collect`` -- for a box that does not share its folder, first :meth:`RunSandbox.fetch`:
  the box's ``out/``, ``work/`` and ``run/`` are listed, and of the files the globs match
  (in path order, the first ``max_files``) only what collection will read comes back (each
  file's first ``min(max_file_bytes, what is left of max_total_bytes)`` bytes, the rest
  a hole so it keeps its size): the same files, sizes, truncations and caps as for a box
  that shares its folder.  A session's ``work/`` comes back whole first (``get``): the
  session goes on from what the run left there.  Then :func:`~skill_executor.outputs.collect.collect`, the
  only place for the path rules, caps and MIME types.

The pipeline makes one per run from ``runtime.claim(plan)`` and never sees a box.
"""

from __future__ import annotations

import signal as signals
import sys
import time
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Self

from ..errors import ExecutorError
from ..outputs.collect import Collection, CollectLimits, collect, compile_globs
from ..paths import MAX_PATH_BYTES
from ..runtimes.base import Box, Command, ExecResult, ProcessSpec
from ..runtimes.drive import drive
from ..runtimes.limits import Guard, signal_name
from ..runtimes.streams import BoundedBuffer
from ..workspace.remove import remove_tree
from ..workspace.schema import InputSpec
from ..workspace.staging import Stager, StagingReport

#: How long a killed process's output may take to end before it is given up.
KILL_GRACE_SECONDS = 5.0
#: What ``put`` copies into a box that does not share the workspace.
STAGED_TOPS = ("skills", "work", "run")
#: Bounds of :meth:`RunSandbox.fetch`'s listing of a box (its answers are untrusted).
FETCH_MAX_ENTRIES = 100_000
FETCH_MAX_DEPTH = 32
#: A file listed larger than this is not believed (nor brought back).
FETCH_MAX_FILE_SIZE = 1 << 40
#: The longest bringing outputs back may take (each request also has its own idle timeout).
FETCH_SECONDS = 300.0


def _plain(name: str) -> bool:
    """One plain path component of valid UTF-8 (a box's listing is untrusted)."""
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        return False
    try:
        return len(name.encode("utf-8")) <= 255
    except UnicodeEncodeError:  # a lone surrogate
        return False


def _never_holes(collection: Collection, fetched: dict[str, int], limits: CollectLimits) -> None:
    """A file's content is never more than what came back from the box (the rest of it is
    a hole): should collection have read past it, the content is cut there, as truncated."""
    for item in collection.files:
        got = fetched.get(item.name)
        if got is not None and len(item.data) > got:
            item.data = item.data[:got]
            item.truncated = True
            item.sha256 = None
            collection.hit("max_total_bytes" if got < limits.max_file_bytes else "max_file_bytes")


class RunSandbox:
    """One run's sandbox over ``box``; a context manager that releases the box."""

    def __init__(self, box: Box) -> None:
        self.box = box
        self.workspace = box.workspace
        self.root = box.root
        self.warnings = box.warnings

    def stage(self, stager: Stager, inputs: Sequence[InputSpec]) -> StagingReport:
        report = stager.stage(self.workspace, inputs)
        if not self.box.shared:
            self.box.put(STAGED_TOPS)
        return report

    def execute(self, command: Command) -> ExecResult:
        spec = ProcessSpec(["bash", "-c", command.command], command.cwd, command.env, command.stdin, command.timeout)
        process = self.box.start(spec)
        out, err = BoundedBuffer(command.stdout_max), BoundedBuffer(command.stderr_max)
        guard = Guard(started=process.started, timeout=command.timeout, cancel=command.cancel, disk=process.disk)
        driven = drive(process, guard, {"stdout": out, "stderr": err}, command.listener, grace=KILL_GRACE_SECONDS)
        code, killed, warnings = driven.code, driven.killed, driven.warnings
        verdict = self.box.verdict()
        if code is None and (killed or verdict.oom_killed):
            code = 128 + signals.SIGKILL
        elif killed and (guard.timed_out or guard.cancelled):
            code = 128 + signals.SIGKILL  # stopped by us, whatever the status raced in
        disk_hit = guard.disk_hit or verdict.disk_limit_hit
        if guard.disk_hit and not verdict.disk_limit_hit and process.disk is not None:
            warnings.append(process.disk.warning())  # passed while it ran, not at the end
        return ExecResult(
            exit_code=code,
            stdout=out.data,
            stderr=err.data,
            duration_ms=int((time.monotonic() - process.started) * 1000),
            stdout_truncated=out.truncated,
            stderr_truncated=err.truncated,
            timed_out=guard.timed_out,
            cancelled=guard.cancelled,
            signal=signal_name(code),
            oom_killed=verdict.oom_killed,
            disk_limit_hit=disk_hit,
            warnings=[*process.warnings, *warnings, *verdict.warnings],
            policy_denied_exec=verdict.policy_denied_exec,
        )

    def collect(
        self, globs: list[str], limits: CollectLimits, *, failed: bool, skill_source: Path | None = None
    ) -> Collection:
        """The outputs; ``skill_source`` (the installed skill): files the run wrote in its skill
        folder are collected too (on a box that shares the workspace; a pod's are not brought back)."""
        warnings: list[str] = []
        fetched: dict[str, int] | None = None
        if not self.box.shared:
            whole: tuple[str, ...] = ()
            if self.workspace.session is not None:  # the session goes on from what the run left
                before = len(self.box.warnings)
                self.box.get("work", sys.maxsize)
                warnings += self.box.warnings[before:]
                whole = ("work",)
            if globs:
                fetched = {}
                warnings += self.fetch(globs, limits, failed=failed, skip=whole, fetched=fetched)
        source = skill_source if self.box.shared else None
        collection = collect(self.workspace, globs, limits, failed=failed, skill_source=source)
        if fetched:
            _never_holes(collection, fetched, limits)
        collection.warnings[:0] = warnings
        return collection

    def fetch(
        self,
        globs: list[str],
        limits: CollectLimits,
        *,
        failed: bool = False,
        skip: Sequence[str] = (),
        fetched: dict[str, int] | None = None,
    ) -> list[str]:
        """Bring back from a box that does not share the workspace what collecting
        ``globs`` under ``limits`` reads (see the module docstring), choosing files as
        :func:`~skill_executor.outputs.collect.collect` does; warnings.  ``skip``: tops
        already brought back whole; ``fetched``: filled with each file's bytes brought back."""
        spec = compile_globs(tuple(globs))
        deadline = time.monotonic() + FETCH_SECONDS
        warnings: list[str] = []
        found: dict[str, int] = {}
        seen = 0
        tops = [top for top in self.workspace.roots() if top not in skip]
        stack = [(top, 0) for top in tops]
        while stack:
            folder, depth = stack.pop()
            if time.monotonic() > deadline:
                warnings.append(f"listing the sandbox took longer than {FETCH_SECONDS:g} s; the rest was not looked at")
                break
            for entry in self.box.list(folder):
                seen += 1
                if seen > FETCH_MAX_ENTRIES:
                    warnings.append(f"more than {FETCH_MAX_ENTRIES} entries in the sandbox; the rest was not looked at")
                    stack.clear()
                    break
                if not _plain(entry.name):
                    shown = entry.name[:80].encode("utf-8", "backslashreplace").decode()
                    warnings.append(f"{folder}: an entry named {shown!r} was skipped")
                    continue
                path = f"{folder}/{entry.name}"
                if len(path.encode()) > MAX_PATH_BYTES:
                    warnings.append(f"an output path longer than {MAX_PATH_BYTES} bytes was skipped")
                elif entry.kind == "directory":
                    if depth + 1 < FETCH_MAX_DEPTH:
                        stack.append((path, depth + 1))
                    else:
                        warnings.append(f"{path}: deeper than {FETCH_MAX_DEPTH} folders; not looked at")
                elif entry.kind == "file" and spec.match_file(path):
                    if not 0 <= entry.size <= FETCH_MAX_FILE_SIZE:
                        warnings.append(f"output {path!r}: the sandbox listed it at {entry.size} bytes; skipped")
                    elif failed and entry.size == 0:
                        warnings.append(f"output {path!r} is empty and the command failed; dropped")
                    else:
                        found[path] = entry.size
        for top in tops:  # the box's files, and only them
            host = self.workspace.roots()[top]
            remove_tree(host)
            host.mkdir(mode=0o755)
        left, kept = limits.max_total_bytes, 0
        for path, size in sorted(found.items()):
            want = min(size, limits.max_file_bytes, max(0, left)) if kept < limits.max_files else 0
            top, _, below = path.partition("/")
            try:
                if want and time.monotonic() > deadline:
                    raise ExecutorError(f"bringing outputs back took longer than {FETCH_SECONDS:g} s")
                data = self.box.read(path, want) if want else b""
                if len(data) < want:  # shorter than it was listed: what there is, no hole
                    warnings.append(f"output {path!r} changed while it was collected")
                    size = len(data)
                with self.workspace.tree(top) as tree:
                    tree.write(PurePosixPath(below), data, owner=None, size=size, what="output")
            except ExecutorError as exc:
                warnings.append(f"output {path!r} could not be brought back: {exc.message}")
                continue
            if fetched is not None:
                fetched[path] = len(data)
            kept += 1
            left -= len(data)
        return warnings

    def close(self) -> None:
        self.box.release()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
