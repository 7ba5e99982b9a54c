"""``skill-executor skills push|versions|pin|pull``: the registry of a running service, for CI.

Exit codes: 0 done; 1 refused (the skill is invalid locally, or the service said no:
4xx); 2 usage or local I/O error; 3 the service is unreachable or failed (5xx).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from skill_executor_client import ApiError, Client
from skill_executor_client.transfer import folder_files

from ..registry.refs import parse_ref, parse_version
from ..registry.store import manifest_digest
from ..skills import check
from .output import emit_json

DEFAULT_TOKEN_ENV = "SKILL_EXECUTOR_API_KEY"
URL_ENV = "SKILL_EXECUTOR_URL"


def register(commands: Any) -> None:
    push = commands.add_parser("push", help="publish a skill folder to a service as a new version (for CI)")
    push.add_argument("directory", type=Path, metavar="DIR")
    _remote(push)
    push.add_argument("--strict", action="store_true", help="spec violations refuse the push (here and there)")
    push.add_argument("--no-default", action="store_true", help="publish without making it the default version")
    push.set_defaults(handler=_push)

    versions = commands.add_parser("versions", help="list a skill's versions on a service")
    versions.add_argument("name")
    _remote(versions)
    versions.set_defaults(handler=_versions)

    pin = commands.add_parser("pin", help="set a skill's default version on a service (rollback, promotion)")
    pin.add_argument("name")
    pin.add_argument("version", help="a number, latest, or sha256:<hex>")
    _remote(pin)
    pin.set_defaults(handler=_pin)

    pull = commands.add_parser("pull", help="download a version of a skill (NAME or NAME@VERSION) into DIR")
    pull.add_argument("name", metavar="NAME[@VERSION]")
    pull.add_argument("directory", type=Path, metavar="DIR")
    _remote(pull)
    pull.set_defaults(handler=_pull)


def _remote(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--server", default=os.environ.get(URL_ENV), help=f"the service's URL (default: ${URL_ENV})")
    parser.add_argument(
        "--token-env",
        default=DEFAULT_TOKEN_ENV,
        metavar="VAR",
        help=f"the environment variable holding the API key (default: {DEFAULT_TOKEN_ENV})",
    )


def _call(args: argparse.Namespace, action: Callable[[Client], int]) -> int:
    if not args.server:
        print(f"skill-executor: give --server URL (or set {URL_ENV})", file=sys.stderr)
        return 2
    try:
        with Client(args.server, api_key=os.environ.get(args.token_env) or None, timeout=300.0) as client:
            return action(client)
    except ApiError as exc:
        print(f"skill-executor: {exc}", file=sys.stderr)
        if exc.details:
            print(json.dumps({"error": exc.code, "details": exc.details}, ensure_ascii=False), file=sys.stderr)
        return 1 if 400 <= exc.status < 500 else 3
    except httpx.HTTPError as exc:
        print(f"skill-executor: cannot reach {args.server}: {exc}", file=sys.stderr)
        return 3
    except OSError as exc:
        print(f"skill-executor: {exc}", file=sys.stderr)
        return 2


def _push(args: argparse.Namespace) -> int:
    verdict = check(args.directory, strict=args.strict)
    for diag in verdict.errors:
        print(f"  error   {diag.code}: {diag.message}", file=sys.stderr)
    for diag in verdict.warnings:
        print(f"  warning {diag.code}: {diag.message}", file=sys.stderr)
    if not verdict.valid:
        print(f"skill-executor: {args.directory} is not a valid skill; nothing pushed", file=sys.stderr)
        return 1

    def push(client: Client) -> int:
        files = folder_files(args.directory)
        local = manifest_digest([(path, _sha256(content)) for path, content in files])
        result = client.push_skill(
            args.directory, strict=True if args.strict else None, set_default=not args.no_default
        )
        answer = result.model_dump(mode="json", by_alias=True)
        emit_json({k: answer.get(k) for k in ("id", "version", "digest", "created", "is_default", "findings")})
        if result.digest != local:
            print(
                f"skill-executor: the service's digest {result.digest} differs from the folder's {local}",
                file=sys.stderr,
            )
            return 1
        return 0

    return _call(args, push)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _versions(args: argparse.Namespace) -> int:
    name = parse_ref(args.name, versioned=False).name  # a malformed name is a usage error (exit 2)

    def show(client: Client) -> int:
        emit_json(client.skill_versions(name).model_dump(mode="json", by_alias=True))
        return 0

    return _call(args, show)


def _pin(args: argparse.Namespace) -> int:
    name = parse_ref(args.name, versioned=False).name
    parsed = parse_version(args.version)
    version: int | str = parsed.number if parsed.number is not None else str(parsed)

    def pin(client: Client) -> int:
        emit_json(client.set_default_version(name, version).model_dump(mode="json", by_alias=True))
        return 0

    return _call(args, pin)


def _pull(args: argparse.Namespace) -> int:
    ref = parse_ref(args.name)

    def pull(client: Client) -> int:
        emit_json(client.pull_skill(ref.name, args.directory, str(ref.version or "default")))
        return 0

    return _call(args, pull)
