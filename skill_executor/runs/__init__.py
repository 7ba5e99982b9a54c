"""The skill_run pipeline and its wire schemas."""

from .models import ArtifactFile, InputSpec, OutputFile, OutputSpec, RunRequest, RunResult
from .pipeline import SkillRunner, new_run_id

__all__ = [
    "ArtifactFile",
    "InputSpec",
    "OutputFile",
    "OutputSpec",
    "RunRequest",
    "RunResult",
    "SkillRunner",
    "new_run_id",
]
