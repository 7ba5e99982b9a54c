"""Run the cases of a set of skills on a :class:`~skill_executor.testing.backends.Backend`.

Per skill: validate ``SKILL.md`` (reported as the case ``validate``), snapshot the folder
into the backend, then run every selected case in a fresh sandbox, up to ``jobs`` at a
time. Cases naming the same ``session`` run in file order in one worker (they share
``work/``); a session id is private to this test run, so parallel test runs never share
one. skill-creator evals stage their files and are reported as skipped: they need a
grader.
"""

from __future__ import annotations

import base64
import os
import secrets
import shlex
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Protocol

from ..errors import ExecutorError
from ..outputs.schema import OutputSpec
from ..runs.models import RunRequest, RunResult
from ..skills.loader import Verdict
from ..skills.loader import check as check_skill
from ..workspace.schema import InputSpec
from .backends import Backend, InfrastructureError
from .checks import Failure, Observed, RunFile, check, golden_path, match_files, request_glob, write_whole
from .diffs import tail
from .format import Case, FileExpect
from .loader import Eval, SkillTests
from .outcomes import Outcome, Report
from .select import Matcher

MiB = 1024 * 1024
VALIDATE = "validate"


class Listener(Protocol):
    def started(self, case_id: str) -> None: ...

    def finished(self, outcome: Outcome) -> None: ...


class _Silent:
    def started(self, case_id: str) -> None:
        pass

    def finished(self, outcome: Outcome) -> None:
        pass


@dataclass(slots=True)
class Options:
    jobs: int = field(default_factory=lambda: os.cpu_count() or 1)
    strict: bool = False
    update_golden: bool = False
    strict_timing: bool = False
    select: Matcher | None = None
    max_file_bytes: int = 16 * MiB  # per output file brought back for the checks
    keep_chars: int = 20_000  # of each case's stdout and stderr, kept for the reports (Caps.case_chars)


@dataclass(slots=True)
class Job:
    """Cases that run one after the other in one worker (one case, or one session's)."""

    item: SkillTests
    skill: str
    ref: str | None
    cases: list[Case]
    session: str | None
    source: str


def run_tests(
    items: Sequence[SkillTests], backend: Backend, options: Options, listener: Listener | None = None
) -> Report:
    """Run everything ``items`` hold; never raises for a failing case."""
    listener = listener or _Silent()
    started_at, clock = datetime.now(UTC), time.monotonic()
    outcomes: list[Outcome] = []
    lock = threading.Lock()
    deselected = 0

    def record(outcome: Outcome) -> None:
        with lock:
            outcomes.append(outcome)
        listener.finished(outcome)

    jobs: list[Job] = []
    evals: list[tuple[SkillTests, str, str | None, Eval]] = []
    token = secrets.token_hex(4)
    rank: dict[str, tuple[int, int]] = {}
    taken: dict[str, Path] = {}
    for index, item in enumerate(items):
        skill, ref, problem = prepare(item, backend, options, record, taken)
        rank[f"{skill}::{VALIDATE}"] = (index, -1)
        for position, case in enumerate(item.tests.cases if item.tests else []):
            rank[f"{skill}::{case.name}"] = (index, position)
        for position, entry in enumerate(item.evals.evals if item.evals else []):
            rank[f"{skill}::eval {entry.id}"] = (index, 100_000 + position)
        source = _display(item.test_file) if item.test_file else _display(item.skill_dir / "SKILL.md")
        cases = item.tests.cases if item.tests else []
        chosen = [c for c in cases if options.select is None or options.select(f"{skill}::{c.name}")]
        deselected += len(cases) - len(chosen)
        if problem is not None:
            for case in chosen:
                record(
                    Outcome(
                        skill,
                        case.name,
                        source,
                        "error",
                        message=problem.message,
                        command=case.command,
                        infrastructure=isinstance(problem, InfrastructureError),
                    )
                )
            continue
        sessions: dict[str, Job] = {}
        for case in chosen:
            if case.session is None:
                jobs.append(Job(item, skill, ref, [case], None, source))
            elif case.session in sessions:
                sessions[case.session].cases.append(case)
            else:
                # Private to this test run and this skill: neither another run nor another skill shares it.
                job = Job(item, skill, ref, [case], f"skill-tests-{token}-{index}-{case.session}", source)
                sessions[case.session] = job
                jobs.append(job)
        for entry in item.evals.evals if item.evals else []:
            if options.select is None or options.select(f"{skill}::eval {entry.id}"):
                evals.append((item, skill, ref, entry))
            else:
                deselected += 1

    def work(job: Job) -> None:
        try:
            for case in job.cases:
                listener.started(f"{job.skill}::{case.name}")
                try:
                    outcome = run_case(job, case, backend, options)
                except Exception as exc:  # a bug must not lose the reports: the case errors
                    outcome = Outcome(
                        job.skill,
                        case.name,
                        job.source,
                        "error",
                        command=case.command,
                        message=f"internal error: {type(exc).__name__}: {exc}",
                    )
                record(outcome)
        finally:
            if job.session is not None:
                backend.end_session(job.session)

    def grade(entry: tuple[SkillTests, str, str | None, Eval]) -> None:
        item, skill, ref, evaluation = entry
        listener.started(f"{skill}::eval {evaluation.id}")
        try:
            outcome = _run_eval(item, skill, ref, evaluation, backend)
        except Exception as exc:
            outcome = Outcome(
                skill,
                f"eval {evaluation.id}",
                _display(item.evals_file),
                "error",
                message=f"internal error: {type(exc).__name__}: {exc}",
            )
        record(outcome)

    with ThreadPoolExecutor(max_workers=max(1, options.jobs), thread_name_prefix="skill-test") as pool:
        for future in [*(pool.submit(work, job) for job in jobs), *(pool.submit(grade, e) for e in evals)]:
            future.result()
    outcomes.sort(key=lambda o: rank.get(o.id, (len(items), 0)))  # reports list cases in file order
    return Report(outcomes, backend.description, started_at, int((time.monotonic() - clock) * 1000), deselected)


