"""The per-run workspace and its logical namespace.

On the host a run's workspace is ``<root>/runs/<run_id>/``::

    work/            WORK_DIR   (a session's persistent dir when the run names one)
    work/inputs/                default target of staged inputs
    out/             OUTPUT_DIR
    run/             RUN_DIR    (run-private scratch: HOME, TMPDIR)
    skills/<id>/     SKILL_DIR  the skill *view*: the run's private copy of the skill
                                (:mod:`skill_executor.runtimes.skillcopy`), plus ``out``,
                                ``work``, ``inputs`` links

The view is what makes ``python3 scripts/fib.py > out/fib.txt`` work from the skill
root, and relative writes there too, while the installed skill is never touched: the
links are relative, so they mean the same on the host and inside a container.

Callers name places with *logical* paths (``out/x``, ``work/a/b``, ``inputs/x``),
which :meth:`Workspace.locate` maps to a writable root and a path below it.  Those
roots are run-writable: every operation inside them goes through
:class:`~skill_executor.workspace.fs.Tree` (:meth:`Workspace.tree`), never by host path.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..access import LOCAL_TENANT
from ..errors import BadRequest, Forbidden
from ..owners import Lease, LeaseState
from ..paths import clean_relative
from . import volumeprobe, volumes
from .fs import Tree
from .remove import remove_tree

log = logging.getLogger(__name__)

#: Logical top-level directories a run may write to.
WRITABLE_ROOTS = ("work", "out", "run")
SKILLS = "skills"
#: Where the warm-pool launcher listens, and where a run's stdin is written.
LAUNCHER_SOCKET = "run/.launcher.sock"
STDIN_FILE = "run/.stdin"
#: The exec policy a per-run container's launcher reads (and removes) before the command starts.
EXEC_POLICY_FILE = "run/.exec-policy"
#: Places in ``run/`` the service itself uses: never staging targets.
RESERVED = frozenset({LAUNCHER_SOCKET, f"{LAUNCHER_SOCKET}.tmp", STDIN_FILE, EXEC_POLICY_FILE})
#: The workspace variables that name folders, and the logical folder each names
#: (``""``: the workspace itself).  Callers may start a path with one (``$OUTPUT_DIR/x``).
PATH_VARIABLES = {"OUTPUT_DIR": "out", "WORK_DIR": "work", "RUN_DIR": "run", "WORKSPACE_DIR": ""}
_PATH_VARIABLE = re.compile(r"^\$(\{)?(OUTPUT_DIR|WORK_DIR|RUN_DIR|WORKSPACE_DIR)(?(1)\})(?=/|$)")


def expand_path_variable(text: str) -> str | None:
    """``$OUTPUT_DIR/x`` (or ``${OUTPUT_DIR}/x``) -> ``out/x``; only on a path boundary
    (``$OUTPUT_DIRX`` is no variable).  None when ``text`` starts with no such variable."""
    match = _PATH_VARIABLE.match(text)
    if not match:
        return None
    prefix = PATH_VARIABLES[match.group(2)]
    rest = text[match.end() :].lstrip("/")
    return "/".join(part for part in (prefix, rest) if part)


#: The runner image's own npm modules (its ``NODE_PATH``), searched after a skill's.
IMAGE_NODE_PATH = "/usr/local/lib/node_modules"


def environment(root: str, skill_id: str, skill_env: str | None = None) -> dict[str, str]:
    """The variables a run sees, for a workspace the command sees at ``root``;
    ``skill_env``: where the command sees the skill's dependency environment, if any."""
    root = root.rstrip("/") or "/"
    skill_dir = f"{root}/{SKILLS}/{skill_id}"
    env = {
        "WORKSPACE_DIR": root,
        "SKILLS_DIR": f"{root}/{SKILLS}",
        "SKILL_DIR": skill_dir,
        "SKILL_NAME": skill_id,
        **{name: f"{root}/{folder}" for name, folder in PATH_VARIABLES.items() if folder},
        "HOME": f"{root}/run/home",
        # matplotlib's font cache in HOME, where the runner image's warm state puts it
        "MPLCONFIGDIR": f"{root}/run/home/.cache/matplotlib",
        "TMPDIR": f"{root}/run/tmp",
        # The skill's root is importable (``from scripts.x import y`` from a script run by
        # path), and so are its scripts' own modules by bare name (``from style_presets
        # import x`` in a snippet SKILL.md tells the agent to run from the skill root).
        "PYTHONPATH": f"{skill_dir}:{skill_dir}/scripts",
    }
    if skill_env is not None:
        env["PYTHONPATH"] = f"{skill_dir}:{skill_dir}/scripts:{skill_env}/python"
        env["NODE_PATH"] = f"{skill_env}/node/node_modules:{IMAGE_NODE_PATH}"
    return env


