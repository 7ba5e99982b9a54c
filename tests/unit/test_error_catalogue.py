"""The error catalogue (skill_executor/errorcodes.py) is complete and exact: every code raised or
answered anywhere in ``skill_executor/`` is in it, every entry is raised somewhere, statuses
written at a raise site agree with it, and an error naming a code answers its status.

Codes are read from the source (not run): ``code="..."`` keywords, class-level
``code = "..."``, the code argument of ``error_response``/``send_error``/``single_header``/
``InfrastructureError``, ``{"code": "..."}`` bodies, ``(status, "code", message)``
refusals and the HTTP status table of skill_executor/web/problems.py."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import skill_executor
from skill_executor.errorcodes import CATALOGUE, MCP_MAPPINGS
from skill_executor.errors import ExecutorError

PACKAGE = Path(skill_executor.__file__).resolve().parent

#: Calls whose positional argument at this index is an error code (and status, if any).
POSITIONAL = {
    "error_response": (1, 0),
    "send_error": (2, 1),
    "single_header": (2, None),
    "InfrastructureError": (1, None),
}
#: Calls whose ``code=`` is not an error code (the doctor's findings are a report, not refusals).
NOT_ERRORS = {"DoctorFinding"}
#: Codes built at run time, by file: ``match_path``'s ``f"{what}_not_found"``.
DERIVED = {"skills/files.py": {"doc_not_found", "file_not_found"}}
#: Codes colleagues are adding on other branches: catalogued ahead of the merge, not raised here yet.
PENDING: set[str] = set()


@dataclass(frozen=True)
class Site:
    code: str
    status: int | None
    where: str


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _strings(node: ast.expr) -> list[str] | None:
    """The constant codes an expression can be (both arms of a conditional), None if not constant."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        body, orelse = _strings(node.body), _strings(node.orelse)
        return None if body is None or orelse is None else body + orelse
    return None


def _int(node: ast.expr | None) -> int | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, int) else None


def scan() -> tuple[list[Site], list[str]]:
    """Every code site in skill_executor/, and the sites whose code is an f-string (built at run time)."""
    sites: list[Site] = []
    built: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            where = f"{rel}:{getattr(node, 'lineno', 0)}"

            def add(value: ast.expr, status: int | None, where: str = where, rel: str = rel) -> None:
                codes = _strings(value)
                if codes is not None:
                    sites.extend(Site(c, status, where) for c in codes)
                elif isinstance(value, ast.JoinedStr):
                    built.append(rel)

            if isinstance(node, ast.Call) and _name(node.func) not in NOT_ERRORS:
                keywords = {k.arg: k.value for k in node.keywords}
                if "code" in keywords:
                    add(keywords["code"], _int(keywords.get("status")))
                index = POSITIONAL.get(_name(node.func) or "")
                if index is not None and len(node.args) > index[0]:
                    add(node.args[index[0]], None if index[1] is None else _int(node.args[index[1]]))
            elif isinstance(node, ast.ClassDef):
                for statement in node.body:
                    if isinstance(statement, ast.Assign | ast.AnnAssign) and statement.value is not None:
                        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
                        if any(isinstance(t, ast.Name) and t.id == "code" for t in targets):
                            add(statement.value, None, f"{rel}:{statement.lineno}")
            elif isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values, strict=True):
                    if isinstance(key, ast.Constant) and key.value == "code":
                        add(value, None)
                    elif rel == "web/problems.py" and _int(key) is not None:  # the HTTP status table
                        add(value, _int(key))
            elif isinstance(node, ast.Tuple) and len(node.elts) >= 2:  # a middleware's (status, code, message)
                status = _int(node.elts[0])
                if status is not None and 400 <= status < 600:
                    add(node.elts[1], status)
    return sites, built


SITES, BUILT = scan()


def raised() -> set[str]:
    return {s.code for s in SITES} | {c for rel in set(BUILT) for c in DERIVED.get(rel, set())}


def test_the_scan_finds_codes_the_way_they_are_raised() -> None:
    codes = {s.code for s in SITES}
    # one of each kind: keyword, class attribute, error_response, middleware tuple, HTTP table, conditional
    assert {
        "invalid_arguments",
        "path_escape",
        "malformed_json",
        "host_not_allowed",
        "method_not_allowed",
        "idempotent_replay",
        "ambiguous_session_id",
        "engine_unavailable",
    } <= codes
    assert "probe" not in codes  # a doctor finding


def test_every_raised_code_is_catalogued() -> None:
    missing = sorted({f"{s.code} ({s.where})" for s in SITES if s.code not in CATALOGUE})
    assert missing == [], "add these codes to skill_executor/errorcodes.py"


def test_codes_built_at_run_time_are_known() -> None:
    assert set(BUILT) <= set(DERIVED), "a code built from an f-string: list what it can be in DERIVED"
    assert all(c in CATALOGUE for codes in DERIVED.values() for c in codes)


def test_every_catalogued_code_is_raised() -> None:
    unused = sorted(set(CATALOGUE) - raised() - PENDING)
    assert unused == [], "catalogued but raised nowhere: remove them or raise them"


def test_pending_codes_are_catalogued() -> None:
    assert set(CATALOGUE) >= PENDING


def test_statuses_written_at_raise_sites_agree_with_the_catalogue() -> None:
    wrong = sorted(
        f"{s.where}: {s.code} {s.status}, catalogue {CATALOGUE[s.code].status}"
        for s in SITES
        if s.status is not None and s.code in CATALOGUE and s.status != CATALOGUE[s.code].status
    )
    assert wrong == []


def _subclasses(cls: type[ExecutorError]) -> Iterator[type[ExecutorError]]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def test_error_classes_declare_the_catalogue_status_of_their_code() -> None:
    """A class that declares a code (its raises may name others: those take the catalogue's status)."""
    for info in pkgutil.walk_packages([str(PACKAGE)], "skill_executor."):
        importlib.import_module(info.name)
    classes = [c for c in [ExecutorError, *_subclasses(ExecutorError)] if c is ExecutorError or c.code != "error"]
    assert len(classes) > 15
    wrong = [
        f"{c.__module__}.{c.__qualname__}: {c.code} {c.status}"
        for c in classes
        if c.code not in CATALOGUE or CATALOGUE[c.code].status != c.status
    ]
    assert wrong == []


@pytest.mark.parametrize("code", sorted(CATALOGUE))
def test_an_error_naming_a_code_answers_the_catalogue_status(code: str) -> None:
    error = ExecutorError("refused", code=code)
    assert error.status == CATALOGUE[code].status
    assert error.to_dict() == {"error": {"code": code, "message": "refused"}}
    assert ExecutorError("refused", code=code, status=599).status == 599  # an explicit status wins


def test_entries_are_complete() -> None:
    for entry in CATALOGUE.values():
        assert entry.code.isidentifier() and entry.code == entry.code.lower()
        assert 400 <= entry.status < 600
        assert entry.meaning.strip() and entry.action.strip()
        assert entry.mcp in MCP_MAPPINGS
