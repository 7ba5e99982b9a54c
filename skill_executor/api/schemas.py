"""Response models of the HTTP API (they make /openapi.json precise)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from ..context.budget import MAX_BUDGET_TOKENS
from ..runs.models import RunResult
from ..tools.budget import BudgetOverride


class ErrorBody(BaseModel):
    code: str
    message: str
    details: Any = None


class ErrorResponse(BaseModel):
    error: ErrorBody


class Finding(BaseModel):
    code: str
    message: str


class SkillSummary(BaseModel):
    name: str
    id: str
    description: str
    tokens: int = Field(description="estimated tokens of this overview entry (4 characters per token)")
    location: str = Field(description="path of SKILL.md as a run sees it")
    score: float | None = None


class SkillList(BaseModel):
    skills: list[SkillSummary]
    count: int
    total_tokens: int
    token_estimate: str = "ceil(characters / 4)"


class FileInfo(BaseModel):
    path: str
    size: int
    kind: str


class SkillDetail(BaseModel):
    name: str
    id: str
    description: str
    license: str | None = None
    compatibility: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    allowed_tools: list[str] = Field(default_factory=list)
    extras: dict[str, Any] = Field(default_factory=dict)
    body: str
    body_tokens: int
    version: int | None = Field(default=None, description="the registry version loaded")
    digest: str | None = Field(default=None, description="its digest, sha256:<hex>")
    docs: list[FileInfo]
    scripts: list[FileInfo]
    references: list[FileInfo]
    assets: list[FileInfo]
    files: list[FileInfo]
    warnings: list[Finding]


class DocEntry(BaseModel):
    path: str
    size: int
    tokens: int
    content: str | None = None
    truncated: bool = False
    binary: bool = False
    note: str | None = Field(default=None, description="how the requested name matched this doc, when not exactly")


class DocList(BaseModel):
    skill: str
    docs: list[DocEntry]


class ValidationFinding(BaseModel):
    code: str
    message: str
    severity: str


class Installed(BaseModel):
    id: str
    name: str
    path: str
    replaced: bool
    files: list[FileInfo]
    warnings: list[Finding]
    version: int | None = Field(default=None, description="the registry version published (or returned)")
    digest: str | None = Field(default=None, description="its digest, sha256:<hex>")
    created: bool = Field(default=True, description="false: identical to the latest version, which is returned")
    is_default: bool = False
    strict: bool = False
    findings: list[ValidationFinding] = Field(default_factory=list, description="every validation finding")


class VersionFile(BaseModel):
    path: str
    sha256: str = Field(description="of the content; of the target for a link")
    size: int
    executable: bool
    link: str | None = Field(default=None, description="a symbolic link's target (kept as a link)")


class VersionInfo(BaseModel):
    skill: str
    version: int
    digest: str
    created_at: float
    source: Literal["upload", "folder"] | str
    created_by: str
    file_count: int
    size: int
    is_default: bool
    is_latest: bool
    files: list[VersionFile] | None = None


class VersionList(BaseModel):
    skill: str
    default_version: int | None
    latest_version: int | None
    default_held: bool = Field(
        default=False,
        description="the default was set explicitly (not to `latest`): "
        "a changed folder of a folder-root skill does not move it",
    )
    versions: list[VersionInfo]


class SkillUpdate(BaseModel):
    model_config = {"extra": "forbid"}

    # strict: a JSON true is not version 1; the text goes to the one parser (skill_executor/registry/refs.py)
    default_version: StrictInt | StrictStr = Field(
        description="a version number, `latest` (the default then follows the latest version), `default`, "
        "or sha256:<hex>"
    )


class AuditRecord(BaseModel):
    id: int
    at: float
    actor: str
    action: str
    skill: str
    version: int | None
    digest: str | None
    detail: str | None


class AuditLog(BaseModel):
    entries: list[AuditRecord]


class RunAccepted(BaseModel):
    run_id: str
    status: Literal["pending_approval", "queued", "running", "completed", "failed", "cancelled"]
    replayed: bool = False


class ApprovalRequest(BaseModel):
    """``POST /v1/runs/{id}/approval``: the decision on a run held for approval."""

    model_config = ConfigDict(extra="forbid")

    decision: Literal["approve", "reject"]
    reason: str | None = Field(default=None, max_length=1000, description="recorded with the decision (audit)")


class RunRecordModel(BaseModel):
    run_id: str
    status: Literal["pending_approval", "queued", "running", "completed", "failed", "cancelled"]
    skill: str
    session: str | None = None
    created_at: float
    updated_at: float
    request: dict[str, Any]
    result: RunResult | None = None
    error: ErrorBody | None = None
    owner: str = Field(description="the key id (tenant) the run belongs to")
    trace_id: str | None = Field(
        default=None, description="the run's OpenTelemetry trace id (32 hex digits); null while tracing is off"
    )


class RunSummary(BaseModel):
    """A run in a listing: ``GET /v1/runs/{id}`` has its request and result."""

    run_id: str
    status: Literal["pending_approval", "queued", "running", "completed", "failed", "cancelled"]
    skill: str = Field(description="as the request named it (a pinned name@ref included)")
    session: str | None = None
    created_at: float = Field(description="seconds since the epoch")
    updated_at: float
    owner: str = Field(description="the key id (tenant) the run belongs to")
    trace_id: str | None = None
    error: ErrorBody | None = Field(default=None, description="what a run that ended in an error ended with")


class RunList(BaseModel):
    runs: list[RunSummary] = Field(description="newest first")
    next_cursor: str | None = Field(
        description="pass as ?cursor= for the next page (with the same filters); null: this is the last page"
    )


class ArtifactModel(BaseModel):
    name: str
    version: int
    size: int
    sha256: str
    mime_type: str
    created_at: float
    run_id: str | None = None
    owner: str = Field(description="the key id (tenant) the artifact belongs to")
    ref: str
    file_id: str = Field(description="this version's file id (GET /v1/files/{id}, inputs' file_id)")


class ArtifactList(BaseModel):
    artifacts: list[ArtifactModel]


#: The longest tool name a call may give (the model APIs allow 64 or 128 characters): longer
#: is no call a model made, and is refused (422) before anything echoes it.
TOOL_NAME_MAX = 256
ToolFormat = Literal["openai", "openai-responses", "anthropic", "mcp"]


class ToolList(BaseModel):
    format: ToolFormat
    tools: list[dict[str, Any]]


class ToolCall(BaseModel):
    name: str = Field(
        max_length=TOOL_NAME_MAX,
        description="the tool the model called; an unknown one is answered with an error result (tool_not_found)",
    )
    arguments: Any = Field(
        default=None,
        description="an object or its JSON text, as the model wrote it; anything else is answered with an "
        "error result (invalid_arguments)",
    )
    format: ToolFormat | None = Field(
        default=None, description="also answer `message`: the result as this format's tool-result message"
    )
    id: str | None = Field(
        default=None,
        max_length=256,
        description="the model's id of this call (tool_use_id, tool_call_id, call_id), put in `message`",
    )
    session: str | None = Field(
        default=None,
        max_length=128,
        description="the session this call is bound to (the framework's conversation): skill_run, "
        "process_* and context_* act in it; arguments naming another session are refused (403 session_mismatch)",
    )
    result_budget: BudgetOverride | None = Field(
        default=None,
        description="overrides of the tool-result budget for this call (SKILL_EXECUTOR_TOOL_RESULT_* otherwise)",
    )


class FunctionCallItem(BaseModel):
    """An OpenAI Responses ``function_call`` output item, as the model produced it; answered
    with its ``function_call_output`` item in ``message``."""

    type: Literal["function_call"]
    call_id: str = Field(min_length=1, max_length=256)
    name: str = Field(max_length=TOOL_NAME_MAX)
    arguments: Any = Field(default=None, description="the arguments' JSON text")
    id: str | None = Field(default=None, description="the item's id (not the call's)")
    status: str | None = None
    session: str | None = Field(
        default=None,
        max_length=128,
        description="the session this call is bound to (the framework's conversation): skill_run, "
        "process_* and context_* act in it; arguments naming another session are refused (403 session_mismatch)",
    )
    result_budget: BudgetOverride | None = Field(
        default=None,
        description="overrides of the tool-result budget for this call (SKILL_EXECUTOR_TOOL_RESULT_* otherwise)",
    )

    def as_call(self) -> ToolCall:
        return ToolCall(
            name=self.name,
            arguments=self.arguments,
            format="openai-responses",
            id=self.call_id,
            session=self.session,
            result_budget=self.result_budget,
        )


class ToolCallResult(BaseModel):
    name: str
    content: str = Field(description="the text for the model; what a program wrote is neutralised (escapes shown)")
    is_error: bool
    data: Any = None
    status: str | None = Field(
        default=None,
        description="the call's state in words (process_poll: running or ended, the next offset), apart from "
        "`content`: a text block of its own in `message`, never a line inside a program's output",
    )
    message: dict[str, Any] | None = Field(
        default=None,
        description="with `format`: the message to append to the conversation as it is -- "
        "Anthropic tool_result block (is_error), OpenAI tool message or Responses "
        "function_call_output item (an error's text starts with 'error:'), MCP CallToolResult (isError)",
    )


class Check(BaseModel):
    ok: bool
    detail: str


class Health(BaseModel):
    status: Literal["ok", "unhealthy"]
    runtime: str
    checks: dict[str, Check]
    #: The checks that fail (empty when healthy).
    failing: list[str] = []


ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse} for code in (400, 401, 403, 404, 409, 413, 421, 422, 429, 503)
}


# -- agent context (/v1/sessions/{session}/context) ---------------------------------------


class ContextBudget(BaseModel):
    """Overrides of the context budget for one request (the settings' otherwise)."""

    model_config = {"extra": "forbid"}
    max_tokens: int | None = Field(default=None, gt=0, le=MAX_BUDGET_TOKENS)
    skill_tokens: int | None = Field(default=None, gt=0, le=MAX_BUDGET_TOKENS)
    doc_tokens: int | None = Field(default=None, gt=0, le=MAX_BUDGET_TOKENS)
    high_water: float | None = Field(default=None, gt=0, le=1)


Evict = Literal["none", "lru", "mention"]


class ContextLoad(BaseModel):
    model_config = {"extra": "forbid"}
    skill: str = Field(min_length=1, max_length=300, description="name, or name@version to pin another version")
    evict: Evict = Field(default="none", description="when it does not fit: none (refuse), lru, mention")
    messages: list[str] = Field(
        default_factory=list, max_length=100, description="the last messages' text, for evict=mention"
    )
    budget: ContextBudget | None = None


class ContextSkill(BaseModel):
    model_config = {"extra": "forbid"}
    skill: str = Field(min_length=1, max_length=300)


class ContextSelectDocs(BaseModel):
    model_config = {"extra": "forbid"}
    skill: str = Field(min_length=1, max_length=300)
    docs: list[str] | None = Field(default=None, max_length=1000, description="doc paths (skill_list_docs)")
    all: bool = Field(default=False, description="every doc the skill ships")
    mode: Literal["add", "replace", "clear"] = "add"
    evict: Evict = "none"
    messages: list[str] = Field(default_factory=list, max_length=100)
    budget: ContextBudget | None = None


# -- a session's interactive processes (/v1/sessions/{session}/processes) -----------------


class ProcessStart(BaseModel):
    """Start a long-lived process in the session's sandbox (its work/ is the working folder)."""

    command: StrictStr | list[StrictStr] = Field(
        description="a shell command (run by bash -c), or an argv list", examples=["python3 -i -u"]
    )
    env: dict[StrictStr, StrictStr] = Field(default_factory=dict, description="extra environment variables")
    cwd: StrictStr | None = Field(default=None, max_length=4096, description="working folder (relative: in work/)")
    pty: bool = Field(default=False, description="run it on a pseudo-terminal (stdout and stderr are one stream)")
    timeout: float | None = Field(
        default=None, gt=0, description="wall-clock limit in seconds (at most SKILL_EXECUTOR_PROCESS_MAX_SECONDS)"
    )
    idle_timeout: float | None = Field(
        default=None,
        gt=0,
        description="killed after this long with no input and no output (at most SKILL_EXECUTOR_PROCESS_IDLE_SECONDS)",
    )


class ProcessInfo(BaseModel):
    """A process's state."""

    id: str
    session: str
    command: str | list[str]
    pty: bool
    running: bool
    exit_code: int | None = Field(description="once ended: its exit status (128+N for signal N)")
    reason: Literal["exited", "killed", "timeout", "idle", "session_ended", "lost"] | None = Field(
        description="why it ended (or is ending): exited by itself, killed, its wall-clock or idle limit, "
        "its session ended"
    )
    started_at: float
    ended_at: float | None
    total: int = Field(description="bytes of output it has written so far")
    timeout: float
    idle_timeout: float


class ProcessList(BaseModel):
    processes: list[ProcessInfo]


class ProcessWrite(BaseModel):
    """Bytes for the process's stdin (UTF-8 text), and/or close it."""

    data: StrictStr = Field(default="", max_length=1024 * 1024, examples=["1+1\n"])
    eof: bool = Field(default=False, description="close its stdin after the data")


class ProcessSignal(BaseModel):
    signal: StrictStr = Field(
        examples=["INT"], description="INT, TERM, KILL, HUP, QUIT, USR1, USR2, STOP, CONT or WINCH"
    )


class ProcessOutput(BaseModel):
    """Output past ``after`` that the ring still holds (byte offsets into everything written)."""

    output: str = Field(description="the bytes as UTF-8 text (invalid sequences replaced)")
    offset: int = Field(description="the offset of the first byte answered")
    next: int = Field(description="the offset to poll after next")
    total: int = Field(description="bytes written in all")
    dropped: int = Field(description="bytes past `after` no longer held (the ring's cap), skipped")
    running: bool
    exit_code: int | None
    reason: str | None
