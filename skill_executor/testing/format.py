"""The ``tests/skill-tests.yaml`` format: what a skill's test file may say.

A test file lives in a skill's ``tests/`` folder (``skill-tests.yaml``, ``.yml`` or
``.json``) and lists cases; each case is one ``skill_run`` and its expectations::

    cases:
      - name: report from the sample
        command: python3 scripts/report.py inputs/data.csv out/
        inputs: [fixtures/data.csv]          # tests/fixtures/data.csv -> work/inputs/data.csv
        expect:
          stdout: {contains: "wrote"}
          files:
            - {path: out/summary.json, mime_type: application/json, json: {rows: 3}}

:func:`json_schema` is the JSON Schema of this format (``skill-executor test --schema``).
"""

from __future__ import annotations

import unicodedata
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .patterns import PatternError, compile_pattern

#: The names a test file may have, in the order they are looked for in ``tests/``.
TEST_FILE_NAMES = ("skill-tests.yaml", "skill-tests.yml", "skill-tests.json")
#: skill-creator's evals, relative to the skill's root.
EVALS_FILE = "evals/evals.json"
SCHEMA_ID = "https://skill-executor.dev/schemas/skill-tests.schema.json"

_SESSION = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


def _strings(value: Any) -> Any:
    """``contains: x`` and ``contains: [x, y]`` mean the same: all of them."""
    return [value] if isinstance(value, str) else value


def _check_regex(values: list[str]) -> list[str]:
    for pattern in values:
        try:
            compile_pattern(pattern)
        except PatternError as exc:
            shown = pattern if len(pattern) <= 80 else pattern[:77] + "..."
            raise ValueError(f"invalid regular expression {shown!r} ({exc.code}): {exc.message}") from None
    return values


def _json_only(value: Any, where: str = "") -> Any:
    """A ``json`` expectation holds JSON values only (a YAML date or set would never match)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"json{where}: the key {key!r} is not a string (quote it)")
            _json_only(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _json_only(item, f"{where}[{index}]")
    elif not (value is None or isinstance(value, (str, int, float, bool))):
        raise ValueError(f"json{where}: {type(value).__name__} is not a JSON value (quote it)")
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class StreamExpect(_Strict):
    """Checks on ``stdout`` or ``stderr`` (all given checks must hold)."""

    contains: list[str] = Field(default_factory=list, description="substrings that must all appear (one or a list)")
    not_contains: list[str] = Field(default_factory=list, description="substrings that must not appear")
    matches: list[str] = Field(
        default_factory=list,
        description="regular expressions (RE2 syntax: Python's without lookarounds or "
        "backreferences; ^ and $ match at line ends) that must all match "
        "somewhere",
    )
    equals: str | None = Field(default=None, description="the whole stream, exactly")
    json_: Any = Field(
        default=None,
        alias="json",
        description="the stream parsed as JSON must contain this (subset match: objects may have more "
        "keys, arrays match element by element)",
    )

    _lists = field_validator("contains", "not_contains", "matches", mode="before")(_strings)
    _json = field_validator("json_")(_json_only)

    @field_validator("matches")
    @classmethod
    def _regexes(cls, value: list[str]) -> list[str]:
        return _check_regex(value)

    @property
    def has_json(self) -> bool:
        return "json_" in self.model_fields_set


class FileExpect(_Strict):
    """Checks on an output file (``path``) or on every file a ``glob`` matches."""

    path: str | None = Field(default=None, max_length=1024, description="a workspace-relative file, e.g. out/report.md")
    glob: str | None = Field(
        default=None, max_length=1024, description="a workspace-relative glob (**); every match is checked"
    )
    exists: bool = Field(default=True, description="false: no file may match")
    mime_type: str | None = Field(default=None, max_length=255, description="exact (text/csv) or a family (image/*)")
    min_size: int | None = Field(default=None, ge=0, description="bytes")
    max_size: int | None = Field(default=None, ge=0, description="bytes")
    contains: list[str] = Field(default_factory=list, description="substrings of the UTF-8 text")
    matches: list[str] = Field(default_factory=list, description="regular expressions (RE2) the text must match")
    json_: Any = Field(default=None, alias="json", description="subset match against the file parsed as JSON")
    equals_file: str | None = Field(
        default=None,
        description="a golden file under tests/ the output must equal byte for byte (--update-golden rewrites it)",
    )
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-fA-F]{64}$", description="hex digest of the content")

    _lists = field_validator("contains", "matches", mode="before")(_strings)
    _json = field_validator("json_")(_json_only)

    @field_validator("matches")
    @classmethod
    def _regexes(cls, value: list[str]) -> list[str]:
        return _check_regex(value)

    @field_validator("path", "glob", "equals_file")
    @classmethod
    def _relative(cls, value: str | None) -> str | None:
        if value is not None:
            _relative_path(value)
        return value

    @model_validator(mode="after")
    def _target(self) -> FileExpect:
        if (self.path is None) == (self.glob is None):
            raise ValueError("give exactly one of path or glob")
        checks = self.model_fields_set - {"path", "glob", "exists"}
        if not self.exists and checks:
            raise ValueError(f"exists: false cannot be combined with {', '.join(sorted(checks))}")
        return self

    @property
    def has_json(self) -> bool:
        return "json_" in self.model_fields_set

    @property
    def pattern(self) -> str:
        return self.path if self.path is not None else str(self.glob)


class Expect(_Strict):
    """What a case's run must show."""

    exit_code: int | None = Field(
        default=None, description="the command's exit status (default 0, or unchecked when timed_out: true is expected)"
    )
    timed_out: bool = Field(default=False, description="whether the run must time out")
    stdout: StreamExpect | None = None
    stderr: StreamExpect | None = None
    files: list[FileExpect] = Field(default_factory=list)
    duration_ms_max: int | None = Field(
        default=None, gt=0, description="a soft budget, reported apart; it fails the case only with --strict-timing"
    )

    @property
    def wanted_exit_code(self) -> int | None:
        if self.exit_code is not None:
            return self.exit_code
        return None if self.timed_out else 0


