"""MIME types from content (libmagic), refined by extension where content says little.

libmagic knows binary formats well but calls most text ``text/plain`` (or guesses a
programming language for Markdown).  So content decides first whether a file is text
(valid UTF-8, no NUL byte); text with a known extension is typed by the extension
(``.json`` is ``application/json``, ``.csv`` ``text/csv``, ``.md`` ``text/markdown``,
...), which also spares libmagic's slowest path (~0.1-0.3 ms a file); everything else
-- binary content, unknown or no extension -- is typed by libmagic.

Many formats are zip archives (OOXML, OpenDocument, EPUB, Java and Python packages,
Android apps, ...).  libmagic tells some of them apart only when it sees the whole
archive and calls the rest ``application/zip``; so zip content (``PK`` signature)
with one of those extensions is typed by the extension (:data:`ZIP_BASED`).
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

#: Formats that are zip archives, by extension (checked only for zip content).
ZIP_BASED: dict[str, str] = {
    ".docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    ".docm": "application/vnd.ms-word.document.macroenabled.12",
    ".dotx": "application/vnd.openxmlformats-officedocument.wordprocessingml.template",
    ".dotm": "application/vnd.ms-word.template.macroenabled.12",
    ".xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    ".xlsm": "application/vnd.ms-excel.sheet.macroenabled.12",
    ".xltx": "application/vnd.openxmlformats-officedocument.spreadsheetml.template",
    ".xltm": "application/vnd.ms-excel.template.macroenabled.12",
    ".pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    ".pptm": "application/vnd.ms-powerpoint.presentation.macroenabled.12",
    ".potx": "application/vnd.openxmlformats-officedocument.presentationml.template",
    ".ppsx": "application/vnd.openxmlformats-officedocument.presentationml.slideshow",
    ".vsdx": "application/vnd.ms-visio.drawing.main+xml",
    ".odt": "application/vnd.oasis.opendocument.text",
    ".ott": "application/vnd.oasis.opendocument.text-template",
    ".ods": "application/vnd.oasis.opendocument.spreadsheet",
    ".ots": "application/vnd.oasis.opendocument.spreadsheet-template",
    ".odp": "application/vnd.oasis.opendocument.presentation",
    ".otp": "application/vnd.oasis.opendocument.presentation-template",
    ".odg": "application/vnd.oasis.opendocument.graphics",
    ".odf": "application/vnd.oasis.opendocument.formula",
    ".epub": "application/epub+zip",
    ".jar": "application/java-archive",
    ".war": "application/java-archive",
    ".ear": "application/java-archive",
    ".whl": "application/x-wheel+zip",
    ".apk": "application/vnd.android.package-archive",
    ".xpi": "application/x-xpinstall",
    ".kmz": "application/vnd.google-earth.kmz",
    ".3mf": "model/3mf",
    ".zip": "application/zip",
}
#: How a zip archive starts: a local file header, or the end record of an empty archive.
ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06", b"PK\x07\x08")

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
    if ext in ZIP_BASED and head.startswith(ZIP_MAGIC):
        return ZIP_BASED[ext]
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
