"""Skills as MCP resources, by the Skills extension (SEP-2640, ``io.modelcontextprotocol/skills``).

Every served file of a skill is a resource ``skill://<name>/<path>``; the skill's entry
(``skills/list``, ``skills/get``) carries its ``SKILL.md`` URI, its frontmatter as JSON and
every served file with its ``sha256:<hex>`` digest and its ``size`` in bytes.  ``<name>`` may
be pinned to a registry version like the REST API's names (``skill://csv-report@3/SKILL.md``).

What is served is what the skill's safe-read rules allow (:mod:`skill_executor.skills.files`):
regular files inside the skill folder, no links (``inventory`` does not follow them, and a
read resolves within the folder), none in ``.git``/``node_modules``/``__pycache__``, and
none over :data:`MAX_FILE_BYTES`.  Such files are neither listed nor readable.

A skill gets an entry only when the extension's rules hold for it (:meth:`SkillFiles.refusal`):
its ``SKILL.md`` is named so, its frontmatter is plain YAML with a ``name`` by the Agent Skills
naming rules equal to the URI's last segment and a 1-1024 character ``description``, and it
is within the extension's limits (:data:`MAX_SKILL_FILES` files, :data:`MAX_SKILL_BYTES` in
all).  Any other skill is left out of ``skills/list`` (a partial listing is allowed) and
``skills/get`` answers ``-32602`` for it, saying why; its files stay readable resources.

Frontmatter: the ``SKILL.md`` YAML block parsed as plain YAML (so numbers and booleans
stay numbers and booleans), with dates as ISO strings.  :func:`frontmatter` of a skill
whose frontmatter our tolerant loader had to repair (plain YAML refuses it) is the repaired
mapping, every scalar a string, as the loader reads it; such a skill gets no entry (its
frontmatter would not be the one a client parses from the file).
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import mimetypes
import os
import re
import stat
import threading
from dataclasses import dataclass
from typing import Any

import yaml

from ..errors import NotFound
from ..registry import SkillRepository
from ..skills import Skill, inventory, read_file
from ..skills.files import SKIP_DIRS
from ..skills.parser import parse_skill_file

SCHEME = "skill://"
EXTENSION = "io.modelcontextprotocol/skills"
DIRECTORY_MIME = "inode/directory"
#: The extension's per-skill limits: entries of ``resources`` (``SKILL.md`` included) and the
#: sum of their sizes.  A skill over either gets no entry (servers SHOULD NOT serve one).
MAX_SKILL_FILES = 512
MAX_SKILL_BYTES = 16 * 1024 * 1024
#: Files larger than this are not served (listed nor read): an MCP read is one message, and
#: no file of a skill within the limits is larger.
MAX_FILE_BYTES = MAX_SKILL_BYTES
#: The Agent Skills naming rules: 1-64 lowercase letters, digits and hyphens, no hyphen first,
#: last or twice in a row.
NAME_PATTERN = re.compile(r"(?!-)(?!.*--)[a-z0-9-]{1,64}(?<!-)")
#: ``ttlMs``/``cacheScope`` of ``skills/list`` and ``skills/get`` (2026-07-28): immediately
#: stale, so a client that refreshes an entry after a digest mismatch gets the server's
#: current one, never its own cached copy; private, as the catalog is served to key holders.
CACHE_TTL_MS = 0
CACHE_SCOPE = "private"
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


def plain_frontmatter(skill: Skill) -> dict[str, Any] | None:
    """The ``SKILL.md`` frontmatter as plain YAML reads it, as JSON; None when it does not."""
    text = skill.raw.lstrip("\ufeff")
    lines = text.splitlines()
    if lines and lines[0].strip() == "---":
        for index, line in enumerate(lines[1:], 1):
            if line.strip() == "---":
                try:
                    data = yaml.safe_load("\n".join(lines[1:index]))
                except yaml.YAMLError:
                    return None
                if isinstance(data, dict):
                    return {str(k): _jsonable(v) for k, v in data.items()}
                return None
    return None


def frontmatter(skill: Skill) -> dict[str, Any]:
    """The ``SKILL.md`` frontmatter as JSON (see the module doc for repaired skills)."""
    plain = plain_frontmatter(skill)
    if plain is not None:
        return plain
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
    """The served files of skills, with digests cached by (path, mtime, size) and parsed
    frontmatters by (path, text)."""

    def __init__(self, repository: SkillRepository) -> None:
        self.repository = repository
        self._digests: dict[tuple[str, int, int], str] = {}
        self._frontmatters: dict[tuple[str, str], dict[str, Any] | None] = {}
        self._lock = threading.Lock()

    def frontmatter(self, skill: Skill) -> dict[str, Any] | None:
        """:func:`plain_frontmatter`, parsed once per ``SKILL.md`` text (plain YAML is slow);
        the caller must not change it."""
        key = (str(skill.skill_file), skill.raw)
        with self._lock:
            if key in self._frontmatters:
                return self._frontmatters[key]
        found = plain_frontmatter(skill)
        with self._lock:
            if len(self._frontmatters) > 10_000:
                self._frontmatters.clear()
            self._frontmatters[key] = found
        return found

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

    def digest(self, skill: Skill, relative: str) -> tuple[str, int]:
        """``sha256:<hex>`` of a file's bytes and their count (cached by path, mtime and size)."""
        full = os.path.join(skill.path, relative)
        st = os.lstat(full)
        key = (full, st.st_mtime_ns, st.st_size)
        with self._lock:
            found = self._digests.get(key)
        if found is None:
            sha = hashlib.sha256()
            size = 0
            with open(full, "rb") as handle:
                for chunk in iter(lambda: handle.read(1 << 20), b""):
                    sha.update(chunk)
                    size += len(chunk)
            found = f"sha256:{sha.hexdigest()}"
            if size != st.st_size:  # changed while read: the next call reads it again
                return found, size
            with self._lock:
                if len(self._digests) > 50_000:
                    self._digests.clear()
                self._digests[key] = found
        return found, st.st_size

    def refusal(self, skill: Skill, label: str, files: list[str]) -> str | None:
        """Why the skill gets no entry (the module doc's rules), or None."""
        if skill.skill_file.name != "SKILL.md":
            return f"its instructions file is {skill.skill_file.name!r}, not 'SKILL.md'"
        data = self.frontmatter(skill)
        if data is None:
            return "its frontmatter is not plain YAML (the tolerant loader had to repair it)"
        name, description = data.get("name"), data.get("description")
        if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
            return f"its name {name!r} breaks the Agent Skills naming rules"
        if name != label.partition("@")[0]:
            return f"its name {name!r} is not its folder's {label.partition('@')[0]!r}"
        if not isinstance(description, str) or not description.strip() or len(description) > 1024:
            return "its description is not 1-1024 characters"
        oversize = next((e.path for e in inventory(skill) if e.size > MAX_FILE_BYTES), None)
        if oversize is not None:  # not served, so the entry could not be complete
            return f"its file {oversize!r} is over {MAX_FILE_BYTES} bytes"
        if len(files) > MAX_SKILL_FILES:
            return f"it has {len(files)} files; the Skills extension allows {MAX_SKILL_FILES}"
        total = sum(os.lstat(os.path.join(skill.path, rel)).st_size for rel in files)
        if total > MAX_SKILL_BYTES:
            return f"its files hold {total} bytes; the Skills extension allows {MAX_SKILL_BYTES}"
        return None

    def entry(self, name: str) -> dict[str, Any]:
        """The skill entry of ``skills/list`` / ``skills/get``; :class:`UnknownResource`
        for a skill that gets none (:meth:`refusal`)."""
        skill = self.skill(name)
        return self.entry_of(skill, name if "@" in name else skill.id)

    def entry_of(self, skill: Skill, label: str) -> dict[str, Any]:
        """:meth:`entry` of a skill already looked up (``skills/list``: one catalog read)."""
        files = self.files(skill)
        why = self.refusal(skill, label, files)
        if why is not None:
            raise UnknownResource(f"No skill is served at {skill_uri(label, 'SKILL.md')}: {why}")
        resources = []
        for rel in files:
            digest, size = self.digest(skill, rel)
            resources.append({"uri": skill_uri(label, rel), "digest": digest, "size": size})
        return {
            "uri": skill_uri(label, skill.skill_file.name),
            "frontmatter": self.frontmatter(skill),
            "resources": resources,
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
        if content.truncated:  # grew past the cap since it was listed
            raise UnknownResource(f"no file {parsed.path!r} is served in skill {skill.id!r}")
        mime = "text/markdown" if parsed.path == skill.skill_file.name else mime_type(parsed.path)
        text = content.text
        if text is not None:
            return {"uri": uri, "mimeType": mime if mime != "application/octet-stream" else "text/plain", "text": text}
        return {"uri": uri, "mimeType": mime, "blob": base64.b64encode(content.data).decode()}

    def directory(self, uri: str) -> list[dict[str, Any]]:
        """``resources/directory/read``: the direct children of a skill directory (empty
        folders too); files as :meth:`read` serves them, folders as ``inode/directory``."""
        parsed = SkillUri.parse(uri)
        skill = self.skill(parsed.name)
        label = parsed.name
        parts = parsed.path.split("/") if parsed.path else []
        where = str(skill.path)
        is_dir = True
        for part in parts:  # each step a real folder: never through a link
            where = os.path.join(where, part)
            try:
                is_dir = part not in SKIP_DIRS and stat.S_ISDIR(os.lstat(where).st_mode)
            except OSError:
                is_dir = False
            if not is_dir:
                break
        if not is_dir:
            if parsed.path in self.files(skill):
                raise UnknownResource(f"{uri[:200]} is not a directory resource")
            raise UnknownResource(f"no directory {parsed.path!r} in skill {skill.id!r}")
        served = set(self.files(skill))
        prefix = f"{parsed.path}/" if parsed.path else ""
        children = []
        with os.scandir(where) as found:
            for item in sorted(found, key=lambda e: e.name):
                child = prefix + item.name
                if item.is_dir(follow_symlinks=False):
                    if item.name not in SKIP_DIRS:
                        children.append({"uri": skill_uri(label, child), "name": item.name, "mimeType": DIRECTORY_MIME})
                elif child in served:
                    mime = "text/markdown" if child == skill.skill_file.name else mime_type(child)
                    entry: dict[str, Any] = {"uri": skill_uri(label, child), "name": item.name, "mimeType": mime}
                    try:
                        entry["size"] = item.stat(follow_symlinks=False).st_size
                    except OSError:
                        pass
                    children.append(entry)
        return children


def page(items: list[Any], cursor: str | None) -> tuple[list[Any], str | None]:
    """One page of ``items`` from an opaque cursor (an offset)."""
    start = int(cursor) if cursor and cursor.isdigit() else 0
    end = start + PAGE_SIZE
    return items[start:end], (str(end) if end < len(items) else None)
