"""Entry point: ``skill-executor <group> <command> ...``.

Exit codes: 0 success, 1 a check failed (invalid skill, failed install), 2 usage
error or refused request, 130 interrupted; ``run`` exits with the command's own status
(124 timed out, 125 no status; see :mod:`skill_executor.cli.runs`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from .. import __version__
from ..errors import ExecutorError
from . import skills as skills_cli
from .output import emit_json


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="skill-executor", description="Run Agent Skills safely and fast.")
    parser.add_argument("--version", action="version", version=f"skill-executor {__version__}")
    groups = parser.add_subparsers(dest="group", required=True, metavar="COMMAND")
    skills_cli.register(groups)
    for module in _optional_modules():
        module.register(groups)
    return parser


def _optional_modules() -> list[Any]:
    """Command groups of later layers; imported lazily so ``skills`` stays light."""
    from . import artifacts as artifacts_cli
    from . import cluster as cluster_cli
    from . import db as db_cli
    from . import image as image_cli
    from . import mcp as mcp_cli
    from . import runs as runs_cli
    from . import serve as serve_cli
    from . import test as test_cli

    return [runs_cli, artifacts_cli, image_cli, serve_cli, mcp_cli, test_cli, db_cli, cluster_cli]


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command: list[str] = []
    if argv and argv[0] == "run" and "--" in argv:
        cut = argv.index("--")
        argv, command = argv[:cut], argv[cut + 1 :]
    parser = _parser()
    args = parser.parse_args(argv)
    args.command_argv = command
    try:
        return int(args.handler(args) or 0)
    except ExecutorError as exc:
        if getattr(args, "json_errors", False):
            emit_json(exc.to_dict())
        else:
            print(f"skill-executor: {exc.code}: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
