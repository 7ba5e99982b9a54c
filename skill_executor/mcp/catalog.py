"""Skills as MCP resources, by the Skills extension (SEP-2640, ``io.modelcontextprotocol/skills``).

Every served file of a skill is a resource ``skill://<name>/<path>``; the skill's entry
(``skills/list``, ``skills/get``) carries its ``SKILL.md`` URI, its frontmatter as JSON and
every served file with its ``sha256:<hex>`` digest.  ``<name>`` may be pinned to a registry
version like the REST API's names (``skill://csv-report@3/SKILL.md``).

What is served is what the skill's safe-read rules allow (:mod:`skill_executor.skills.files`):
regular files inside the skill folder, no links (``inventory`` does not follow them, and a
read resolves within the folder), none in ``.git``/``node_modules``/``__pycache__``, and
none over :data:`MAX_FILE_BYTES`.  Such files are neither listed nor readable.

Frontmatter: the ``SKILL.md`` YAML block parsed as plain YAML (so numbers and booleans
stay numbers and booleans), with dates as ISO strings.  A skill whose frontmatter our
tolerant loader had to repair (plain YAML refuses it) is still served: its ``frontmatter``
is the repaired mapping, every scalar a string, as the loader reads it.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import mimetypes
import os
import stat
import threading
from dataclasses import dataclass
from typing import Any

import yaml

from ..errors import NotFound
from ..registry import SkillRepository
from ..skills import Skill, inventory, read_file
from ..skills.parser import parse_skill_file

SCHEME = "skill://"
EXTENSION = "io.modelcontextprotocol/skills"
DIRECTORY_MIME = "inode/directory"
#: Files larger than this are not served (listed nor read): an MCP read is one message.
MAX_FILE_BYTES = 1024 * 1024
#: Entries per page of ``skills/list``, ``resources/list`` and ``resources/directory/read``.
PAGE_SIZE = 100
_TEXT_MIME = {
    ".md": "text/markdown",
    ".txt": "text/plain",
    ".py": "text/x-python",
    ".sh": "text/x-shellscript",
    ".json": "application/json",
    ".yaml": "application/yaml",
    ".yml": "application/yaml",
    ".js": "text/javascript",
    ".csv": "text/csv",
    ".toml": "application/toml",
}


class UnknownResource(NotFound):
    """An unknown ``skill://`` URI (answered as JSON-RPC ``-32602``)."""

    code = "resource_not_found"


@dataclass(frozen=True, slots=True)
class SkillUri:
    """``skill://<name>[@ref]/<path>``; ``path`` "" is the skill's root directory."""

    name: str
    path: str

    @classmethod
    def parse(cls, uri: str) -> SkillUri:
        if not uri.startswith(SCHEME):
            raise UnknownResource(f"not a skill:// URI: {uri[:200]!r}")
        rest = uri[len(SCHEME) :]
        name, _, path = rest.partition("/")
        path = path.rstrip("/")
        if not name or any(part in ("", ".", "..") for part in path.split("/")) and path:
            raise UnknownResource(f"invalid skill URI {uri[:200]!r}")
        return cls(name, path)


def skill_uri(name: str, path: str = "") -> str:
    return f"{SCHEME}{name}/{path}" if path else f"{SCHEME}{name}"


def mime_type(path: str) -> str:
    ext = os.path.splitext(path)[1].lower()
    return _TEXT_MIME.get(ext) or mimetypes.guess_type(path)[0] or "application/octet-stream"


def frontmatter(skill: Skill) -> dict[str, Any]:
    """The ``SKILL.md`` frontmatter as JSON (see the module doc for repaired skills)."""
    text = skill.raw.lstrip("\ufeff")
    lines = text.splitlines()
    if lines and lines[0].strip() == "---":
        for index, line in enumerate(lines[1:], 1):
            if line.strip() == "---":
                try:
                    data = yaml.safe_load("\n".join(lines[1:index]))
                except yaml.YAMLError:
                    break
                if isinstance(data, dict):
                    return {str(k): _jsonable(v) for k, v in data.items()}
                break
    parsed = parse_skill_file(skill.raw.encode())
    return dict(parsed.frontmatter) if isinstance(parsed.frontmatter, dict) else {}


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, datetime.date | datetime.datetime):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return value


