"""The wire schema of one staged input (``skill_run``'s ``inputs[]``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class InputSpec(BaseModel):
    """One file or folder to stage into the workspace before the command runs."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    from_: str = Field(
        alias="from",
        description="artifact://name[@version], host:///abs/path, workspace://rel/path or skill://name/rel/path",
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