def validate(item: SkillTests, *, strict: bool) -> tuple[Verdict, Outcome]:
    """The skill's ``validate`` case: does ``SKILL.md`` load (``strict``: and follow the spec)?"""
    verdict = check_skill(item.skill_dir, strict=strict)
    skill = verdict.name or item.skill_dir.name
    failures = [Failure(f"{VALIDATE}.{d.code}", d.message) for d in verdict.errors]
    message = "; ".join(f"warning {d.code}: {d.message}" for d in verdict.warnings) or None
    source = _display(item.test_file or item.skill_dir / "SKILL.md")
    return verdict, Outcome(
        skill, VALIDATE, source, "passed" if verdict.valid else "failed", failures=failures, message=message
    )


def prepare(
    item: SkillTests,
    backend: Backend,
    options: Options,
    record: Callable[[Outcome], None],
    taken: dict[str, Path] | None = None,
) -> tuple[str, str | None, ExecutorError | None]:
    """Validate the skill (its ``validate`` case) and snapshot it into the backend;
    ``taken``: the names already under test (two folders with one name cannot both run)."""
    verdict, validated = validate(item, strict=options.strict)
    skill = validated.skill
    if options.select is None or options.select(f"{skill}::{VALIDATE}") or not verdict.valid:
        record(validated)
    if verdict.skill is None:
        return skill, None, ExecutorError("the skill does not load (see its validate case)", code="skill_invalid")
    if taken is not None:
        other = taken.setdefault(verdict.skill.id, item.skill_dir)
        if other != item.skill_dir:
            return (
                skill,
                None,
                ExecutorError(
                    f"{item.skill_dir} has the same name as {other} ({verdict.skill.id!r}); test them in separate runs",
                    code="skill_name_taken",
                ),
            )
    try:
        return skill, backend.prepare(item.skill_dir), None
    except ExecutorError as exc:
        return skill, None, exc


def build_request(ref: str, case: Case, session: str | None, *, max_file_bytes: int = 16 * MiB) -> RunRequest:
    inputs = [
        InputSpec.model_validate(
            {
                "from": item.from_ if item.from_ is not None else f"skill://{ref}/tests/{item.path}",
                "to": item.to,
                "mode": item.mode,
            }
        )
        for item in case.inputs
    ]
    globs = list(dict.fromkeys(request_glob(spec) for spec in case.expect.files))
    return RunRequest(
        skill=ref,
        command=case.command,
        env=case.env,
        stdin=case.stdin,
        timeout=case.timeout,
        session=session,
        inputs=inputs,
        outputs=OutputSpec(
            globs=globs,
            inline=True,
            inline_binary=True,
            max_file_bytes=max_file_bytes,
            max_total_bytes=max(64 * MiB, max_file_bytes),
        ),
    )


def observed(result: RunResult) -> Observed:
    files = []
    for item in result.output_files:
        data: bytes | None = None
        if item.content is not None and not item.truncated:
            data = item.content.encode() if item.encoding == "utf-8" else base64.b64decode(item.content)
        files.append(RunFile(item.name, item.mime_type, item.size_bytes, item.sha256, data, item.truncated))
    return Observed(
        result.exit_code,
        result.timed_out,
        result.stdout,
        result.stderr,
        result.duration_ms,
        files,
        result.stdout_truncated,
        result.stderr_truncated,
    )


