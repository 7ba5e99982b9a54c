"""Build a ``skill_run`` result from what executed and what was collected; save
collected files as artifacts when asked."""

from __future__ import annotations

import base64
from pathlib import PurePosixPath

from ..artifacts.names import validate_name
from ..artifacts.store import ArtifactStore
from ..errors import ExecutorError
from ..outputs.collect import CollectedFile, Collection
from ..runtimes.base import ExecResult
from ..runtimes.streams import decode
from ..skills import Skill
from .models import ArtifactFile, OutputFile, RunRequest, RunResult
from .plan import OutputPlan


def build_result(
    artifacts: ArtifactStore,
    request: RunRequest,
    skill: Skill,
    run_id: str,
    executed: ExecResult,
    collection: Collection,
    plan: OutputPlan,
    warnings: list[str],
    tenant: str,
) -> RunResult:
    result = RunResult(
        run_id=run_id,
        skill=skill.id,
        skill_version=skill.version,
        skill_digest=skill.digest,
        session=request.session,
        stdout=decode(executed.stdout),
        stderr=decode(executed.stderr),
        exit_code=executed.exit_code,
        signal=executed.signal,
        timed_out=executed.timed_out,
        oom_killed=executed.oom_killed,
        disk_limit_hit=executed.disk_limit_hit,
        policy_denied_exec=executed.policy_denied_exec,
        duration_ms=executed.duration_ms,
        stdout_truncated=executed.stdout_truncated,
        stderr_truncated=executed.stderr_truncated,
        limits_hit=list(collection.limits_hit),
        warnings=[*warnings, *executed.warnings, *collection.warnings],
    )
    if executed.cancelled:
        result.warnings.append("the run was cancelled")
    denied = executed.policy_denied_exec
    if denied is not None:
        result.warnings.append(
            f"policy rule {denied['rule']!r} refused to start the program {denied['program']!r} "
            f"({denied['path']}: {denied['reason']}); the run was stopped"
        )
    result.limits_hit += [
        limit
        for limit, hit in (
            ("stdout_max_bytes", executed.stdout_truncated),
            ("stderr_max_bytes", executed.stderr_truncated),
            ("timeout", executed.timed_out),
            ("disk", executed.disk_limit_hit),
            ("memory", executed.oom_killed),
            ("policy_denied_exec", denied is not None),
        )
        if hit
    ]
    for item in collection.files:
        entry = OutputFile(
            name=item.name,
            mime_type=item.mime_type,
            size_bytes=item.size,
            sha256=item.sha256,
            truncated=item.truncated,
            ref=_workspace_ref(request, item.name),
        )
        if plan.inline and item.is_text:
            entry.content, entry.encoding = item.data.decode("utf-8", "ignore" if item.truncated else "strict"), "utf-8"
        elif plan.inline_binary and not item.is_text:
            entry.content, entry.encoding = base64.b64encode(item.data).decode(), "base64"
        if plan.save:
            saved = _save(artifacts, item, plan, request, run_id, result, tenant)
            if saved is not None:
                entry.ref, entry.file_id = saved.ref, saved.file_id
                result.artifact_files.append(saved)
        result.output_files.append(entry)
    return result


def _workspace_ref(request: RunRequest, name: str) -> str | None:
    """An unsaved output's ref: only a session's ``work/`` outlives the run (a later run of
    the session stages it as ``workspace://work/...``); the run's ``out/`` and ``run/`` do not."""
    return f"workspace://{name}" if request.session and PurePosixPath(name).parts[0] == "work" else None


def _save(
    artifacts: ArtifactStore,
    item: CollectedFile,
    plan: OutputPlan,
    request: RunRequest,
    run_id: str,
    result: RunResult,
    tenant: str,
) -> ArtifactFile | None:
    if item.truncated:
        result.warnings.append(f"output {item.name!r} was truncated by a cap and is not saved as an artifact")
        return None
    path = PurePosixPath(item.name)
    try:
        name = plan.name_template.render(
            path=item.name,
            name=path.name,
            stem=path.stem,
            ext=path.suffix,
            run_id=run_id,
            session=request.session or "",
            prefix=request.artifact_prefix,
        )
        validate_name(name)
    except ExecutorError as exc:
        result.warnings.append(f"output {item.name!r} not saved: {exc.message}")
        return None
    info = artifacts.put(name, item.data, mime_type=item.mime_type, run_id=run_id, tenant=tenant)
    return ArtifactFile(name=info.name, version=info.version, ref=info.ref, file_id=info.file_id)
