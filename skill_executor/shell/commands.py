"""The commands of shell code, read by a real parser (tree-sitter's bash grammar), pure.

Only words in command position are commands: ``case`` patterns, ``[[ ... =~ ... ]]`` regexes,
arguments (an ffmpeg filter, a search query), here-document bodies, assignments and
redirections are not.  Commands inside command substitutions, pipelines, lists, loops,
conditionals and function bodies are.  Wrappers (``sudo``, ``env``, ``exec``, ...) are looked
through to the command they run.  Names of functions the code defines are collected, so calls
of them are not taken for commands.

Each command says whether it is **sure**: it parsed cleanly (no parse error in or around it)
and its name reads as a command (not an all-capitals word such as a query's ``AND``, nor a
camelCase word alone such as a subcommand's ``auditItems``).  Callers
add their own knowledge (a script is surer than a snippet in prose).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import lru_cache
from typing import NamedTuple

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

#: A shell variable assignment at the head of a word (``NAME=``, ``NAME+=``, ``NAME[i]=``).
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=")

#: Words that run the command after them (their options skipped).
WRAPPERS = frozenset({"sudo", "env", "exec", "time", "nohup", "nice", "stdbuf", "doas"})
#: A name in capitals only (``AND``, ``SELECT``): a query's or a table's word, not a command.
SHOUTED = re.compile(r"^[A-Z][A-Z0-9_]+$")
#: A camelCase word alone on its line (``auditItems``: a script's subcommand shown by itself)
#: is a guess; with arguments it is a command like deepTools' ``bamCoverage -b x.bam``.
CAMEL = re.compile(r"^[a-z][a-z0-9]*[A-Z]")
#: Nodes whose text is one literal word once unquoted.
_EXPANSIONS = frozenset(
    {
        "simple_expansion",
        "expansion",
        "command_substitution",
        "arithmetic_expansion",
        "process_substitution",
        "brace_expression",
    }
)
_ARGUMENTS = frozenset(
    {"word", "string", "raw_string", "concatenation", "number", "ansi_c_string", "translated_string", *_EXPANSIONS}
)
_ESCAPE = re.compile(r"\\(.)", re.S)


class ShellCommand(NamedTuple):
    """One command: its words from the command name on, its 1-based line, whether it is sure."""

    words: list[str]
    line: int
    sure: bool


@lru_cache(maxsize=1)
def parser() -> Parser:
    """The one tree-sitter bash parser of the package (made once; shared by every reader)."""
    return Parser(Language(tree_sitter_bash.language()))


#: At most this many stretches a parse error swallowed are read again, per call.
RECOVERIES = 32


def shell_commands(text: str, functions: set[str] | None = None) -> Iterator[ShellCommand]:
    """The commands of ``text`` (see the module docstring), in source order; the names of the
    functions it defines are added to ``functions``.  Lines a parse error swallowed (an
    unclosed quote, say) are read again on their own, and what they run is not sure."""
    functions = set() if functions is None else functions
    budget = [RECOVERIES]
    yield from sorted(_commands(text.split("\n"), 0, functions, budget), key=lambda c: c.line)


def _commands(lines: list[str], first: int, functions: set[str], budget: list[int]) -> list[ShellCommand]:
    source = "\n".join(lines).encode("utf-8", "surrogateescape")
    tree = parser().parse(source)
    found: list[ShellCommand] = []
    broken_rows: set[int] = set()  # lines a parse error touches: nothing on them is sure
    swallowed: list[tuple[int, int]] = []
    stack: list[tuple[Node, bool]] = [(tree.root_node, False)]
    while stack:  # iterative: a deeply nested file must not exhaust the interpreter's stack
        node, broken = stack.pop()
        if node.type == "ERROR" or node.is_missing:
            before = node.prev_named_sibling
            start = before.end_point.row if before is not None and not broken else node.start_point.row
            if not broken and node.end_point.row > start:
                swallowed.append((start + 1, node.end_point.row))
            broken = True
            broken_rows.update(range(start, node.end_point.row + 1))
        if node.type in ("command", "subshell") and _glued(source, node.start_byte):
            continue  # `crop=1280:720:(iw-1280)/2`: a word the parser split, no command (bash refuses it)
        if node.type == "function_definition":
            name = node.child_by_field_name("name")
            if name is not None and name.text is not None:
                functions.add(name.text.decode("utf-8", "surrogateescape"))
        elif node.type == "command":
            command = _command(node, broken)
            if command is not None:
                found.append(command._replace(line=command.line + first))
        stack.extend((child, broken) for child in reversed(node.children))
    out = [c._replace(sure=False) if c.sure and c.line - first - 1 in broken_rows else c for c in found]
    for start, end in swallowed:
        if budget[0] <= 0:
            break
        budget[0] -= 1
        taken = {c.line for c in out}
        again = _commands(lines[start : end + 1], first + start, functions, budget)
        out += [c._replace(sure=False) for c in again if c.line not in taken]
    return out


def _command(node: Node, broken: bool) -> ShellCommand | None:
    name_node = node.child_by_field_name("name")
    if name_node is None:
        return None
    name = literal(name_node.children[0] if name_node.children else name_node)
    if name is None:
        return None
    words = [name]
    for child in node.children_by_field_name("argument"):
        if child.type not in _ARGUMENTS:
            continue
        value = literal(child)
        words.append(value if value is not None else _text(child))
    words = _through_wrappers(words)
    if not words or words[0].startswith(("-", "~")) or "=" in words[0] or words[0].isdigit():
        return None
    alone_camel = len(words) == 1 and bool(CAMEL.match(words[0]))
    sure = not broken and not node.has_error and not SHOUTED.match(words[0]) and not alone_camel
    return ShellCommand(words, node.start_point.row + 1, sure)


#: What may come right before a command (or a subshell) in valid shell: space, an operator,
#: a bracket (``$(``, a ``case`` pattern's ``a)cmd``) or a quote.  Anything else glues it to
#: a word the parser split (``crop=...:(iw-1280)/2``: a subshell after ``:``).
_COMMAND_BOUNDARY = frozenset(b" \t\r\n;&|(){}!`$\"'")


def _glued(source: bytes, start: int) -> bool:
    return start > 0 and source[start - 1] not in _COMMAND_BOUNDARY


def _through_wrappers(words: list[str]) -> list[str]:
    while words:
        head = words[0]
        if ASSIGNMENT.match(head):
            words = words[1:]
        elif head in WRAPPERS:
            words = words[1:]
            while words and words[0].startswith("-"):
                words = words[1:]
        else:
            break
    return words


def literal(node: Node) -> str | None:
    """The word ``node`` stands for once unquoted, or None when it holds an expansion."""
    kind = node.type
    if kind in ("word", "number", "command_name"):
        if any(child.type in _EXPANSIONS for child in node.children):
            return None
        return _ESCAPE.sub(r"\1", _text(node))
    if kind == "raw_string":
        return _text(node)[1:-1]
    if kind == "string":
        if any(child.type in _EXPANSIONS for child in node.children):
            return None
        return re.sub(r'\\([$`"\\\n])', r"\1", _text(node)[1:-1])
    if kind == "concatenation":
        parts = [literal(child) for child in node.children]
        return None if any(p is None for p in parts) else "".join(p for p in parts if p is not None)
    return None


def _text(node: Node) -> str:
    return (node.text or b"").decode("utf-8", "surrogateescape")
