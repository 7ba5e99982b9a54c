"""What a skill needs from its image, read from its files without running anything (the
static half of ``skills doctor``; the probe in the sandbox is :mod:`skill_executor.doctor`)."""

from ..shell import ShellCommand, shell_commands
from .model import ImageNeeds, locations, node_package, python_distribution
from .scan import scan, scan_texts
from .text import fenced_blocks, looks_like_shell
from .vocabulary import PIP_REASON

__all__ = [
    "PIP_REASON",
    "ShellCommand",
    "ImageNeeds",
    "fenced_blocks",
    "locations",
    "looks_like_shell",
    "node_package",
    "python_distribution",
    "scan",
    "scan_texts",
    "shell_commands",
]
