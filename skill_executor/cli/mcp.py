"""``skill-executor mcp``: the MCP server over stdio (for desktop clients)."""

from __future__ import annotations

import argparse
from typing import Any

from .serve import add_service_options, build_settings


def register(groups: Any) -> None:
    mcp = groups.add_parser("mcp", help="serve skills and skill_run over MCP on stdio")
    add_service_options(mcp)
    mcp.set_defaults(handler=_mcp)


def _mcp(args: argparse.Namespace) -> int:
    from ..errors import ExecutorError
    from ..extras import mcp_problem

    settings = build_settings(args)
    problem = mcp_problem()
    if problem is not None:
        raise ExecutorError(problem, code="mcp_unavailable")
    from ..mcp.stdio import run

    return run(settings)
