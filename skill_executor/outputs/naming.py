"""Artifact names for saved outputs: ``name_template``, a tiny template language.

A template is text with placeholders: ``{path}`` (the output's workspace path),
``{name}`` (its file name), ``{stem}``, ``{ext}`` (with its dot), ``{run_id}``,
``{session}`` (empty outside a session) and ``{prefix}`` (the legacy
``artifact_prefix``); ``{{`` and ``}}`` are literal braces.  Nothing else: no format
specs, conversions, attribute or index access -- ``str.format`` on a caller's
template let ``{path:>20000000}`` build a 19 MiB name and ``{name.__class__}`` reach
into Python.  A template is parsed once when the request is checked (a bad one is a
400 naming the placeholder and its position) and rendered per file; a rendering over
:data:`~skill_executor.artifacts.names.NAME_MAX` characters stops there and is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..artifacts.names import NAME_MAX
from ..errors import BadRequest

FIELDS = ("path", "name", "stem", "ext", "run_id", "session", "prefix")
#: Placeholders made from the others: ``{safe_path}`` is ``{path}`` with every character an
#: artifact name cannot hold as ``_`` (``out/My Report.pdf`` -> ``out/My_Report.pdf``).
DERIVED = ("safe_path",)
_UNSAFE = re.compile(r"[^A-Za-z0-9._+/-]")
#: Longer than any useful template (a name is at most NAME_MAX characters).
MAX_TEMPLATE_CHARS = 1024
DEFAULT_TEMPLATE = "{prefix}{path}"

_HELP = (
    "the placeholders are "
    + " ".join(f"{{{f}}}" for f in (*FIELDS, *DERIVED))
    + " (no format specs, conversions or attribute access); write {{ and }} for literal braces"
)


def _refuse(problem: str) -> BadRequest:
    return BadRequest(f"invalid name_template: {problem}; {_HELP}", code="invalid_name_template")


def _shown(text: str) -> str:
    return text if len(text) <= 40 else text[:40] + "..."


@dataclass(frozen=True, slots=True)
class NameTemplate:
    """A parsed ``name_template``: literal text and field names, in order."""

    text: str
    #: (is a field, literal text or field name)
    parts: tuple[tuple[bool, str], ...]

    @classmethod
    def parse(cls, text: str) -> NameTemplate:
        """Parse ``text``; raises ``BadRequest(code="invalid_name_template")``."""
        if len(text) > MAX_TEMPLATE_CHARS:
            raise _refuse(f"it is {len(text)} characters; the limit is {MAX_TEMPLATE_CHARS}")
        parts: list[tuple[bool, str]] = []
        literal: list[str] = []
        i = 0
        while i < len(text):
            char = text[i]
            if char in "{}" and text[i + 1 : i + 2] == char:
                literal.append(char)
                i += 2
            elif char == "}":
                raise _refuse(f"a single '}}' at position {i}")
            elif char == "{":
                end = text.find("}", i + 1)
                if end < 0:
                    raise _refuse(f"the '{{' at position {i} is never closed")
                field = text[i + 1 : end]
                if field not in FIELDS and field not in DERIVED:
                    raise _refuse(f"unknown placeholder {_shown(text[i : end + 1])!r} at position {i}")
                if literal:
                    parts.append((False, "".join(literal)))
                    literal = []
                parts.append((True, field))
                i = end + 1
            else:
                stop = min((p for p in (text.find("{", i), text.find("}", i)) if p >= 0), default=len(text))
                literal.append(text[i:stop])
                i = stop
        if literal:
            parts.append((False, "".join(literal)))
        fixed = sum(len(value) for is_field, value in parts if not is_field)
        if fixed > NAME_MAX:
            raise _refuse(f"its text alone is {fixed} characters; an artifact name is at most {NAME_MAX}")
        return cls(text, tuple(parts))

    def render(self, *, path: str, name: str, stem: str, ext: str, run_id: str, session: str, prefix: str) -> str:
        """The name for one file; ``BadRequest(code="invalid_artifact_name")`` past NAME_MAX characters."""
        values = {
            "path": path,
            "name": name,
            "stem": stem,
            "ext": ext,
            "run_id": run_id,
            "session": session,
            "prefix": prefix,
            "safe_path": safe_path(path),
        }
        out: list[str] = []
        length = 0
        for is_field, value in self.parts:
            piece = values[value] if is_field else value
            length += len(piece)
            if length > NAME_MAX:
                raise BadRequest(
                    f"name_template {_shown(self.text)!r} makes a name longer than {NAME_MAX} characters",
                    code="invalid_artifact_name",
                )
            out.append(piece)
        return "".join(out)


def safe_path(path: str) -> str:
    """``path`` as an artifact name can hold it: other characters as ``_``, and a segment
    that starts with anything but a letter, digit or ``_`` behind a ``_``."""
    segments = _UNSAFE.sub("_", path).split("/")
    return "/".join(s if s[:1].isalnum() or s[:1] == "_" else "_" + s for s in segments)
