"""The wire schema of one staged input (``skill_run``'s ``inputs[]``)."""

from __future__ import annotations

from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator


class InputSpec(BaseModel):
    """One file or folder to stage into the workspace before the command runs."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    from_: str = Field(
        default="",
        alias="from",
        description="artifact://name[@version], file://<file id>, host:///abs/path, workspace://rel/path "
        "or skill://name/rel/path",
    )
    file_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=512,
        description="a file id (POST /v1/files, a saved output's file_id) instead of from; staged as "
        "work/inputs/<its name> unless to says",
    )
    to: str | None = Field(
        default=None, description="workspace-relative target; default work/inputs/<basename>; inputs/x = work/inputs/x"
    )
    mode: Literal["copy", "link"] = Field(
        default="copy", description="copy, or link: a read-only view the run cannot write through"
    )
    pin: bool = Field(
        default=False, description="with a session: reuse the artifact version first staged in that session"
    )

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if self.file_id is not None:
            if self.from_ not in ("", f"file://{self.file_id}"):
                raise ValueError("an input has either from or file_id, not both")
            self.from_ = f"file://{self.file_id}"
        elif not self.from_:
            raise ValueError("an input needs from (a source) or file_id")
        return self
