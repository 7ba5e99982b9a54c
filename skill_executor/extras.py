"""Optional parts of the package and what each needs installed.

The MCP server (``skill-executor mcp``, ``/mcp`` in ``serve``) is built on the MCP SDK 2.x
(``mcp>=2.3,<3``), which is the ``mcp`` extra: ``pip install 'skill-executor[mcp]'``.
Without it (or next to a framework pinned to ``mcp`` 1.x) the rest -- the library, the
client, the CLI, the REST API -- installs and works; the MCP server says what is missing.

The cluster's and Kubernetes' dependencies are extras too (``cluster``, ``s3``,
``kubernetes``; :data:`PARTS`), so a laptop install stays small: each part checks its
modules with :func:`require` where it starts and names the extra that installs them.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from importlib.util import find_spec

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from .errors import ExecutorError

#: What the MCP server needs (the ``mcp`` extra of pyproject.toml says the same).
MCP_REQUIREMENT = "mcp>=2.3,<3"
MCP_SPECIFIER = SpecifierSet(MCP_REQUIREMENT.removeprefix("mcp"))
MCP_EXTRA = "pip install 'skill-executor[mcp]'"


def mcp_problem() -> str | None:
    """Why the MCP server cannot run in this environment, or None when it can."""
    try:
        found = version("mcp")
    except PackageNotFoundError:
        return f"the MCP server needs the mcp extra: {MCP_EXTRA} ({MCP_REQUIREMENT})"
    try:
        usable = Version(found) in MCP_SPECIFIER
    except InvalidVersion:
        usable = False
    if usable:
        return None
    return (
        f"the MCP server needs {MCP_REQUIREMENT}, and this environment has mcp {found} (pinned by another "
        f"package?): install skill-executor with its mcp extra in an environment of its own ({MCP_EXTRA} in a "
        "virtualenv, or pipx) and connect to it over stdio or HTTP -- MCP clients of either SDK speak to it"
    )


#: The optional parts a laptop does without, each an extra of pyproject.toml: what it is
#: for, and the modules it needs (imported only where that part is used).
PARTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "cluster": ("a Postgres database (API replicas and workers)", ("psycopg", "procrastinate")),
    "s3": ("an S3 object store", ("boto3",)),
    "kubernetes": ("the agent-sandbox runtime (Kubernetes)", ("k8s_agent_sandbox", "kubernetes", "grpc")),
}


def extra_problem(extra: str) -> str | None:
    """Why ``extra``'s part cannot run in this environment (its modules are missing), or None."""
    purpose, modules = PARTS[extra]
    missing = [name for name in modules if not _importable(name)]
    if not missing:
        return None
    return (
        f"{purpose} needs the {extra} extra: pip install 'skill-executor[{extra}]' (missing here: {', '.join(missing)})"
    )


def _importable(name: str) -> bool:
    try:
        return find_spec(name) is not None
    except (ImportError, ValueError):  # a finder that refuses it, a broken installation
        return False


def require(extra: str) -> None:
    """Raise ``extra_missing`` (naming the extra to install) unless ``extra``'s modules import."""
    problem = extra_problem(extra)
    if problem is not None:
        raise ExecutorError(problem, code="extra_missing")