class SkillFiles:
    """The served files of skills, with digests cached by (path, mtime, size)."""

    def __init__(self, repository: SkillRepository) -> None:
        self.repository = repository
        self._digests: dict[tuple[str, int, int], str] = {}
        self._lock = threading.Lock()

    def skill(self, name: str) -> Skill:
        try:
            return self.repository.get(name)
        except NotFound as exc:
            raise UnknownResource(exc.message) from None

    def files(self, skill: Skill) -> list[str]:
        """Relative paths of every served file, ``SKILL.md`` first."""
        out = [skill.skill_file.name]
        for entry in inventory(skill):
            if entry.size <= MAX_FILE_BYTES:
                out.append(entry.path)
        return out

    def digest(self, skill: Skill, relative: str) -> str:
        full = os.path.join(skill.path, relative)
        st = os.lstat(full)
        key = (full, st.st_mtime_ns, st.st_size)
        with self._lock:
            found = self._digests.get(key)
        if found is None:
            sha = hashlib.sha256()
            with open(full, "rb") as handle:
                for chunk in iter(lambda: handle.read(1 << 20), b""):
                    sha.update(chunk)
            found = f"sha256:{sha.hexdigest()}"
            with self._lock:
                if len(self._digests) > 50_000:
                    self._digests.clear()
                self._digests[key] = found
        return found

    def entry(self, name: str) -> dict[str, Any]:
        """The skill entry of ``skills/list`` / ``skills/get``."""
        skill = self.skill(name)
        label = name if "@" in name else skill.id
        return {
            "uri": skill_uri(label, skill.skill_file.name),
            "frontmatter": frontmatter(skill),
            "resources": [
                {"uri": skill_uri(label, rel), "digest": self.digest(skill, rel)} for rel in self.files(skill)
            ],
        }

    def entry_for_uri(self, uri: str) -> dict[str, Any]:
        parsed = SkillUri.parse(uri)
        skill = self.skill(parsed.name)
        if parsed.path != skill.skill_file.name:
            raise UnknownResource(f"{uri[:200]!r} is not the SKILL.md of a skill")
        return self.entry(parsed.name)

    def skill_resource(self, skill: Skill) -> dict[str, Any]:
        return {
            "uri": skill_uri(skill.id, skill.skill_file.name),
            "name": skill.name,
            "description": skill.description,
            "mimeType": "text/markdown",
        }

    def read(self, uri: str) -> dict[str, Any]:
        """``resources/read`` contents of one served file: text, or a base64 blob."""
        parsed = SkillUri.parse(uri)
        skill = self.skill(parsed.name)
        if parsed.path not in self.files(skill):
            raise UnknownResource(f"no file {parsed.path!r} is served in skill {skill.id!r}")
        try:
            content = read_file(skill, parsed.path, max_bytes=MAX_FILE_BYTES)
        except NotFound as exc:
            raise UnknownResource(exc.message) from None
        mime = "text/markdown" if parsed.path == skill.skill_file.name else mime_type(parsed.path)
        text = content.text
        if text is not None:
            return {"uri": uri, "mimeType": mime if mime != "application/octet-stream" else "text/plain", "text": text}
        return {"uri": uri, "mimeType": mime, "blob": base64.b64encode(content.data).decode()}

    def directory(self, uri: str) -> list[dict[str, Any]]:
        """``resources/directory/read``: the direct children of a skill directory."""
        parsed = SkillUri.parse(uri)
        skill = self.skill(parsed.name)
        label = parsed.name
        files = self.files(skill)
        prefix = f"{parsed.path}/" if parsed.path else ""
        if prefix and not any(f.startswith(prefix) for f in files):
            raise UnknownResource(f"{uri[:200]!r} is not a directory of skill {skill.id!r}")
        children: dict[str, dict[str, Any]] = {}
        for rel in files:
            if not rel.startswith(prefix):
                continue
            head, sep, _ = rel[len(prefix) :].partition("/")
            child = prefix + head
            if sep:
                children.setdefault(child, {"uri": skill_uri(label, child), "name": head, "mimeType": DIRECTORY_MIME})
            else:
                item: dict[str, Any] = {
                    "uri": skill_uri(label, child),
                    "name": head,
                    "mimeType": "text/markdown" if child == skill.skill_file.name else mime_type(child),
                }
                try:
                    st = os.lstat(os.path.join(skill.path, child))
                    if stat.S_ISREG(st.st_mode):
                        item["size"] = st.st_size
                except OSError:
                    pass
                children[child] = item
        return [children[key] for key in sorted(children)]


def page(items: list[Any], cursor: str | None) -> tuple[list[Any], str | None]:
    """One page of ``items`` from an opaque cursor (an offset)."""
    start = int(cursor) if cursor and cursor.isdigit() else 0
    end = start + PAGE_SIZE
    return items[start:end], (str(end) if end < len(items) else None)
