"""Text helpers of the scan (pure): fenced blocks of the docs, prompts and console output of
shell blocks, whether an untagged block reads as shell, JavaScript comments.  The commands of
shell code are :mod:`skill_executor.shell`'s (a real parser)."""

from __future__ import annotations

import re
from collections.abc import Iterator

from ..shell import ASSIGNMENT

FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})\s*([^\s`{]*)")


def fenced_blocks(text: str) -> Iterator[tuple[str, int, str]]:
    """Markdown fenced code blocks: (lower-case tag, line number before the first line, content)."""
    lines = text.split("\n")
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        fence, tag = opening.group(1), opening.group(2).lower()
        start = index + 1
        end = start
        while end < len(lines) and not lines[end].strip().startswith(fence[0] * len(fence)):
            end += 1
        yield tag, start, "\n".join(lines[start:end])
        index = end + 1


def prompt_lines(block: str, *, console: bool) -> str:
    """A block's commands: ``$ `` prompts dropped; in a console block only prompted lines
    (and their continuations) are commands, the rest is output (blanked, keeping line numbers)."""
    out: list[str] = []
    continued = False
    for line in block.split("\n"):
        stripped = line.lstrip()
        if stripped.startswith(("$ ", "> ")) or stripped == "$":
            line = stripped[2:]
            continued = line.rstrip().endswith("\\")
        elif console and not continued:
            line = ""
        else:
            continued = line.rstrip().endswith("\\")
        out.append(line)
    return "\n".join(out)


def session_output(block: str) -> str:
    """The lines of a shell block with ``$ `` prompts that are not commands by
    :func:`prompt_lines` (output, or commands written without a prompt), the rest blanked."""
    commands = prompt_lines(block, console=True).split("\n")
    return "\n".join(
        line if not kept and line.strip() else "" for line, kept in zip(block.split("\n"), commands, strict=True)
    )


NOT_SHELL_WORDS = frozenset(
    {
        "import",
        "from",
        "def",
        "class",
        "const",
        "let",
        "var",
        "function",
        "return",
        "async",
        "await",
        "try",
        "except",
        "with",
        "package",
        "public",
        "private",
        "print",
        "elif",
        "else",
        "case",
        "switch",
        "module",
        "use",
        "fn",
        "int",
        "void",
    }
)


def looks_like_shell(block: str) -> bool:
    """An untagged block whose every line reads as a command: ``$ `` prompts, or a plain
    command word (or an assignment) followed by arguments."""
    lines = [line.strip() for line in block.split("\n") if line.strip() and not line.strip().startswith("#")]
    if not lines:
        return False
    if all(line.startswith("$ ") for line in lines):
        return True
    if not all(line.isascii() for line in lines):  # arrows, box drawing, prose: a diagram or text
        return False
    for line in lines:
        first = line.split()[0]
        if first in NOT_SHELL_WORDS:
            return False
        if not (re.match(r"^[a-z][a-z0-9._+-]*$", first) or ASSIGNMENT.match(first) or first.startswith("./")):
            return False
        if line.endswith((":", "{", ",", ";")) and not line.endswith(("do;", "then;")):
            return False
    return True


def strip_js_comments(text: str) -> str:
    """JavaScript with ``//`` and ``/* */`` comments blanked (line numbers kept; strings
    are respected roughly: a ``//`` right after ``:`` is a URL's). Linear."""
    parts: list[str] = []
    position = 0
    while (opening := text.find("/*", position)) >= 0:
        closing = text.find("*/", opening + 2)
        end = len(text) if closing < 0 else closing + 2
        parts += [text[position:opening], "\n" * text.count("\n", opening, end)]
        position = end
    parts.append(text[position:])
    return re.sub(r"(?<![:\\'\"`])//[^\n]*", "", "".join(parts))
