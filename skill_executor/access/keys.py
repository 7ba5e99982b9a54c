"""API keys: a key's id (its tenant) and the keys file (``SKILL_EXECUTOR_API_KEYS_FILE``)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import ExecutorError


def key_id(key: str) -> str:
    """A key's id: the tenant of what it makes (a hash prefix, safe to log and to write in a
    policy file)."""
    return hashlib.sha256(key.encode()).hexdigest()[:12]


@dataclass(frozen=True, slots=True)
class KeyEntry:
    """One key of SKILL_EXECUTOR_API_KEYS_FILE: the secret, whether it is an admin's, its name."""

    key: str
    admin: bool = False
    name: str | None = None


_KEY_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")


def read_keys_file(path: Path) -> list[KeyEntry]:
    """The keys of a keys file: one per line, ``KEY [admin] [name=NAME]`` (``#`` starts a
    comment).  A name (a-z, 0-9, ``.``, ``_``, ``-``) is what a command policy's rules may
    call the key besides its id; names are unique."""
    entries: list[KeyEntry] = []
    seen: set[str] = set()
    for number, line in enumerate(path.read_text().splitlines(), 1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        name = None
        for field in fields[1:]:
            if field.startswith("name="):
                name = field.removeprefix("name=")
                if not _KEY_NAME.match(name) or name in seen:
                    problem = "is used twice" if name in seen else "is not a key name (a-z, 0-9, . _ -; at most 64)"
                    raise ExecutorError(
                        f"keys file {path}, line {number}: {name[:80]!r} {problem}",
                        code="invalid_keys_file",
                        status=500,
                    )
                seen.add(name)
        entries.append(KeyEntry(fields[0], "admin" in fields[1:], name))
    return entries


def key_names(keys_file: Path | None) -> dict[str, str]:
    """Key id -> name, of the named keys of a keys file (none: {})."""
    if keys_file is None:
        return {}
    return {key_id(entry.key): entry.name for entry in read_keys_file(keys_file) if entry.name}
