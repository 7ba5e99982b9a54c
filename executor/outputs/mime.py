"""MIME types from content (libmagic), refined by extension where content says little.

libmagic knows binary formats well but calls most text ``text/plain`` (or guesses a
programming language for Markdown).  So content decides first whether a file is text
(valid UTF-8, no NUL byte); text with a known extension is typed by the extension
(``.json`` is ``application/json``, ``.csv`` ``text/csv``, ``.md`` ``text/markdown``,
...), which also spares libmagic's slowest path (~0.1-0.3 ms a file); everything else
-- binary content, unknown or no extension -- is typed by libmagic.
"""

from __future__ import annotations

import threading

import magic

from ..skills.files import is_text

BY_EXTENSION: dict[str, str] = {
    ".json": "application/json",
    ".jsonl": "application/jsonl",
    ".ndjson": "application/x-ndjson",
    ".csv": "text/csv",
    ".tsv": "text/tab-separated-values",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".svg": "image/svg+xml",
    ".html": "text/html",
    ".htm": "text/html",
    ".xml": "application/xml",
    ".yaml": "application/yaml",
    ".yml": "application/yaml",
    ".toml": "application/toml",
    ".txt": "text/plain",
    ".log": "text/plain",
    ".py": "text/x-python",
    ".sh": "text/x-shellscript",
    ".js": "text/javascript",
    ".mjs": "text/javascript",
    ".ts": "text/x-typescript",
    ".css": "text/css",
    ".tex": "text/x-tex",
    ".ini": "text/plain",
    ".sql": "application/sql",
    ".geojson": "application/geo+json",
}

_local = threading.local()


def _magic() -> magic.Magic:
    # libmagic handles are not thread-safe: one per thread.
    handle = getattr(_local, "magic", None)
    if handle is None:
        handle = _local.magic = magic.Magic(mime=True)
    return handle


def sniff(head: bytes) -> str:
    """libmagic's MIME type for the first bytes of a file."""
    if not head:
        return "inode/x-empty"
    try:
        return _magic().from_buffer(head)
    except magic.MagicException:
        return "application/octet-stream"


def detect(name: str, head: bytes, *, complete: bool) -> str:
    """The MIME type of a file called ``name`` whose content starts with ``head``."""
    dot = name.rfind(".")
    ext = name[dot:].lower() if dot > name.rfind("/") else ""
    refined = BY_EXTENSION.get(ext)
    text = is_text(head, partial=not complete)
    if refined and text:
        return refined
    found = sniff(head)
    if found in ("inode/x-empty", "application/x-empty"):
        return refined or "application/octet-stream"
    if text and found == "application/octet-stream":
        return "text/plain"
    return found
