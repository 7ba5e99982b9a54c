"""Wire schemas of ``skill_run``: request and result (field names follow trpc-agent-go).

These models are what the HTTP API, the CLI (``--request``) and the tool definitions
share.  Unknown fields are refused, so a typo is an error rather than a silently
ignored option.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..outputs.schema import OutputSpec
from ..workspace.schema import InputSpec

__all__ = ["InputSpec", "OutputSpec", "RunRequest", "RunResult", "OutputFile", "ArtifactFile"]


#: Most re-executions a run may ask for (``RunRequest.retry``).
MAX_RETRIES = 5


class RunRequest(BaseModel):
    """A ``skill_run`` call."""

    model_config = ConfigDict(extra="forbid")

    skill: str = Field(
        min_length=1,
        max_length=256,
        description="skill name (case-insensitive), optionally pinned: name@3, name@latest, name@sha256:<hex>",
    )
    command: str = Field(min_length=1, description="shell command, run with bash -c")
    cwd: str | None = Field(default=None, description="relative to the skill root; $WORK_DIR etc. understood")
    env: dict[str, str] = Field(default_factory=dict)
    stdin: str | None = None
    timeout: float | None = Field(default=None, gt=0, description="seconds; server default and maximum apply")
    session: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
    inputs: list[InputSpec] = Field(default_factory=list)
    with_skills: list[str] = Field(
        default_factory=list,
        max_length=8,
        description="other skills the run can read beside its own (read-only, in $SKILLS_DIR/<name>, also "
        "/mnt/skills/public/<name>); those its SKILL.md refers to as ../<name>/ are there without asking",
    )
    outputs: OutputSpec | None = None
    output_files: list[str] = Field(default_factory=list, description="legacy: globs (same caps as outputs)")
    save_as_artifacts: bool = Field(default=False, description="legacy: save collected files as artifacts")
    omit_inline_content: bool = Field(default=False, description="legacy: do not inline file content")
    artifact_prefix: str = Field(default="", description="legacy: prefix of saved artifact names")
    retry: int = Field(
        default=0,
        ge=0,
        le=MAX_RETRIES,
        description="times the run is executed again when the cluster worker executing it is lost "
        "(0: never, as runs may have side effects; only for a command safe to repeat)",
    )


class OutputFile(BaseModel):
    name: str
    mime_type: str
    size_bytes: int
    sha256: str | None = None
    truncated: bool = False
    content: str | None = None
    encoding: Literal["utf-8", "base64"] | None = None
    ref: str | None = Field(
        default=None,
        description="where the file is after the run: its artifact:// ref when saved (outputs.save); "
        "workspace://work/... for a file in a session's work/ (while the session lives); null: not kept "
        "(the run's out/ and run/ end with it)",
    )


class ArtifactFile(BaseModel):
    name: str
    version: int
    ref: str


class RunResult(BaseModel):
    run_id: str
    skill: str
    skill_version: int | None = Field(default=None, description="the registry version that ran")
    skill_digest: str | None = Field(default=None, description="that version's digest, sha256:<hex>")
    session: str | None = None
    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    signal: str | None = None
    timed_out: bool = False
    oom_killed: bool = False
    disk_limit_hit: bool = False
    duration_ms: int = 0
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    output_files: list[OutputFile] = Field(default_factory=list)
    artifact_files: list[ArtifactFile] = Field(default_factory=list)
    limits_hit: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
