"""Entry point: ``skill-executor <group> <command> ...``.

Exit codes: 0 success, 1 a check failed (invalid skill, failed install), 2 usage
error or refused request, 130 interrupted; ``run`` exits with the command's own status
(124 timed out, 125 no status; see :mod:`skill_executor.cli.runs`).

Errors go to stderr, never stdout: ``skill-executor: <code>: <message>``, or for
``run --request`` (whose stdout is the result JSON) the ``{"error": {...}}`` object on
one line, so a script reads the result from stdout and the refusal from stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from .. import __version__
from ..config import Settings
from ..errors import ExecutorError
from . import skills as skills_cli


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
        return _refused(args, exc)
    except ValidationError as exc:
        if exc.title != Settings.__name__:
            raise
        return _refused(args, invalid_settings(exc))
    except KeyboardInterrupt:
        return 130


def _refused(args: argparse.Namespace, exc: ExecutorError) -> int:
    if getattr(args, "json_errors", False):
        print(json.dumps(exc.to_dict(), ensure_ascii=False), file=sys.stderr)
    else:
        print(f"skill-executor: {exc.code}: {exc.message}", file=sys.stderr)
    return 2


def invalid_settings(exc: ValidationError) -> ExecutorError:
    """A SKILL_EXECUTOR_* variable that does not parse, named as the user wrote it."""
    problems = [
        f"{Settings.model_config.get('env_prefix', '')}{'_'.join(map(str, e['loc'])).upper()}: {e['msg']}"
        + (f" (got {e['input']!r})" if isinstance(e.get("input"), str | int | float) else "")
        for e in exc.errors()
    ]
    return ExecutorError("; ".join(problems), code="invalid_settings")


if __name__ == "__main__":
    sys.exit(main())
