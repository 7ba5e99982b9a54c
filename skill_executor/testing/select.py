"""``-k EXPR``: pytest's keyword expressions over a case's id (``skill::case name``).

Words match as case-insensitive substrings; ``and``, ``or``, ``not`` and parentheses
combine them: ``-k "csv and not broken"``. A word may be quoted to hold spaces.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ..errors import BadRequest

_TOKEN = re.compile(r"\s*(\(|\)|\"[^\"]*\"|'[^']*'|[^\s()]+)")

Matcher = Callable[[str], bool]


def keyword_matcher(expression: str) -> Matcher:
    """A predicate over case ids; a malformed expression is a usage error (400)."""
    tokens = _tokens(expression)
    if not tokens:
        return lambda _: True
    position = 0

    def peek() -> str | None:
        return tokens[position] if position < len(tokens) else None

    def take() -> str:
        nonlocal position
        token = tokens[position]
        position += 1
        return token

    def parse_or() -> Matcher:
        left = parse_and()
        while peek() == "or":
            take()
            right = parse_and()
            left = (lambda a, b: lambda s: a(s) or b(s))(left, right)
        return left

    def parse_and() -> Matcher:
        left = parse_not()
        while peek() == "and":
            take()
            right = parse_not()
            left = (lambda a, b: lambda s: a(s) and b(s))(left, right)
        return left

    def parse_not() -> Matcher:
        if peek() == "not":
            take()
            inner = parse_not()
            return lambda s: not inner(s)
        return parse_atom()

    def parse_atom() -> Matcher:
        token = peek()
        if token is None:
            raise _bad(expression, "it ends too early")
        take()
        if token == "(":
            inner = parse_or()
            if peek() != ")":
                raise _bad(expression, "a '(' is not closed")
            take()
            return inner
        if token in (")", "and", "or"):
            raise _bad(expression, f"unexpected {token!r}")
        word = token[1:-1] if token[:1] in "\"'" else token
        needle = word.lower()
        return lambda s: needle in s.lower()

    matcher = parse_or()
    if position != len(tokens):
        raise _bad(expression, f"unexpected {tokens[position]!r}")
    return matcher


def _tokens(expression: str) -> list[str]:
    tokens: list[str] = []
    rest = expression.strip()
    while rest:
        found = _TOKEN.match(rest)
        if found is None:
            raise _bad(expression, "an unclosed quote")
        tokens.append(found.group(1))
        rest = rest[found.end() :].lstrip()
    return tokens


def _bad(expression: str, why: str) -> BadRequest:
    return BadRequest(f"invalid -k expression {expression!r}: {why}", code="usage")
