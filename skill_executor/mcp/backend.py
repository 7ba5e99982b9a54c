"""What the MCP handlers need from the service, read lazily: the HTTP app builds it before its
lifespan has built the service."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mcp.server.context import ServerRequestContext

from ..access import Principal
from ..artifacts.store import LocalArtifactStore
from ..lifecycle import RunManager
from ..registry import SkillRepository
from ..tools import ToolExecutor


@dataclass
class McpBackend:
    """What the handlers need: read lazily, so the HTTP app can build it before its lifespan."""

    repository: Callable[[], SkillRepository]
    manager: Callable[[], RunManager]
    tools: Callable[[], ToolExecutor]
    artifacts: Callable[[], LocalArtifactStore]
    visible_skills_dir: Callable[[], str | None]
    principal: Callable[[ServerRequestContext[Any, Any]], Principal]
