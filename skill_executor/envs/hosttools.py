"""Running a host tool (pip, npm) over untrusted input: the only way ``skill_executor/`` does it.

Resolving a skill's dependencies runs pip and npm on the service's host over names a
skill chose (and packages an index serves).  Nothing of the skill and nothing of the
service's own set-up may steer them, so :meth:`HostTools.run` runs every such tool

* from a **fresh, empty working directory** it makes (never the skill's folder, never the
  service's working directory, where a ``pip/`` package, ``sitecustomize.py``, ``.npmrc``
  or ``node_modules/.bin`` could wait), with its own empty ``HOME`` and ``TMPDIR``;
* with a **scrubbed environment**: only ``PATH`` (the tool's folder and the system's),
  ``HOME``, ``TMPDIR``, ``LANG``/``LC_ALL``, the proxy and CA-bundle variables of
  :data:`PASSED`, and what the caller sets on purpose -- no credentials, no ``PIP_*``,
  ``npm_config_*``, ``PYTHON*`` or other ``NODE_*`` of the service's environment;
* as an **unprivileged user** when the service runs as root (``HOST_TOOLS_USER``, default
  ``nobody``; no supplementary groups), with only its build folder writable: the
  folder is handed to that user before the tool starts and taken back (:func:`reclaim`:
  top-down, links never followed) before anyone reads what it wrote;
* in its own process group, killed as a whole once the tool exits or times out;
* with its output bounded (the last :data:`OUTPUT_BYTES`) and :func:`redact`-ed: no URL
  credential, query string or fragment, and no configured secret, leaves this module.

Callers add the tool's own isolation switches (``python -I``, ``pip --isolated`` with
``PIP_CONFIG_FILE=/dev/null``, ``npm --userconfig``/``--globalconfig`` on empty files).
A process that leaves the tool's process group on purpose (``setsid``) is not tracked.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO
from urllib.parse import parse_qsl, unquote, urlsplit

from ..errors import Unavailable

#: Inherited variables a tool may see: how the operator's host reaches the network.
PASSED = (
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    # Node (npm) reads no system CA store, only its own bundle and this file: a host whose
    # proxy re-signs TLS (a company CA) sets it, or every npm install fails its handshake.
    "NODE_EXTRA_CA_CERTS",
)
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
#: How much of a tool's output (stdout and stderr together) is kept: the end.
OUTPUT_BYTES = 256 * 1024
#: The scratch folder a run makes inside the tool's folder (removed after the run).
SCRATCH = ".tool"
#: Values of ``HOST_TOOLS_USER`` that keep the service's own user.
SERVICE_USER = frozenset({"root", "0", "0:0"})
#: Secrets shorter than this are only redacted inside URLs (a one-letter password would
#: otherwise blank out every such letter).
MIN_SECRET = 4

# A URL in free text: scheme, optional userinfo, the host (and port), then anything else
# (path, query, fragment) up to white space, a quote or a bracket.
_URL = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)(?:[^\s/?#]*@)?([^\s/?#\"'<>()\[\]{}]*)([^\s\"'<>()\[\]{}]*)")
#: What a redacted URL shows in place of everything after its host.
HIDDEN = "/***"
#: Path segments of an index URL too common to be secret (never replaced in free text).
_PLAIN_SEGMENTS = frozenset(
    {
        "simple",
        "pypi",
        "packages",
        "package",
        "repository",
        "repositories",
        "api",
        "index",
        "npm",
        "registry",
        "artifactory",
        "nexus",
        "python",
        "content",
        "groups",
        "group",
        "root",
        "web",
        "public",
        "private",
        "dist",
    }
)


class HostToolsUnusable(Unavailable):
    """The service cannot run pip or npm the way it must (a set-up problem, not the skill's)."""

    code = "host_tools_unusable"


def redact_url(url: str) -> str:
    """A package index's (or registry's) URL as it may be recorded and shown anywhere --
    manifests a run reads, API answers, logs, errors, ``doctor``: its scheme and host (and
    port) only, everything else (userinfo, path, query, fragment) replaced by ``/***``.
    Tokens live in any of those parts (``user:token@``, ``/simple/<token>/``,
    ``?token=``), so none of them is kept.  A value that is not a URL is ``***``."""
    match = _URL.fullmatch(url.strip())
    if match is None:
        return "***"
    scheme, host, rest = match.group(1).lower(), match.group(2).lower(), match.group(3)
    return scheme + host + (rest if rest in ("", "/") else HIDDEN)  # userinfo: dropped


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every URL in it shown as :func:`redact_url` shows it, and every known
    secret (at least :data:`MIN_SECRET` long) replaced by ``***``."""
    text = _URL.sub(lambda m: redact_url(m.group(0)), text)
    for secret in sorted({s for s in secrets if len(s) >= MIN_SECRET}, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def url_secrets(url: str | None) -> set[str]:
    """The parts of a configured URL that are secret, to be replaced wherever a tool quotes
    them without the URL around them (pip quotes an index's path alone): its user and
    password, its path (whole, and each segment but the common words of index paths) unless
    it is only such words, its
    query string and each query value, its fragment; raw and percent-decoded."""
    if not url:
        return set()
    try:
        parts = urlsplit(url)
    except ValueError:
        return {url}
    found: set[str] = set()
    if "@" in parts.netloc:
        userinfo = parts.netloc.rsplit("@", 1)[0]
        found |= {userinfo, *userinfo.split(":", 1)}
    path = parts.path.strip("/")
    unusual = {s for s in path.split("/") if s and s.lower() not in _PLAIN_SEGMENTS}
    if unusual:  # "/simple/" alone hides nothing
        found |= {path, *unusual}
    if parts.query:
        found.add(parts.query)
        found |= {value for _, value in parse_qsl(parts.query, keep_blank_values=True)}
    if parts.fragment:
        found.add(parts.fragment)
    return {s for s in found | {unquote(s) for s in found} if s}


@dataclass(frozen=True, slots=True)
class ToolUser:
    """Who tools run as (when the service is root)."""

    uid: int
    gid: int
    name: str


def tool_user(setting: str) -> ToolUser | None:
    """The user tools run as; None: the service's own (it is not root, or ``setting`` says
    so).  ``setting``: a user name, ``uid`` or ``uid:gid``."""
    if os.geteuid() != 0 or setting.strip() in SERVICE_USER:
        return None
    text = setting.strip()
    try:
        if re.fullmatch(r"\d+(:\d+)?", text):
            uid_text, _, gid_text = text.partition(":")
            uid = int(uid_text)
            gid = int(gid_text) if gid_text else uid
            return ToolUser(uid, gid, text)
        entry = pwd.getpwnam(text)
    except KeyError:
        raise HostToolsUnusable(
            f"HOST_TOOLS_USER names no user of this host: {text!r} (a name, uid or "
            "uid:gid; 'root' keeps the service's own user)"
        ) from None
    return ToolUser(entry.pw_uid, entry.pw_gid, text)


@dataclass(frozen=True, slots=True)
class HostToolResult:
    argv: tuple[str, ...]
    returncode: int
    #: stdout and stderr as they came, the last :data:`OUTPUT_BYTES`, redacted.
    output: str
    timed_out: bool = False


@dataclass(frozen=True, slots=True)
class Scratch:
    """The places of one tool run inside its folder."""

    folder: Path
    home: Path
    tmp: Path
    cwd: Path


@dataclass
class HostTools:
    """Runs host tools as described in the module's docstring."""

    user: ToolUser | None = None
    secrets: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        for name in PASSED:
            self.secrets |= url_secrets(os.environ.get(name))

    def scratch(self, folder: Path) -> Scratch:
        """Make ``folder`` (it must not exist; its parent must be the service's) for one
        run; the caller puts the tool's inputs in it before :meth:`run`."""
        folder.mkdir(mode=0o755)
        base = folder / SCRATCH
        places = Scratch(folder, base / "home", base / "tmp", base / "cwd")
        for path in (base, places.home, places.tmp, places.cwd):
            path.mkdir(mode=0o755)
        return places

    def run(
        self, argv: Sequence[str], scratch: Scratch, *, timeout: float, env: Mapping[str, str] | None = None
    ) -> HostToolResult:
        """Run ``argv`` with ``scratch.folder`` its only writable place; once this returns,
        the tool's processes are gone and what it wrote is the service's (links not followed)."""
        argv = tuple(argv)
        tool_dir = os.path.dirname(shutil.which(argv[0]) or argv[0])
        variables = {name: os.environ[name] for name in PASSED if name in os.environ}
        variables |= {
            "PATH": f"{tool_dir}:{SYSTEM_PATH}" if tool_dir else SYSTEM_PATH,
            "HOME": str(scratch.home),
            "TMPDIR": str(scratch.tmp),
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
        }
        variables |= dict(env or {})
        if self.user is not None:
            _give(scratch.folder, self.user, keep=scratch.cwd)
        try:
            with tempfile.TemporaryFile() as out:
                returncode, timed_out = self._spawn(argv, scratch.cwd, variables, out, timeout)
                size = out.seek(0, os.SEEK_END)
                out.seek(max(0, size - OUTPUT_BYTES))
                text = out.read().decode("utf-8", errors="replace")
        finally:
            reclaim(scratch.folder)
            shutil.rmtree(scratch.folder / SCRATCH, ignore_errors=True)
        if timed_out:
            text += f"\ntimed out after {timeout:.0f} s"
        return HostToolResult(argv, returncode, redact(text, self.secrets), timed_out)

    def _spawn(
        self, argv: tuple[str, ...], cwd: Path, env: dict[str, str], out: IO[bytes], timeout: float
    ) -> tuple[int, bool]:
        user = self.user
        try:
            proc = subprocess.Popen(  # the one place; argv is never a shell line
                argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                umask=0o022,
                close_fds=True,
                user=None if user is None else user.uid,
                group=None if user is None else user.gid,
                extra_groups=None if user is None else [],
            )
        except (OSError, subprocess.SubprocessError) as exc:
            message = f"cannot run {argv[0]}" + (f" as {user.name}" if user else "") + f": {exc}\n"
            out.write(message.encode())
            return 127, False
        fired = threading.Event()

        def expire() -> None:
            fired.set()
            _kill_group(proc.pid)

        timer = threading.Timer(timeout, expire)
        timer.daemon = True
        timer.start()
        try:
            # Wait for the leader without reaping it: while it is a zombie its id is not
            # reused, so killing its group afterwards can only hit the tool's processes.
            os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
        finally:
            timer.cancel()
            _kill_group(proc.pid)
            returncode = proc.wait()
        return (124, True) if fired.is_set() else (returncode, False)

    def check(self, argv: Sequence[str], where: Path, readable: Iterable[Path] = (), *, timeout: float = 60.0) -> None:
        """Refuse with :class:`HostToolsUnusable` unless ``argv`` runs (exit 0) the way
        :meth:`run` runs tools, from folders made in ``where`` (an empty folder of the
        caller's, next to where the real runs' folders go), and every path of ``readable``
        is readable there."""
        who = f" as {self.user.name} (uid {self.user.uid})" if self.user else ""
        hint = _HINT if self.user else ""
        result = self.run(argv, self.scratch(where / "run"), timeout=timeout)
        if result.returncode != 0:
            raise HostToolsUnusable(
                f"the service cannot run {argv[0]}{who}: {result.output.strip()[-500:] or 'no output'}{hint}"
            )
        # ``where`` itself by its absolute path: the tool starts in its folder whatever the
        # folders above it allow (the working directory is entered before the user is
        # switched), but pip and npm are handed absolute paths next to it.
        paths = [str(where), *(str(p) for p in readable)]
        test = (
            'for p do if [ -d "$p" ]; then [ -r "$p" ] && [ -x "$p" ]; else [ -r "$p" ]; fi'
            ' || { echo "cannot read $p"; exit 1; }; done'
        )
        result = self.run(["/bin/sh", "-c", test, "sh", *paths], self.scratch(where / "read"), timeout=timeout)
        if result.returncode != 0:
            output = result.output.strip()[-500:]
            if self.user and output == f"cannot read {where}":
                output += f" (every folder above it must be searchable by {self.user.name})"
            raise HostToolsUnusable(f"pip/npm{who}: {output}{hint}")


_HINT = (
    "; make it readable by that user, point SKILL_EXECUTOR_HOST_TOOLS_PYTHON at a Python with pip it "
    "can run (e.g. /usr/bin/python3), or set SKILL_EXECUTOR_HOST_TOOLS_USER to another user "
    "('root' runs pip and npm as the service itself)"
)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _give(folder: Path, user: ToolUser, keep: Path) -> None:
    """Hand a folder the service made (nothing else wrote in it yet) to the tool's user;
    ``keep`` stays the service's (read-only to the tool)."""
    for current, _, files in os.walk(folder):
        if Path(current) != keep:
            os.chown(current, user.uid, user.gid, follow_symlinks=False)
        for name in files:
            os.chown(os.path.join(current, name), user.uid, user.gid, follow_symlinks=False)


class ReclaimRefused(HostToolsUnusable):
    """A tool left something in its folder the service will not take over."""

    code = "host_tool_output_refused"


def reclaim(folder: Path) -> None:
    """Make everything under ``folder`` the service's: folders 0755, files 0644 (0755 when
    executable), links left as links; anything else (a FIFO, a socket) is removed, and a
    file with several links (one of them could be another owner's file) is refused.

    Top-down: a folder becomes the service's before its entries are read, so the tool's
    user (or a process of it that outlived the tool) can no longer change them."""
    uid, gid = os.geteuid(), os.getegid()
    stack = [str(folder)]
    while stack:
        current = stack.pop()
        os.chown(current, uid, gid, follow_symlinks=False)
        os.chmod(current, 0o755)  # a folder: the root, or an entry checked below
        with os.scandir(current) as entries:
            listed = list(entries)
        for entry in listed:
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                stack.append(entry.path)
            elif stat.S_ISLNK(st.st_mode):
                os.chown(entry.path, uid, gid, follow_symlinks=False)
            elif stat.S_ISREG(st.st_mode):
                if st.st_nlink > 1:
                    raise ReclaimRefused(f"a host tool left a file with {st.st_nlink} links: {entry.path}")
                os.chown(entry.path, uid, gid, follow_symlinks=False)
                os.chmod(entry.path, 0o755 if st.st_mode & 0o111 else 0o644)
            else:
                os.unlink(entry.path)


def seal_data_dir(data_dir: Path, *, shared: Iterable[Path]) -> None:
    """Keep what the service stores out of the tool user's reach.

    pip and npm run as ``HOST_TOOLS_USER`` with the network: whatever that user can read on
    the host, a hostile package index or a bug in a tool could send away.  The data dir
    becomes traversable but not listable (0711) and everything in it private to the service
    (folders 0700, files 0600) except the ``shared`` folders (the environments' root, which
    the tool user builds in).  Run-writable trees are not touched (their modes are the
    workspace's business; the folder that holds them becomes 0700).  Files created later in
    the data dir's top level are private by how they are made (:mod:`skill_executor.db.engine`).
    """
    keep = {p.resolve() for p in shared}
    try:
        os.chmod(data_dir, 0o711)
        entries = list(os.scandir(data_dir))
    except OSError:
        return
    for entry in entries:
        path = Path(entry.path)
        if path.resolve() in keep:
            continue
        try:
            if entry.is_symlink():
                continue
            os.chmod(entry.path, 0o700 if entry.is_dir() else 0o600)
        except OSError:
            continue
