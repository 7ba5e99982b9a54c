"""``skill-executor mcp``: the MCP server over stdio (for desktop clients)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .arguments import existing_dir
from .serve import build_settings


def register(groups: Any) -> None:
    mcp = groups.add_parser("mcp", help="serve skills and skill_run over MCP on stdio")
    mcp.add_argument("--runtime", choices=("local", "docker"))
    mcp.add_argument("--skills-dir", action="append", type=existing_dir, dest="skills_dirs",
                     help="a skill root (an existing folder); repeat for more")
    mcp.add_argument("--data-dir", type=Path)
    mcp.set_defaults(handler=_mcp)


def _mcp(args: argparse.Namespace) -> int:
    from ..mcp.stdio import run

    return run(build_settings(args))
