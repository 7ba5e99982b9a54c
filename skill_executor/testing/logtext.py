"""Untrusted text on its way to a CI log or a report: made inert, then bounded.

A test run prints what a pull request controls -- a skill's stdout and stderr, case
names, commands, expected values, diffs -- into the CI job's log, where some lines are
commands to the runner: GitHub Actions reads ``::add-mask::x``, ``::error file=..::``,
``::stop-commands::t`` at the start of a line (after whitespace) and ``##[cmd]`` anywhere
in it; Azure Pipelines reads ``##vso[...]`` anywhere (TeamCity ``##teamcity[``); GitLab
folds sections on ``section_start:...\\r\\x1b[0K`` and every log viewer acts on ANSI escapes
and ``\\r``. :func:`inert` is the one function all of that passes through; :class:`Caps`
and the clip functions bound it (a marker says how much was left out).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TextIO

from ..tools.neutral import neutralise

KiB, MiB = 1024, 1024 * 1024

#: ``##[...]`` (GitHub's older form), ``##vso[`` (Azure), ``##teamcity[``: read anywhere in a line.
_HASH_COMMAND = re.compile(r"##([A-Za-z]*)\[")


def inert(text: str) -> str:
    """``text`` that no terminal or CI runner acts on: control and invisible formatting
    characters escaped, the ``[`` of ``##word[`` escaped (``##vso\\x5b``), and the first ``:``
    of a line whose first non-blank characters are ``::`` escaped (``\\x3a:add-mask::``).
    Newlines and tabs stay; everything else is unchanged."""
    text = neutralise(text)  # the service's one neutraliser (model-bound text passes it too)
    text = _HASH_COMMAND.sub(lambda m: f"##{m.group(1)}\\x5b", text)
    if "::" not in text:
        return text
    lines = text.split("\n")
    for index, line in enumerate(lines):
        body = line.lstrip()
        if body.startswith("::"):
            at = len(line) - len(body)
            lines[index] = line[:at] + "\\x3a" + line[at + 1 :]
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Caps:
    """How much untrusted text a test run prints and writes (``skill-executor test``'s
    ``--max-line-chars``, ``--max-case-chars``, ``--max-log-bytes``, ``--max-report-bytes``)."""

    line_chars: int = 2_000  # one line of the log or of a report's text
    case_chars: int = 20_000  # one case's failure text, and each of its streams in a report
    log_bytes: int = 4 * MiB  # the whole console output (the summary line is always printed)
    report_bytes: int = 16 * MiB  # each report file (--junit, --json)


def clip_lines(text: str, limit: int) -> str:
    """Each line at most ``limit`` characters, the rest replaced by a marker."""
    if len(text) <= limit:
        return text
    lines = text.split("\n")
    for index, line in enumerate(lines):
        if len(line) > limit:
            lines[index] = f"{line[:limit]} [truncated: {len(line) - limit} more characters on this line]"
    return "\n".join(lines)


def for_log(text: str, caps: Caps, *, keep: str = "head", omitted: int = 0) -> str:
    """Untrusted text as it may be printed or reported: at most ``caps.case_chars`` of it (its
    head or its tail), inert, each line cut at ``caps.line_chars``, a marker saying how much
    was left out. Only the part shown is ever processed (a 64 MiB stream costs a slice), and
    it is made inert again after the cuts: a cut must not leave ``::`` at the start of a line.
    ``omitted``: characters already left out on the side that is cut (counted in the marker)."""
    limit = caps.case_chars
    left_out = omitted + max(0, len(text) - limit)
    if left_out:
        text = text[:limit] if keep == "head" else text[-limit:]
    shown = clip_lines(inert(text), caps.line_chars)
    if len(shown) > limit:  # escapes and line markers made it longer
        left_out += len(shown) - limit
        shown = shown[:limit] if keep == "head" else shown[-limit:]
    if left_out:
        shown = (
            shown + f"\n[truncated: {left_out} more characters left out]"
            if keep == "head"
            else f"[truncated: {left_out} characters before this left out]\n" + shown
        )
    return inert(shown)


class BoundedLog:
    """A stream that takes at most ``limit`` bytes; past that, one marker, and the rest is
    counted, not written (:meth:`last` always writes, for the summary line)."""

    def __init__(self, stream: TextIO, limit: int) -> None:
        self.stream = stream
        self.limit = limit
        self.written = 0
        self.left_out = 0

    def write(self, text: str) -> None:
        size = len(text.encode("utf-8", "replace"))
        if self.left_out or self.written + size > self.limit:
            if not self.left_out:
                self.stream.write(
                    f"\n[truncated: the log reached its limit of {self.limit} bytes "
                    "(--max-log-bytes); the rest is left out here, the reports have it]\n"
                )
            self.left_out += size
            return
        self.stream.write(text)
        self.written += size

    def last(self, text: str) -> None:
        if self.left_out:
            self.stream.write(f"\n[truncated: {self.left_out} bytes of the log were left out]\n")
        self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()
