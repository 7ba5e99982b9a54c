"""The one loop that reads a started :class:`~.base.Process` to its end under a
:class:`~.limits.Guard` (its deadline, cancellation, disk cap): output into bounded buffers
(and the listener, only what is kept) as it streams, the guard checked on every pass (also
while output floods in), and on a breach the whole process group killed and its output read
on for at most ``grace`` seconds: output up to the kill is kept.  Then ``wait``: nothing of
the run is alive once it returns.

:class:`~skill_executor.runs.sandbox.RunSandbox` drives every run with it; a runtime drives
its own housekeeping processes with it (a pod's unpacking of the staged files)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from .base import OutputListener, Process
from .limits import Guard
from .streams import BoundedBuffer


@dataclass(slots=True)
class Driven:
    """How a driven process ended: its exit status (None: unknown), whether it was killed
    on a breach, and what the caller should know."""

    code: int | None
    killed: bool = False
    warnings: list[str] = field(default_factory=list)


def drive(
    process: Process,
    guard: Guard,
    buffers: dict[str, BoundedBuffer],
    listener: OutputListener | None = None,
    *,
    grace: float,
) -> Driven:
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
                given_up = time.monotonic() + grace
    finally:
        code = process.wait()
    return Driven(code, killed, warnings)
