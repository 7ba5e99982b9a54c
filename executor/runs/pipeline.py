"""The ``skill_run`` pipeline, runtime-agnostic.

validate -> workspace -> skill view -> stage inputs -> execute -> collect outputs ->
save artifacts -> result -> clean up.  Refusals (bad request, unknown skill, refused
input) raise :class:`~executor.errors.ExecutorError` before anything runs and leave
nothing behind; a command that fails or times out is a normal :class:`RunResult`.
"""

from __future__ import annotations

import base64
import logging
import queue
import re
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..access import LOCAL_TENANT
from ..artifacts.store import ArtifactStore, validate_name
from ..config import Settings
from ..errors import BadRequest, ExecutorError, TooLarge
from ..outputs.collect import CollectedFile, CollectLimits, Collection, collect, resolve_globs
from ..paths import clean_relative, resolve_within
from ..runtimes.base import ExecResult, ExecSpec, OutputListener, Runtime, RuntimePaths
from ..runtimes.streams import decode
from ..skills import Skill, SkillRepository
from ..workspace.layout import Workspace, WorkspaceManager, expand_path_variable
from ..workspace.sessions import SessionStore
from ..workspace.staging import Stager
from .limiter import Reservation, RunLimiter
from .models import ArtifactFile, OutputFile, RunRequest, RunResult

