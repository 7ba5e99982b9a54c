"""``skill-executor serve``: the HTTP service on its embedded defaults."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..config import Settings
from .arguments import existing_dir, port

#: After the drain has answered every run's waiting client, how long the server still
#: waits for other open requests (an upload, a download) before cancelling them.
REQUESTS_GRACE_SECONDS = 1


def register(groups: Any) -> None:
    serve = groups.add_parser("serve", help="run the HTTP service")
    serve.add_argument("--host", help="bind address (default 127.0.0.1; others need API keys and the docker runtime)")
    serve.add_argument("--port", type=port, help="TCP port, 1-65535 (default 8080)")
    add_service_options(serve)
    serve.set_defaults(handler=_serve)


def add_service_options(parser: argparse.ArgumentParser) -> None:
    """What ``serve`` and ``mcp`` share: the runtime, the skill roots, the data folder."""
    parser.add_argument("--runtime", choices=("local", "docker"))
    parser.add_argument(
        "--skills-dir",
        action="append",
        type=existing_dir,
        dest="skills_dirs",
        help="a skill root (an existing folder); repeat for more",
    )
    parser.add_argument("--data-dir", type=Path)


def build_settings(args: argparse.Namespace) -> Settings:
    overrides = {
        key: value
        for key in ("host", "port", "runtime", "skills_dirs", "data_dir")
        if (value := getattr(args, key, None)) is not None
    }
    return Settings(**overrides)


M_ARENA_MAX = -8


def limit_malloc_arenas(count: int = 2) -> None:
    """Cap glibc's malloc arenas before threads start.

    Each thread otherwise gets an arena of its own, and output floods read by many
    threads leave each arena's peak behind: measured here, 8 runs printing 1 GiB each
    peaked at 263 MB RSS with default arenas and 178 MB with two.
    """
    try:
        import ctypes

        ctypes.CDLL(None).mallopt(M_ARENA_MAX, count)
    except (OSError, AttributeError):
        pass  # not glibc: nothing to tune


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from ..api.app import create_app
    from ..api.middleware import configure_logging
    from ..api.protocol import DrainingServer, JsonErrorHttpToolsProtocol
    from ..web.auth import KeyRing, bind_problem

    settings = build_settings(args)
    problem = bind_problem(settings, KeyRing.from_settings(settings))
    if problem is not None:
        print(f"skill-executor: {problem}", file=sys.stderr)
        return 2
    from ..errors import ExecutorError
    from ..owners import DataDirClaim

    try:
        claim = DataDirClaim(settings.data_dir)  # before anything reads or writes a record
    except (ExecutorError, OSError) as exc:
        print(f"skill-executor: {getattr(exc, 'message', exc)}", file=sys.stderr)
        return 1
    limit_malloc_arenas()
    configure_logging(settings.log_json)
    app = create_app(settings, claim=claim)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=REQUESTS_GRACE_SECONDS,
        http=JsonErrorHttpToolsProtocol,
    )
    server = DrainingServer(config, app)
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    return 0 if server.started else 3  # uvicorn's code for a failed start-up
