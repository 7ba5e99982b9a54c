"""Text a program wrote, made safe to show a model or a terminal: :func:`neutralise`.

A process's or a run's output may hold escape sequences and control characters: ANSI colours,
a clear-screen, cursor moves, OSC sequences (a terminal's title, hyperlinks, clipboard writes),
carriage returns that overwrite a line, backspaces, bidi overrides that show text in another
order than it is read, and invisible format characters (zero-width spaces, Unicode "tag"
characters that smuggle text a human cannot see).  Shown as they are, such text can paint over
or imitate what the tool itself says, in a terminal or in a model's context.

Every tool result that carries such text (``process_poll``'s output, ``skill_run``'s stdout,
stderr and text files, MCP progress messages) passes through :func:`neutralise`, and so does
every line ``skill-executor test`` prints to a CI log (:func:`skill_executor.testing.logtext.inert`
adds the CI runners' command prefixes to it):

* ``\\n`` and ``\\t`` stay; ``\\r\\n`` becomes ``\\n`` (a terminal's line end, as a PTY writes);
* every other C0 control, DEL and every C1 control is shown as a visible escape: ESC as
  ``\\x1b`` (so ``ESC[31m`` reads ``\\x1b[31m``), a lone CR as ``\\x0d``, NUL as ``\\x00``...;
* bidi controls (U+202A-U+202E, U+2066-U+2069, LRM/RLM/ALM), every other Unicode format
  character (category Cf: zero-width spaces, word joiners, the BOM, tag characters) except the
  zero-width joiner of emoji sequences, line and paragraph separators (U+2028/U+2029) and lone
  surrogates are shown as ``\\uXXXX`` (``\\U000XXXXX`` past the BMP).

Nothing is interpreted and nothing is dropped: the text says which character was there.
A backslash is not escaped (paths and regular expressions stay readable), so the rendering is
not reversible: the raw bytes stay on REST (``GET /v1/sessions/{s}/processes/{p}/output``,
``/v1/runs/{id}``, the kept ``runs/<id>/stdout`` artifact).  The status of a call is never in
this text (structure beside it: see docs/guides/processes.md).
"""

from __future__ import annotations

import re
import unicodedata

#: A neutralised text is at most this many times longer than the text.
MAX_GROWTH = 4
#: The zero-width joiner, kept: emoji sequences use it, and alone it hides nothing.
_KEPT = {"\u200d"}


def _dangerous() -> str:
    """A character class of what :func:`neutralise` shows escaped, as ranges (fast to match)."""
    codes = [c for c in range(0x20) if chr(c) not in "\n\t"] + list(range(0x7F, 0xA0))
    codes += [c for c in range(0xA0, 0x30000) if unicodedata.category(chr(c)) == "Cf" and chr(c) not in _KEPT]
    codes += [*range(0xD800, 0xE000), 0x2028, 0x2029, *range(0xE0000, 0xE0080)]  # surrogates, separators, tags
    spans: list[list[int]] = []
    for code in sorted(set(codes)):
        if spans and spans[-1][1] == code - 1:
            spans[-1][1] = code
        else:
            spans.append([code, code])
    esc = re.escape
    return "[" + "".join(esc(chr(a)) if a == b else f"{esc(chr(a))}-{esc(chr(b))}" for a, b in spans) + "]"


_PATTERN = re.compile(_dangerous())


def _visible(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def neutralise(text: str) -> str:
    """``text`` with every control, bidi and format character shown as a visible escape
    (the module's docstring says which); ``\\n`` and ``\\t`` kept, ``\\r\\n`` made ``\\n``."""
    if "\r\n" in text:
        text = text.replace("\r\n", "\n")
    return _PATTERN.sub(_visible, text)
