"""Judging a command's words (each a literal, or None where it expands): the variables a
builtin names, ``set``'s and a shell's options, what a wrapper starts, the code of ``sh -c``.
:class:`Unknowable` says what cannot be known before the command runs."""

from __future__ import annotations

import re

from .vocabulary import (
    BINARY_TESTS,
    DANGEROUS_VARIABLE,
    SAFE_NAME,
    SAFE_SET_LETTERS,
    SAFE_SET_NAMES,
    SAFE_SHOPT_NAMES,
    WrapperSpec,
)


class Unknowable(Exception):
    """The programs of a command cannot all be known before it runs."""


def judge_name(word: str | None, what: str) -> None:
    """A variable a builtin assigns, unsets or tests: a plain name (an array element by a
    number only: a subscript is arithmetic, and ``a[$(cmd)]`` runs ``cmd``), never one of
    :data:`DANGEROUS_VARIABLE`."""
    if word is None:
        raise Unknowable(f"{what} names a variable only known when the command runs")
    match = SAFE_NAME.match(word)
    if match is None:
        raise Unknowable(f"{what} names {word[:60]!r}, which is not judged (an array subscript can run code)")
    if DANGEROUS_VARIABLE.match(match.group(1)):
        raise Unknowable(f"{what} assigns {match.group(1)}, which changes what commands start")


def _getopt(head: str, args: list[str | None], valued: str, flags: str) -> tuple[list[tuple[str, str | None]], int]:
    """A builtin's options as bash reads them (``-a NAME``, ``-aNAME``, ``-ra NAME``): the
    (letter, value) pairs and the index of its first operand (an expansion is taken for one:
    see :func:`_after_expansion`)."""
    found: list[tuple[str, str | None]] = []
    index = 0
    while index < len(args):
        word = args[index]
        if word is None:
            break
        if word == "--":
            return found, index + 1
        if not word.startswith("-") or word == "-":
            break
        index += 1
        for at, letter in enumerate(word[1:], start=1):
            if letter in valued:
                value = word[at + 1 :] or (args[index] if index < len(args) else None)
                if not word[at + 1 :]:
                    index += 1
                found.append((letter, value))
                break
            if letter not in flags:
                raise Unknowable(f"{head} option {word!r} is not judged")
            found.append((letter, None))
    return found, index


def _after_expansion(head: str, words: list[str | None]) -> None:
    """An expansion among a builtin's words can be an option (``x=-p; wait $x PATH``): every
    word after one must be a literal, and a name there a plain one."""
    expanded = False
    for word in words:
        if expanded:
            if word is None:
                raise Unknowable(f"{head} is given expansions that can be options naming a variable")
            if re.match(r"^[A-Za-z_]", word):
                judge_name(word, head)
        expanded = expanded or word is None


def judge_builtin(head: str, args: list[str | None]) -> None:
    """Builtins that assign, unset or test a variable by name (``read``, ``printf -v``,
    ``getopts``, ``wait -p``, ``unset``, ``test -v``, ``declare`` and its kin), ``set`` (its
    options) and ``jobs -x`` (which runs a command)."""
    if head == "read":
        options, first = _getopt(head, args, "adinNptu", "ers")
        for letter, value in options:
            if letter == "a":
                judge_name(value, "read -a")
        for word in args[first:]:
            judge_name(word, head)
    elif head == "printf":
        options, _ = _getopt(head, args[:2] if args and args[0] and args[0].startswith("-v") else [], "v", "")
        for _, value in options:
            judge_name(value, "printf -v")
        _after_expansion(head, args[:2])
    elif head == "getopts":
        if len(args) > 1:
            judge_name(args[1], head)
    elif head == "wait":
        options, first = _getopt(head, args, "p", "fn")
        for letter, value in options:
            if letter == "p":
                judge_name(value, "wait -p")
        _after_expansion(head, args[first:])
    elif head == "unset":
        _, first = _getopt(head, args, "", "fvn")
        for word in args[first:]:
            judge_name(word, head)
    elif head in ("test", "["):
        operands = args[:-1] if head == "[" and args and args[-1] == "]" else args
        for index, word in enumerate(operands):
            following = operands[index + 1] if index + 1 < len(operands) else None
            if word in ("-v", "-R") and index + 1 < len(operands):
                judge_name(following, f"{head} {word}")
            elif word is None and index + 1 < len(operands) and following not in BINARY_TESTS:
                raise Unknowable(f"{head} is given an expansion that can be -v, which runs an array subscript")
    elif head == "jobs":
        if any(word is None or (word.startswith("-") and "x" in word) for word in args):
            raise Unknowable("jobs -x runs a command")
    elif head == "set":
        _set_options(head, args)
    else:  # declare, typeset, local, export, readonly
        judge_assignments(head, args)


def judge_assignments(head: str, args: list[str | None]) -> None:
    for word in args:
        if word is None:
            raise Unknowable(f"{head} with an expansion is not judged")
        if word.startswith(("-", "+")):
            if set(word[1:]) & set("nif") or not word[1:].isalpha():
                raise Unknowable(f"{head} {word} is not judged (namerefs, integers, functions)")
            continue
        name, equals, value = word.partition("=")
        judge_name(name.removesuffix("+"), head)
        if equals and value.startswith("("):  # a quoted compound assignment: subscripts again
            raise Unknowable(f"{head} {word[:60]!r} is not judged (an array subscript can run code)")


