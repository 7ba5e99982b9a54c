"""Runtimes whose commands use the host's tools (``local``, ``bwrap``): the host's ``python3``
is the Python a run gets, so a run of a skill on another Python tier is refused unless the
host's Python is that tier's."""

from __future__ import annotations

import functools
import os
import re
import shutil

from ..errors import Unavailable
from ..image.inputs import DEFAULT_TIER, PythonTier


@functools.cache
def host_python(path: str) -> str | None:
    """The major.minor of the ``python3`` a run finds on ``path`` (its PATH), read from the
    name it links to (``python3`` -> ``python3.11``; no process is started); None: none, or a
    name that does not tell (a pyenv shim)."""
    program = shutil.which("python3", path=path)
    if program is None:
        return None
    match = re.fullmatch(r"python(3\.\d+)", os.path.basename(os.path.realpath(program)))
    return match.group(1) if match else None


def check_host_python(python: PythonTier, runtime: str, path: str) -> None:
    """503 ``python_tier_unavailable`` when a run needs a tier other than the default one
    and the host's Python (on the run's ``path``) is not that tier's."""
    if python == DEFAULT_TIER:
        return
    found = host_python(path)
    if found != python.name:
        raise Unavailable(
            f"the skill needs Python {python.name} (its requires-python); the {runtime} runtime runs the "
            f"host's python3, which is {found or 'missing or of an unknown version'}: use the docker "
            f"runtime and its Python {python.name} image",
            code="python_tier_unavailable",
        )
