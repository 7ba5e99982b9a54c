"""Optional parts of the package and what each needs installed.

The MCP server (``skill-executor mcp``, ``/mcp`` in ``serve``) is built on the MCP SDK 2.x
(``mcp>=2.3,<3``), which is the ``mcp`` extra: ``pip install 'skill-executor[mcp]'``.
Without it (or next to a framework pinned to ``mcp`` 1.x) the rest -- the library, the
client, the CLI, the REST API -- installs and works; the MCP server says what is missing.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

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
