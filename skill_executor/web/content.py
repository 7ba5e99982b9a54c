"""How the service answers bytes that a run, a skill or a user wrote: never as active content
of the service's own origin.

A page served from this origin runs its script with this origin's rights (the browser guard
lets same-origin requests through: such a script could start runs, read files, and so on).
So every answer carrying such bytes -- files, artifacts (a run's saved outputs and refs), a
skill's files and version archives, a context rendering -- has:

* ``Content-Disposition: attachment`` with a safe file name, so a browser saves it rather than
  showing it; only :data:`PASSIVE_INLINE` types (plain text, JSON, PNG/JPEG/GIF/WebP images:
  nothing a browser executes) are ``inline``;
* ``X-Content-Type-Options: nosniff``, so a browser never takes a type other than the one
  declared (text that looks like HTML stays text);
* ``Content-Security-Policy: sandbox; default-src 'none'`` (:data:`SANDBOX_CSP`): even shown,
  the document has a unique opaque origin, runs no script and loads nothing.

:func:`download_headers` makes these headers (the byte routes use it, with their name for the
file); :class:`~skill_executor.api.middleware.ContentSafety` applies the same rule to every
response of the API and the worker as a backstop (a route that forgot is still covered), and
adds ``nosniff`` to every response (JSON, errors, event streams) so none is sniffable as HTML.

PDF is deliberately *not* inline: PDF viewers run document script (Acrobat JavaScript, form
actions) and have a long history of same-origin escapes; and Chromium refuses to show a PDF in a
sandboxed document anyway.  SVG, HTML, XML and everything else is an attachment.

The in-pod server (:mod:`skill_executor.podserver.rest`) runs apart from this package and keeps
its own copy of these headers (a test holds the two equal).
"""

from __future__ import annotations

import re
import urllib.parse

#: The types a browser may show inline: it renders them as text or a picture, runs nothing.
PASSIVE_INLINE = frozenset({"text/plain", "application/json", "image/png", "image/jpeg", "image/gif", "image/webp"})
#: The policy every answer of written bytes carries: a sandboxed, opaque-origin document with
#: no script and no subresource of any kind.
SANDBOX_CSP = "sandbox; default-src 'none'"
NOSNIFF = "nosniff"
#: The longest file name put in a Content-Disposition (a longer one keeps its extension).
FILENAME_MAX = 150
_ASCII_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")
#: Characters a file name never carries into a header: controls, separators of paths and of
#: header parameters, and the bidi and format characters that would disguise an extension.
_UNSAFE = re.compile(
    r"[\x00-\x1f\x7f-\x9f/\\\"';:<>|?*%\u061c\u200b-\u200f\u202a-\u202e\u2060-\u206f\ud800-\udfff\ufeff]+"
)


def base_type(content_type: str | None) -> str:
    """``type/subtype`` of a Content-Type value, lower case (``""`` for none)."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def is_passive(content_type: str | None) -> bool:
    """Whether a browser may show ``content_type`` inline (:data:`PASSIVE_INLINE`)."""
    return base_type(content_type) in PASSIVE_INLINE


def safe_filename(name: str | None) -> str:
    """``name``'s last path segment, without controls, quotes, separators or bidi/format
    characters, at most :data:`FILENAME_MAX` characters; ``"download"`` when nothing is left."""
    last = (name or "").replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    cleaned = _UNSAFE.sub("_", last).strip(" .") or "download"  # no hidden file, no trailing dot
    if len(cleaned) > FILENAME_MAX:
        stem, dot, ext = cleaned.rpartition(".")
        keep = FILENAME_MAX - len(ext) - 1
        cleaned = stem[:keep] + dot + ext if dot and 0 < len(ext) < 16 else cleaned[:FILENAME_MAX]
    return cleaned


def disposition(name: str | None, content_type: str | None) -> str:
    """The Content-Disposition for ``name`` served as ``content_type``: ``inline`` for a passive
    type, else ``attachment``; the name as an ASCII ``filename`` and, when it is not ASCII, an
    RFC 5987 ``filename*`` too."""
    kind = "inline" if is_passive(content_type) else "attachment"
    safe = safe_filename(name)
    ascii_name = _ASCII_UNSAFE.sub("_", safe)
    value = f'{kind}; filename="{ascii_name}"'
    if ascii_name != safe:
        value += f"; filename*=UTF-8''{urllib.parse.quote(safe, safe='')}"
    return value


def download_headers(name: str | None, content_type: str | None) -> dict[str, str]:
    """The headers of an answer carrying written bytes (see the module's docstring)."""
    return {
        "Content-Disposition": disposition(name, content_type),
        "X-Content-Type-Options": NOSNIFF,
        "Content-Security-Policy": SANDBOX_CSP,
    }
