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
  unindented lines -- is repaired once, with a warning;
* the work one file can cause is bounded (the file is untrusted): the frontmatter is
  at most :data:`MAX_FRONTMATTER_BYTES`; while composing, nesting depth, nodes, text
  and alias references are counted against :data:`YAML_LIMITS`, aliases and merge
  keys at their expanded size.  A few hundred bytes of nested aliases or merge keys
  would otherwise cost minutes of CPU here, or an endless JSON answer later.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent, Event, NodeEvent
from yaml.nodes import MappingNode, Node, ScalarNode
from yaml.parser import Parser as _PyParser
from yaml.reader import Reader
from yaml.resolver import Resolver
from yaml.scanner import Scanner

from .rules import Diagnostic


class _PythonParser(Reader, Scanner, _PyParser):
    """PyYAML's pure-Python reader, scanner and parser (the fallback without libyaml)."""

    def __init__(self, stream: str) -> None:
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        _PyParser.__init__(self)


try:  # libyaml scans and parses in C, 5-10x faster; composing stays in Python (bounded below)
    from yaml._yaml import CParser as _CParser

    _HAVE_LIBYAML = True
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    _HAVE_LIBYAML = False


MAX_SKILL_FILE_BYTES = 4 * 1024 * 1024
#: The YAML between the ``---`` lines, in bytes.  Real frontmatter is well under
#: 4 KiB (a description is at most 1024 characters); this leaves room for metadata.
MAX_FRONTMATTER_BYTES = 64 * 1024
#: How many ``key: value`` lines a repair tries alone (one small parse each); real
#: frontmatter has a few dozen.
MAX_REPAIR_CHECKS = 1000
_MERGE_TAG = "tag:yaml.org,2002:merge"
_BOM = "\ufeff"


@dataclass(frozen=True, slots=True)
class YamlLimits:
    """What composing one frontmatter may cost; aliases count at their expanded size."""

    max_depth: int = 64
    max_nodes: int = 10_000
    max_chars: int = 256 * 1024
    max_aliases: int = 1_000


YAML_LIMITS = YamlLimits()


class YamlLimitError(yaml.YAMLError):
    """The frontmatter is refused because reading it would cost too much."""

    def __init__(self, problem: str, line: int | None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.line = line  # 0-based, within the YAML text


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


class _BoundedComposer(Composer):
    """PyYAML's composer, counting what the document costs as it is composed.

    Every node counts once for each place it appears: an alias costs the nodes and
    text of what it names (so a merge key ``<<: [*a, *a]`` costs ``a`` twice, as it
    will when merged).  Crossing a bound stops composing at once.  An alias to a node
    that contains it (``&a [*a]``) is refused: it would make a cyclic value.
    """

    limits: YamlLimits = YAML_LIMITS
    peek_event: Callable[[], Event]  # the parser's, later in the loader's bases

    def __init__(self) -> None:
        super().__init__()
        self._depth = 0
        self._nodes = 0
        self._chars = 0
        self._aliases = 0
        #: anchor -> (nodes, chars) of the finished node it names
        self._sizes: dict[str, tuple[int, int]] = {}

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        event = self.peek_event()
        line = event.start_mark.line if event.start_mark is not None else 0
        limits = self.limits
        if isinstance(event, AliasEvent):
            anchor = str(event.anchor)
            self._aliases += 1
            if self._aliases > limits.max_aliases:
                raise YamlLimitError(f"more than {limits.max_aliases} alias references (*name)", line)
            if anchor in self.anchors and anchor not in self._sizes:
                raise YamlLimitError(f"the alias *{anchor} refers to a node that contains it", line)
            nodes, chars = self._sizes.get(anchor, (0, 0))
            self._count(nodes, chars, line, f" (the alias *{anchor} repeats {nodes} nodes)")
            return super().compose_node(parent, index)
        self._depth += 1
        if self._depth > limits.max_depth:
            raise YamlLimitError(f"collections nested more than {limits.max_depth} deep", line)
        before = (self._nodes, self._chars)
        node = super().compose_node(parent, index)
        self._depth -= 1
        self._count(1, len(node.value) if isinstance(node, ScalarNode) else 0, line, "")
        if isinstance(event, NodeEvent) and event.anchor is not None:
            self._sizes[event.anchor] = (self._nodes - before[0], self._chars - before[1])
        return node

    def _count(self, nodes: int, chars: int, line: int, why: str) -> None:
        self._nodes += nodes
        self._chars += chars
        if self._nodes > self.limits.max_nodes:
            raise YamlLimitError(
                f"more than {self.limits.max_nodes} YAML nodes, aliases and merge keys counted as copies{why}",
                line,
            )
        if self._chars > self.limits.max_chars:
            raise YamlLimitError(
                f"more than {self.limits.max_chars} characters of text, aliases and merge keys counted as copies",
                line,
            )


class _LoaderMixin(SafeConstructor, Resolver):
    """Resolves every plain scalar to a string and records duplicate keys."""

    duplicate_keys: list[tuple[str, int]]

    def _start(self) -> None:
        """What every loader sets up once its parser is: constructor, resolver, the bounds."""
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        _BoundedComposer.__init__(self)  # type: ignore[arg-type]
        self.duplicate_keys = []

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[str] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, ScalarNode) and key_node.tag != _MERGE_TAG:
                if key_node.value in seen:
                    self.duplicate_keys.append((key_node.value, key_node.start_mark.line + 1))
                seen.add(key_node.value)
        return super().construct_mapping(node, deep=deep)


