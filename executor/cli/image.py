"""``skill-executor image build``: build or reuse the runner image."""

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
    mode.add_argument("--offline", action="store_const", const="offline", dest="mode",
                      help="build the base with debootstrap + docker import (no registry)")
    mode.add_argument("--online", action="store_const", const="online", dest="mode",
                      help="build FROM the public Debian base (needs a registry)")
    build.add_argument("--context", type=Path, help="the images/ folder (default: the source tree's)")
    build.add_argument("--service", action="store_true", help="build the service's own image (docker-compose.yml)")
    build.set_defaults(handler=_build, mode="auto")


def _build(args: argparse.Namespace) -> int:
    from ..images import build_image, build_service_image
    from ..runtimes.docker import connect

    build = build_service_image if args.service else build_image
    result = build(connect(timeout=600), mode=args.mode, context=args.context)
    print(json.dumps({"tag": result.tag, "built": result.built, "base": result.base}))
    return 0
