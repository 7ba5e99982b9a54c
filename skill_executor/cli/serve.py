"""``skill-executor serve``: the HTTP service on its embedded defaults (role ``all``), or a
cluster's API replica (``--role api``); ``skill-executor worker``: a cluster's run worker."""

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
    serve.add_argument(
        "--role",
        choices=("all", "api"),
        default="all",
        help="all: the whole service in this process (default); api: a cluster's API replica "
        "(Postgres only: runs go to `skill-executor worker`s, nothing executes here)",
    )
    add_service_options(serve)
    serve.set_defaults(handler=_serve)
    worker = groups.add_parser(
        "worker", help="a cluster's run worker: executes queued runs (Postgres only); serves /healthz and /metrics"
    )
    worker.add_argument("--host", help="bind address of /healthz and /metrics (default 127.0.0.1)")
    worker.add_argument("--port", type=port, help="TCP port of /healthz and /metrics, 1-65535 (default 8080)")
    add_service_options(worker)
    worker.set_defaults(handler=_worker)


def add_service_options(parser: argparse.ArgumentParser) -> None:
    """What ``serve`` and ``mcp`` share: the runtime, the skill roots, the data folder."""
    parser.add_argument("--runtime", choices=("local", "bwrap", "docker"))
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
    from ..errors import ExecutorError
    from ..service import Role, check_role

    role: Role = "api" if getattr(args, "role", "all") == "api" else "all"

    try:
        check_role(settings, role)
    except ExecutorError as exc:
        print(f"skill-executor: {exc.message}", file=sys.stderr)
        return 2
    problem = bind_problem(settings, KeyRing.from_settings(settings), "remote" if role == "api" else None)
    if problem is not None:
        print(f"skill-executor: {problem}", file=sys.stderr)
        return 2
    from ..owners import DataDirClaim

    try:
        claim = DataDirClaim(settings.data_dir)  # before anything reads or writes a record
    except (ExecutorError, OSError) as exc:
        print(f"skill-executor: {getattr(exc, 'message', exc)}", file=sys.stderr)
        return 1
    limit_malloc_arenas()
    configure_logging(settings.log_json)
    app = create_app(settings, claim=claim, role=role)
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


def _worker(args: argparse.Namespace) -> int:
    import uvicorn

    from ..api.middleware import configure_logging
    from ..api.protocol import DrainingServer, JsonErrorHttpToolsProtocol
    from ..api.worker import create_worker_app
    from ..errors import ExecutorError
    from ..owners import DataDirClaim
    from ..service import check_role
    from ..web.auth import KeyRing, bind_problem

    settings = build_settings(args)
    try:
        check_role(settings, "worker")
    except ExecutorError as exc:
        print(f"skill-executor: {exc.message}", file=sys.stderr)
        return 2
    problem = bind_problem(settings, KeyRing.from_settings(settings))
    if problem is not None:
        print(f"skill-executor: {problem}", file=sys.stderr)
        return 2
    try:
        claim = DataDirClaim(settings.data_dir)  # its workspaces and containers are this data dir's
    except (ExecutorError, OSError) as exc:
        print(f"skill-executor: {getattr(exc, 'message', exc)}", file=sys.stderr)
        return 1
    limit_malloc_arenas()
    configure_logging(settings.log_json)
    servers: list[DrainingServer] = []

    def on_exit(code: int) -> None:
        for server in servers:
            server.should_exit = True

    app = create_worker_app(settings, claim=claim, on_exit=on_exit)
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
    servers.append(server)
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    if not server.started:
        return 3
    return int(app.state.exit_code)
