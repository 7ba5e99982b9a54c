"""Regular expressions from a test file (``matches``): the only way they are compiled.

A skill's test file is untrusted (CI runs it on pull requests), so its patterns are
compiled by RE2 (google-re2): matching takes time linear in the text, and compiling is
bounded by :data:`MAX_MEMORY` (a counted repetition such as ``(?:a{1000}){1000}`` is
refused, not built). A pattern longer than :data:`MAX_PATTERN_CHARS`, or one RE2 cannot
take (lookarounds, backreferences, possessive repetition), is refused with a stable code:
there is no fallback to a backtracking engine.

The syntax is RE2's, which is Python's without those features; Python's ``\\Z`` is read
as RE2's ``\\z`` (the end of the text). ``\\d``, ``\\w``, ``\\s`` and ``\\b`` are ASCII
(use ``\\p{Nd}``, ``\\pL`` for Unicode classes). Output globs (``files[].glob``) are
compiled by pathspec's RE2 backend (:func:`skill_executor.outputs.collect.compile_globs`).
"""

from __future__ import annotations

from typing import Any, Protocol, cast

import re2

from ..errors import BadRequest

#: The longest pattern accepted (characters).
MAX_PATTERN_CHARS = 2_000
#: RE2's memory budget per pattern (its compiled program and its DFA cache); google-re2
#: keeps its last 128 compiled patterns, so at most 128 times this.
MAX_MEMORY = 4 * 1024 * 1024

#: RE2's parse errors that mean "a feature RE2 does not have" rather than "a mistake".
_UNSUPPORTED = (
    "invalid perl operator: (?=",
    "invalid perl operator: (?!",
    "invalid perl operator: (?<=",
    "invalid perl operator: (?<!",
    "invalid perl operator: (?P",
    "invalid perl operator: (?>",
    "bad repetition operator: *+",
    "bad repetition operator: ++",
    "bad repetition operator: ?+",
)


class PatternError(BadRequest):
    """A pattern that is not compiled. Codes: ``pattern_too_long``, ``pattern_too_large``
    (over RE2's repetition or memory bounds), ``pattern_unsupported`` (lookarounds,
    backreferences, possessive or atomic groups), ``invalid_pattern`` (a syntax error)."""


class Regex(Protocol):
    def search(self, text: str) -> Any: ...


def compile_pattern(pattern: str) -> Regex:
    """``pattern`` compiled with ``^``/``$`` matching at line ends (Python's ``re.MULTILINE``);
    raises :class:`PatternError`."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise PatternError(
            f"the pattern has {len(pattern)} characters, more than {MAX_PATTERN_CHARS}", code="pattern_too_long"
        )
    options = re2.Options()
    options.max_mem = MAX_MEMORY
    options.log_errors = False  # RE2 would print the pattern on stderr: the CI log
    translated = _python_to_re2(pattern)
    try:
        return cast(Regex, re2.compile("(?m)" + translated, options))
    except re2.error:
        pass
    try:  # the reason, quoting the pattern as written (without the "(?m)")
        re2.compile(translated, options)
        reason = "pattern too large - compile failed"
    except re2.error as exc:
        reason = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
    raise _refusal(reason)


def _refusal(reason: str) -> PatternError:
    if (
        any(reason.startswith(prefix) for prefix in _UNSUPPORTED)
        or reason.startswith("invalid escape sequence: \\")
        and reason[len("invalid escape sequence: \\") :][:1].isdigit()
    ):
        return PatternError(
            f"RE2 cannot take it ({reason}): lookarounds, backreferences and possessive or atomic "
            "repetition are not supported; split it into several patterns or use contains / "
            "not_contains",
            code="pattern_unsupported",
        )
    if reason.startswith("invalid repetition size"):
        return PatternError(f"its counted repetitions total more than RE2's 1000 ({reason})", code="pattern_too_large")
    if reason.startswith("pattern too large"):
        return PatternError(
            f"it is too large to compile within {MAX_MEMORY // (1024 * 1024)} MiB ({reason})", code="pattern_too_large"
        )
    return PatternError(f"RE2 syntax error: {reason}", code="invalid_pattern")


def _python_to_re2(pattern: str) -> str:
    """Python's ``\\Z`` (end of text) is RE2's ``\\z``; nothing else is rewritten."""
    out: list[str] = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\" and index + 1 < len(pattern):
            nxt = pattern[index + 1]
            out.append("\\z" if nxt == "Z" else char + nxt)
            index += 2
            continue
        out.append(char)
        index += 1
    return "".join(out)
