"""Argument types shared by command groups: a bad value is a usage error (exit 2) with a
message naming it, before anything starts."""

from __future__ import annotations

import argparse
from pathlib import Path


def port(text: str) -> int:
    """A TCP port to listen on, 1-65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid port {text!r}: not a number") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"invalid port {value}: must be 1-65535")
    return value


def existing_dir(text: str) -> Path:
    """A folder that exists (a mistyped ``--skills-dir`` must not serve an empty catalog)."""
    path = Path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is not a folder" if path.exists() else f"{text!r} does not exist")
    return path
