"""What a test run reports: a failure as a reader wants it (:func:`describe`), JUnit XML
(the Jenkins/xunit schema GitHub Actions, GitLab and Jenkins read) and JSON. Untrusted
text is inert and bounded in both (:mod:`.logtext`); a report past ``Caps.report_bytes``
keeps every case and its verdict and leaves the later cases' output out, with a marker.
The console (progress and the summary) is :mod:`.console`."""

from __future__ import annotations

import json
import re
import socket
import xml.etree.ElementTree as ET
from typing import Any

from .logtext import Caps, for_log, inert
from .outcomes import Outcome, Report

#: Characters XML 1.0 cannot carry (JUnit readers reject the whole file for one).
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_TAIL_LINES = 20
#: Texts this short stay in a report past its budget (the marker would be longer).
_SMALL = 200
#: The one function untrusted text passes through before a log (kept under its old name).
safe = inert


def describe(outcome: Outcome, caps: Caps | None = None) -> str:
    """A failure as a reader wants it: what was run, each broken check with expected and
    got (a diff where there is one), then the tails of the streams and the files; inert,
    each line and the whole at most ``caps``' line and case sizes."""
    caps = caps or Caps()
    lines = [f"___ {outcome.id} ___ ({outcome.source})"]
    if outcome.command:
        lines.append(f"command: {outcome.command}")
    if outcome.message:
        lines.append(f"{'error' if outcome.status == 'error' else 'note'}: {outcome.message}")
    for failure in outcome.failures:
        lines.append(f"  x {failure.check}: {failure.message}")
        if failure.diff:  # behind "|", for the reader (inert() is what keeps a line from being a command)
            lines += ["      | " + line for line in _recent(failure.diff, caps, head=True)]
        else:
            if failure.expected is not None:
                lines += _block("expected", failure.expected, caps)
            if failure.got is not None:
                lines += _block("got", failure.got, caps)
    if outcome.run_id is not None:
        lines.append(f"exit code: {outcome.exit_code}" + (f"  run: {outcome.run_id}" if outcome.run_id else ""))
        for name, text in (("stdout", outcome.stdout), ("stderr", outcome.stderr)):
            if text:
                shown = _recent(text, caps)
                lines.append(f"{name} (last {len(shown)} lines):")
                lines += ["  | " + line for line in shown]
        if outcome.files:
            lines.append("files: " + "; ".join(outcome.files))
    return for_log("\n".join(lines), caps) + "\n"


def _recent(text: str, caps: Caps, *, head: bool = False) -> list[str]:
    """The last (``head``: first) lines of ``text``, read from no more than a case's worth of it."""
    window = caps.case_chars
    if len(text) > window:
        text = text[:window] if head else text[-window:]
    parts = text.rstrip("\n").split("\n")
    return parts[:200] if head else parts[-_TAIL_LINES:]


def _block(label: str, text: str, caps: Caps) -> list[str]:
    parts = _recent(text[-1000:] if len(text) > 1000 else text, caps)
    cut = "..." if len(text) > 1000 else ""
    if len(parts) == 1:
        return [
            f"      {label}: {cut}{parts[0]!r}"
            if parts[0] != parts[0].strip() or not parts[0]
            else f"      {label}: {cut}{parts[0]}"
        ]
    return [f"      {label}:"] + ["        | " + line for line in parts]