log = logging.getLogger(__name__)

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: The kernel's limit for one ``NAME=value`` string (MAX_ARG_STRLEN, its NUL included).
MAX_ENV_ENTRY_BYTES = 128 * 1024 - 1
FORBIDDEN_ENV = frozenset({"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "BASH_ENV", "ENV"})
RESERVED_ENV = frozenset(
    {"WORKSPACE_DIR", "SKILLS_DIR", "SKILL_DIR", "SKILL_NAME", "WORK_DIR", "OUTPUT_DIR", "RUN_DIR"}
)


def new_run_id() -> str:
    """Time-ordered, unguessable: ``<ms since epoch, hex>-<96 random bits>``."""
    return f"{int(time.time() * 1000):011x}-{secrets.token_hex(12)}"


@dataclass(frozen=True, slots=True)
class Checked:
    """What :meth:`SkillRunner.validate` settled about a request (reused by ``run``)."""

    skill: Skill
    timeout: float
    plan: "OutputPlan"


@dataclass(slots=True)
class OutputPlan:
    globs: list[str]
    inline: bool
    inline_binary: bool
    save: bool
    name_template: str
    limits: CollectLimits


class SkillRunner:
    """Runs ``skill_run`` requests on one runtime. Thread-safe."""

    def __init__(
        self,
        settings: Settings,
        repository: SkillRepository,
        artifacts: ArtifactStore,
        runtime: Runtime,
    ) -> None:
        self.settings = settings
        self.repository = repository
        self.artifacts = artifacts
        self.runtime = runtime
        self.workspaces = WorkspaceManager(settings.workspaces)
        swept = self.workspaces.sweep()
        if swept:
            log.warning("removed %d workspace(s) left by a crashed process", len(swept))
        start_pool = getattr(runtime, "start_pool", None)
        if start_pool is not None:
            start_pool(self.workspaces)  # warm containers need the workspace folder
        self.sessions = SessionStore(settings.workspaces, settings.session_ttl_seconds)
        self.stager = Stager(
            repository,
            artifacts,
            self.sessions,
            allowed_host_roots=settings.allowed_host_roots,
            max_bytes=settings.max_staged_bytes,
            owner=runtime.owner,
        )
        self.limiter = RunLimiter(settings.max_concurrent_runs, settings.max_queued_runs)
        # Workspaces are removed once results are built, off the caller's path
        # (folder removal is slow on some file systems).
        self._trash: queue.Queue[Workspace | None] = queue.Queue()
        self._cleaner = threading.Thread(target=self._clean, name="workspace-cleaner", daemon=True)
        self._cleaner.start()
        self._last_sweep = 0.0
        self._sweep_lock = threading.Lock()

    # -- validation --------------------------------------------------------------------

    def validate(self, request: RunRequest) -> Checked:
        """Everything that can be refused before a workspace exists."""
        s = self.settings
        skill = self.repository.get(request.skill)
        timeout = request.timeout if request.timeout is not None else s.default_timeout
        if timeout > s.max_timeout:
            raise BadRequest(
                f"timeout {timeout:g}s exceeds the server maximum of {s.max_timeout:g}s", code="timeout_too_large"
            )
        if len(request.command.encode()) > s.max_command_bytes:
            raise TooLarge(f"command is longer than {s.max_command_bytes} bytes", code="command_too_large")
        if "\x00" in request.command:
            raise BadRequest("command contains a NUL byte", code="invalid_command")
        if request.stdin is not None and len(request.stdin.encode()) > s.max_stdin_bytes:
            raise TooLarge(f"stdin is larger than {s.max_stdin_bytes} bytes", code="stdin_too_large")
        self._validate_env(request.env)
        if len(request.inputs) > s.max_inputs:
            raise BadRequest(f"at most {s.max_inputs} inputs per run", code="too_many_inputs")
        if request.cwd is not None:
            self._cwd_logical(request.cwd)
        return Checked(skill, timeout, self._output_plan(request))

    def _validate_env(self, env: dict[str, str]) -> None:
        if len(env) > self.settings.max_env_vars:
            raise BadRequest(f"at most {self.settings.max_env_vars} environment variables", code="invalid_env")
        total = 0
        for name, value in env.items():
            if not ENV_NAME.match(name) or len(name) > 1024:
                raise BadRequest(f"invalid environment variable name {name[:64]!r}", code="invalid_env")
            if name in FORBIDDEN_ENV:
                raise BadRequest(f"environment variable {name} is not allowed", code="env_refused")
            if name in RESERVED_ENV:
                raise BadRequest(f"environment variable {name} is set by the service", code="env_refused")
            if "\x00" in value:
                raise BadRequest(f"environment variable {name} contains a NUL byte", code="invalid_env")
            size = len(name.encode()) + 1 + len(value.encode("utf-8", "surrogatepass"))
            if size > MAX_ENV_ENTRY_BYTES:
                raise TooLarge(
                    f"environment variable {name} is {size} bytes; the most one variable may hold is "
                    f"{MAX_ENV_ENTRY_BYTES} bytes",
                    code="env_too_large",
                )
            total += size + 1
        if total > self.settings.max_env_bytes:
            raise TooLarge(
                f"the environment variables take {total} bytes; the most is {self.settings.max_env_bytes}",
                code="env_too_large",
            )

    def _output_plan(self, request: RunRequest) -> OutputPlan:
        s = self.settings
        spec = request.outputs
        raw_globs = [*(spec.globs if spec else []), *request.output_files]
        limits = CollectLimits(
            max_files=spec.max_files if spec else 100,
            max_file_bytes=spec.max_file_bytes if spec else 4 * 1024 * 1024,
            max_total_bytes=spec.max_total_bytes if spec else 64 * 1024 * 1024,
        )
        for field, asked, most in (
            ("max_files", limits.max_files, s.max_output_files),
            ("max_file_bytes", limits.max_file_bytes, s.max_output_file_bytes),
            ("max_total_bytes", limits.max_total_bytes, s.max_output_total_bytes),
        ):
            if asked > most:
                raise BadRequest(f"outputs.{field} {asked} exceeds the server maximum of {most}", code="output_caps")
        template = (spec.name_template if spec else None) or "{prefix}{path}"
        try:
            template.format(path="p", name="n", stem="s", ext="", run_id="r", session="s", prefix="")
        except (KeyError, IndexError, ValueError) as exc:
            raise BadRequest(f"invalid name_template {template!r}: {exc}", code="invalid_name_template") from None
        return OutputPlan(
            globs=resolve_globs(raw_globs),
            inline=(spec.inline if spec else True) and not request.omit_inline_content,
            inline_binary=bool(spec and spec.inline_binary) and not request.omit_inline_content,
            save=bool(spec and spec.save) or request.save_as_artifacts,
            name_template=template,
            limits=limits,
        )

    def _cwd_logical(self, cwd: str) -> tuple[str, PurePosixPath]:
        """("skill" | "workspace", relative path) for a request's cwd."""
        expanded = expand_path_variable(cwd)
        if expanded is not None:
            return "workspace", clean_relative(expanded, what="cwd", allow_empty=True)
        return "skill", clean_relative(cwd, what="cwd", allow_empty=True)

    def _resolve_cwd(self, cwd: str | None, workspace: Workspace, skill: Skill, paths: RuntimePaths) -> str:
        root = paths.workspace.rstrip("/")
        skill_root = f"{root}/skills/{workspace.skill_id}"
        if cwd is None:
            return skill_root
        kind, rel = self._cwd_logical(cwd)
        if kind == "workspace" or rel.parts[0] in ("out", "work", "inputs"):
            if str(rel) == ".":
                return root
            logical = workspace.logical(str(rel), what="cwd")
            top, rest = workspace.locate(logical, what="cwd")
            with workspace.tree(top) as tree:
                if not tree.is_dir(rest, what=f"cwd {cwd!r}"):
                    raise BadRequest(f"cwd {cwd!r} is not a folder in the workspace", code="invalid_cwd")
            return f"{root}/{logical}"
        if str(rel) == ".":
            return skill_root
        source = resolve_within(skill.path, rel, what="cwd")
        if not source.is_dir():
            raise BadRequest(f"cwd {cwd!r} is not a folder of the skill", code="invalid_cwd")
        return f"{skill_root}/{rel}"

    # -- running -----------------------------------------------------------------------

    def run(
        self,
        request: RunRequest,
        *,
        run_id: str | None = None,
        listener: OutputListener | None = None,
        cancel: threading.Event | None = None,
        reservation: Reservation | None = None,
        checked: Checked | None = None,
        tenant: str = LOCAL_TENANT,
    ) -> RunResult:
        """Run a request for ``tenant`` (the API key it belongs to: its session and
        artifacts are that key's); ``reservation`` is a place already taken with the
        limiter, ``checked`` what :meth:`validate` already settled about this request.

        Runs of one session never overlap: a second one waits for the session at most
        its own timeout, then is refused with ``session_busy``.
        """
        try:
            checked = checked or self.validate(request)
        except BaseException:
            if reservation is not None:
                reservation.release()
            raise
        run_id = run_id or new_run_id()
        self._maybe_sweep()
        skill, timeout, plan = checked.skill, checked.timeout, checked.plan
        with reservation or self.limiter.reserve(), self.runtime.activity.running():
            if request.session:
                with self.sessions.use(request.session, tenant, wait=timeout) as work:
                    return self._run(request, skill, timeout, plan, run_id, work, listener, cancel, tenant)
            return self._run(request, skill, timeout, plan, run_id, None, listener, cancel, tenant)

    def _run(
        self,
        request: RunRequest,
        skill: Skill,
        timeout: float,
        plan: OutputPlan,
        run_id: str,
        session_work: Path | None,
        listener: OutputListener | None,
        cancel: threading.Event | None,
        tenant: str,
    ) -> RunResult:
        workspace = self.runtime.create_workspace(
            self.workspaces, run_id, skill.id, session_work=session_work, session=request.session, tenant=tenant
        )
        warnings: list[str] = []
        try:
            warnings += self.runtime.prepare(workspace, skill)
            report = self.stager.stage(workspace, request.inputs)
            warnings += report.warnings
            paths = self.runtime.paths(workspace)
            cwd = self._resolve_cwd(request.cwd, workspace, skill, paths)
            env = {**paths.env(skill.id), **request.env, "PWD": cwd}
            spec = ExecSpec(
                run_id=run_id,
                command=request.command,
                cwd=cwd,
                env=env,
                stdin=request.stdin.encode() if request.stdin is not None else None,
                timeout=timeout,
                workspace=workspace,
                skill=skill,
                stdout_max=self.settings.stdout_max_bytes,
                stderr_max=self.settings.stderr_max_bytes,
                listener=listener,
                cancel=cancel,
                session_disk_max=self.settings.session_disk_bytes if request.session else None,
            )
            executed = self.runtime.execute(spec)
            failed = executed.timed_out or executed.cancelled or executed.exit_code != 0
            collection = collect(workspace, plan.globs, plan.limits, failed=failed)
            return self._result(request, skill, run_id, executed, collection, plan, warnings, tenant)
        finally:
            try:
                self.runtime.cleanup(workspace)
            finally:
                if not self.settings.keep_workspaces:
                    self._trash.put(workspace)

    def _result(
        self,
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
            session=request.session,
            stdout=decode(executed.stdout),
            stderr=decode(executed.stderr),
            exit_code=executed.exit_code,
            signal=executed.signal,
            timed_out=executed.timed_out,
            oom_killed=executed.oom_killed,
            disk_limit_hit=executed.disk_limit_hit,
            duration_ms=executed.duration_ms,
            stdout_truncated=executed.stdout_truncated,
            stderr_truncated=executed.stderr_truncated,
            limits_hit=list(collection.limits_hit),
            warnings=[*warnings, *executed.warnings, *collection.warnings],
        )
        if executed.cancelled:
            result.warnings.append("the run was cancelled")
        result.limits_hit += [
            limit
            for limit, hit in (
                ("stdout_max_bytes", executed.stdout_truncated),
                ("stderr_max_bytes", executed.stderr_truncated),
                ("timeout", executed.timed_out),
                ("disk", executed.disk_limit_hit),
                ("memory", executed.oom_killed),
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
                ref=f"workspace://{item.name}",
            )
            if plan.inline and item.is_text:
                entry.content, entry.encoding = item.data.decode("utf-8", "ignore" if item.truncated else "strict"), "utf-8"
            elif plan.inline_binary and not item.is_text:
                entry.content, entry.encoding = base64.b64encode(item.data).decode(), "base64"
            if plan.save:
                saved = self._save(item, plan, request, run_id, result, tenant)
                if saved is not None:
                    entry.ref = saved.ref
                    result.artifact_files.append(saved)
            result.output_files.append(entry)
        return result

    def _save(
        self, item: CollectedFile, plan: OutputPlan, request: RunRequest, run_id: str, result: RunResult, tenant: str
    ) -> ArtifactFile | None:
        if item.truncated:
            result.warnings.append(f"output {item.name!r} was truncated by a cap and is not saved as an artifact")
            return None
        path = PurePosixPath(item.name)
        name = plan.name_template.format(
            path=item.name,
            name=path.name,
            stem=path.stem,
            ext=path.suffix,
            run_id=run_id,
            session=request.session or "",
            prefix=request.artifact_prefix,
        )
        try:
            validate_name(name)
        except ExecutorError as exc:
            result.warnings.append(f"output {item.name!r} not saved: {exc.message}")
            return None
        info = self.artifacts.put(name, item.data, mime_type=item.mime_type, run_id=run_id, tenant=tenant)
        return ArtifactFile(name=info.name, version=info.version, ref=info.ref)

    # -- housekeeping --------------------------------------------------------------------

    def _clean(self) -> None:
        while (workspace := self._trash.get()) is not None:
            self.runtime.activity.wait_quiet(2.0)
            try:
                self.workspaces.remove(workspace)
            except Exception as exc:  # the cleaner must outlive anything a run leaves
                log.warning("removing workspace %s failed: %s", workspace.root, exc)
            finally:
                self._trash.task_done()
        self._trash.task_done()

    def settle(self) -> None:
        """Wait until every finished run's workspace is removed."""
        self._trash.join()

    def close(self) -> None:
        """Remove the workspaces still queued, then stop the cleaner."""
        self._trash.put(None)
        self._cleaner.join(timeout=60)

    def _maybe_sweep(self) -> None:
        now = time.monotonic()
        if now - self._last_sweep < 60 or not self._sweep_lock.acquire(blocking=False):
            return
        try:
            self._last_sweep = now
            self.sessions.sweep()
        except OSError as exc:  # housekeeping must never fail a run
            log.warning("session sweep failed: %s", exc)
        finally:
            self._sweep_lock.release()
