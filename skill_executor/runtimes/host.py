"""What every box whose workspace is a folder on the service's host shares (``shared``:
the command sees that folder itself, a bind mount or the folder as it is).

``put`` and ``get`` have nothing to copy; ``list`` reads the folder through the host's
safe file layer (:mod:`skill_executor.workspace.fs`); a box starts one process only;
releasing hands what the runtime attached (its ``discard_first`` hook: a container) and
then the folder to the janitor.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath

from ..errors import ExecutorError
from ..policy import ExecRule
from ..workspace.layout import EXEC_POLICY_FILE, Workspace
from .base import BoxEntry, BoxVerdict, Process, ProcessSpec
from .janitor import Janitor


class SharedBox:
    """A box over a host folder; subclasses implement ``_start`` (and ``discard_first``)."""

    shared = True

    def __init__(
        self,
        workspace: Workspace,
        root: str,
        janitor: Janitor,
        *,
        discard: Callable[[Path], None],
        keep: bool = False,
    ) -> None:
        self.workspace = workspace
        self.root = root
        self.warnings: list[str] = []
        self._janitor = janitor
        self._discard = discard
        self._keep = keep
        self._started = False
        self._released = False
        self._verdict = BoxVerdict()

    def skill_root(self) -> str:
        """The run's skill folder as the command sees it: where a command-policy rule's relative
        program names (``scripts/x.py``) are resolved, whatever the run's ``cwd`` (a name that
        meant ``work/scripts/x.py`` under ``cwd: $WORK_DIR`` would be whatever the run put there)."""
        return f"{self.root.rstrip('/')}/skills/{self.workspace.skill_id}"

    def write_exec_policy(self, rule: ExecRule, *, trusted: int) -> str:
        """Write ``rule`` where the exec-mode launcher reads (and removes) it before the
        command starts (:data:`~skill_executor.workspace.layout.EXEC_POLICY_FILE`); the nonce
        naming its verdict file, known only to the host and the launcher."""
        nonce = secrets.token_hex(16)
        top, _, name = EXEC_POLICY_FILE.partition("/")
        with self.workspace.tree(top) as tree:
            data = rule.spec(root=self.skill_root(), trusted=trusted, nonce=nonce)
            tree.write(PurePosixPath(name), data, owner=None, mode=0o444, what="the exec policy")
        return nonce

    def put(self, tops: Sequence[str]) -> None:
        """Nothing to copy: the command sees the workspace itself."""

    def get(self, top: str, limit: int) -> int:
        """Nothing to copy: the command wrote into the workspace itself."""
        return 0

    def list(self, folder: str) -> list[BoxEntry]:
        top, _, below = folder.partition("/")
        where = PurePosixPath(below or ".")
        depth = len(where.parts) + 1 if below else 1
        with self.workspace.tree(top) as tree:
            entries = []
            for entry in tree.walk(where):
                if len(entry.path.parts) != depth:
                    continue
                mode = entry.stat.st_mode
                kind = "directory" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other"
                entries.append(BoxEntry(entry.path.name, entry.stat.st_size if kind == "file" else 0, kind))
            return entries

    def read(self, path: str, limit: int) -> bytes:
        top, _, below = path.partition("/")
        with self.workspace.tree(top) as tree:
            fd, _ = tree.open_file(PurePosixPath(below))
            with os.fdopen(fd, "rb") as file:
                return file.read(limit)

    def start(self, spec: ProcessSpec) -> Process:
        if self._started or self._released:
            raise ExecutorError("a box starts one process only (single use)", code="internal", status=500)
        self._started = True
        return self._start(spec)

    def _start(self, spec: ProcessSpec) -> Process:
        raise NotImplementedError

    def verdict(self) -> BoxVerdict:
        return self._verdict

    def discard_first(self) -> Callable[[], None] | None:
        """What must go before the folder does (a container), as a background job."""
        return None

    def release(self) -> None:
        """Hand the box to the janitor: first what :meth:`discard_first` names, then the folder."""
        if self._released:
            return
        self._released = True
        before = self.discard_first()
        root = None if self._keep else self.workspace.root
        remove = self._discard

        def discard() -> None:
            try:
                if before is not None:
                    before()
            finally:
                if root is not None:
                    remove(root)

        self._janitor.submit(discard)


def shell(argv: list[str]) -> str:
    """The shell command of ``["bash", "-c", text]`` (what a launcher that runs shell
    commands takes); anything else is refused."""
    if len(argv) != 3 or argv[:2] != ["bash", "-c"]:
        raise ExecutorError("this runtime starts shell commands only (bash -c TEXT)", code="internal", status=500)
    return argv[2]
