"""Compare a run with a case's ``expect``: pure functions, no I/O but reading golden files.

Every failed check is a :class:`Failure` with a readable message and, where it helps,
what was expected, what came and a unified diff.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ExecutorError, Forbidden
from ..outputs.collect import compile_globs, normalise_glob
from ..paths import resolve_within
from .diffs import around, projected, subset_problems, tail, text_diff
from .format import Expect, FileExpect, StreamExpect
from .patterns import PatternError, compile_pattern


def _regex_failure(check: str, what: str, pattern: str, text: str, note: str = "") -> Failure | None:
    """RE2 (:mod:`.patterns`): time linear in the text, no catastrophic backtracking."""
    try:
        found = compile_pattern(pattern).search(text) is not None
    except PatternError as exc:  # the loader refuses these; a model built in code may still hold one
        return Failure(check, f"/{pattern}/ is refused: {exc.code}: {exc.message}", expected=pattern)
    if found:
        return None
    return Failure(check, f"{what} does not match /{pattern}/{note}", expected=pattern, got=tail(text))


@dataclass(slots=True)
class Failure:
    check: str  # e.g. "exit_code", "stdout.contains", "files[0].json"
    message: str
    expected: str | None = None
    got: str | None = None
    diff: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            k: v
            for k, v in (
                ("check", self.check),
                ("message", self.message),
                ("expected", self.expected),
                ("got", self.got),
                ("diff", self.diff),
            )
            if v is not None
        }


@dataclass(slots=True)
class RunFile:
    """An output file as the checks see it."""

    name: str  # workspace-relative, e.g. out/report.md
    mime_type: str
    size: int
    sha256: str | None
    data: bytes | None  # None: not brought back (too large)
    truncated: bool = False


@dataclass(slots=True)
class Observed:
    """What a run showed."""

    exit_code: int | None
    timed_out: bool
    stdout: str
    stderr: str
    duration_ms: int
    files: list[RunFile] = field(default_factory=list)
    stdout_truncated: bool = False
    stderr_truncated: bool = False


def check(expect: Expect, seen: Observed, *, tests_dir: Path, skip_golden: bool = False) -> list[Failure]:
    """Every way ``seen`` differs from ``expect`` (empty: the case passed)."""
    failures: list[Failure] = []
    if expect.timed_out != seen.timed_out:
        failures.append(
            Failure(
                "timed_out",
                "the run timed out" if seen.timed_out else "the run did not time out",
                expected=str(expect.timed_out).lower(),
                got=str(seen.timed_out).lower(),
            )
        )
    wanted = expect.wanted_exit_code
    if wanted is not None and seen.exit_code != wanted:
        failures.append(
            Failure(
                "exit_code",
                f"exit code {seen.exit_code}, expected {wanted}",
                expected=str(wanted),
                got=str(seen.exit_code),
            )
        )
    for stream in ("stdout", "stderr"):
        spec: StreamExpect | None = getattr(expect, stream)
        if spec is not None:
            truncated = getattr(seen, f"{stream}_truncated")
            failures += check_stream(stream, spec, getattr(seen, stream), truncated=truncated)
    for index, file_spec in enumerate(expect.files):
        failures += check_files(f"files[{index}]", file_spec, seen.files, tests_dir=tests_dir, skip_golden=skip_golden)
    return failures


def check_stream(label: str, spec: StreamExpect, text: str, *, truncated: bool = False) -> list[Failure]:
    failures: list[Failure] = []
    note = " (the stream was truncated)" if truncated else ""
    for needle in spec.contains:
        if needle not in text:
            failures.append(
                Failure(
                    f"{label}.contains", f"{label} does not contain {needle!r}{note}", expected=needle, got=tail(text)
                )
            )
    for needle in spec.not_contains:
        if needle in text:
            failures.append(
                Failure(
                    f"{label}.not_contains",
                    f"{label} contains {needle!r}",
                    expected=f"not {needle!r}",
                    got=around(text, text.index(needle)),
                )
            )
    for pattern in spec.matches:
        if (failure := _regex_failure(f"{label}.matches", label, pattern, text, note)) is not None:
            failures.append(failure)
    if spec.equals is not None and text != spec.equals:
        failures.append(
            Failure(
                f"{label}.equals",
                f"{label} differs from the expected text{note}",
                expected=tail(spec.equals),
                got=tail(text),
                diff=text_diff(spec.equals, text, label),
            )
        )
    if spec.has_json:
        failures += _check_json(f"{label}.json", label, text, spec.json_)
    return failures


def check_files(
    label: str, spec: FileExpect, files: list[RunFile], *, tests_dir: Path, skip_golden: bool = False
) -> list[Failure]:
    matched = match_files(spec, files)
    listing = ", ".join(f.name for f in files) or "(none)"
    if not spec.exists:
        if matched:
            return [
                Failure(
                    f"{label}.exists",
                    f"{spec.pattern} should not exist, but {_names(matched)} did",
                    expected="no file",
                    got=_names(matched),
                )
            ]
        return []
    if not matched:
        hint = ""
        if normalise_glob(spec.pattern).split("/", 1)[0] not in ("out", "work", "run"):
            hint = (
                " (paths are workspace-relative: out/..., work/...; the command runs in the skill's folder, "
                "where out/ and work/ lead there)"
            )
        return [
            Failure(
                f"{label}.exists",
                f"no output file matches {spec.pattern}{hint}",
                expected=spec.pattern,
                got=f"files: {listing}",
            )
        ]
    failures: list[Failure] = []
    for item in matched:
        failures += _check_file(f"{label}[{item.name}]" if spec.glob else label, spec, item, tests_dir, skip_golden)
    return failures


def match_files(spec: FileExpect, files: list[RunFile]) -> list[RunFile]:
    if spec.path is not None:
        name = normalise_glob(spec.path)
        return [f for f in files if f.name == name]
    globs = compile_globs((normalise_glob(str(spec.glob)),))
    return [f for f in files if globs.match_file(f.name)]


def request_glob(spec: FileExpect) -> str:
    """The output glob that brings back what ``spec`` checks (a path's glob characters escaped)."""
    if spec.glob is not None:
        return spec.glob
    return re.sub(r"([*?\[\]\\])", r"\\\1", str(spec.path))


def _check_file(label: str, spec: FileExpect, item: RunFile, tests_dir: Path, skip_golden: bool) -> list[Failure]:
    failures: list[Failure] = []
    name = item.name
    if spec.mime_type is not None and not _mime_matches(spec.mime_type, item.mime_type):
        failures.append(
            Failure(
                f"{label}.mime_type",
                f"{name} is {item.mime_type}, expected {spec.mime_type}",
                expected=spec.mime_type,
                got=item.mime_type,
            )
        )
    if spec.min_size is not None and item.size < spec.min_size:
        failures.append(
            Failure(
                f"{label}.min_size",
                f"{name} has {item.size} bytes, fewer than {spec.min_size}",
                expected=f">= {spec.min_size}",
                got=str(item.size),
            )
        )
    if spec.max_size is not None and item.size > spec.max_size:
        failures.append(
            Failure(
                f"{label}.max_size",
                f"{name} has {item.size} bytes, more than {spec.max_size}",
                expected=f"<= {spec.max_size}",
                got=str(item.size),
            )
        )
    if spec.sha256 is not None:
        if item.sha256 is None:
            failures.append(
                Failure(
                    f"{label}.sha256",
                    f"{name} ({item.size} bytes) was too large to bring back and "
                    "hash: raise --max-file-bytes (the service's maximum applies)",
                )
            )
        elif item.sha256 != spec.sha256.lower():
            failures.append(
                Failure(f"{label}.sha256", f"{name} has another SHA-256", expected=spec.sha256.lower(), got=item.sha256)
            )
    content_checks = bool(spec.contains or spec.matches or spec.has_json or (spec.equals_file and not skip_golden))
    if not content_checks:
        return failures
    if item.data is None or item.truncated:
        failures.append(
            Failure(
                f"{label}.content",
                f"{name} ({item.size} bytes) was too large to bring back and "
                "compare: raise --max-file-bytes (the service's maximum applies) or check only "
                "min_size/max_size",
            )
        )
        return failures
    text = item.data.decode("utf-8", errors="replace")
    for needle in spec.contains:
        if needle not in text:
            failures.append(
                Failure(f"{label}.contains", f"{name} does not contain {needle!r}", expected=needle, got=tail(text))
            )
    for pattern in spec.matches:
        if (failure := _regex_failure(f"{label}.matches", name, pattern, text)) is not None:
            failures.append(failure)
    if spec.has_json:
        failures += _check_json(f"{label}.json", name, text, spec.json_)
    if spec.equals_file and not skip_golden:
        failures += _check_golden(f"{label}.equals_file", spec.equals_file, item, tests_dir)
    return failures


def _check_golden(label: str, golden: str, item: RunFile, tests_dir: Path) -> list[Failure]:
    try:
        path = golden_path(tests_dir, golden)
    except ExecutorError as exc:
        return [Failure(label, exc.message)]
    try:
        want = path.read_bytes()
    except FileNotFoundError:
        return [Failure(label, f"the golden file tests/{golden} does not exist (create it with --update-golden)")]
    except OSError as exc:
        return [Failure(label, f"cannot read the golden file tests/{golden}: {exc.strerror}")]
    got = item.data or b""
    if got == want:
        return []
    message = f"{item.name} differs from tests/{golden}"
    try:
        want_text, got_text = want.decode("utf-8"), got.decode("utf-8")
    except UnicodeDecodeError:
        return [
            Failure(
                label,
                message + f" (binary: {len(want)} bytes expected, {len(got)} bytes got)",
                expected=hashlib.sha256(want).hexdigest(),
                got=hashlib.sha256(got).hexdigest(),
            )
        ]
    return [
        Failure(
            label,
            message + " (--update-golden accepts the new output)",
            diff=text_diff(want_text, got_text, f"tests/{golden}", item.name),
        )
    ]


def golden_path(tests_dir: Path, golden: str) -> Path:
    """The golden file, refused when it (or a folder on the way) is a link out of ``tests/``:
    its content would be printed in diffs, and ``--update-golden`` would write through it."""
    if tests_dir.is_symlink() or Path(os.path.abspath(tests_dir)).resolve() != (
        Path(os.path.abspath(tests_dir)).parent.resolve() / tests_dir.name
    ):
        raise Forbidden("the skill's tests/ folder is a symbolic link; golden files are refused", code="path_escape")
    return resolve_within(tests_dir, golden, what="golden file")


def write_whole(path: Path, data: bytes) -> None:
    """Whole or not at all (a temp file, then a rename): a golden file or a report a CI step
    reads is never seen half written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{secrets.token_hex(4)}.partial")
    partial.write_bytes(data)
    os.replace(partial, path)


def _check_json(label: str, what: str, text: str, expected: Any) -> list[Failure]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return [
            Failure(label, f"{what} is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", got=tail(text))
        ]
    problems = subset_problems(expected, data)
    if not problems:
        return []
    return [
        Failure(
            label,
            f"{what} does not contain the expected JSON: "
            + "; ".join(problems[:5])
            + (f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""),
            expected=json.dumps(expected, indent=2, ensure_ascii=False),
            got=tail(json.dumps(data, indent=2, ensure_ascii=False)),
            diff=text_diff(
                json.dumps(expected, indent=2, sort_keys=True, ensure_ascii=False),
                json.dumps(projected(expected, data), indent=2, sort_keys=True, ensure_ascii=False),
                "expected",
                "got",
            ),
        )
    ]


def _mime_matches(pattern: str, actual: str) -> bool:
    base = actual.split(";", 1)[0].strip().lower()
    return fnmatch.fnmatchcase(base, pattern.split(";", 1)[0].strip().lower())


def _names(files: list[RunFile]) -> str:
    return ", ".join(f.name for f in files)
