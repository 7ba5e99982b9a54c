"""What every runtime whose workspace is a folder on the service's host shares.

Staging and collecting go through the host's safe file layer (the workspace's
``work/``, ``out/`` and ``run/`` are only ever touched through
:mod:`skill_executor.workspace.fs`); closing releases what the runtime attached (its
``release`` hook: a container) and hands the folder to the janitor.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Self

from ..outputs.collect import Collection, CollectLimits, collect
from ..workspace.layout import Workspace
from ..workspace.schema import InputSpec
from ..workspace.staging import Stager, StagingReport
from .janitor import Janitor


class HostSandbox:
    """A sandbox over a host folder; subclasses implement ``execute`` (and ``release``)."""

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
        self._closed = False

    def stage(self, stager: Stager, inputs: Sequence[InputSpec]) -> StagingReport:
        return stager.stage(self.workspace, inputs)

    def collect(self, globs: list[str], limits: CollectLimits, *, failed: bool) -> Collection:
        return collect(self.workspace, globs, limits, failed=failed)

    def release(self) -> Callable[[], None] | None:
        """What must go before the folder does (a container), as a background job."""
        return None

    def close(self) -> None:
        """Hand the sandbox to the janitor: first what :meth:`release` names, then the folder."""
        if self._closed:
            return
        self._closed = True
        before = self.release()
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

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
