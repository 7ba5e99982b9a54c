"""Shell code read by a real parser (tree-sitter's bash grammar), pure: the one place that
parses shell for the package.  :func:`shell_commands` lists the commands a text would run (the
doctor's scan, :mod:`skill_executor.preflight`); :func:`parser` and :func:`literal` are the
pieces the command policy (:mod:`skill_executor.policy`) walks the tree with."""

from .commands import ASSIGNMENT, WRAPPERS, ShellCommand, literal, parser, shell_commands

__all__ = ["ASSIGNMENT", "WRAPPERS", "ShellCommand", "literal", "parser", "shell_commands"]