def one_line(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


class _Budget:
    """What is left of a report's bytes: past it, a case keeps its verdict, not its output."""

    def __init__(self, caps: Caps) -> None:
        self.caps = caps
        self.left = caps.report_bytes

    def take(self, text: str, *, keep: str = "head", omitted: int = 0) -> str:
        bounded = for_log(text, self.caps, keep=keep, omitted=omitted)
        size = len(bounded.encode("utf-8", "replace"))
        if size > self.left and size > _SMALL:  # a check's name or an exit code is always kept
            self.left = 0
            return (
                f"[truncated: the report reached its limit of {self.caps.report_bytes} bytes "
                f"(--max-report-bytes); {len(text)} characters of this case left out]"
            )
        self.left = max(0, self.left - size)
        return bounded


def junit_xml(report: Report, caps: Caps | None = None) -> bytes:
    """JUnit XML: one ``testsuite`` per test file, one ``testcase`` per case."""
    caps = caps or Caps()
    budget = _Budget(caps)
    suites = ET.Element(
        "testsuites",
        name="skill-executor test",
        tests=str(len(report.outcomes)),
        failures=str(report.count("failed")),
        errors=str(report.count("error")),
        time=_seconds(report.duration_ms),
    )
    groups: dict[tuple[str, str], list[Outcome]] = {}
    for outcome in report.outcomes:
        groups.setdefault((outcome.skill, outcome.source), []).append(outcome)
    host = socket.gethostname()
    for index, ((skill, source), outcomes) in enumerate(groups.items()):
        suite = ET.SubElement(
            suites,
            "testsuite",
            name=f"{skill} ({source})" if source else skill,
            tests=str(len(outcomes)),
            failures=str(sum(o.status == "failed" for o in outcomes)),
            errors=str(sum(o.status == "error" for o in outcomes)),
            skipped=str(sum(o.status == "skipped" for o in outcomes)),
            time=_seconds(sum(o.duration_ms for o in outcomes)),
            timestamp=report.started_at.strftime("%Y-%m-%dT%H:%M:%S"),
            hostname=host,
            id=str(index),
            package=skill,
        )
        properties = ET.SubElement(suite, "properties")
        ET.SubElement(properties, "property", name="backend", value=report.backend)
        ET.SubElement(properties, "property", name="source", value=source)
        for outcome in outcomes:
            case = ET.SubElement(
                suite, "testcase", name=outcome.name, classname=f"skills.{skill}", time=_seconds(outcome.duration_ms)
            )
            if outcome.status == "skipped":
                skipped = ET.SubElement(case, "skipped", message=one_line(outcome.message or "skipped", 500))
                if outcome.needs_grader:
                    skipped.text = budget.take("\n".join(f"- {s}" for s in outcome.needs_grader))
            elif outcome.status == "error":
                error = ET.SubElement(
                    case,
                    "error",
                    message=one_line(outcome.message or "error", 500),
                    type="infrastructure" if outcome.infrastructure else "error",
                )
                error.text = budget.take(describe(outcome, caps))
            elif outcome.status == "failed":
                first = outcome.failures[0] if outcome.failures else None
                failure = ET.SubElement(
                    case,
                    "failure",
                    message=one_line(first.message if first else "failed", 500),
                    type=first.check if first else "failure",
                )
                failure.text = budget.take(describe(outcome, caps))
            if outcome.stdout:
                ET.SubElement(case, "system-out").text = budget.take(
                    outcome.stdout, keep="tail", omitted=outcome.stdout_omitted
                )
            if outcome.stderr:
                ET.SubElement(case, "system-err").text = budget.take(
                    outcome.stderr, keep="tail", omitted=outcome.stderr_omitted
                )
    for element in suites.iter():  # every attribute too: names, messages, types come from the test file
        element.attrib = {key: _xml(for_log(value, caps)) for key, value in element.attrib.items()}
        if element.text:
            element.text = _xml(element.text)
    ET.indent(suites)
    body: bytes = ET.tostring(suites, encoding="utf-8")
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + body + b"\n"


def _seconds(ms: int) -> str:
    return f"{ms / 1000:.3f}"


def _xml(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


def json_report(report: Report, caps: Caps | None = None) -> bytes:
    """The report as JSON; every string inert and bounded, the whole within the budget."""
    caps = caps or Caps()
    budget = _Budget(caps)
    body = report.to_dict()
    cases: list[dict[str, Any]] = body.pop("cases")
    body = _strings(body, lambda text: for_log(text, caps))
    body["cases"] = []
    for case in cases:
        verdict = {k: case.pop(k) for k in ("id", "skill", "name", "source", "status") if k in case}
        body["cases"].append(_strings(verdict, lambda text: for_log(text, caps)) | _strings(case, budget.take))
    return (json.dumps(body, indent=2, ensure_ascii=False) + "\n").encode()


def _strings(value: Any, change: Any) -> Any:
    if isinstance(value, str):
        return change(value)
    if isinstance(value, dict):
        return {k: _strings(v, change) for k, v in value.items()}
    if isinstance(value, list):
        return [_strings(v, change) for v in value]
    return value
