"""Function tools for agents: the catalogue of definitions in OpenAI, Anthropic and MCP
shapes (:mod:`.catalogue`), the executor of a call (:mod:`.executor`) and the result an
agent loop feeds back (:mod:`.results`)."""

from .catalogue import CONTEXT_TOOLS, Format, definitions
from .executor import ToolExecutor, run_request
from .results import ToolResult, failed, render_result, run_result

__all__ = [
    "CONTEXT_TOOLS",
    "Format",
    "ToolExecutor",
    "ToolResult",
    "definitions",
    "failed",
    "render_result",
    "run_request",
    "run_result",
]
