"""Every program a command starts, read from the tree of the project's shell parser
(:mod:`skill_executor.shell`), or the reason that cannot be known (:func:`analyse`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from tree_sitter import Node

from ..shell import literal, parser
from .vocabulary import (
    ARITHMETIC_NODES,
    ARITHMETIC_TESTS,
    CONTINUED_WORD,
    CONTROL,
    DANGEROUS_VARIABLE,
    EXPANDING,
    FIND_EXEC,
    KEYWORDS,
    KNOWN_NODES,
    NAMING,
    SHELLS,
    UNKNOWABLE,
    WRAPPERS,
    program_name,
    runner,
)
from .words import Unknowable, judge_assignments, judge_builtin, judge_name, shell_inline_code, wrapped_command


@dataclass
class Analysis:
    programs: list[str] = field(default_factory=list)
    problem: str | None = None

    def sorted(self) -> tuple[str, ...]:
        return tuple(sorted(set(self.programs)))


def analyse(command: str, env: Mapping[str, str] | None = None) -> Analysis:
    """Every program ``command`` starts, or the reason that cannot be known."""
    found = Analysis()
    try:
        for name in env or {}:
            if DANGEROUS_VARIABLE.match(name):
                raise Unknowable(f"the request's env sets {name}, which changes what commands start")
        _walk_source(command, found.programs, depth=0)
    except Unknowable as exc:
        found.problem = str(exc)
    return found


MAX_DEPTH = 8


def _walk_source(source: str, out: list[str], depth: int) -> None:
    if depth > MAX_DEPTH:
        raise Unknowable("shells nest too deeply to judge")
    if "\x00" in source:
        raise Unknowable("the command holds a NUL character")
    control = CONTROL.search(source)
    if control is not None:  # \r, \v, \f: blanks to the parser, a word's characters to bash
        raise Unknowable(
            f"the command holds the control character {control.group()!r} (the parser and bash read it differently)"
        )
    if CONTINUED_WORD.search(source):
        raise Unknowable("a line continuation inside a word (the parser and the shell read it differently)")
    data = source.encode("utf-8", "surrogateescape")
    tree = parser().parse(data)
    if tree.root_node.has_error:
        raise Unknowable("the command does not parse as shell code")
    _unread_substitutions(tree.root_node, data)
    _glued_arrays(tree.root_node, data)
    _walk(tree.root_node, out, depth)


#: Where a command substitution (or arithmetic) may begin: ``$(``, ``$[``, a backtick; and a
#: translated string ``$"..."``: bash expands the translation a catalog holds (``TEXTDOMAINDIR``),
#: and a skill or a bundle can ship the catalog.
SUBSTITUTION = re.compile(rb'\$\(|\$\[|`|\$"')


def _unread_substitutions(root: Node, data: bytes) -> None:
    """Refuse text the shell would run as a command substitution but the parser read as
    something else (nested backticks, ``<<-`` here-document bodies, backticks in a
    ``${x:-...}`` inside a string): every ``$(``, ``$[`` and backtick must open or close a
    substitution (or arithmetic) the parser read, or sit in single quotes, a comment or the
    body of a here-document with a quoted delimiter."""
    read: set[int] = set()
    inert: list[tuple[int, int]] = []
    stack = [(root, False)]
    while stack:
        node, quoted = stack.pop()  # quoted: inside double quotes or a here-document body
        kind = node.type
        if kind in ("command_substitution", "arithmetic_expansion", "process_substitution"):
            if node.children:
                read.add(node.children[0].start_byte)
                if node.children[-1].type == "`":
                    read.add(node.children[-1].start_byte)
            quoted = False  # a substitution's code is read afresh
        elif kind == "comment" or (kind in ("raw_string", "ansi_c_string") and not quoted):
            # single quotes in "${x-'...'}" or a here-document are no quotes to bash
            inert.append((node.start_byte, node.end_byte))
            continue
        elif kind == "heredoc_redirect":
            start = next((c for c in node.children if c.type == "heredoc_start"), None)
            if start is not None and re.search(r"['\"\\]", _text(start)):
                inert += [(c.start_byte, c.end_byte) for c in node.children if c.type == "heredoc_body"]
        quoted = quoted or kind in ("string", "heredoc_body")
        stack.extend((child, quoted) for child in node.children)
    for match in SUBSTITUTION.finditer(data):
        at = match.start()
        if at in read or any(start <= at < end for start, end in inert):
            continue
        shown = data[max(0, at - 20) : at + 20].decode("utf-8", "replace")
        if match.group() == b'$"':
            raise Unknowable(f"a translated string is not judged (its catalog's translation can run code): {shown!r}")
        raise Unknowable(f"a command substitution the parser did not read: {shown!r}")


#: What may follow an array literal's ``)``: a blank, an operator, the end.
AFTER_ARRAY = frozenset(b" \t\n;&|)<>")


def _glued_arrays(root: Node, data: bytes) -> None:
    """Refuse an array literal glued to the next word: bash reads ``a=(1)ls rm`` as one
    assignment word and runs ``rm``; the parser reads ``a=(1)`` and the command ``ls rm``."""
    stack = [root]
    while stack:
        node = stack.pop()
        if node.type == "array" and node.end_byte < len(data) and data[node.end_byte] not in AFTER_ARRAY:
            shown = data[node.start_byte : node.end_byte + 20].decode("utf-8", "replace")
            raise Unknowable(f"an array literal glued to the next word is not judged: {shown!r}")
        stack.extend(node.children)


def _text(node: Node) -> str:
    return (node.text or b"").decode("utf-8", "surrogateescape")


def _walk(root: Node, out: list[str], depth: int) -> None:
    stack = [root]
    while stack:
        node = stack.pop()
        if node.is_named:
            kind = node.type
            if kind not in KNOWN_NODES:
                raise Unknowable(f"{kind.replace('_', ' ')} is not judged: {_text(node)[:60]!r}")
            if kind == "variable_name" and DANGEROUS_VARIABLE.match(_text(node)):
                raise Unknowable(f"the command uses {_text(node)}, which changes what commands start")
            if kind == "command":
                _command(node, out, depth)
            elif kind == "declaration_command":
                _declaration(node)
            elif kind == "unset_command":
                _unset(node)
            elif kind == "file_redirect":
                _duplication(node)
            elif kind == "unary_expression" and node.children and _text(node.children[0]) in ("-v", "-R"):
                _tested(node)
            elif kind == "expansion":
                _expansion(node)
            elif kind == "subscript":
                _arithmetic(node.child_by_field_name("index"), "an array subscript")
            elif kind == "array":  # a=([i]=v): i is arithmetic (of an indexed array)
                for element in node.children:
                    text = _text(element)
                    if text.startswith("[") and not re.match(r"^\[[0-9]+\]\+?=", text):
                        raise Unknowable(f"an array subscript {text[:60]!r} is not judged (it can run code)")
            elif kind == "c_style_for_statement":
                for part in node.children:
                    if part.type not in ("do_group", "compound_statement"):
                        _arithmetic(part, "arithmetic")
            elif kind == "arithmetic_expansion" or (
                kind == "compound_statement" and node.children and node.children[0].type == "(("
            ):
                _arithmetic(node, "arithmetic")
            elif kind == "binary_expression" and _operator(node) in ARITHMETIC_TESTS:
                for side in (node.child_by_field_name("left"), node.child_by_field_name("right")):
                    if side is not None and side.type != "number":
                        raise Unknowable(f"an arithmetic test reads {_text(side)!r}, which can run code")
        stack.extend(reversed(node.children))


def _operator(node: Node) -> str:
    op = node.child_by_field_name("operator")
    return _text(op) if op is not None else ""


def _arithmetic(node: Node | None, what: str) -> None:
    """Arithmetic evaluates the values of the variables it reads as arithmetic, and a value
    such as ``a[$(cmd)]`` runs ``cmd``: arithmetic may only hold numbers."""
    if node is None:
        return
    stack = [node]
    while stack:
        current = stack.pop()
        if current.is_named and current.type not in ARITHMETIC_NODES:  # a name, an expansion, a string
            raise Unknowable(f"{what} reads {_text(current)!r}, which can run code")
        stack.extend(current.children)


def _expansion(node: Node) -> None:
    text = _text(node)
    if text.startswith("${!"):
        raise Unknowable(f"indirect expansion {text[:60]!r} is not judged")
    if re.search(r"@[A-Za-z]\}$", text):
        raise Unknowable(f"a transforming expansion {text[:60]!r} is not judged (@P runs code)")
    # ${x:offset:length}: the offsets are arithmetic
    children = node.children
    for index, child in enumerate(children):
        if child.type == ":" and index + 1 < len(children):
            for rest in children[index + 1 :]:
                _arithmetic(rest, "a substring offset") if rest.type not in ("}", ":") else None
            break


def _declaration(node: Node) -> None:
    keyword = node.children[0].type if node.children else ""
    words: list[str | None] = []
    for child in node.children[1:]:
        if child.type == "word":
            words.append(literal(child))
        elif child.type not in ("variable_assignment", "variable_name", "comment"):
            raise Unknowable(f"{keyword} with {_text(child)[:60]!r} is not judged")
    judge_assignments(keyword, words)


def _tested(node: Node) -> None:
    """``[[ -v NAME ]]``: a subscript of NAME is arithmetic (it can run code)."""
    operand = node.children[1] if len(node.children) > 1 else None
    if operand is not None and operand.type == "variable_name":
        word: str | None = _text(operand)
    else:
        word = None if operand is None else literal(operand)
    judge_name(word, f"[[ {_text(node.children[0])}")


def _duplication(node: Node) -> None:
    """``>& word``: once the word is no descriptor number, bash expands it again, so
    ``ls >& '$(cmd)'`` runs ``cmd``: the word must be a literal without ``$`` or backticks."""
    if not any(child.type in (">&", "<&", ">&-", "<&-") for child in node.children):
        return
    target = node.child_by_field_name("destination")
    word = literal(target) if target is not None else ""
    if word is None or re.search(r"[$`]", word):
        raise Unknowable(f"a duplication {_text(node)[:60]!r} is not judged (bash expands its word twice)")


def _unset(node: Node) -> None:
    words: list[str | None] = []
    for child in node.children[1:]:
        if child.type in ("variable_name", "subscript"):
            words.append(_text(child))
        elif child.type != "comment":
            words.append(literal(child))
    judge_builtin("unset", words)


def _words(node: Node) -> list[str | None]:
    """The command's words, name first: each literal, or None where it expands."""
    name = node.child_by_field_name("name")
    assert name is not None
    first = name.children[0] if name.children else name
    words: list[str | None] = [literal(first)]
    for child in node.children_by_field_name("argument"):
        words.append(literal(child))
    return words


def _command(node: Node, out: list[str], depth: int) -> None:
    name = node.child_by_field_name("name")
    if name is None:  # assignments (and redirections) alone
        return
    words = _words(node)
    for word in words[1:]:  # {NAME}>file assigns NAME a descriptor
        braced = re.match(r"^\{([A-Za-z_][A-Za-z0-9_]*(?:\[.*\])?)\}$", word or "")
        if braced is not None:
            judge_name(braced.group(1), "a redirection")
    if words[0] is None:
        raise Unknowable(f"the program {_text(name)[:60]!r} is only known when the command runs")
    _program(words, out, depth, _text(name))


def _program(words: list[str | None], out: list[str], depth: int, shown: str) -> None:
    """Judge a command of ``words`` (the first known) and what it starts."""
    while True:
        head = words[0]
        if head is None:
            raise Unknowable(f"a wrapper starts {shown!r}, which is only known when the command runs")
        if EXPANDING.search(head) and head not in ("[",):
            raise Unknowable(f"the program {head!r} expands (a glob, a brace, a tilde or a new line)")
        if head in UNKNOWABLE:
            raise Unknowable(UNKNOWABLE[head])
        if head in KEYWORDS:  # the parser and the shell disagree (``! ! cmd``): not judged
            raise Unknowable(f"the shell keyword {head!r} read as a program")
        program = program_name(head)
        if program.startswith(("/proc/", "/dev/fd/", "/dev/stdin")):
            raise Unknowable(f"the program {program!r} is a file only known when the command runs")
        shell_code = shell_inline_code(program, words[1:]) if program in SHELLS else None
        # a shell running -c code is judged through ("sh -c": a deny of sh still holds)
        out.append(f"{program} -c" if shell_code is not None else program)
        if head in NAMING:
            judge_builtin(head, words[1:])
        if runner(program):
            return  # judged by name: refused unless allowed by name
        if shell_code is not None:
            _walk_source(shell_code, out, depth + 1)
            return
        if program in SHELLS:
            return
        if program == "find":
            _find(words[1:], out, depth)
            return
        spec = WRAPPERS.get(program)
        if spec is None:
            return
        rest = wrapped_command(program, spec, words[1:])
        if rest is None:
            return
        words = rest


def _find(args: list[str | None], out: list[str], depth: int) -> None:
    index = 0
    while index < len(args):
        word = args[index]
        if word in FIND_EXEC:
            end = index + 1
            while end < len(args) and args[end] not in (";", "+"):
                end += 1
            inner = args[index + 1 : end]
            if not inner:
                raise Unknowable(f"find {word} without a command")
            _program(inner, out, depth, "find " + str(word))
            index = end
        index += 1
