"""The wire schema of what a run brings back (``skill_run``'s ``outputs``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

MiB = 1024 * 1024


class OutputSpec(BaseModel):
    """Which files to bring back, and how."""

    model_config = ConfigDict(extra="forbid")

    globs: list[str] = Field(default_factory=list, description="workspace-relative globs; ** supported")
    inline: bool = Field(default=True, description="inline text content (UTF-8) in the result")
    inline_binary: bool = Field(default=False, description="also inline binary content, base64-encoded")
    save: bool = Field(default=False, description="save each collected file as an artifact (new version)")
    name_template: str | None = Field(
        default=None,
        description="artifact name; placeholders {path} {name} {stem} {ext} {run_id} {session} {prefix} {safe_path}",
    )
    max_files: int = Field(default=100, ge=0)
    max_file_bytes: int = Field(default=4 * MiB, ge=0)
    max_total_bytes: int = Field(default=64 * MiB, ge=0)
