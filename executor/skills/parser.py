"""Parse the bytes of a ``SKILL.md`` into frontmatter and body.

The parser is deliberately forgiving where real skills are sloppy and exact where
sloppiness would change meaning:

* strict UTF-8 (a file we cannot decode is rejected, never guessed at);
* the frontmatter delimiters are found by *line*, so a ``---`` inside a value never
  cuts the YAML short;
* YAML is read by a safe loader in which every scalar is a string (``version: 1.0``
  stays ``"1.0"``, ``name: yes`` stays ``"yes"``), while lists, mappings, anchors and
  merge keys still work;
* duplicate keys are noticed (last one wins);
* frontmatter YAML cannot read -- most often an unquoted ``: `` in a value, a value
  starting with ``[``, ``@`` or a quoted word, or a description continued on
  unindented lines -- is repaired once, with a warning.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.nodes import MappingNode, ScalarNode

from .spec import Diagnostic

MAX_SKILL_FILE_BYTES = 4 * 1024 * 1024
_MERGE_TAG = "tag:yaml.org,2002:merge"
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


class _StringLoader(yaml.SafeLoader):
    """A safe loader that resolves every plain scalar to a string and records duplicates."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicate_keys: list[tuple[str, int]] = []

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[str] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, ScalarNode) and key_node.tag != _MERGE_TAG:
                if key_node.value in seen:
                    self.duplicate_keys.append((key_node.value, key_node.start_mark.line + 1))
                seen.add(key_node.value)
        return super().construct_mapping(node, deep=deep)


# No implicit typing at all: ints, floats, booleans, nulls and timestamps stay strings.
_StringLoader.yaml_implicit_resolvers = {}
_StringLoader.add_implicit_resolver(_MERGE_TAG, re.compile(r"^(?:<<)$"), ["<"])


def _stringify(value: Any, memo: dict[int, Any]) -> Any:
    """Turn explicitly tagged scalars (``!!int 3``) into strings too; keep structure.

    ``memo`` keeps aliased containers shared, so a "billion laughs" document costs
    linear time here instead of exponential.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, dict | list):
        key = id(value)
        if key in memo:
            return memo[key]
        if isinstance(value, dict):
            out_dict: dict[str, Any] = {}
            memo[key] = out_dict
            for k, v in value.items():
                out_dict[_stringify(k, memo) if isinstance(k, str) else _scalar_text(k)] = (
                    _stringify(v, memo)
                )
            return out_dict
        out_list: list[Any] = []
        memo[key] = out_list
        out_list.extend(_stringify(v, memo) for v in value)
        return out_list
    return _scalar_text(value)


def _scalar_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def load_yaml(text: str) -> tuple[Any, list[tuple[str, int]]]:
    """Load YAML with every scalar as a string; returns (data, duplicate keys)."""
    loader = _StringLoader(text)
    try:
        data = loader.get_single_data()
        return _stringify(data, {}), loader.duplicate_keys
    finally:
        loader.dispose()


_PAIR = re.compile(r"^(?P<indent>[ \t]*)(?P<key>[^\s#'\"\-?:][^:#]*?):[ \t]+(?P<value>\S.*?)[ \t]*$")
#: A line that starts a top-level key (``key:`` then a blank or the end of the line).
_TOP_KEY = re.compile(r"^[^\s#'\"\-?:][^:]*:(?:[ \t]|$)")


def _readable_alone(value: str) -> bool:
    """Can YAML read ``value`` as the value of one key, as written?"""
    try:
        loader = _StringLoader(f"k: {value}")
        try:
            return isinstance(loader.get_single_data(), dict)
        finally:
            loader.dispose()
    except yaml.YAMLError:
        return False


def _fold_continuations(lines: list[str]) -> tuple[list[str], list[str]]:
    """Join unindented lines that continue a top-level plain value (not valid YAML) into it."""
    out: list[str] = []
    folded: list[str] = []
    key: str | None = None
    for line in lines:
        if line and not line[0].isspace() and not line.startswith(("#", "- ")) and not _TOP_KEY.match(line):
            if key is not None:
                out[-1] = f"{out[-1].rstrip()} {line.strip()}"
                if key not in folded:
                    folded.append(key)
                continue
        match = _PAIR.match(line)
        plain = match is not None and not match["indent"] and match["value"][0] not in "|>'\"[{&*!#"
        key = match["key"].strip() if plain and match is not None else None
        out.append(line)
    return out, folded


def _repair(text: str) -> tuple[str, list[str]]:
    """Make sloppy frontmatter readable; return it and the keys whose values changed.

    * unindented lines continuing a top-level plain value are folded into it;
    * a single-line value YAML cannot read as written (``Use when: x``, ``[Beta] Does
      X``, ``"Fast" helper``, ``@mention``) is double-quoted, as the text it reads as.

    A trailing ``  # comment`` stays a comment.  Multi-line values (indented
    continuations) are left alone: quoting only their first line would change them.
    """
    lines, fixed = _fold_continuations(text.split("\n"))
    for index, line in enumerate(lines):
        match = _PAIR.match(line)
        if not match or match["value"][0] in "|>&*!#":
            continue
        value, comment = match["value"], ""
        if " #" in value:
            value, _, rest = value.partition(" #")
            comment, value = " #" + rest, value.rstrip()
        if _readable_alone(value):
            continue
        indent = len(match["indent"].expandtabs())
        nxt = next((ln for ln in lines[index + 1 :] if ln.strip()), "")
        if nxt and len(nxt) - len(nxt.lstrip()) > indent and not nxt.lstrip().startswith("#"):
            continue
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        lines[index] = f'{match["indent"]}{match["key"]}: "{escaped}"{comment}'
        key = match["key"].strip()
        if key not in fixed:
            fixed.append(key)
    return "\n".join(lines), fixed


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
                f"SKILL.md is {len(data)} bytes; the limit is {MAX_SKILL_FILE_BYTES}",
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
    try:
        data_obj, duplicates = load_yaml(yaml_text)
    except yaml.YAMLError as first_error:
        repaired, keys = _repair(yaml_text)
        try:
            if not keys:
                raise first_error
            data_obj, duplicates = load_yaml(repaired)
        except yaml.YAMLError:
            raise SkillFileError(
                Diagnostic(
                    "yaml-invalid",
                    f"the frontmatter is not valid YAML: {_one_line(first_error)}",
                    "fatal",
                ),
                notes,
            ) from None
        notes.append(
            Diagnostic(
                "yaml-repaired",
                "the frontmatter is not valid YAML as written: the value of "
                + ", ".join(repr(k) for k in keys)
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