class Input(_Strict):
    """A file or folder to stage: ``path`` under the skill's ``tests/`` folder, or ``from`` an ``artifact://``."""

    path: str | None = Field(default=None, description="relative to the skill's tests/ folder")
    from_: str | None = Field(default=None, alias="from", description="artifact://name[@version]")
    to: str | None = Field(default=None, description="workspace-relative target (default: work/inputs/<basename>)")
    mode: Literal["copy", "link"] = "copy"

    @field_validator("path")
    @classmethod
    def _relative(cls, value: str | None) -> str | None:
        if value is not None:
            _relative_path(value)
        return value

    @field_validator("from_")
    @classmethod
    def _artifact(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("artifact://"):
            raise ValueError("from must be an artifact://name[@version] reference (files of the skill: use path)")
        return value

    @model_validator(mode="after")
    def _source(self) -> Input:
        if (self.path is None) == (self.from_ is None):
            raise ValueError("give exactly one of path or from")
        return self


class Case(_Strict):
    """One run and what it must show."""

    name: str = Field(min_length=1, max_length=200, description="unique; no control characters")
    command: str = Field(min_length=1, description="shell command, run with bash -c from the skill's root")
    inputs: list[Input] = Field(
        default_factory=list, description="a string is a path under tests/ (or an artifact:// reference)"
    )
    env: dict[str, str] = Field(default_factory=dict)
    stdin: str | None = None
    timeout: float | None = Field(default=None, gt=0, description="seconds")
    session: str | None = Field(
        default=None, pattern=_SESSION, description="cases naming the same session run in file order, sharing work/"
    )
    expect: Expect = Field(default_factory=Expect)

    @field_validator("name")
    @classmethod
    def _printable(cls, value: str) -> str:
        if any(unicodedata.category(c) in ("Cc", "Zl", "Zp") for c in value):
            raise ValueError("a case name cannot hold control characters or line breaks")
        return value

    @field_validator("inputs", mode="before")
    @classmethod
    def _short_inputs(cls, value: Any) -> Any:
        if not isinstance(value, list):
            return value
        return [
            ({"from": item} if "://" in item else {"path": item}) if isinstance(item, str) else item for item in value
        ]


class TestFile(_Strict):
    """A skill's ``tests/skill-tests.yaml``."""

    __test__ = False  # not a pytest class

    schema_: str | None = Field(default=None, alias="$schema", description="this format's JSON Schema, for editors")
    cases: list[Case] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_names(self) -> TestFile:
        seen: set[str] = set()
        for case in self.cases:
            if case.name in seen:
                raise ValueError(f"two cases are named {case.name!r}: names must be unique")
            seen.add(case.name)
        return self


def _relative_path(value: str) -> None:
    if not value or value.startswith("/") or "\\" in value or "\0" in value:
        raise ValueError(f"{value!r} must be a relative path with / separators")
    if any(part == ".." for part in value.split("/")):
        raise ValueError(f"{value!r} must not contain '..'")


def json_schema() -> dict[str, Any]:
    """The JSON Schema of a test file (draft 2020-12), as ``--schema`` prints it."""
    schema = TestFile.model_json_schema(by_alias=True)
    _allow_single_strings(schema)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        **schema,
        "title": "skill-executor skill tests",
    }


def _allow_single_strings(schema: dict[str, Any]) -> None:
    """The lists that accept one string, and inputs that accept a path string, say so."""
    defs = schema.get("$defs", {})
    for model in ("StreamExpect", "FileExpect"):
        for key in ("contains", "not_contains", "matches"):
            prop = defs.get(model, {}).get("properties", {}).get(key)
            if prop is not None:
                items = prop.pop("items")
                prop.pop("type", None)
                prop["anyOf"] = [{"type": "string"}, {"type": "array", "items": items}]
    case_inputs = defs.get("Case", {}).get("properties", {}).get("inputs")
    if case_inputs is not None:
        case_inputs["items"] = {"anyOf": [{"type": "string"}, case_inputs["items"]]}
