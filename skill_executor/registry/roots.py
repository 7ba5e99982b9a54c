"""Where the skill roots may lie: tenants' writes never reach a read-only root, and an
install never replaces the service's data (checked at start)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..errors import ExecutorError
from ..paths import is_within


def check_layout(read_only: Sequence[Path], install_root: Path | None, private: Sequence[Path]) -> None:
    """Tenants' writes never reach a read-only root, and an install never replaces the service's data.

    A read-only root may neither be, nor lie inside, nor contain the install root, the
    registry or a service folder (``private``: the data folder, the workspaces); the install
    root may neither be nor contain the registry or a service folder (an upload named like
    one of them would replace it).
    """
    for root in read_only:
        theirs = root.resolve()
        if install_root is not None and _overlap(install_root.resolve(), theirs):
            raise ExecutorError(
                f"the install root {install_root} overlaps the read-only skills root {root}: installs would "
                "write into shipped skills; set SKILL_EXECUTOR_INSTALL_DIR to a folder of its own",
                code="install_root_overlaps",
                status=500,
            )
        for folder in private:
            if _overlap(folder.resolve(), theirs):
                raise ExecutorError(
                    f"the read-only skills root {root} overlaps the service's folder {folder}: what tenants "
                    "upload or write there would be discovered as skills; keep SKILL_EXECUTOR_SKILLS_DIRS apart "
                    "from SKILL_EXECUTOR_DATA_DIR and SKILL_EXECUTOR_WORKSPACE_ROOT",
                    code="skills_root_overlaps",
                    status=500,
                )
    if install_root is not None:
        mine = install_root.resolve()
        for folder in private:
            if is_within(folder.resolve(), mine):
                raise ExecutorError(
                    f"the install root {install_root} holds the service's folder {folder}: an upload named like "
                    "it would replace it; set SKILL_EXECUTOR_INSTALL_DIR to a folder of its own",
                    code="install_root_overlaps",
                    status=500,
                )


def _overlap(a: Path, b: Path) -> bool:
    return is_within(a, b) or is_within(b, a)