def _set_options(head: str, args: list[str | None]) -> None:
    """``set``'s options: those that change how a command is read (``-k``: assignments
    anywhere, ``-o keyword``, ``-H``, ...) are refused."""
    index = 0
    while index < len(args):
        word = args[index]
        if word is None:
            raise Unknowable(f"{head} is given an expansion among its options")
        if word in ("--", "-") or word[:1] not in "-+" or len(word) < 2 or word.startswith("--"):
            return
        index += 1 + _option_word(head, word, args[index + 1 :], "")


def _option_word(head: str, word: str, following: list[str | None], own: str) -> int:
    """One word of set's (or a shell's) one-letter options, ``own`` the shell's own letters
    (``c``); how many following words its ``-o``/``-O`` take."""
    taken = 0
    for letter in word[1:]:
        if letter in "oO":
            value = following[taken] if taken < len(following) else None
            taken += 1
            allowed = SAFE_SET_NAMES if letter == "o" else SAFE_SHOPT_NAMES
            if value not in allowed and not (value is None and head == "set"):
                raise Unknowable(f"{head} {word[0]}{letter} {value!r} is not judged (it changes how commands are read)")
        elif letter not in SAFE_SET_LETTERS and letter not in own:
            raise Unknowable(f"{head} option {word!r} is not judged (it changes how commands are read)")
    return taken


def wrapped_command(head: str, spec: WrapperSpec, args: list[str | None]) -> list[str | None] | None:
    """The words of the command ``head`` starts (None: it starts none)."""
    index = 0
    operands = spec.operands
    while index < len(args):
        word = args[index]
        if word is None:
            raise Unknowable(f"{head} is given {'an expansion'} before its command")
        if word == "--":
            index += 1
            break
        if word.startswith("-") and word != "-" or (word == "-" and "-" in spec.flags):
            option, _, attached = word.partition("=")
            if option in spec.refused:
                raise Unknowable(spec.refused[option])
            if option in spec.queries:
                return None
            if option in spec.flags:
                index += 1
                continue
            if option in spec.valued:
                index += 1 if attached or "=" in word else 2
                continue
            if spec.numeric and re.match(r"^-\d+$", word):
                index += 1
                continue
            short = word[:2]
            if short in spec.valued and not word.startswith("--"):  # -oL, -n5
                index += 1
                continue
            raise Unknowable(f"{head} option {word!r} is not judged")
        if spec.assignments and _assignment(head, spec, word):
            index += 1
            continue
        if operands:
            operands -= 1
            index += 1
            continue
        break
    while spec.any_assignment and index < len(args) and _assignment(head, spec, args[index]):
        index += 1  # env -- A=1 cmd: still assignments
    rest = args[index:]
    if not rest:
        return [spec.default] if spec.default else None
    return rest


def _assignment(head: str, spec: WrapperSpec, word: str | None) -> bool:
    """Whether ``word`` is an assignment ``head`` makes (env: any word with ``=``, whatever its
    name: ``env 'a-b=1' cmd`` starts cmd); never of a variable that changes what starts."""
    if word is None or "=" not in word:
        return False
    if not spec.any_assignment and not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", word):
        return False
    variable = word.split("=", 1)[0]
    if DANGEROUS_VARIABLE.match(variable):
        raise Unknowable(f"{head} sets {variable}, which changes what commands start")
    return True


def shell_inline_code(program: str, args: list[str | None]) -> str | None:
    """The code a shell runs from ``-c`` (None: a script file, the shell's own business);
    refused when it reads commands from its input."""
    index = 0
    inline = False
    while index < len(args):
        word = args[index]
        if word is None:
            raise Unknowable(f"{program} is given an expansion among its options")
        if word == "--" or word == "-":
            index += 1
            break
        if word in ("--rcfile", "--init-file"):
            index += 2
            continue
        if word.startswith("--"):
            if word in ("--norc", "--noprofile", "--posix", "--restricted", "--noediting"):
                index += 1
                continue
            raise Unknowable(f"{program} option {word!r} is not judged")
        if word[:1] in "-+" and len(word) > 1:
            letters = word[1:]
            if not re.match(r"^[a-zA-Z]+$", letters) or "s" in letters or "i" in letters:
                raise Unknowable(f"{program} {word} reads commands from its input")
            if "l" in letters:
                raise Unknowable(f"{program} {word} is a login shell: it runs ~/.profile first")
            inline = inline or "c" in letters
            # -e, -o pipefail, -O nullglob: judged as set's (-eo pipefail takes the next word)
            index += 1 + _option_word(program, word, args[index + 1 :], "c")
            continue
        break
    rest = args[index:]
    if inline:
        if not rest or rest[0] is None:
            raise Unknowable(f"{program} -c runs a string only known when the command runs")
        return rest[0]
    if not rest:
        raise Unknowable(f"{program} without a script reads commands from its input")
    if rest[0] is None:
        raise Unknowable(f"{program} runs a script only known when the command runs")
    if rest[0] == "/dev/stdin" or rest[0].startswith(("/dev/fd/", "/proc/")):
        raise Unknowable(f"{program} {rest[0]} reads commands from its input")
    return None
