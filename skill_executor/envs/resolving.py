"""What pip's and npm's resolutions share: their time limit, how a refusal quotes a tool's
output, and how a file a tool wrote is read (bounded, never through a link)."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from .declared import DependenciesUnmet

#: How much of pip's / npm's output a refusal quotes.
ERROR_LINES = 15
#: How long a resolution may take.
RESOLVE_TIMEOUT = 900.0
#: Checks once that a tool runs as the tools run (:meth:`~.store.SkillEnvs.usable_or_refuse`):
#: the tool's name, its probe command, the source folders it must read.
Usable = Callable[[str, list[str], list[Path | None]], None]


def tail(text: str) -> list[str]:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-ERROR_LINES:]


def unmet(items: list[dict[str, str]], log_lines: list[str] | None = None) -> DependenciesUnmet:
    names = ", ".join(item["need"] or item.get("source", "?") for item in items)
    return DependenciesUnmet(
        f"the skill's dependencies cannot be met: {names}",
        details={"unmet": items, **({"log": log_lines} if log_lines else {})},
    )


#: The most of a tool's answer file (pip's report, a package.json) that is read.
MAX_ANSWER_BYTES = 16 * 1024 * 1024


def read_bounded(path: Path) -> str:
    """A file a tool wrote (regular, not a link, at most :data:`MAX_ANSWER_BYTES`); ``ValueError`` else."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"not a regular file: {path.name}")
        data = handle.read(MAX_ANSWER_BYTES + 1)
    if len(data) > MAX_ANSWER_BYTES:
        raise ValueError(f"{path.name} is over {MAX_ANSWER_BYTES} bytes")
    return data.decode("utf-8", errors="replace")