#: Where a warm container's skill copy made ahead of its run waits: a folder of the
#: service (mode 0700: the container's user cannot enter it) in the workspace's ``skills/``,
#: so the copy moves into place with one rename (on the same file system).
PREPARED = ".prepared"
OWNER_FILE = ".owner"
#: How long a workspace without an owner file must stay unchanged to count as abandoned.
ORPHAN_GRACE_SECONDS = 60.0
#: How long a workspace of an owner this root cannot judge must stay unchanged.
FOREIGN_GRACE_SECONDS = 86400.0
#: How long one of this process's own folders, in no use, stays before the reconciliation
#: removes it (in use means: made and not yet discarded; this only spares a folder whose
#: removal is under way).
STALE_GRACE_SECONDS = 5.0


@dataclass(slots=True)
class Workspace:
    run_id: str
    root: Path
    work: Path
    session: str | None
    skill_id: str
    #: The API key (tenant) the run belongs to: its session and artifacts are that key's.
    tenant: str = LOCAL_TENANT

    @property
    def out(self) -> Path:
        return self.root / "out"

    @property
    def run_dir(self) -> Path:
        return self.root / "run"

    @property
    def inputs(self) -> Path:
        return self.work / "inputs"

    @property
    def skills_dir(self) -> Path:
        return self.root / SKILLS

    @property
    def skill_view(self) -> Path:
        return self.skills_dir / self.skill_id

    def roots(self) -> dict[str, Path]:
        """Logical top-level name -> host directory, for the writable roots."""
        return {"work": self.work, "out": self.out, "run": self.run_dir}

    def logical(self, path: str, *, what: str = "path") -> PurePosixPath:
        """Normalise a workspace-relative path: ``inputs/x`` -> ``work/inputs/x``."""
        rel = clean_relative(path, what=what)
        if rel.parts[0] == "inputs":
            rel = PurePosixPath("work", *rel.parts)
        return rel

    def locate(self, logical: PurePosixPath, *, what: str = "path") -> tuple[str, PurePosixPath]:
        """(writable root name, path below it) of a logical path; refuses other roots."""
        top = logical.parts[0]
        if top not in WRITABLE_ROOTS:
            raise Forbidden(
                f"{what} {str(logical)!r} is outside the writable workspace (work/, out/, run/, inputs/)",
                code="path_escape",
            )
        if len(logical.parts) > 1 and "/".join(logical.parts[:2]) in RESERVED:
            raise BadRequest(f"{what} {str(logical)!r} is reserved by the service", code="reserved_path")
        rest = PurePosixPath(*logical.parts[1:]) if len(logical.parts) > 1 else PurePosixPath(".")
        return top, rest

    def tree(self, top: str) -> Tree:
        """The writable root ``top`` (``work``, ``out`` or ``run``), opened for safe use."""
        return Tree(self.roots()[top])


