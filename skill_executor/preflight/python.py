"""What a Python file uses, read from its syntax tree: imports (optional when guarded),
commands it runs (``subprocess``, ``os.system``, ``shutil.which``), URLs it requests."""

from __future__ import annotations

import ast
from pathlib import PurePosixPath
from typing import Protocol

from .model import ImageNeeds
from .vocabulary import (
    API_CLIENT_MODULES,
    EXEC_EXCEPTIONS,
    IMPORT_EXCEPTIONS,
    NETWORK_MODULES,
    OS_EXEC_CALLS,
    OS_SHELL_CALLS,
    REQUEST_CALLS,
    SUBPROCESS_CALLS,
)


class PythonSink(Protocol):
    """What :class:`PythonVisitor` reports to (the scanner of :mod:`.scanner`)."""

    needs: ImageNeeds
    file_names: set[str]

    def python_module(self, dotted: str, path: str, line: int, optional: bool, local: set[str]) -> None: ...

    def shell(self, path: str, text: str, offset: int, *, sure: bool = True) -> None: ...

    def shell_needs(self, path: str, name: str, words: list[str], line: int, *, sure: bool = True) -> None: ...

    def url(self, path: str, line: int, url: str) -> None: ...


class PythonVisitor(ast.NodeVisitor):
    """The commands, modules and network a Python file uses, reported to its scanner."""

    def __init__(self, scanner: PythonSink, path: str, offset: int, local: set[str]) -> None:
        self.scanner = scanner
        self.needs = scanner.needs
        self.path = path
        self.offset = offset
        self.local = local
        self.guarded = 0
        #: Inside a ``try`` that catches a missing program (FileNotFoundError, OSError, ...).
        self.exec_guarded = 0
        #: Names bound to the subprocess/os/shutil modules or their functions.
        self.aliases: dict[str, str] = {}

    def line(self, node: ast.AST) -> int:
        return int(getattr(node, "lineno", 1)) + self.offset

    def visit_Try(self, node: ast.Try) -> None:
        guarded = any(_catches(h, IMPORT_EXCEPTIONS) for h in node.handlers)
        exec_guarded = any(_catches(h, EXEC_EXCEPTIONS) for h in node.handlers)
        self.guarded += guarded
        self.exec_guarded += exec_guarded
        for statement in node.body:
            self.visit(statement)
        self.guarded -= guarded
        self.exec_guarded -= exec_guarded
        for part in (*node.handlers, *node.orelse, *node.finalbody):
            self.visit(part)

    visit_TryStar = visit_Try  # type: ignore[assignment]

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        checking = (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
            isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
        )
        self.guarded += checking
        for statement in node.body:
            self.visit(statement)
        self.guarded -= checking
        self.visit(node.test)
        for statement in node.orelse:
            self.visit(statement)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.imported(alias.name, node)
            if alias.name in ("subprocess", "os", "shutil"):
                self.aliases[alias.asname or alias.name] = alias.name

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level or not node.module:
            return
        self.imported(node.module, node)
        if node.module in ("subprocess", "os", "shutil"):
            for alias in node.names:
                self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        if node.module in ("urllib", "http", "google"):  # `from google import genai`
            for alias in node.names:
                self.network_module(f"{node.module}.{alias.name}", node)

    def imported(self, dotted: str, node: ast.AST) -> None:
        self.scanner.python_module(dotted, self.path, self.line(node), self.guarded > 0, self.local)
        self.network_module(dotted, node)

    def network_module(self, dotted: str, node: ast.AST) -> None:
        for name in NETWORK_MODULES:
            if dotted == name or dotted.startswith(name + "."):
                self.needs.reason(self.path, self.line(node), f"imports {name} (an HTTP client)", "maybe")
        for name in API_CLIENT_MODULES:
            if dotted == name or dotted.startswith(name + "."):
                self.needs.reason(self.path, self.line(node), f"imports {name} (a hosted API's client)", "maybe")

    def visit_Call(self, node: ast.Call) -> None:
        name = self.call_name(node.func)
        first = node.args[0] if node.args else None
        line = self.line(node)
        literal = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None
        if name in {f"subprocess.{c}" for c in SUBPROCESS_CALLS}:
            if isinstance(first, (ast.List, ast.Tuple)) and first.elts:
                head = first.elts[0]
                if isinstance(head, ast.Constant) and isinstance(head.value, str):
                    words = [e.value for e in first.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
                    self.command_words(words, line)
            elif literal is not None:
                self.scanner.shell(self.path, literal, line - 1)
        elif name in {f"os.{c}" for c in OS_SHELL_CALLS} and literal is not None:
            self.scanner.shell(self.path, literal, line - 1)
        elif name == "shutil.which" and literal is not None:
            self.needs.command(PurePosixPath(literal).name, self.path, line, optional=True)
        elif name in {f"os.{c}" for c in OS_EXEC_CALLS} and literal is not None:
            self.needs.command(PurePosixPath(literal).name, self.path, line, optional=self.exec_guarded > 0)
        elif name in ("importlib.import_module", "__import__") and literal and not literal.startswith("."):
            self.imported(literal, node)
        attr = (
            node.func.attr
            if isinstance(node.func, ast.Attribute)
            else (node.func.id if isinstance(node.func, ast.Name) else "")
        )
        if attr in REQUEST_CALLS:
            target = (
                first
                if first is not None
                else next((k.value for k in node.keywords if k.arg in ("url", "base_url")), None)
            )
            if isinstance(target, ast.Constant) and isinstance(target.value, str):
                self.scanner.url(self.path, line, target.value)
            elif isinstance(target, ast.JoinedStr) and target.values:
                head = target.values[0]
                if isinstance(head, ast.Constant) and isinstance(head.value, str):
                    self.scanner.url(self.path, line, head.value)
        self.generic_visit(node)

    def command_words(self, words: list[str], line: int) -> None:
        name = PurePosixPath(words[0]).name if words[0].startswith("/") else words[0]
        if "/" in name or name in self.scanner.file_names:
            return
        self.needs.command(name, self.path, line, optional=self.exec_guarded > 0)
        self.scanner.shell_needs(self.path, name, words, line)

    def call_name(self, func: ast.expr) -> str:
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            base = self.aliases.get(func.value.id, func.value.id)
            return f"{base}.{func.attr}"
        if isinstance(func, ast.Name):
            return self.aliases.get(func.id, func.id)
        return ""


def _catches(handler: ast.ExceptHandler, exceptions: frozenset[str]) -> bool:
    kind = handler.type
    if kind is None:
        return True
    names = kind.elts if isinstance(kind, ast.Tuple) else [kind]
    return any(
        (isinstance(n, ast.Name) and n.id in exceptions) or (isinstance(n, ast.Attribute) and n.attr in exceptions)
        for n in names
    )