class _PythonStringLoader(_BoundedComposer, _PythonParser, _LoaderMixin):
    """The bounded safe string loader over PyYAML's pure-Python parser."""

    def __init__(self, stream: str) -> None:
        _PythonParser.__init__(self, stream)
        self._start()


_LOADERS: dict[str, type[Any]] = {"python": _PythonStringLoader}
if _HAVE_LIBYAML:

    class _CStringLoader(_BoundedComposer, _CParser, _LoaderMixin):
        """The bounded safe string loader over libyaml's scanner and parser."""

        def __init__(self, stream: str) -> None:
            _CParser.__init__(self, stream)
            self._start()

    _LOADERS["libyaml"] = _CStringLoader

# No implicit typing at all: ints, floats, booleans, nulls and timestamps stay strings.
for _loader in _LOADERS.values():
    _loader.yaml_implicit_resolvers = {}
    _loader.add_implicit_resolver(_MERGE_TAG, re.compile(r"^(?:<<)$"), ["<"])

#: Which parser reads frontmatter: libyaml where PyYAML was built with it.  The verdict
#: is the same with either (tests run both); only the speed differs.
YAML_PARSER = "libyaml" if "libyaml" in _LOADERS else "python"


def _resource_error(exc: BaseException) -> YamlLimitError | None:
    """The bound a scanner or parser error stands for, if it is about resources, not syntax.

    libyaml (PyYAML 6.0.4 and later, libyaml 0.2.6) stops a deep flow collection itself
    while scanning ahead ("exceeded maximum nesting depth", at ~1000 levels), before the
    composer's own depth bound sees it; a recursion or memory error is a bound too.  All
    are refusals with the composer's message, whatever PyYAML or libyaml is installed,
    and never a reason to try a repair.
    """
    if isinstance(exc, YamlLimitError):
        return exc
    if isinstance(exc, yaml.MarkedYAMLError):
        text = f"{exc.context or ''} {exc.problem or ''}"
        if "nesting depth" in text or "nest level" in text:
            mark = exc.problem_mark or exc.context_mark
            return YamlLimitError(
                f"collections nested more than {YAML_LIMITS.max_depth} deep", mark.line if mark else None
            )
        return None
    if isinstance(exc, RecursionError):
        return YamlLimitError(f"collections nested more than {YAML_LIMITS.max_depth} deep", None)
    if isinstance(exc, MemoryError):
        return YamlLimitError("more memory than reading frontmatter may take", None)
    return None


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
    """Load YAML with every scalar as a string; returns (data, duplicate keys).

    Raises :class:`yaml.YAMLError` for anything unreadable (:class:`YamlLimitError`
    when a bound of :data:`YAML_LIMITS` is crossed), never another exception.
    """
    loader = _LOADERS[YAML_PARSER](text)
    try:
        data = loader.get_single_data()
        return _stringify(data, {}), loader.duplicate_keys
    except (ValueError, TypeError, OverflowError) as exc:  # an explicit tag: !!int x, !!timestamp 2024-13-01
        raise yaml.constructor.ConstructorError(None, None, f"a tagged value cannot be read: {exc}") from None
    except (yaml.YAMLError, RecursionError, MemoryError) as exc:
        bound = _resource_error(exc)
        if bound is None:
            raise
        raise bound from None
    finally:
        loader.dispose()


#: ``key: value`` on one line.  The value's end is found without backtracking over
#: runs of blanks (``\S.*?[ \t]*$`` took seconds for a line of 20 000 spaces).
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