class WorkspaceManager:
    """Creates and removes run workspaces under ``<root>/runs``, under this process's
    lease on the root (:class:`~skill_executor.owners.Lease`): every workspace names its owner.

    With ``volume_bytes`` (the hard disk cap), every workspace folder is the mount point
    of a volume of its own (:mod:`.volumes`) of that size; it is unmounted when the
    folder is removed (also by a sweep after a crash)."""

    def __init__(self, root: Path, *, instance: str | None = None, volume_bytes: int | None = None) -> None:
        self.root = root.resolve()
        self.runs = self.root / "runs"
        self.runs.mkdir(parents=True, exist_ok=True)
        self.volume_bytes = volume_bytes
        #: What every run's HOME starts with (the runner image's warm state: font caches, a
        #: LibreOffice profile), copied in when a workspace is made; None: an empty HOME.
        self.home_template: Path | None = None
        self.lease = Lease(self.root, instance)
        self.token = self.lease.token
        st = os.stat(self.root)
        #: This root's identity on this machine (its device and inode): a copy of the data
        #: dir has the same lease root id and lease files, never the same identity.
        self.identity = f"{st.st_dev:x}:{st.st_ino:x}"
        #: Volumes (a loop device each) of dead owners' workspaces unmounted by :meth:`sweep`.
        self.released_volumes = 0
        #: Names of this process's workspaces that are in use (made, not yet discarded).
        self._live: set[str] = set()
        self._live_lock = threading.Lock()

    def sweep(self, *, grace: float = ORPHAN_GRACE_SECONDS, foreign_grace: float = FOREIGN_GRACE_SECONDS) -> list[str]:
        """Remove workspaces whose owner is gone (left by a crash).

        An owner is judged by its lease (:meth:`Lease.judge`): a live one's workspaces
        stay, whatever PID namespace it runs in.  A folder without a readable owner
        token may be half-made or half-removed by a live process sharing this root right
        now; it counts as abandoned only once it has not changed for ``grace`` seconds.
        A token of no lease of this root (an older version's ``host:pid:start``, a root
        whose ``leases/`` was recreated) is not judged: such a folder goes only once it has
        not changed for ``foreign_grace`` (a day; no run lasts that long).
        """
        removed = []
        now = time.time()
        verdicts: dict[str, LeaseState] = {}
        for entry in sorted(self.runs.iterdir()):
            try:
                token = (entry / OWNER_FILE).read_text()
            except OSError:
                token = ""
            if token not in verdicts:
                verdicts[token] = self.lease.judge(token)
            verdict = verdicts[token]
            if verdict in (LeaseState.MINE, LeaseState.ALIVE):
                continue
            if verdict is LeaseState.FOREIGN:
                try:
                    age = now - entry.stat().st_mtime
                except FileNotFoundError:
                    continue
                if age < (foreign_grace if token else grace):
                    continue
            if self._remove(entry):
                removed.append(entry.name)
        return removed

    def stale(self, *, grace: float = STALE_GRACE_SECONDS) -> list[Path]:
        """This process's own workspaces that are in no use any more (a cleanup that
        failed), unchanged for ``grace`` seconds."""
        now = time.time()
        found = []
        with self._live_lock:
            live = set(self._live)
        for entry in self.runs.iterdir():
            if entry.name in live:
                continue
            try:
                if (entry / OWNER_FILE).read_text() != self.token or now - entry.stat().st_mtime < grace:
                    continue
            except OSError:
                continue
            with self._live_lock:
                if entry.name not in self._live:
                    found.append(entry)
        return found

    def in_use(self) -> int:
        """This process's folders in use right now."""
        with self._live_lock:
            return len(self._live)

    def count(self) -> int:
        """Workspace folders under this root (any owner)."""
        try:
            return sum(1 for _ in os.scandir(self.runs))
        except OSError:
            return 0

    def _remove(self, entry: Path) -> bool:
        try:
            if volumes.unmount(entry):
                self.released_volumes += 1
            remove_tree(entry)
            return True
        except OSError as exc:  # one bad leftover must not stop the service starting
            log.warning("could not remove the abandoned workspace %s: %s", entry, exc)
            return False

    def discard(self, root: Path) -> None:
        """Remove one of this process's workspace folders (a run's or a warm container's),
        its volume first (the image goes with the folder)."""
        try:
            volumes.unmount(root)
            remove_tree(root)
        finally:
            with self._live_lock:
                self._live.discard(root.name)

    def probe_volumes(self) -> None:
        """Make, fill and remove a test volume (:func:`.volumeprobe.probe`): ``DiskCapUnavailable``
        naming what is missing when the hard disk cap cannot work here."""
        folder = self._new_folder(f"probe-{os.getpid()}-{time.monotonic_ns()}")
        try:
            volumeprobe.probe(folder)
        finally:
            self.discard(folder)

    def create(
        self,
        run_id: str,
        skill_id: str,
        *,
        session_work: Path | None = None,
        session: str | None = None,
        owner: tuple[int, int] | None = None,
        tenant: str = LOCAL_TENANT,
        warm_home: bool = True,
    ) -> Workspace:
        """A fresh workspace; its writable folders belong to ``owner`` (the run's user);
        ``warm_home``: its HOME starts as :attr:`home_template` (the default image's).

        A session's ``work/`` was written by earlier runs: its ``inputs/`` is made only
        when nothing of that name is there (a link an earlier run left is neither
        followed nor replaced; staging through it is refused later).
        """
        root = self.create_root(run_id, owner, warm_home=warm_home)
        work = root / "work"
        if session_work is not None:
            # root/work stays an empty mountpoint (or becomes a link) for the session's dir.
            work = session_work
            with Tree(work) as tree:
                if owner is not None:
                    os.fchown(tree.fd, *owner)
                if tree.lstat(PurePosixPath("inputs")) is None:
                    tree.make_dirs(PurePosixPath("inputs"), owner=owner)
        return Workspace(run_id=run_id, root=root, work=work, session=session, skill_id=skill_id, tenant=tenant)

    def create_root(self, name: str, owner: tuple[int, int] | None = None, *, warm_home: bool = True) -> Path:
        """A fresh workspace folder with the standard layout (no skill yet), on a volume
        of its own under the hard disk cap."""
        root = self._new_folder(name)
        try:
            if self.volume_bytes is not None:
                volumes.create(root, self.volume_bytes)
                self._write_owner(root)  # the volume's own (the folder's is hidden under it)
            for sub in ("work", "work/inputs", "out", "run", "run/home", "run/tmp", SKILLS):
                (root / sub).mkdir(mode=0o755)
                if owner is not None and sub != SKILLS:
                    os.chown(root / sub, *owner)
            if self.home_template is not None and warm_home:
                copy_home(self.home_template, root / "run" / "home", owner)
        except BaseException:
            self.discard(root)
            raise
        return root

    def _new_folder(self, name: str) -> Path:
        """``runs/<name>``, made by this process (in use until discarded) with its owner file."""
        if not name or "/" in name or name.startswith("."):
            raise BadRequest(f"invalid run id {name!r}")
        root = self.runs / name
        with self._live_lock:
            self._live.add(name)
        try:
            root.mkdir(mode=0o755)
        except BaseException:
            with self._live_lock:
                self._live.discard(name)
            raise
        try:
            self._write_owner(root)
        except BaseException:
            self.discard(root)
            raise
        return root

    def _write_owner(self, root: Path) -> None:
        """The owner file appears whole (a sweep never reads half a token)."""
        tmp = root / f"{OWNER_FILE}.tmp"
        tmp.write_text(self.token)
        os.chmod(tmp, 0o600)
        os.rename(tmp, root / OWNER_FILE)

    def adopt(self, root: Path, run_id: str, skill_id: str, tenant: str = LOCAL_TENANT) -> Workspace:
        """Give a prepared folder (a warm container's) to a run; it keeps its name."""
        return Workspace(run_id=run_id, root=root, work=root / "work", session=None, skill_id=skill_id, tenant=tenant)

    def remove(self, workspace: Workspace) -> None:
        self.discard(workspace.root)

    def close(self) -> None:
        """Give up the lease (after everything of this process is gone)."""
        self.lease.release()


