"""The secrets file (``SKILL_EXECUTOR_SECRETS_FILE``): the values the egress gateway injects
into requests' headers (a rule's ``{secret:NAME}``), which never enter a sandbox.

YAML, a mapping of names to values::

    GITHUB_TOKEN: ghp_0123456789abcdef          # the value itself
    OPENAI_API_KEY: env:OPENAI_API_KEY          # the service's environment variable
    PYPI_TOKEN: file:/run/secrets/pypi-token    # a file's content (one trailing new line dropped)
    LITERAL: {value: "env:not-a-reference"}     # a value that starts like a reference

Read once, at start (as the policy file is): a change needs a restart.  No value appears in
an error message, a log line or a ``repr()``: problems name the secret and the line only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import yaml

from ..errors import ExecutorError
from .egress import SECRET_NAME

#: Shorter values are refused: the gateway refuses requests toward other hosts that carry a
#: secret's value, and a short one would be found everywhere.
MIN_SECRET_CHARS = 8
#: Longer values are refused (a header value, and a file read by mistake).
MAX_SECRET_BYTES = 16 * 1024


class SecretsError(ExecutorError):
    """The secrets file cannot be used: the service refuses to start."""

    code = "invalid_secrets_file"
    status = 500


class Secrets:
    """Named secret values.  Its ``repr``/``str`` show the names only; a value is read by
    :meth:`value` (the grant given to the egress gateway), nowhere else."""

    __slots__ = ("_values", "source")

    def __init__(self, values: Mapping[str, str] | None = None, source: str = "<secrets>") -> None:
        self._values = dict(values or {})
        self.source = source

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._values)

    def __contains__(self, name: object) -> bool:
        return name in self._values

    def __len__(self) -> int:
        return len(self._values)

    def value(self, name: str) -> str:
        return self._values[name]

    def __repr__(self) -> str:
        return f"Secrets({self.source!r}, names={sorted(self._values)!r})"

    __str__ = __repr__

    def __reduce__(self) -> str | tuple[object, ...]:
        raise TypeError("secrets are not serialised")


def parse_secrets(text: str, source: str = "<secrets>", environ: Mapping[str, str] | None = None) -> Secrets:
    """Secrets from YAML text (``environ``: where ``env:`` references are read, default the
    process's); :class:`SecretsError` naming the problem (never a value) otherwise."""
    environ = os.environ if environ is None else environ
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise SecretsError(f"secrets file {source}: not valid YAML{where}") from None  # no snippet: it holds values
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SecretsError(f"secrets file {source}: expected a mapping of names to values, got {type(data).__name__}")
    values: dict[str, str] = {}
    for number, (name, entry) in enumerate(data.items(), 1):
        if not isinstance(name, str) or not SECRET_NAME.match(name):  # not shown: it may be a value
            raise SecretsError(
                f"secrets file {source}: entry {number}: its name is not a secret's name "
                "(a variable name: A-Z, a-z, 0-9, _)"
            )
        values[name] = _value(name, entry, source, environ)
    return Secrets(values, source)


def _value(name: str, entry: object, source: str, environ: Mapping[str, str]) -> str:
    where = f"secrets file {source}: {name}"
    if isinstance(entry, dict):
        if len(entry) != 1 or next(iter(entry)) not in ("value", "env", "file"):
            raise SecretsError(f"{where}: a mapping holds one of value, env or file")
        kind, reference = next(iter(entry.items()))
        if not isinstance(reference, str):
            raise SecretsError(f"{where}.{kind}: a string (quote it)")
    elif isinstance(entry, str):
        kind, reference = "value", entry
        for prefix in ("env", "file"):
            if entry.startswith(prefix + ":"):
                kind, reference = prefix, entry[len(prefix) + 1 :]
    else:
        kind = "a list" if isinstance(entry, list) else "empty" if entry is None else "not a string (quote it)"
        raise SecretsError(f"{where}: {kind}")
    if kind == "env":
        if not SECRET_NAME.match(reference):
            raise SecretsError(f"{where}: env:{reference[:64]} is not a variable name")
        if reference not in environ:
            raise SecretsError(f"{where}: env:{reference} is not set in the service's environment")
        value = environ[reference]
    elif kind == "file":
        path = Path(reference)
        if not path.is_absolute():
            raise SecretsError(f"{where}: file:{reference[:256]} is not an absolute path")
        try:
            with path.open("rb") as f:
                raw = f.read(MAX_SECRET_BYTES + 3)
        except OSError as exc:
            raise SecretsError(
                f"{where}: file:{reference} cannot be read: {exc.strerror or type(exc).__name__}"
            ) from None
        try:
            value = raw.decode()
        except UnicodeDecodeError:
            raise SecretsError(f"{where}: file:{reference} is not UTF-8 text") from None
        value = value.removesuffix("\n").removesuffix("\r")
    else:
        value = reference
    return _checked(where, value)


def _checked(where: str, value: str) -> str:
    if not value:
        raise SecretsError(f"{where}: empty")
    if len(value.encode()) > MAX_SECRET_BYTES:
        raise SecretsError(f"{where}: longer than {MAX_SECRET_BYTES} bytes")
    if any(c in value for c in "\r\n\0"):
        raise SecretsError(f"{where}: holds a line break or a NUL, which no header value may")
    if len(value) < MIN_SECRET_CHARS:
        raise SecretsError(
            f"{where}: shorter than {MIN_SECRET_CHARS} characters (it could not be told apart in other requests)"
        )
    if value != value.strip():
        raise SecretsError(f"{where}: starts or ends with white space")
    return value


def load_secrets(path: Path | None, environ: Mapping[str, str] | None = None) -> Secrets | None:
    """The secrets file at ``path`` (None: no file)."""
    if path is None:
        return None
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise SecretsError(f"secrets file {path}: cannot be read: {exc.strerror or type(exc).__name__}") from None
    except UnicodeDecodeError:
        raise SecretsError(f"secrets file {path}: not UTF-8 text") from None
    return parse_secrets(text, str(path), environ)
