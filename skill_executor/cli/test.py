"""``skill-executor test [PATH...]``: run skills' ``tests/skill-tests.yaml`` in the sandbox.

Exit codes: 0 every case passed; 1 a case failed (or errored); 2 usage error or a test
file that cannot be read (the message names the line); 3 the infrastructure is missing
(no Docker engine, no runner image, the service unreachable or failing).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from ..errors import ExecutorError
from ..testing.logtext import Caps, for_log

EXIT_PASSED, EXIT_FAILED, EXIT_USAGE, EXIT_INFRASTRUCTURE = 0, 1, 2, 3
_CAPS = Caps()  # the defaults


def register(groups: Any) -> None:
    test = groups.add_parser(
        "test",
        help="run skills' tests/skill-tests.yaml in the sandbox (CI: exit 1 on a failure)",
        description="Run every case of the skills' tests/skill-tests.yaml (PATH: a skill folder, a folder of "
        "skills or a test file; default: the current folder) in a fresh sandbox each. Exit status: "
        "0 all passed, 1 a case failed, 2 usage error or invalid test file, 3 infrastructure "
        "unavailable.",
    )
    test.add_argument("paths", nargs="*", type=Path, metavar="PATH")
    test.add_argument("--schema", action="store_true", help="print the test file format's JSON Schema and exit")
    test.add_argument(
        "-j",
        "--jobs",
        type=_positive,
        default=os.cpu_count() or 1,
        help="cases run in parallel (default: the CPU count)",
    )
    test.add_argument(
        "-k", dest="keyword", metavar="EXPR", help="only cases whose id (skill::case) matches: words, and, or, not, ( )"
    )
    test.add_argument("--strict", action="store_true", help="spec violations in SKILL.md fail its validate case")
    test.add_argument(
        "--update-golden", action="store_true", help="rewrite the equals_file golden files from the current outputs"
    )
    test.add_argument("--strict-timing", action="store_true", help="a case over its duration_ms_max fails")
    test.add_argument(
        "--max-file-bytes",
        type=_positive,
        default=16 * 1024 * 1024,
        metavar="N",
        help="bring back output files up to N bytes for the checks (default 16 MiB; the service's maximum applies)",
    )
    test.add_argument(
        "--max-line-chars",
        type=_positive,
        default=_CAPS.line_chars,
        metavar="N",
        help=f"cut each printed or reported line of a skill's output at N characters (default {_CAPS.line_chars})",
    )
    test.add_argument(
        "--max-case-chars",
        type=_positive,
        default=_CAPS.case_chars,
        metavar="N",
        help=f"at most N characters of one case's failure text, and of each of its streams in a "
        f"report (default {_CAPS.case_chars})",
    )
    test.add_argument(
        "--max-log-bytes",
        type=_positive,
        default=_CAPS.log_bytes,
        metavar="N",
        help=f"at most N bytes of console output; the summary line always follows (default {_CAPS.log_bytes})",
    )
    test.add_argument(
        "--max-report-bytes",
        type=_positive,
        default=_CAPS.report_bytes,
        metavar="N",
        help=f"about N bytes per report file; later cases keep their verdict, not their output "
        f"(default {_CAPS.report_bytes})",
    )
    test.add_argument("--junit", type=Path, metavar="FILE", help="write a JUnit XML report")
    test.add_argument("--json", type=Path, metavar="FILE", dest="json_file", help="write a JSON report")
    test.add_argument(
        "--server",
        metavar="URL",
        help="run on a running service instead of this machine's engine; it needs --publish, since "
        "each skill folder is uploaded there",
    )
    test.add_argument(
        "--publish",
        choices=("existing", "any"),
        default=None,
        help="with --server: what may be uploaded. existing: a new version of a skill the service "
        "has, never made its default (a skill it does not have is refused); any: new skills too, "
        "which the service makes live at once (a staging service only). Default: nothing",
    )
    test.add_argument(
        "--token-env",
        default="SKILL_EXECUTOR_API_KEY",
        metavar="VAR",
        help="with --server: the environment variable holding the API key",
    )
    test.add_argument(
        "--runtime",
        choices=("docker", "local"),
        default="docker",
        help="docker (default) or local: quick iterations, NOT sandboxed",
    )
    test.add_argument("--image", help="the runner image (default: SKILL_EXECUTOR_DOCKER_IMAGE or the configured one)")
    test.add_argument(
        "--data-dir",
        type=Path,
        help="where dependency environments and records are kept (default: SKILL_EXECUTOR_DATA_DIR, "
        "else ~/.cache/skill-executor/test)",
    )
    progress = test.add_mutually_exclusive_group()
    progress.add_argument("--live", action="store_const", const=True, dest="live", help="a live status line")
    progress.add_argument("--plain", action="store_const", const=False, dest="live", help="one line per case")
    test.set_defaults(handler=_test, live=None)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid count {text!r}: not a number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"invalid count {value}: must be at least 1")
    return value


def _test(args: argparse.Namespace) -> int:
    from ..testing.backends import InfrastructureError
    from ..testing.checks import write_whole
    from ..testing.console import Console
    from ..testing.format import json_schema
    from ..testing.loader import collect
    from ..testing.report import json_report, junit_xml
    from ..testing.runner import Options, run_tests
    from ..testing.select import keyword_matcher

    if args.schema:
        print(json.dumps(json_schema(), indent=2))
        return EXIT_PASSED
    caps = Caps(
        line_chars=args.max_line_chars,
        case_chars=args.max_case_chars,
        log_bytes=args.max_log_bytes,
        report_bytes=args.max_report_bytes,
    )
    if args.server and (args.runtime != "docker" or args.image or args.data_dir):
        return _usage("--server runs on the service's own runtime and image: drop --runtime/--image/--data-dir")
    if args.publish and not args.server:
        return _usage("--publish says what a run may upload to a service: it goes with --server")
    if args.server and not args.publish:
        return _usage(
            "--server uploads each skill folder to the service; a test run changes nothing there unless "
            "asked: pass --publish existing (a new version of a skill the service has, never its default) "
            "or --publish any (new skills too, which go live: a staging service only)"
        )
    try:
        select = keyword_matcher(args.keyword) if args.keyword else None
        items = collect(args.paths or [Path(".")], exclude=[_data_dir(args)])
    except ExecutorError as exc:  # TestFileError, a bad -k
        return _usage(for_log(exc.message, caps))
    if args.runtime == "local":
        print(
            "skill-executor test: WARNING: --runtime local runs every command directly on this machine, NOT "
            "sandboxed (no container, no network isolation); use it only for quick iterations",
            file=sys.stderr,
        )
    try:
        backend = _backend(args, items)
    except InfrastructureError as exc:
        print(
            f"skill-executor test: infrastructure unavailable: {exc.code}: {for_log(exc.message, caps)}",
            file=sys.stderr,
        )
        return EXIT_INFRASTRUCTURE
    total = (
        sum(len(i.tests.cases) if i.tests else 0 for i in items)
        + len(items)
        + sum(len(i.evals.evals) if i.evals else 0 for i in items)
    )
    console = Console(live=args.live, total=0 if args.keyword else total, caps=caps)
    options = Options(
        jobs=args.jobs,
        strict=args.strict,
        update_golden=args.update_golden,
        strict_timing=args.strict_timing,
        select=select,
        max_file_bytes=args.max_file_bytes,
        keep_chars=caps.case_chars,
    )
    print(
        f"skill-executor test: {len(items)} skill(s) on {backend.description}, {args.jobs} at a time", file=sys.stderr
    )
    if args.publish:
        print(
            f"skill-executor test: --publish {args.publish}: each skill is uploaded to {args.server}; its "
            "default version is not moved, but the service's overview and search show an installed skill's "
            "latest upload (its name and description) at once",
            file=sys.stderr,
        )
    try:
        report = run_tests(items, backend, options, console)
    finally:
        backend.close()
    console.report(report)
    try:
        if args.junit:
            write_whole(args.junit, junit_xml(report, caps))
        if args.json_file:
            write_whole(args.json_file, json_report(report, caps))
    except OSError as exc:
        print(f"skill-executor test: cannot write the report: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not report.outcomes:
        print("skill-executor test: no case ran (check the paths and -k)", file=sys.stderr)
        return EXIT_USAGE
    return report.exit_code


def _usage(message: str) -> int:
    print(f"skill-executor test: {message}", file=sys.stderr)
    return EXIT_USAGE


def _data_dir(args: argparse.Namespace) -> Path:
    """``--data-dir``, else ``SKILL_EXECUTOR_DATA_DIR``, else a cache folder of the test command's own
    (never a service's data folder: the registry there would gain the snapshots' versions)."""
    if args.data_dir is not None:
        return Path(args.data_dir)
    from ..testing.backends import default_data_dir

    return default_data_dir()


def _backend(args: argparse.Namespace, items: list[Any]) -> Any:
    from ..config import Settings
    from ..testing.backends import LocalBackend, ServerBackend

    if args.server:
        return ServerBackend(args.server, api_key=os.environ.get(args.token_env) or None, publish=args.publish)
    overrides: dict[str, Any] = {"runtime": args.runtime}
    if args.image:
        overrides["docker_image"] = args.image
    overrides["data_dir"] = _data_dir(args)
    # Warm containers pay off for one-shot cases; a session's cases run on the per-run path.
    one_shot = sum(1 for i in items if i.tests for c in i.tests.cases if c.session is None)
    overrides["pool_size"] = min(args.jobs, one_shot, 4) if args.runtime == "docker" else 0
    return LocalBackend(Settings(**overrides))
