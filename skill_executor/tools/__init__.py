"""Function tools for agents: the catalogue of definitions in OpenAI, Anthropic and MCP
shapes (:mod:`.catalogue`), the executor of a call (:mod:`.executor`) and the result an
agent loop feeds back (:mod:`.results`)."""

from .arguments import bound, keep_outputs, run_request
from .budget import BudgetOverride, ResultBudget, Surface, default_budget
from .catalogue import CONTEXT_TOOLS, PROCESS_TOOLS, Format, definitions
from .executor import ToolExecutor
from .results import ToolResult, failed, kept_result, mcp_block, render_result, run_result

__all__ = [
    "BudgetOverride",
    "CONTEXT_TOOLS",
    "PROCESS_TOOLS",
    "ResultBudget",
    "Surface",
    "bound",
    "default_budget",
    "keep_outputs",
    "kept_result",
    "mcp_block",
    "Format",
    "ToolExecutor",
    "ToolResult",
    "definitions",
    "failed",
    "render_result",
    "run_request",
    "run_result",
]
