"""What a test run prints and writes: a live progress display (a status line on a
terminal, one plain line per case in CI logs), readable failures, the summary line,
JUnit XML (the Jenkins/xunit schema GitHub Actions, GitLab and Jenkins read) and JSON."""

from __future__ import annotations

import json
import os
import re
import socket
import sys
import threading
import xml.etree.ElementTree as ET
from typing import TextIO

from .checks import tail
from .runner import Outcome, Report

_MARK = {"passed": "PASS", "failed": "FAIL", "error": "ERROR", "skipped": "SKIP"}
#: Characters XML 1.0 cannot carry (JUnit readers reject the whole file for one).
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_TAIL_LINES = 20
#: Control characters a terminal or a CI log would act on (colours, titles, the clipboard...).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def safe(text: str) -> str:
    """Untrusted text (from a test file or a run) made inert for a terminal or a CI log:
    control characters shown as ``\\xNN``."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


class Console:
    """Progress while cases run; failures in full at the end."""

    def __init__(self, stream: TextIO | None = None, *, live: bool | None = None, total: int = 0) -> None:
        self.stream = stream or sys.stdout
        self.live = self.stream.isatty() and os.environ.get("TERM") != "dumb" if live is None else live
        self.total = total
        self._lock = threading.Lock()
        self._running: list[str] = []
        self._done: dict[str, int] = {}

    def started(self, case_id: str) -> None:
        with self._lock:
            self._running.append(case_id)
            self._status()

    def finished(self, outcome: Outcome) -> None:
        with self._lock:
            if outcome.id in self._running:
                self._running.remove(outcome.id)
            self._done[outcome.status] = self._done.get(outcome.status, 0) + 1
            self._clear()
            extra = f" ({outcome.duration_ms} ms)" if outcome.duration_ms else ""
            reason = f": {outcome.message}" if outcome.status in ("error", "skipped") and outcome.message else ""
            if outcome.status == "failed" and outcome.failures:
                reason = f": {outcome.failures[0].message}"
            self.stream.write(safe(f"{_MARK[outcome.status]:5} {outcome.id}{extra}{_one_line(reason)}") + "\n")
            self._status()
            self.stream.flush()

    def _status(self) -> None:
        if not self.live:
            return
        done = sum(self._done.values())
        counts = ", ".join(f"{n} {s}" for s, n in self._done.items())
        running = ", ".join(self._running[:3]) + (" ..." if len(self._running) > 3 else "")
        line = f"[{done}/{self.total or '?'}] {counts}" + (f" | running: {running}" if running else "")
        width = max(20, _columns() - 1)
        self.stream.write("\r\x1b[K" + safe(line)[:width])
        self.stream.flush()

    def _clear(self) -> None:
        if self.live:
            self.stream.write("\r\x1b[K")

    def report(self, report: Report) -> None:
        with self._lock:
            self._clear()
            bad = [o for o in report.outcomes if o.status in ("failed", "error")]
            if bad:
                self.stream.write("\n" + "=" * 30 + " failures " + "=" * 30 + "\n")
                for outcome in bad:
                    self.stream.write(safe(describe(outcome)) + "\n")
            graded = [o for o in report.outcomes if o.needs_grader and o.status == "skipped"]
            if graded:
                self.stream.write("\nneeds a grader (not machine-checkable yet):\n")
                for outcome in graded:
                    statements = "".join(safe(f"    - {_one_line(s, 500)}") + "\n" for s in outcome.needs_grader)
                    self.stream.write(safe(f"  {outcome.id}") + "\n" + statements)
            over = [o for o in report.outcomes if o.over_budget]
            if over:
                self.stream.write("\nover their time budget (fails only with --strict-timing):\n")
                self.stream.write("".join(safe(f"  {o.id}: {o.over_budget}") + "\n" for o in over))
            golden = [(o.id, path) for o in report.outcomes for path in o.golden_updated]
            if golden:
                self.stream.write("\ngolden files updated:\n" + "".join(safe(f"  {p} ({i})") + "\n" for i, p in golden))
            self.stream.write(f"\n{report.summary()} on {report.backend}\n")
            self.stream.flush()


def describe(outcome: Outcome) -> str:
    """A failure as a reader wants it: what was run, each broken check with expected and
    got (a diff where there is one), then the tails of the streams and the files."""
    lines = [f"___ {outcome.id} ___ ({outcome.source})"]
    if outcome.command:
        lines.append(f"command: {outcome.command}")
    if outcome.message:
        lines.append(f"{'error' if outcome.status == 'error' else 'note'}: {outcome.message}")
    for failure in outcome.failures:
        lines.append(f"  x {failure.check}: {failure.message}")
        if failure.diff:  # behind "|": no diff line can start a CI log line (GitHub reads "::command")
            lines += ["      | " + line for line in failure.diff.rstrip("\n").splitlines()]
        else:
            if failure.expected is not None:
                lines += _block("expected", failure.expected)
            if failure.got is not None:
                lines += _block("got", failure.got)
    if outcome.run_id is not None:
        lines.append(f"exit code: {outcome.exit_code}" + (f"  run: {outcome.run_id}" if outcome.run_id else ""))
        for name, text in (("stdout", outcome.stdout), ("stderr", outcome.stderr)):
            if text:
                shown = text.rstrip("\n").splitlines()[-_TAIL_LINES:]
                lines.append(f"{name} (last {len(shown)} lines):")
                lines += ["  | " + line for line in shown]
        if outcome.files:
            lines.append("files: " + "; ".join(outcome.files))
    return "\n".join(lines) + "\n"


def _block(label: str, text: str) -> list[str]:
    parts = tail(text, 1000).rstrip("\n").splitlines() or [""]
    if len(parts) == 1:
        return [f"      {label}: {parts[0]!r}" if parts[0] != parts[0].strip() or not parts[0] else
                f"      {label}: {parts[0]}"]
    return [f"      {label}:"] + ["        | " + line for line in parts[-_TAIL_LINES:]]


def _one_line(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _columns() -> int:
    try:
        return os.get_terminal_size().columns
    except OSError:
        return 100


def junit_xml(report: Report) -> bytes:
    """JUnit XML: one ``testsuite`` per test file, one ``testcase`` per case."""
    suites = ET.Element("testsuites", name="skill-executor test", tests=str(len(report.outcomes)),
                        failures=str(report.count("failed")), errors=str(report.count("error")),
                        time=_seconds(report.duration_ms))
    groups: dict[tuple[str, str], list[Outcome]] = {}
    for outcome in report.outcomes:
        groups.setdefault((outcome.skill, outcome.source), []).append(outcome)
    host = socket.gethostname()
    for index, ((skill, source), outcomes) in enumerate(groups.items()):
        suite = ET.SubElement(suites, "testsuite", name=f"{skill} ({source})" if source else skill,
                              tests=str(len(outcomes)),
                              failures=str(sum(o.status == "failed" for o in outcomes)),
                              errors=str(sum(o.status == "error" for o in outcomes)),
                              skipped=str(sum(o.status == "skipped" for o in outcomes)),
                              time=_seconds(sum(o.duration_ms for o in outcomes)),
                              timestamp=report.started_at.strftime("%Y-%m-%dT%H:%M:%S"),
                              hostname=_xml(host), id=str(index), package=_xml(skill))
        properties = ET.SubElement(suite, "properties")
        ET.SubElement(properties, "property", name="backend", value=_xml(report.backend))
        ET.SubElement(properties, "property", name="source", value=_xml(source))
        for outcome in outcomes:
            case = ET.SubElement(suite, "testcase", name=_xml(outcome.name), classname=_xml(f"skills.{skill}"),
                                 time=_seconds(outcome.duration_ms))
            if outcome.status == "skipped":
                skipped = ET.SubElement(case, "skipped", message=_xml(outcome.message or "skipped"))
                if outcome.needs_grader:
                    skipped.text = _xml("\n".join(f"- {s}" for s in outcome.needs_grader))
            elif outcome.status == "error":
                error = ET.SubElement(case, "error", message=_xml(_one_line(outcome.message or "error", 500)),
                                      type="infrastructure" if outcome.infrastructure else "error")
                error.text = _xml(describe(outcome))
            elif outcome.status == "failed":
                first = outcome.failures[0] if outcome.failures else None
                failure = ET.SubElement(case, "failure", message=_xml(_one_line(first.message if first else "failed",
                                                                                500)),
                                        type=first.check if first else "failure")
                failure.text = _xml(describe(outcome))
            if outcome.stdout:
                ET.SubElement(case, "system-out").text = _xml(tail(outcome.stdout, 20_000))
            if outcome.stderr:
                ET.SubElement(case, "system-err").text = _xml(tail(outcome.stderr, 20_000))
    for element in suites.iter():
        element.attrib = {key: _xml(value) for key, value in element.attrib.items()}
        if element.text:
            element.text = _xml(element.text)
    ET.indent(suites)
    body: bytes = ET.tostring(suites, encoding="utf-8")
    return b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n" + body + b"\n"


def _seconds(ms: int) -> str:
    return f"{ms / 1000:.3f}"


def _xml(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


def json_report(report: Report) -> bytes:
    return (json.dumps(report.to_dict(), indent=2, ensure_ascii=False) + "\n").encode()
