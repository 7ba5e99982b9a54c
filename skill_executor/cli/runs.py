"""``skill-executor run``.

``run`` exits with the command's status, so scripts can rely on it:

* 0 -- the command exited 0;
* 1-255 -- the command's exit code (a command killed by signal N: 128+N, as the
  result's ``exit_code``; out of memory: 137);
* 124 -- the command timed out (as ``timeout(1)``);
* 125 -- the command has no exit code (cancelled, or stopped by the service);
* 2 -- also a usage error or a refused request (nothing ran; the output says which).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ..config import Settings
from ..errors import BadRequest
from .arguments import existing_dir

if TYPE_CHECKING:
    from ..runs.models import RunResult


def register(groups: Any) -> None:
    run = groups.add_parser(
        "run",
        help="run a skill_run request (or SKILL -- COMMAND...) and print the result",
        description="Either --request FILE|- (prints the result JSON) or SKILL -- COMMAND... (readable output).",
    )
    run.add_argument("skill", nargs="?", help="shorthand: the skill to run COMMAND in")
    run.add_argument("--request", help="a JSON request file, or - for stdin")
    _common(run)
    run.set_defaults(handler=_run, json_errors=True)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runtime", choices=("local", "bwrap", "docker"))
    parser.add_argument(
        "--skills-dir",
        action="append",
        type=existing_dir,
        dest="skills_dirs",
        help="a skill root (an existing folder); repeat for more",
    )
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--allow-host-root", action="append", type=Path, dest="allowed_host_roots")


def settings_from(args: argparse.Namespace) -> Settings:
    overrides: dict[str, Any] = {
        key: value
        for key in ("runtime", "skills_dirs", "data_dir", "allowed_host_roots")
        if (value := getattr(args, key, None)) is not None
    }
    overrides["pool_size"] = 0  # one run per process: warm containers would only cost
    return Settings(**overrides)


#: ``run``'s exit statuses that are not the command's own.
EXIT_TIMED_OUT = 124
EXIT_NO_STATUS = 125


def exit_status(result: RunResult) -> int:
    """What ``skill-executor run`` exits with for a run that happened."""
    if result.timed_out:
        return EXIT_TIMED_OUT
    if result.exit_code is None:
        return EXIT_NO_STATUS
    return min(max(result.exit_code, 0), 255)


def _run(args: argparse.Namespace) -> int:
    from ..access import LOCAL
    from ..core import Executor
    from ..runs.models import RunRequest

    # A refusal of --request is {"error": ...} JSON (on stderr, as every error); of the shorthand, a message.
    args.json_errors = args.request is not None
    command: list[str] = getattr(args, "command_argv", [])
    if args.request is None and not (args.skill and command):
        raise BadRequest("give --request FILE|- or SKILL -- COMMAND...", code="usage")
    if args.request is not None and (args.skill or command):
        raise BadRequest("--request and SKILL -- COMMAND are exclusive", code="usage")
    try:
        if args.request is not None:
            text = sys.stdin.read() if args.request == "-" else Path(args.request).read_text()
            request = RunRequest.model_validate_json(text)
        else:
            import shlex

            request = RunRequest(
                skill=args.skill,
                command=shlex.join(command) if len(command) > 1 else command[0],
                output_files=["out/**"],
            )
    except OSError as exc:
        raise BadRequest(f"cannot read request: {exc}", code="usage") from None
    except ValidationError as exc:
        raise BadRequest(
            "invalid request: " + "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()),
            code="invalid_request",
        ) from None

    executor = Executor.from_settings(settings_from(args))
    try:
        # the front door every run takes: refused, recorded and audited as the service's runs
        result = executor.runs().run(request, principal=LOCAL)
    finally:
        executor.close()
    if args.request is not None:
        print(result.model_dump_json(indent=2))
        return exit_status(result)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    for item in result.output_files:
        print(f"--- {item.name} ({item.mime_type}, {item.size_bytes} bytes{', truncated' if item.truncated else ''})")
        if item.encoding == "utf-8" and item.content is not None:
            print(item.content, end="" if item.content.endswith("\n") else "\n")
    status = "timed out" if result.timed_out else f"exit {result.exit_code}"
    print(f"--- {status} in {result.duration_ms} ms", file=sys.stderr)
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return exit_status(result)
