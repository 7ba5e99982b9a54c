"""sandboxd's REST files API (``/v1/files``, ``/v1/health``, ``/v1/metadata``) on the standard
library's HTTP server, with sandboxd's response shapes and status codes: JSON errors
``{code, message}`` (403 PERMISSION_DENIED, 404 NOT_FOUND, 400 INVALID_ARGUMENT, 409 CONFLICT),
a listing ``{path, entries: [{name, size, type, modified_at, mode}]}`` for a directory, 204 for
PUT and DELETE.  What it adds: bodies over ``--max-put-bytes`` get 413 before any byte is read, a
listing over ``--max-list-entries`` gets 413, a full disk gets 507 (neither is retried by the
SDK, which retries 5xx of 500-504), a connection idle for ``--io-timeout`` is closed, and only
regular files are served (a FIFO or socket gets 403, never a blocked read)."""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
import socketserver
import stat
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler

from . import body, tree

PREFIX = "/v1/files"
_SENSITIVE = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "CRED", "KEY", "AUTH", "BEARER", "PRIVATE", "CERT")
_BOOLS = {"1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True}
_BOOLS |= {"0": False, "f": False, "F": False, "FALSE": False, "false": False, "False": False}
#: Every answer is never sniffed, and a file's is never active content of this server's origin
#: (a download, in a sandboxed document without script): skill_executor.web.content's rule,
#: copied because this server runs apart from the service (a test holds the two equal).
NOSNIFF = "nosniff"
SANDBOX_CSP = "sandbox; default-src 'none'"
_ASCII_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")


def attachment(name: str) -> str:
    """``attachment`` with ``name`` as a safe ASCII ``filename`` (and the whole name, UTF-8
    percent-encoded, as ``filename*`` when it is not that)."""
    plain = _ASCII_UNSAFE.sub("_", name).strip("._") or "download"
    value = f'attachment; filename="{plain[:150]}"'
    if plain != name:
        value += "; filename*=UTF-8''" + urllib.parse.quote(name[:150], safe="", errors="replace")
    return value


class FilesHandler(BaseHTTPRequestHandler):
    """One connection; the class attributes are set by :func:`handler_class`."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    root: tree.PodRoot
    max_put: int
    max_entries: int
    started: float
    query: dict[str, list[str]]
    body_read = False  # a PUT's body (set per request by do_PUT)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass  # requests are not logged (paths are the run's data)

    # -- responses -------------------------------------------------------------------------
    def end_headers(self) -> None:
        self.send_header("X-Content-Type-Options", NOSNIFF)
        self.send_header("Content-Security-Policy", SANDBOX_CSP)
        super().end_headers()

    def _json(self, code: int, body: object) -> None:
        data = (json.dumps(body) + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _error(self, code: int, name: str, message: str) -> None:
        if self.command == "PUT" and not self.body_read:
            self._discard_body()
        self._json(code, {"code": name, "message": message})

    def _discard_body(self) -> None:
        """Before answering a PUT whose body is not wanted: a small body is read and dropped
        (closing on unread bytes would reset the connection, losing the answer), a large one
        is left unread and the connection closed."""
        self.body_read = True
        raw = self.headers.get("Content-Length", "")
        if raw.isdigit() and int(raw) <= 65536 and "Transfer-Encoding" not in self.headers:
            self.rfile.read(int(raw))
        else:
            self.close_connection = True

    def _no_content(self) -> None:
        self.send_response(204)
        self.end_headers()

    def _fail(self, exc: BaseException) -> None:
        number = getattr(exc, "errno", None)
        if isinstance(exc, tree.PathRefused) or number == errno.ELOOP:
            self._error(403, "PERMISSION_DENIED", "path traversal outside sandbox root is forbidden")
        elif isinstance(exc, tree.TooManyEntries):
            self._error(413, "RESOURCE_EXHAUSTED", f"directory listing has {exc}")
        elif isinstance(exc, FileNotFoundError):
            self._error(404, "NOT_FOUND", "path does not exist within the sandbox")
        elif number == errno.ENOTDIR:
            if self.command == "PUT":
                self._error(409, "CONFLICT", "a parent of the path is not a directory")
            else:
                self._error(404, "NOT_FOUND", "path does not exist within the sandbox")
        elif number == errno.ENXIO:  # a socket (open() refuses it): not served, as a FIFO is not
            self._error(403, "PERMISSION_DENIED", "not a regular file")
        elif isinstance(exc, PermissionError):
            self._error(403, "PERMISSION_DENIED", "permission denied")
        elif number in (errno.ENAMETOOLONG, errno.EISDIR):
            self._error(400, "INVALID_ARGUMENT", os.strerror(number or 0))
        elif number in (errno.ENOSPC, errno.EDQUOT):
            self._error(507, "RESOURCE_EXHAUSTED", "no space left in the sandbox")
        elif number == errno.ENOTEMPTY:
            self._error(409, "CONFLICT", "directory is not empty; pass recursive=true to remove it")
        else:
            self._error(500, "INTERNAL", f"{type(exc).__name__}: {exc}")

    # -- routing ---------------------------------------------------------------------------
    def _route(self) -> list[str] | None:
        """The target's components for a files request; otherwise answered here (``None``)."""
        url = urllib.parse.urlsplit(self.path)
        self.query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
        if url.path == PREFIX or url.path.startswith(PREFIX + "/"):
            try:
                return tree.split(url.path[len(PREFIX) + 1 :], self.root.path)
            except tree.PathRefused as exc:
                self._fail(exc)
                return None
        if self.command in ("GET", "HEAD") and url.path == "/v1/health":
            self._json(200, {"status": "ok", "uptime_seconds": int(time.monotonic() - self.started)})
        elif self.command in ("GET", "HEAD") and url.path == "/v1/metadata":
            env = {k: v for k, v in os.environ.items() if k.startswith("SANDBOX_") and not _sensitive(k)}
            self._json(200, {"env": env})
        else:
            self._error(404, "NOT_FOUND", "no such endpoint")
        return None

    def _param(self, name: str, default: str = "") -> str:
        return self.query.get(name, [default])[-1]

    # -- verbs -----------------------------------------------------------------------------
    def do_HEAD(self) -> None:  # noqa: N802 - the base class's naming
        self.do_GET()

    def do_GET(self) -> None:  # noqa: N802
        parts = self._route()
        if parts is None:
            return
        try:
            parent = self.root.open_dir(parts[:-1])
            try:
                fd = tree.open_file(parent, parts[-1]) if parts else os.dup(parent)
            finally:
                os.close(parent)
        except (OSError, tree.PathRefused) as exc:
            self._fail(exc)
            return
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                self._list(fd, parts)
            elif not stat.S_ISREG(st.st_mode):
                self._error(403, "PERMISSION_DENIED", "not a regular file")
            else:
                with open(fd, "rb", buffering=0, closefd=False) as file:
                    self._send_file(file, st, parts[-1] if parts else "download")
        finally:
            os.close(fd)

    def _list(self, fd: int, parts: list[str]) -> None:
        try:
            entries = tree.listing(fd, self.max_entries)
        except (OSError, tree.TooManyEntries) as exc:
            self._fail(exc)
            return
        self._json(200, {"path": "/" + "/".join(parts), "entries": entries})

    def _send_file(self, file: object, st: os.stat_result, name: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Disposition", attachment(name))
        self.send_header("Content-Length", str(st.st_size))
        self.send_header("Last-Modified", self.date_time_string(int(st.st_mtime)))
        self.end_headers()
        if self.command == "HEAD" or not st.st_size:
            return
        # The size as opened is what is sent: a file that grows meanwhile is cut there, one that
        # shrinks ends the connection (the client sees a short body, never a wrong one).
        sent = self.connection.sendfile(file, 0, st.st_size)
        if sent != st.st_size:
            self.close_connection = True

    def do_PUT(self) -> None:  # noqa: N802
        self.body_read = False
        parts = self._route()
        if parts is None:
            return
        mode = self._param("mode", "0644")
        if len(mode) != 4 or mode[0] != "0" or any(c not in "01234567" for c in mode):
            self._error(400, "INVALID_ARGUMENT", f"mode {mode!r} must match ^0[0-7]{{3}}$")
            return
        if not parts:
            self._error(400, "INVALID_ARGUMENT", "target path is a directory")
            return
        if self.headers.get_content_type() == "multipart/form-data":
            self._error(400, "INVALID_ARGUMENT", "multipart uploads are not supported; send the raw body")
            return
        chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
        length = 0
        if not chunked:
            raw = self.headers.get("Content-Length", "0").strip()
            if not raw.isdigit():
                self._error(400, "INVALID_ARGUMENT", "a Content-Length (or a chunked body) is required")
                return
            length = int(raw)
            if length > self.max_put:
                self._error(413, "RESOURCE_EXHAUSTED", f"file larger than {self.max_put} bytes")
                return
        try:
            self._write(parts, int(mode, 8), None if chunked else length)
        except (OSError, tree.PathRefused, body.BodyError) as exc:
            if self.body_read:
                self.close_connection = True  # the body was read in part: the connection is spent
            if isinstance(exc, TimeoutError | ConnectionError):
                return  # the client stalled or left: nothing to answer
            if isinstance(exc, body.BodyError):
                self._error(
                    413 if exc.too_large else 400,
                    "RESOURCE_EXHAUSTED" if exc.too_large else "INVALID_ARGUMENT",
                    str(exc),
                )
            else:
                self._fail(exc)
        else:
            self._no_content()

    def _write(self, parts: list[str], mode: int, length: int | None) -> None:
        """Write the body into a temporary file beside the target, then rename it over the
        target (a link there is replaced, never followed)."""
        parent = self.root.open_dir(parts[:-1], create=True)
        try:
            try:
                if stat.S_ISDIR(os.stat(parts[-1], dir_fd=parent, follow_symlinks=False).st_mode):
                    raise IsADirectoryError(errno.EISDIR, "target path is a directory")
            except FileNotFoundError:
                pass
            tmp = f".sandboxd-tmp-{secrets.token_hex(8)}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=parent)
            try:
                self.body_read = True
                with open(fd, "wb", buffering=0, closefd=True) as out:
                    for chunk in body.read(self.rfile, length, self.max_put):  # type: ignore[arg-type]
                        out.write(chunk)
                    os.fchmod(fd, mode)
                os.rename(tmp, parts[-1], src_dir_fd=parent, dst_dir_fd=parent)
            except BaseException:
                try:
                    os.unlink(tmp, dir_fd=parent)
                except OSError:
                    pass
                raise
        finally:
            os.close(parent)

    def do_DELETE(self) -> None:  # noqa: N802
        parts = self._route()
        if parts is None:
            return
        recursive = _BOOLS.get(self._param("recursive", "false"))
        if recursive is None:
            self._error(400, "INVALID_ARGUMENT", f"recursive {self._param('recursive')!r} must be a boolean")
            return
        if not parts and not recursive:
            self._error(409, "CONFLICT", "cannot delete the sandbox root; pass recursive=true to clear its contents")
            return
        try:
            parent = self.root.open_dir(parts[:-1])
            try:
                if not parts:
                    for name in os.listdir(parent):
                        tree.remove(parent, name)
                elif recursive:
                    tree.remove(parent, parts[-1])
                elif stat.S_ISDIR(os.stat(parts[-1], dir_fd=parent, follow_symlinks=False).st_mode):
                    os.rmdir(parts[-1], dir_fd=parent)
                else:
                    os.unlink(parts[-1], dir_fd=parent)
            finally:
                os.close(parent)
        except (OSError, tree.PathRefused) as exc:
            self._fail(exc)
            return
        self._no_content()


class UnixFilesHandler(FilesHandler):
    disable_nagle_algorithm = False  # a unix socket has no Nagle

    def address_string(self) -> str:
        return "unix"


class UnixThreadingHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def _sensitive(name: str) -> bool:
    upper = name.upper()
    return any(marker in upper for marker in _SENSITIVE)


def handler_class(
    base: type[FilesHandler], root: tree.PodRoot, *, max_put: int, max_entries: int, io_timeout: float
) -> type[FilesHandler]:
    """A handler class bound to one root and its limits."""
    attrs = {"root": root, "max_put": max_put, "max_entries": max_entries, "timeout": io_timeout}
    attrs["started"] = time.monotonic()
    return type(base.__name__ + "Bound", (base,), attrs)
