"""The one runtime-neutral sandbox: what the pipeline needs, over any runtime's :class:`Box`.

:class:`RunSandbox` stages, executes and collects for every runtime alike:

* ``stage`` -- the inputs into the box's ``workspace`` (:class:`~skill_executor.workspace.staging.Stager`),
  then, for a box that does not share that folder, ``put`` into the box;
* ``execute`` -- start the command, read its output into bounded buffers (and the
  listener, only what is kept) as it streams, check the deadline, cancellation and the
  disk cap on every pass (also while output floods in), and on a breach kill the whole
  process group and keep reading for at most :data:`KILL_GRACE_SECONDS`: output up to
  the kill is kept.  Then ``wait``: nothing of the run is alive once it returns;
* ``collect`` -- for a box that does not share its folder, ``get`` ``out/`` (and
  ``work/``) back first; then :func:`~skill_executor.outputs.collect.collect`, the only
  place for the path rules, caps and MIME types.

The pipeline makes one per run from ``runtime.claim(plan)`` and never sees a box.
"""

from __future__ import annotations

import signal as signals
import time
from collections.abc import Sequence
from typing import Self

from ..outputs.collect import Collection, CollectLimits, collect
from ..runtimes.base import Box, Command, ExecResult, ProcessSpec
from ..runtimes.limits import Guard, signal_name
from ..runtimes.streams import BoundedBuffer
from ..workspace.schema import InputSpec
from ..workspace.staging import Stager, StagingReport

#: How long a killed process's output may take to end before it is given up.
KILL_GRACE_SECONDS = 5.0
#: What ``put`` copies into a box that does not share the workspace.
STAGED_TOPS = ("skills", "work", "run")


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
        buffers = {"stdout": out, "stderr": err}
        guard = Guard(started=process.started, timeout=command.timeout, cancel=command.cancel, disk=process.disk)
        listener = command.listener
        killed = False
        given_up = float("inf")
        warnings: list[str] = []
        try:
            while not process.ended:
                now = time.monotonic()
                if now >= given_up:
                    warnings.append("the killed run's output did not end; it was given up")
                    break
                wait = guard.wait_time() if not killed else given_up - now
                for name, chunk in process.events(wait):
                    kept = buffers[name].feed(chunk)
                    if listener is not None and kept:
                        try:
                            listener(name, bytes(kept))
                        except Exception:  # a broken listener must not break the run
                            pass
                # Checked on every pass: a command that floods its output keeps the stream
                # busy, and must still meet its deadline.
                if not killed and guard.breached():
                    process.kill()
                    killed = True
                    given_up = time.monotonic() + KILL_GRACE_SECONDS
        finally:
            code = process.wait()
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
        )

    def collect(self, globs: list[str], limits: CollectLimits, *, failed: bool) -> Collection:
        if not self.box.shared:
            left = limits.max_total_bytes
            for top in ("out", "work"):
                left -= self.box.get(top, max(0, left))
        return collect(self.workspace, globs, limits, failed=failed)

    def close(self) -> None:
        self.box.release()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
