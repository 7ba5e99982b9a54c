"""Parse the bytes of a ``SKILL.md`` into frontmatter and body.

The parser is deliberately forgiving where real skills are sloppy and exact where
sloppiness would change meaning:

* strict UTF-8 (a file we cannot decode is rejected, never guessed at);
* the frontmatter delimiters are found by *line*, so a ``---`` inside a value never
  cuts the YAML short;
* YAML is read by :mod:`.yamlread` (safe, every scalar a string, duplicate keys noticed);
* frontmatter YAML cannot read -- most often an unquoted ``: `` in a value, a value
  starting with ``[``, ``@`` or a quoted word, or a description continued on
  unindented lines -- is repaired once, with a warning;
* the work one file can cause is bounded (the file is untrusted): the frontmatter is
  at most :data:`MAX_FRONTMATTER_BYTES`, and composing it is bounded by
  :data:`~.yamlread.YAML_LIMITS`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from .rules import Diagnostic
from .yamlread import YamlLimitError, load_yaml

MAX_SKILL_FILE_BYTES = 4 * 1024 * 1024
#: The YAML between the ``---`` lines, in bytes.  Real frontmatter is well under
#: 4 KiB (a description is at most 1024 characters); this leaves room for metadata.
MAX_FRONTMATTER_BYTES = 64 * 1024
#: How many ``key: value`` lines a repair tries alone (one small parse each); real
#: frontmatter has a few dozen.
MAX_REPAIR_CHECKS = 1000
_BOM = "\ufeff"


class SkillFileError(Exception):
    """The file cannot be used at all; ``diagnostic`` says why."""

    def __init__(self, diagnostic: Diagnostic, notes: list[Diagnostic] | None = None) -> None:
        super().__init__(diagnostic.message)
        self.diagnostic = diagnostic
        self.notes = notes or []


@dataclass(slots=True)
class ParsedFile:
    """A decoded ``SKILL.md``: frontmatter mapping, trimmed body, the raw text."""

    frontmatter: dict[str, Any]
    body: str
    raw: str
    diagnostics: list[Diagnostic] = field(default_factory=list)


_PAIR = re.compile(r"^(?P<indent>[ \t]*)(?P<key>[^\s#'\"\-?:][^:#]*?):[ \t]+(?P<value>\S(?:.*[^ \t])?)[ \t]*$")
#: A line that starts a top-level key (``key:`` then a blank or the end of the line).
_TOP_KEY = re.compile(r"^[^\s#'\"\-?:][^:]*:(?:[ \t]|$)")


def _readable_alone(value: str) -> bool:
    """Can YAML read ``value`` as the value of one key, as written?"""
    try:
        return isinstance(load_yaml(f"k: {value}")[0], dict)
    except YamlLimitError:
        return True  # readable, and refused as written by the second parse
    except (yaml.YAMLError, ValueError, TypeError, OverflowError):
        return False


def _fold_continuations(lines: list[str]) -> tuple[list[str], list[str]]:
    """Join unindented lines that continue a top-level plain value (not valid YAML) into it."""
    out: list[list[str]] = []  # each output line as parts, joined once (no quadratic concatenation)
    folded: list[str] = []
    key: str | None = None
    for line in lines:
        continues = line and not line[0].isspace() and not line.startswith(("#", "- ")) and not _TOP_KEY.match(line)
        if continues and key is not None:
            out[-1][-1] = out[-1][-1].rstrip()
            out[-1] += [" ", line.strip()]
            if key not in folded:
                folded.append(key)
            continue
        match = _PAIR.match(line)
        plain = match is not None and not match["indent"] and match["value"][0] not in "|>'\"[{&*!#"
        key = match["key"].strip() if plain and match is not None else None
        out.append([line])
    return ["".join(parts) for parts in out], folded


def _repair(text: str) -> tuple[str, list[str]]:
    """Make sloppy frontmatter readable; return it and the keys whose values changed.

    * unindented lines continuing a top-level plain value are folded into it;
    * a single-line value YAML cannot read as written (``Use when: x``, ``[Beta] Does
      X``, ``"Fast" helper``, ``@mention``) is double-quoted, as the text it reads as.

    A trailing ``  # comment`` stays a comment.  Multi-line values (indented
    continuations) are left alone: quoting only their first line would change them.
    Each value is tried alone, at most :data:`MAX_REPAIR_CHECKS` of them: past that
    nothing is repaired (the frontmatter is then refused with the first error).
    """
    lines, fixed = _fold_continuations(text.split("\n"))
    checks = 0
    for index, line in enumerate(lines):
        match = _PAIR.match(line)
        if not match or match["value"][0] in "|>&*!#":
            continue
        checks += 1
        if checks > MAX_REPAIR_CHECKS:
            return text, []
        value, comment = match["value"], ""
        if " #" in value:
            value, _, rest = value.partition(" #")
            comment, value = " #" + rest, value.rstrip()
        if _readable_alone(value):
            continue
        indent = len(match["indent"].expandtabs())
        nxt = next((lines[i] for i in range(index + 1, len(lines)) if lines[i].strip()), "")
        if nxt and len(nxt) - len(nxt.lstrip()) > indent and not nxt.lstrip().startswith("#"):
            continue
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        lines[index] = f'{match["indent"]}{match["key"]}: "{escaped}"{comment}'
        key = match["key"].strip()
        if key not in fixed:
            fixed.append(key)
    return "\n".join(lines), fixed


def _load_frontmatter(text: str) -> tuple[Any, list[tuple[str, int]], list[str]]:
    """(data, duplicate keys, repaired keys): loaded as written, else repaired once.

    Raises the first parse's error when the repair changes nothing or does not help,
    and :class:`YamlLimitError` from either parse (a repair cannot make a bomb cheap).
    """
    try:
        data, duplicates = load_yaml(text)
        return data, duplicates, []
    except YamlLimitError:
        raise
    except yaml.YAMLError as first_error:
        repaired, keys = _repair(text)
        if not keys:
            raise
        try:
            data, duplicates = load_yaml(repaired)
        except YamlLimitError as exc:
            exc.line = None  # a line of the repaired text, not of the file
            raise
        except yaml.YAMLError:
            raise first_error from None
        return data, duplicates, keys


def _is_delimiter(line: str) -> bool:
    return line.rstrip(" \t") == "---"


def decode(data: bytes) -> tuple[str, list[Diagnostic]]:
    """Strict UTF-8, BOM stripped (noted), CRLF/CR normalised to LF."""
    notes: list[Diagnostic] = []
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SkillFileError(
            Diagnostic(
                "encoding",
                f"SKILL.md is not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})",
                "fatal",
            )
        ) from None
    if text.startswith(_BOM):
        text = text[1:]
        notes.append(Diagnostic("bom", "SKILL.md starts with a UTF-8 byte order mark (stripped)", "note"))
    return text.replace("\r\n", "\n").replace("\r", "\n"), notes


def parse_skill_file(data: bytes) -> ParsedFile:
    """Parse ``SKILL.md`` bytes; raises :class:`SkillFileError` when unusable."""
    if len(data) > MAX_SKILL_FILE_BYTES:
        raise SkillFileError(
            Diagnostic(
                "file-too-large",
                f"SKILL.md is more than {MAX_SKILL_FILE_BYTES} bytes (the limit)",
                "fatal",
            )
        )
    text, notes = decode(data)
    lines = text.split("\n")

    start = 0
    while start < len(lines) and not lines[start].strip():
        start += 1
    if start == len(lines) or not _is_delimiter(lines[start]):
        raise SkillFileError(
            Diagnostic(
                "frontmatter-missing",
                "SKILL.md must start with YAML frontmatter: a line '---', the YAML, and a closing '---'",
                "fatal",
            ),
            notes,
        )
    if start:
        notes.append(
            Diagnostic(
                "leading-blank-lines",
                f"{start} blank line(s) before the opening '---' (ignored)",
                "note",
            )
        )
    end = next((i for i in range(start + 1, len(lines)) if _is_delimiter(lines[i])), None)
    if end is None:
        raise SkillFileError(
            Diagnostic(
                "frontmatter-unclosed",
                f"the frontmatter opened on line {start + 1} is never closed by a '---' line",
                "fatal",
            ),
            notes,
        )

    yaml_text = "\n".join(lines[start + 1 : end])
    size = len(yaml_text.encode("utf-8", "surrogatepass"))
    if size > MAX_FRONTMATTER_BYTES:
        raise SkillFileError(
            Diagnostic(
                "frontmatter-too-large",
                f"the frontmatter (lines {start + 2}-{end}) is {size} bytes; the limit is "
                f"{MAX_FRONTMATTER_BYTES} (long text belongs in the body)",
                "fatal",
            ),
            notes,
        )
    try:
        data_obj, duplicates, repaired = _load_frontmatter(yaml_text)
    except YamlLimitError as exc:
        where = f" (line {exc.line + start + 2})" if exc.line is not None else ""
        raise SkillFileError(
            Diagnostic(
                "yaml-invalid",
                f"the frontmatter is refused: {exc.problem}{where}; these limits bound the work one SKILL.md may cause",
                "fatal",
            ),
            notes,
        ) from None
    except yaml.YAMLError as exc:
        raise SkillFileError(
            Diagnostic("yaml-invalid", f"the frontmatter is not valid YAML: {_one_line(exc)}", "fatal"), notes
        ) from None
    if repaired:
        notes.append(
            Diagnostic(
                "yaml-repaired",
                "the frontmatter is not valid YAML as written: the value of "
                + ", ".join(repr(k) for k in repaired)
                + " is not readable as written (e.g. an unquoted ': ', a reserved first character, "
                "or continuation lines without indentation); read as the text it holds",
                "spec",
            )
        )

    if not isinstance(data_obj, dict):
        kind = "empty" if data_obj in (None, "") else type(data_obj).__name__
        raise SkillFileError(
            Diagnostic(
                "frontmatter-not-mapping",
                f"the frontmatter must be a YAML mapping of keys to values, not {kind}",
                "fatal",
            ),
            notes,
        )
    for key, line in duplicates:
        notes.append(
            Diagnostic(
                "duplicate-key",
                f"key {key!r} appears more than once (line {line + start + 1}); the last value wins",
                "spec",
            )
        )
    body = "\n".join(lines[end + 1 :]).strip()
    return ParsedFile(frontmatter=data_obj, body=body, raw=text, diagnostics=notes)


def _one_line(error: yaml.YAMLError) -> str:
    return " ".join(str(error).split())
