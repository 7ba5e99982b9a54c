"""``skill-executor run`` (filled in by the skill_run pipeline)."""

from typing import Any


def register(groups: Any) -> None:
    return None
