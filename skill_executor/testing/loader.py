"""Find and read test files: ``tests/skill-tests.{yaml,yml,json}`` and skill-creator's
``evals/evals.json``.

A test file that cannot be read is a :class:`TestFileError` naming the file and the
line: ``skills/x/tests/skill-tests.yaml:12: cases[2].expect.files[0]: give exactly one
of path or glob``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ..errors import ExecutorError
from ..paths import is_within
from ..registry.discovery import discover
from ..skills.loader import find_skill_file
from .format import EVALS_FILE, TEST_FILE_NAMES, TestFile


class TestFileError(ExecutorError):
    """A test file (or a PATH given to ``skill-executor test``) that cannot be used."""

    __test__ = False
    status = 400

    def __init__(self, message: str, *, path: Path | None = None, line: int | None = None) -> None:
        where = "" if path is None else f"{path}:{line}: " if line else f"{path}: "
        super().__init__(where + message, code="invalid_test_file")
        self.path = path
        self.line = line


@dataclass(slots=True)
class Eval:
    """One entry of skill-creator's ``evals/evals.json``, read tolerantly: an entry that
    cannot be understood carries its ``problem`` (reported as an error of that eval only)."""

    id: str
    prompt: str = ""
    files: list[str] = field(default_factory=list)
    statements: list[str] = field(default_factory=list)  # its expectations/assertions
    problem: str | None = None


@dataclass(slots=True)
class EvalsFile:
    skill_name: str | None
    evals: list[Eval]


@dataclass(slots=True)
class SkillTests:
    """A skill folder and what it says about testing itself."""

    skill_dir: Path
    test_file: Path | None = None
    tests: TestFile | None = None
    evals_file: Path | None = None
    evals: EvalsFile | None = None
    only_file: bool = False  # the PATH named the test file itself
    notes: list[str] = field(default_factory=list)

    @property
    def tests_dir(self) -> Path:
        return self.skill_dir / "tests"


def collect(paths: Sequence[Path], *, exclude: Sequence[Path] = ()) -> list[SkillTests]:
    """What ``skill-executor test PATH...`` covers: each PATH is a test file, a skill
    folder or a folder of skills (skills found below ``exclude``, e.g. the data folder's
    copies, are not). Raises :class:`TestFileError` for a PATH that is none of these or a
    test file that cannot be read."""
    #: skill folder -> the files named (None: the whole skill)
    wanted: dict[Path, tuple[Path, list[Path] | None]] = {}
    skipped = [Path(e).resolve() for e in exclude]
    for raw in paths:
        path = Path(raw)
        if not path.exists() and not path.is_symlink():
            raise TestFileError(f"{raw} does not exist")
        if not path.is_dir():
            skill_dir = _skill_of_test_file(path)
            _, files = wanted.setdefault(skill_dir.resolve(), (skill_dir, []))
            if files is not None:
                files.append(path)
            continue
        skill_dirs = (
            [path]
            if find_skill_file(path) is not None
            else [Path(d) for d in discover([path]) if not any(is_within(Path(d).resolve(), e) for e in skipped)]
        )
        if not skill_dirs:
            raise TestFileError(f"{raw} holds no skill (no SKILL.md in it or below it)")
        for skill_dir in skill_dirs:
            wanted[skill_dir.resolve()] = (skill_dir, None)
    return [load_skill_tests(skill_dir, files=files) for skill_dir, files in wanted.values()]


def _skill_of_test_file(path: Path) -> Path:
    if path.name not in TEST_FILE_NAMES and not path.name.endswith(EVALS_FILE.rsplit("/", 1)[1]):
        raise TestFileError(f"a test file is named {' or '.join(TEST_FILE_NAMES)}", path=path)
    skill_dir = Path(os.path.abspath(path)).parent.parent
    if find_skill_file(skill_dir) is None:
        folder = "evals/" if path.name.endswith(".json") and path.parent.name == "evals" else "tests/"
        raise TestFileError(
            f"a test file must be in the {folder} folder of a skill (no SKILL.md in {skill_dir})", path=path
        )
    return skill_dir


def load_skill_tests(
    skill_dir: Path, *, files: Sequence[Path] | None = None, test_file: Path | None = None
) -> SkillTests:
    """Read a skill's test file and ``evals/evals.json``; ``files`` (or ``test_file``):
    only those. Nothing on the way is a symbolic link: the host reads these files, and a
    link would make it read (and ``--update-golden`` write) outside the skill."""
    item = SkillTests(skill_dir=skill_dir)
    named = list(files or []) + ([test_file] if test_file is not None else [])
    if named or files is not None:
        item.only_file = True
        for path in named:
            _no_links(skill_dir, path)
            if path.parent.name == "evals":
                item.evals_file = path
            elif item.test_file is not None and item.test_file.resolve() != path.resolve():
                raise TestFileError(
                    f"more than one test file: {item.test_file.name}, {path.name}; keep one", path=item.tests_dir
                )
            else:
                item.test_file = path
    else:
        present = [
            item.tests_dir / name
            for name in TEST_FILE_NAMES
            if (item.tests_dir / name).is_file() or (item.tests_dir / name).is_symlink()
        ]
        if len(present) > 1:
            raise TestFileError(
                f"more than one test file: {', '.join(p.name for p in present)}; keep one", path=item.tests_dir
            )
        item.test_file = present[0] if present else None
        evals = skill_dir / EVALS_FILE
        if evals.is_file() or evals.is_symlink():
            item.evals_file = evals
    for found in (item.test_file, item.evals_file):
        if found is not None:
            _no_links(skill_dir, found)
    if item.test_file is not None:
        item.tests = read_test_file(item.test_file)
    if item.evals_file is not None:
        item.evals = read_evals(item.evals_file)
    return item


def _no_links(skill_dir: Path, path: Path) -> None:
    """``path`` and every folder between it and the skill folder are real, not links."""
    base = Path(os.path.abspath(skill_dir))
    try:
        relative = Path(os.path.abspath(path)).relative_to(base)
    except ValueError:
        raise TestFileError("is not inside its skill's folder", path=path) from None
    current = base
    for part in relative.parts:
        current = current / part
        if current.is_symlink():
            raise TestFileError(
                f"{current.relative_to(base)} is a symbolic link: test files and the tests/ and "
                "evals/ folders must be real files and folders of the skill",
                path=path,
            )
    skill_md = find_skill_file(skill_dir)
    if skill_md is not None and skill_md.is_symlink():
        raise TestFileError(f"{skill_md.name} is a symbolic link; the skill's own files must be real files", path=path)


def read_test_file(path: Path) -> TestFile:
    """Parse and validate one test file; every error names the line."""
    try:
        text = _read(path).decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise TestFileError(f"not UTF-8 text ({exc.reason} at byte {exc.start})", path=path) from None
    except OSError as exc:
        raise TestFileError(f"cannot read: {exc.strerror}", path=path) from None
    data, tree = _parse(text, path)
    try:
        return TestFile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        problems = [f"{_loc(e['loc'])}: {_message(e)}" for e in exc.errors()]
        line = _line_of(tree, first["loc"])
        more = f" (and {len(problems) - 1} more: {'; '.join(problems[1:4])})" if len(problems) > 1 else ""
        raise TestFileError(problems[0] + more, path=path, line=line) from None


#: The largest test or evals file read (a bigger one is a mistake or an attack on the host's memory).
MAX_FILE_BYTES = 8 * 1024 * 1024


def _read(path: Path) -> bytes:
    with path.open("rb") as handle:
        data = handle.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise TestFileError(f"the file is larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB", path=path)
    return data


def read_evals(path: Path) -> EvalsFile:
    """skill-creator's ``{"skill_name": ..., "evals": [{"id", "prompt", "files", "expectations"}]}``
    (a bare list of evals, ``assertions`` and ``{"text": ...}`` statements are understood too)."""
    try:
        data = json.loads(_read(path).decode("utf-8-sig"))
    except json.JSONDecodeError as exc:
        raise TestFileError(f"invalid JSON: {exc.msg} (column {exc.colno})", path=path, line=exc.lineno) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TestFileError(f"cannot read: {exc}", path=path) from None
    entries = data.get("evals") if isinstance(data, dict) else data
    if not isinstance(entries, list):
        raise TestFileError('expected {"evals": [...]} (skill-creator\'s format) or a list of evals', path=path)
    name = data.get("skill_name") if isinstance(data, dict) else None
    return EvalsFile(name if isinstance(name, str) else None, [_eval(i, e) for i, e in enumerate(entries)])


def _eval(index: int, raw: Any) -> Eval:
    if not isinstance(raw, dict):
        return Eval(str(index + 1), problem=f"evals[{index}] is not an object")
    ident = raw.get("id", index + 1)
    entry = Eval(str(ident) if isinstance(ident, (int, str)) and str(ident).strip() else str(index + 1))
    prompt = raw.get("prompt", raw.get("query", ""))
    entry.prompt = prompt if isinstance(prompt, str) else json.dumps(prompt)
    files = raw.get("files", [])
    files = [files] if isinstance(files, str) else files
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        entry.problem = f"evals[{index}].files must be a list of paths relative to the skill's root"
    else:
        entry.files = files
    for key in ("expectations", "assertions"):
        for statement in raw.get(key) or []:
            text = (
                statement.get("text") or statement.get("assertion") or statement.get("description")
                if isinstance(statement, dict)
                else statement
            )
            entry.statements.append(text if isinstance(text, str) else json.dumps(statement))
    return entry


class _Loader(yaml.SafeLoader):
    """Safe YAML whose plain scalars mean what JSON would: ``true``/``false`` are the only
    booleans (``NO``, ``yes``, ``on`` stay strings) and dates stay strings."""


_Loader.yaml_implicit_resolvers = {
    first: [
        (tag, regexp)
        for tag, regexp in resolvers
        if tag not in ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:timestamp")
    ]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
#: Nodes a test file may have (a bigger one is a mistake or an attack on the host).
MAX_NODES = 100_000


def _parse(text: str, path: Path) -> tuple[Any, yaml.Node | None]:
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TestFileError(f"invalid JSON: {exc.msg} (column {exc.colno})", path=path, line=exc.lineno) from None
        try:
            tree = yaml.compose(text, Loader=yaml.SafeLoader)  # JSON is YAML: only for line numbers
        except yaml.YAMLError:
            tree = None
        return data, tree
    try:
        _no_aliases(text, path)
        tree = yaml.compose(text, Loader=_Loader)
        _no_duplicate_keys(tree, path)
        data = yaml.load(text, Loader=_Loader)  # noqa: S506 -- a SafeLoader
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = " ".join(filter(None, [exc.context, exc.problem]))
        raise TestFileError(f"invalid YAML: {problem}", path=path, line=mark.line + 1 if mark else None) from None
    except yaml.YAMLError as exc:
        raise TestFileError(f"invalid YAML: {exc}", path=path) from None
    if data is None:
        raise TestFileError("the file is empty; it needs a list of cases", path=path)
    return data, tree


def _no_aliases(text: str, path: Path) -> None:
    """Anchors and aliases are refused (an alias bomb would expand exponentially); so is a
    file of more than :data:`MAX_NODES` nodes."""
    for count, event in enumerate(yaml.parse(text, Loader=_Loader), start=1):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise TestFileError(
                "anchors and aliases (&x, *x) are not supported in test files; write the values out",
                path=path,
                line=event.start_mark.line + 1 if event.start_mark else None,
            )
        if count > MAX_NODES:
            raise TestFileError(f"the file has more than {MAX_NODES} YAML nodes", path=path)


def _no_duplicate_keys(node: yaml.Node | None, path: Path) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.value != "<<":
                if key.value in seen:
                    raise TestFileError(f"duplicate key {key.value!r}", path=path, line=key.start_mark.line + 1)
                seen.add(key.value)
            _no_duplicate_keys(value, path)
    elif isinstance(node, yaml.SequenceNode):
        for child in node.value:
            _no_duplicate_keys(child, path)


def _line_of(tree: yaml.Node | None, loc: Iterable[int | str]) -> int | None:
    """The line of the deepest node on ``loc`` (pydantic's path into the data)."""
    node = tree
    if node is None:
        return None
    for key in loc:
        if isinstance(node, yaml.MappingNode) and isinstance(key, str):
            for k, v in node.value:
                if isinstance(k, yaml.ScalarNode) and k.value == key:
                    node = v
                    break
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and 0 <= key < len(node.value):
            node = node.value[key]
    return node.start_mark.line + 1


def _loc(loc: Iterable[int | str]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part.startswith(("function-", "union[", "str", "list[", "model-")) or "[" in part:
            continue  # pydantic's validator tags, not keys
        else:
            text += ("." if text else "") + part
    return text or "(top level)"


def _message(error: Any) -> str:
    message = str(error["msg"])
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    if error["type"] == "extra_forbidden":
        return "unknown key (see skill-executor test --schema)"
    return message