RUN_LINKS = {"out": "../../out", "work": "../../work", "inputs": "../../work/inputs"}
#: What a workspace root holds of its own (a skill's entry of that name is not linked there).
ROOT_ENTRIES = frozenset({"work", "out", "run", SKILLS, OWNER_FILE, "inputs"})


def copy_home(template: Path, home: Path, owner: tuple[int, int] | None) -> None:
    """The files and folders of ``template`` (the service's own, trusted) into ``home``,
    belonging to ``owner``: the run changes them as it likes (a LibreOffice profile is
    written at every start), the template never."""
    for dirpath, dirnames, filenames in os.walk(template):
        rel = os.path.relpath(dirpath, template)
        target = home if rel == "." else home / rel
        for name in dirnames:
            (target / name).mkdir(mode=0o755, exist_ok=True)
            if owner is not None:
                os.chown(target / name, *owner)
        for name in filenames:
            source = os.path.join(dirpath, name)
            if os.path.islink(source):
                continue
            shutil.copyfile(source, target / name)
            os.chmod(target / name, 0o644)
            if owner is not None:
                os.chown(target / name, *owner)


def add_run_links(view: Path) -> None:
    """``out``, ``work`` and ``inputs`` in a skill folder point at the run's folders."""
    for name, target in RUN_LINKS.items():
        os.symlink(target, view / name)


def add_root_links(root: Path, skill_id: str, names: list[str]) -> None:
    """Each top-level entry of the skill also appears in the workspace root, as a link
    into the skill's folder, so paths relative to a run folder reach the skill too:
    ``cd out && python ../templates/x.py`` (``out`` is ``<root>/out``, its ``..`` the
    root).  The root's own entries (``work``, ``out``, ``run``, ``skills``, the owner
    file) win; the root is not writable by the run, nor are these links."""
    for name in names:
        if name in ROOT_ENTRIES or name.startswith(".") or "/" in name:
            continue
        try:
            os.symlink(f"{SKILLS}/{skill_id}/{name}", root / name)
        except FileExistsError:
            pass


def shadowed(entries: list[str]) -> list[str]:
    return [f"the skill's own {e!r} is hidden by the run's {e}/ directory" for e in entries if e in RUN_LINKS]
