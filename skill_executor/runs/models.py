"""Wire schemas of ``skill_run``: request and result (field names follow trpc-agent-go).

These models are what the HTTP API, the CLI (``--request``) and the tool definitions
share.  Unknown fields are refused, so a typo is an error rather than a silently
ignored option.
"""

from __future__ import annotations

from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..outputs.schema import OutputSpec
from ..policy import HostError, parse_host
from ..workspace.schema import InputSpec

__all__ = [
    "InputSpec",
    "EgressRequest",
    "NetworkRequest",
    "OutputSpec",
    "RunRequest",
    "RunResult",
    "OutputFile",
    "ArtifactFile",
    "SkillBundle",
]


#: Most re-executions a run may ask for (``RunRequest.retry``).
MAX_RETRIES = 5


#: What a bundle's ``media_type`` may say (the archive's own bytes decide, as for an install).
BUNDLE_MEDIA_TYPES = Literal[
    "application/zip",
    "application/gzip",
    "application/x-gzip",
    "application/x-tar",
    "application/x-bzip2",
    "application/x-xz",
]


class SkillBundle(BaseModel):
    """A skill sent with the run instead of installed (OpenAI's inline skill ``source``): the
    base64 of a .zip or .tar[.gz|.bz2|.xz] holding one skill, or the digest of one this key
    sent before.  Checked as an install is; kept per key, by digest; never in the catalog."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["base64"] | None = Field(default=None, description="base64 (the only encoding; may be left out)")
    media_type: BUNDLE_MEDIA_TYPES | None = Field(default=None, description="informative: the bytes decide")
    data: str | None = Field(default=None, min_length=1, description="the archive, base64-encoded")
    digest: str | None = Field(
        default=None,
        pattern=r"^sha256:[0-9a-f]{64}$",
        description="sha256:<hex> of an archive this key sent before (a run's skill_digest)",
    )

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if (self.data is None) == (self.digest is None):
            raise ValueError("a bundle is either data (base64) or the digest of one sent before")
        return self


#: Most hosts a request's ``network.allow`` may name.
MAX_NETWORK_HOSTS = 64


class NetworkRequest(BaseModel):
    """The network a run asks for: less than its policy rule's ``egress`` allows, never more."""

    model_config = ConfigDict(extra="forbid")

    allow: list[str] = Field(
        max_length=MAX_NETWORK_HOSTS,
        description="hosts the run may reach, each allowed by its policy rule's egress.allow: exact names, "
        "'*.' wildcards the rule lists as such, addresses and networks within the rule's ([]: no network)",
    )

    @field_validator("allow")
    @classmethod
    def _hosts(cls, hosts: list[str]) -> list[str]:
        for host in hosts:
            try:
                parse_host(host)
            except HostError as exc:
                raise ValueError(str(exc)) from None
        return hosts


class RunRequest(BaseModel):
    """A ``skill_run`` call."""

    model_config = ConfigDict(extra="forbid")

    skill: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="skill name (case-insensitive), optionally pinned: name@3, name@latest, name@sha256:<hex>; "
        "with a bundle: optional, the bundle's skill name",
    )
    bundle: SkillBundle | None = Field(
        default=None, description="run a skill sent with the request (base64 zip/tar.gz) instead of an installed one"
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
    network: NetworkRequest | None = Field(
        default=None,
        description="narrow the network its policy rule's egress gives the run (docs: guides/egress.md); "
        "refused (422 network_not_allowed) for a host the rule does not allow, or where no egress rule applies",
    )
    retry: int = Field(
        default=0,
        ge=0,
        le=MAX_RETRIES,
        description="times the run is executed again when the cluster worker executing it is lost "
        "(0: never, as runs may have side effects; only for a command safe to repeat)",
    )

    @model_validator(mode="after")
    def _skill_or_bundle(self) -> Self:
        if self.skill is None and self.bundle is None:
            raise ValueError("name a skill, or send one as a bundle")
        return self


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
    file_id: str | None = Field(default=None, description="when saved (outputs.save): its file id")


class ArtifactFile(BaseModel):
    name: str
    version: int
    ref: str
    file_id: str | None = Field(default=None, description="its file id (GET /v1/files/{id}; inputs' file_id)")


class EgressRequest(BaseModel):
    """One request of the run through the egress gateway (one per refused ``CONNECT``), as the
    audit keeps it: never a query string, a header or a secret's value."""

    host: str
    method: str
    path: str = Field(description="without its query")
    status: int = Field(
        description="what the run got (403: refused by the gateway; 502: cut or unreachable; 0: pending approval)"
    )
    bytes: int = Field(description="response body bytes the run got")
    decision: Literal["allowed", "denied", "limited", "pending"] = Field(
        description="pending: the host is outside the allow-list of a rule with ask: the request waits for approval "
        "(POST /v1/egress/approvals/{approval}); its outcome is a later event"
    )
    rule: str | None = Field(default=None, description="the policy rule whose egress judged it")
    reason: str | None = Field(default=None, description="why it was denied or limited")
    limit: str | None = Field(default=None, description="the cap behind 'limited' (also in the run's limits_hit)")
    approval: str | None = Field(default=None, description="the pending approval's id (decision pending)")


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
    policy_denied_exec: dict[str, str] | None = Field(
        default=None,
        description="the program the sandbox refused to start under the command policy, which ended the run: "
        "{rule, program, path, reason} (docs: guides/policy.md)",
    )
    duration_ms: int = 0
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    output_files: list[OutputFile] = Field(default_factory=list)
    artifact_files: list[ArtifactFile] = Field(default_factory=list)
    limits_hit: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    egress: list[EgressRequest] = Field(
        default_factory=list,
        description="the run's requests through the egress gateway, in order (docs: guides/egress.md); "
        "empty for a run without network",
    )