def run_case(job: Job, case: Case, backend: Backend, options: Options) -> Outcome:
    outcome = Outcome(job.skill, case.name, job.source, "passed", command=case.command)
    missing = [i.path for i in case.inputs if i.path is not None and not (job.item.tests_dir / i.path).exists()]
    if missing:
        outcome.status, outcome.message = "error", f"input tests/{missing[0]} does not exist"
        return outcome
    clock = time.monotonic()
    try:
        assert job.ref is not None
        result = backend.run(build_request(job.ref, case, job.session, max_file_bytes=options.max_file_bytes))
    except InfrastructureError as exc:
        outcome.status, outcome.message, outcome.infrastructure = "error", f"{exc.code}: {exc.message}", True
        outcome.duration_ms = int((time.monotonic() - clock) * 1000)
        return outcome
    except ExecutorError as exc:
        outcome.status, outcome.message = "error", f"the run was refused: {exc.code}: {exc.message}"
        outcome.duration_ms = int((time.monotonic() - clock) * 1000)
        return outcome
    seen = observed(result)
    outcome.duration_ms, outcome.exit_code, outcome.run_id = result.duration_ms, result.exit_code, result.run_id
    # The checks had the whole streams; the reports show at most a case's worth of each, so
    # only that is kept (a thousand cases of 1 MiB of output each must not pile up here).
    outcome.stdout, outcome.stdout_omitted = _last(result.stdout, options.keep_chars)
    outcome.stderr, outcome.stderr_omitted = _last(result.stderr, options.keep_chars)
    outcome.files = [
        f"{f.name} ({f.mime_type}, {f.size_bytes} bytes{', truncated' if f.truncated else ''})"
        for f in result.output_files
    ]
    outcome.failures = check(case.expect, seen, tests_dir=job.item.tests_dir, skip_golden=options.update_golden)
    if result.limits_hit:
        outcome.message = f"output limits hit: {', '.join(result.limits_hit)}"
    if options.update_golden:
        for spec in case.expect.files:
            if spec.equals_file is not None:
                outcome.failures += _update_golden(spec, seen, job.item.tests_dir, outcome)
    budget = case.expect.duration_ms_max
    if budget is not None and result.duration_ms > budget:
        outcome.over_budget = f"took {result.duration_ms} ms, over its budget of {budget} ms"
        if options.strict_timing:
            outcome.failures.append(
                Failure(
                    "duration_ms_max", outcome.over_budget, expected=f"<= {budget} ms", got=f"{result.duration_ms} ms"
                )
            )
    if outcome.failures:
        outcome.status = "failed"
    return outcome


def _last(text: str, chars: int) -> tuple[str, int]:
    return (text, 0) if len(text) <= chars else (text[-chars:], len(text) - chars)


def _update_golden(spec: FileExpect, seen: Observed, tests_dir: Path, outcome: Outcome) -> list[Failure]:
    label = f"{spec.pattern}.equals_file"
    matched = match_files(spec, seen.files) if spec.exists else []
    if len(matched) != 1:
        return [
            Failure(
                label,
                f"cannot update tests/{spec.equals_file}: {len(matched)} files match {spec.pattern} "
                "(a golden file needs exactly one)",
            )
        ]
    data = matched[0].data
    if data is None:
        return [
            Failure(label, f"cannot update tests/{spec.equals_file}: {matched[0].name} was too large to bring back")
        ]
    try:
        target = golden_path(tests_dir, str(spec.equals_file))
    except ExecutorError as exc:
        return [Failure(label, exc.message)]
    try:
        if target.is_file() and target.read_bytes() == data:
            return []
        write_whole(target, data)
    except OSError as exc:
        return [Failure(label, f"cannot write tests/{spec.equals_file}: {exc.strerror}")]
    outcome.golden_updated.append(f"tests/{spec.equals_file}")
    return []


def _run_eval(item: SkillTests, skill: str, ref: str | None, evaluation: Eval, backend: Backend) -> Outcome:
    source = _display(item.evals_file) if item.evals_file else "evals/evals.json"
    outcome = Outcome(
        skill, f"eval {evaluation.id}", source, "skipped", command=None, needs_grader=evaluation.statements
    )
    what = f"{len(evaluation.statements)} natural-language expectation(s)" if evaluation.statements else "its prompt"
    outcome.message = f"needs a grader: {what} cannot be checked by a machine yet"
    if evaluation.problem is not None:
        outcome.status, outcome.message = "error", f"cannot read this eval: {evaluation.problem}"
        return outcome
    if not evaluation.files or ref is None:
        return outcome
    outcome.command = "test -e " + " ".join(
        shlex.quote(f"work/inputs/{PurePosixPath(f).name}") for f in evaluation.files
    )
    try:
        inputs = [InputSpec.model_validate({"from": f"skill://{ref}/{f}"}) for f in evaluation.files]
        request = RunRequest(skill=ref, command=outcome.command, inputs=inputs)
        result = backend.run(request)
    except InfrastructureError as exc:
        outcome.status, outcome.message, outcome.infrastructure = "error", f"{exc.code}: {exc.message}", True
        return outcome
    except (ExecutorError, ValueError) as exc:
        outcome.status, outcome.message = "error", f"the eval's files cannot be staged: {exc}"
        return outcome
    outcome.duration_ms, outcome.exit_code, outcome.run_id = result.duration_ms, result.exit_code, result.run_id
    if result.exit_code != 0:
        outcome.status = "error"
        outcome.message = f"the eval's files were not staged (exit {result.exit_code}): {tail(result.stderr, 500)}"
    return outcome


def _display(path: Path | None) -> str:
    if path is None:
        return ""
    try:
        return os.path.relpath(path)
    except ValueError:
        return str(path)
