"""Find and read test files: ``tests/skill-tests.{yaml,yml,json}`` and skill-creator's
``evals/evals.json``.

A test file that cannot be read is a :class:`TestFileError` naming the file and the
line: ``skills/x/tests/skill-tests.yaml:12: cases[2].expect.files[0]: give exactly one
of path or glob``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import ExecutorError
from ..paths import is_within
from ..skills.loader import find_skill_file
from ..skills.repository import discover
from .spec import EVALS_FILE, TEST_FILE_NAMES, TestFile


class TestFileError(ExecutorError):
    """A test file (or a PATH given to ``skill-executor test``) that cannot be used."""

    __test__ = False
    status = 400

    def __init__(self, message: str, *, path: Path | None = None, line: int | None = None) -> None:
        where = "" if path is None else f"{path}:{line}: " if line else f"{path}: "
        super().__init__(where + message, code="invalid_test_file")
        self.path = path
        self.line = line


class Eval(BaseModel):
    """One entry of skill-creator's ``evals/evals.json`` (extra keys are kept out of the way)."""

    model_config = ConfigDict(extra="ignore")

    id: int | str
    prompt: str = ""
    expected_output: str = ""
    files: list[str] = Field(default_factory=list)
    expectations: list[str] = Field(default_factory=list)
    assertions: list[str] = Field(default_factory=list)

    @property
    def statements(self) -> list[str]:
        return [*self.expectations, *self.assertions]


class EvalsFile(BaseModel):
    model_config = ConfigDict(extra="ignore")

    skill_name: str | None = None
    evals: list[Eval] = Field(default_factory=list)


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
    found: dict[Path, SkillTests] = {}
    skipped = [Path(e).resolve() for e in exclude]
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise TestFileError(f"{raw} does not exist")
        if path.is_file():
            skill_dir = _skill_of_test_file(path)
            item = load_skill_tests(skill_dir, test_file=path)
            found.setdefault(skill_dir.resolve(), item)
            continue
        skill_dirs = [path] if find_skill_file(path) is not None else [
            d for d in discover([path]) if not any(is_within(Path(d).resolve(), e) for e in skipped)]
        if not skill_dirs:
            raise TestFileError(f"{raw} holds no skill (no SKILL.md in it or below it)")
        for skill_dir in skill_dirs:
            key = Path(skill_dir).resolve()
            if key not in found or found[key].only_file:
                found[key] = load_skill_tests(Path(skill_dir))
    return list(found.values())


def _skill_of_test_file(path: Path) -> Path:
    if path.name not in TEST_FILE_NAMES and not path.name.endswith(EVALS_FILE.rsplit("/", 1)[1]):
        raise TestFileError(f"a test file is named {' or '.join(TEST_FILE_NAMES)}", path=path)
    skill_dir = path.resolve().parent.parent
    if find_skill_file(skill_dir) is None:
        folder = "evals/" if path.name.endswith(".json") and path.parent.name == "evals" else "tests/"
        raise TestFileError(f"a test file must be in the {folder} folder of a skill (no SKILL.md in {skill_dir})",
                            path=path)
    return skill_dir


def load_skill_tests(skill_dir: Path, *, test_file: Path | None = None) -> SkillTests:
    """Read a skill's test file (and ``evals/evals.json``); ``test_file``: only that file."""
    item = SkillTests(skill_dir=skill_dir)
    if test_file is not None and test_file.parent.name == "evals":
        item.evals_file, item.evals, item.only_file = test_file, read_evals(test_file), True
        return item
    if test_file is not None:
        item.test_file, item.only_file = test_file, True
    else:
        present = [item.tests_dir / name for name in TEST_FILE_NAMES if (item.tests_dir / name).is_file()]
        if len(present) > 1:
            raise TestFileError(f"more than one test file: {', '.join(p.name for p in present)}; keep one",
                                path=item.tests_dir)
        item.test_file = present[0] if present else None
        evals = skill_dir / EVALS_FILE
        if evals.is_file():
            item.evals_file, item.evals = evals, read_evals(evals)
    if item.test_file is not None:
        item.tests = read_test_file(item.test_file)
    return item


def read_test_file(path: Path) -> TestFile:
    """Parse and validate one test file; every error names the line."""
    try:
        text = path.read_bytes().decode("utf-8-sig")
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


def read_evals(path: Path) -> EvalsFile:
    try:
        data = json.loads(path.read_bytes().decode("utf-8-sig"))
    except json.JSONDecodeError as exc:
        raise TestFileError(f"invalid JSON: {exc.msg} (column {exc.colno})", path=path, line=exc.lineno) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TestFileError(f"cannot read: {exc}", path=path) from None
    try:
        return EvalsFile.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        raise TestFileError(f"{_loc(error['loc'])}: {_message(error)}", path=path) from None


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
        tree = yaml.compose(text, Loader=yaml.SafeLoader)
        _no_duplicate_keys(tree, path)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = " ".join(filter(None, [exc.context, exc.problem]))
        raise TestFileError(f"invalid YAML: {problem}", path=path, line=mark.line + 1 if mark else None) from None
    except yaml.YAMLError as exc:
        raise TestFileError(f"invalid YAML: {exc}", path=path) from None
    if data is None:
        raise TestFileError("the file is empty; it needs a list of cases", path=path)
    return data, tree


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
        message = message[len("Value error, "):]
    if error["type"] == "extra_forbidden":
        return "unknown key (see skill-executor test --schema)"
    return message
