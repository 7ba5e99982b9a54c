"""``skill-executor image build|versions``: build or reuse the runner image; list what it holds."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def register(groups: Any) -> None:
    image = groups.add_parser("image", help="the runner image")
    sub = image.add_subparsers(dest="command", required=True, metavar="SUBCOMMAND")
    build = sub.add_parser("build", help="build the runner image (reused when up to date)")
    mode = build.add_mutually_exclusive_group()
    mode.add_argument(
        "--offline",
        action="store_const",
        const="offline",
        dest="mode",
        help="build the base with debootstrap + docker import (no registry)",
    )
    mode.add_argument(
        "--online",
        action="store_const",
        const="online",
        dest="mode",
        help="build FROM the public Debian base (needs a registry)",
    )
    build.add_argument(
        "--flavour",
        choices=["full", "minimal", "python3.13"],
        default="full",
        help="full (default; tagged :latest), minimal (tagged :minimal) or the Python 3.13 tier "
        "(Debian trixie; tagged :python3.13)",
    )
    build.add_argument("--context", type=Path, help="the images/ folder (default: the source tree's)")
    build.add_argument("--service", action="store_true", help="build the service's own image (docker-compose.yml)")
    build.set_defaults(handler=_build, mode="auto")
    versions = sub.add_parser("versions", help="print a Markdown table of the tool and package versions in images")
    versions.add_argument(
        "--image",
        action="append",
        dest="images",
        metavar="REF",
        help="an image to list (repeatable, one column each; default: the configured runner image)",
    )
    versions.add_argument("--context", type=Path, help="the images/ folder (default: the source tree's)")
    versions.set_defaults(handler=_versions)


def _build(args: argparse.Namespace) -> int:
    from ..image.build import build_image, build_service_image
    from ..runtimes.docker import connect

    client = connect(timeout=600)
    if args.service:
        result = build_service_image(client, mode=args.mode, context=args.context)
    else:
        result = build_image(client, mode=args.mode, context=args.context, flavour=args.flavour)
    print(json.dumps({"tag": result.tag, "built": result.built, "base": result.base, "flavour": result.flavour}))
    return 0


def _versions(args: argparse.Namespace) -> int:
    from ..config import Settings
    from ..image.build import runner_versions
    from ..runtimes.docker import connect

    images = args.images or [Settings().docker_image]
    print(runner_versions(connect(timeout=120), images, context=args.context), end="")
    return 0
