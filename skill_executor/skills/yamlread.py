"""The YAML reader of frontmatter: safe, every scalar a string, and bounded.

YAML is read by a safe loader in which every scalar is a string (``version: 1.0`` stays
``"1.0"``, ``name: yes`` stays ``"yes"``), while lists, mappings, anchors and merge keys
still work; duplicate keys are noticed (last one wins).  The work one text can cause is
bounded (it is untrusted): while composing, nesting depth, nodes, text and alias
references are counted against :data:`YAML_LIMITS`, aliases and merge keys at their
expanded size.  A few hundred bytes of nested aliases or merge keys would otherwise
cost minutes of CPU, or an endless JSON answer later.  The verdict is the same with
libyaml's parser or PyYAML's pure-Python one (:data:`YAML_PARSER`); only the speed differs.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
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


_MERGE_TAG = "tag:yaml.org,2002:merge"


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
                out_dict[_stringify(k, memo) if isinstance(k, str) else _scalar_text(k)] = _stringify(v, memo)
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
