"""How a mismatch is shown: the tail of a long text, a unified diff (or, for texts too
large to diff cheaply, the lines around the first difference), and where a JSON value
fails to contain an expected one.  Pure functions.
"""

from __future__ import annotations

import difflib
import json
from typing import Any

#: How much of a stream or file a message quotes.
TAIL_CHARS = 2000
#: Texts are diffed line by line up to this size; beyond it, around the first difference.
DIFF_MAX_CHARS = 200_000
DIFF_MAX_LINES = 5_000


def subset_problems(expected: Any, got: Any, where: str = "$") -> list[str]:
    """Where ``got`` fails to contain ``expected``: objects may have more keys; arrays
    match element by element and must have the same length; scalars are equal (1 is not
    true, 1 equals 1.0)."""
    if isinstance(expected, dict):
        if not isinstance(got, dict):
            return [f"{where} is {_kind(got)}, expected an object"]
        problems: list[str] = []
        for key, value in expected.items():
            if key not in got:
                problems.append(f"{where}.{key} is missing")
            else:
                problems += subset_problems(value, got[key], f"{where}.{key}")
        return problems
    if isinstance(expected, list):
        if not isinstance(got, list):
            return [f"{where} is {_kind(got)}, expected an array"]
        if len(got) != len(expected):
            return [f"{where} has {len(got)} elements, expected {len(expected)}"]
        return [p for i, value in enumerate(expected) for p in subset_problems(value, got[i], f"{where}[{i}]")]
    if isinstance(expected, bool) or isinstance(got, bool):
        same = isinstance(expected, bool) and isinstance(got, bool) and expected == got
    else:
        same = expected == got
    return (
        []
        if same
        else [
            f"{where} is {json.dumps(got, ensure_ascii=False)[:200]}, expected "
            f"{json.dumps(expected, ensure_ascii=False)[:200]}"
        ]
    )


def projected(expected: Any, got: Any) -> Any:
    """``got`` cut down to the keys ``expected`` names, so a diff shows only what matters."""
    if isinstance(expected, dict) and isinstance(got, dict):
        return {k: projected(v, got[k]) for k, v in expected.items() if k in got}
    if isinstance(expected, list) and isinstance(got, list) and len(expected) == len(got):
        return [projected(e, g) for e, g in zip(expected, got, strict=True)]
    return got


def _kind(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


def text_diff(expected: str, got: str, expected_name: str = "expected", got_name: str = "got") -> str:
    if not expected.endswith("\n") and not got.endswith("\n"):
        expected, got = expected + "\n", got + "\n"  # no "No newline" noise when neither has one
    if max(len(expected), len(got)) > DIFF_MAX_CHARS or max(expected.count("\n"), got.count("\n")) > DIFF_MAX_LINES:
        return _first_difference(expected, got, expected_name, got_name)
    lines = list(
        difflib.unified_diff(
            expected.splitlines(keepends=True),
            got.splitlines(keepends=True),
            fromfile=expected_name,
            tofile=got_name,
            n=2,
        )
    )
    if not lines and expected != got:
        return "(the texts differ only in line endings or a final newline)"
    shown = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines[:200])
    return shown + (f"... ({len(lines) - 200} more diff lines)\n" if len(lines) > 200 else "")


def _first_difference(expected: str, got: str, expected_name: str, got_name: str) -> str:
    """Too large to diff cheaply: the lines around the first difference."""
    want, have = expected.splitlines(keepends=True), got.splitlines(keepends=True)
    at = next((i for i, (a, b) in enumerate(zip(want, have, strict=False)) if a != b), min(len(want), len(have)))
    start = max(0, at - 2)
    lines = [
        f"--- {expected_name}\n",
        f"+++ {got_name}\n",
        f"@@ first difference at line {at + 1} ({len(want)} lines expected, {len(have)} got; too large to "
        "diff whole) @@\n",
    ]
    lines += [" " + line for line in want[start:at]]
    lines += ["-" + line for line in want[at : at + 5]] + ["+" + line for line in have[at : at + 5]]
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def tail(text: str, limit: int = TAIL_CHARS) -> str:
    return text if len(text) <= limit else "..." + text[-limit:]


def around(text: str, at: int, width: int = 200) -> str:
    start = max(0, at - width)
    return ("..." if start else "") + text[start : at + width] + ("..." if at + width < len(text) else "")
