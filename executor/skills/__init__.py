"""The skills layer: spec rules, parsing, discovery, progressive disclosure, packages."""

from .files import (
    FileContent,
    FileEntry,
    Match,
    docs,
    find_file,
    inventory,
    match_path,
    open_file,
    read_file,
    suggestions,
)
from .loader import SkillLoadError, Verdict, check, load_skill
from .model import Skill, estimate_tokens
from .package import Installed, PackageLimits, install_package, uninstall
from .render import expand_placeholders, host_location, render_text, render_xml, sandbox_dir
from .repository import Catalog, SkillRepository, discover
from .search import Hit
from .spec import Diagnostic

__all__ = [
    "Catalog",
    "Diagnostic",
    "FileContent",
    "FileEntry",
    "Hit",
    "Installed",
    "Match",
    "PackageLimits",
    "Skill",
    "SkillLoadError",
    "SkillRepository",
    "Verdict",
    "check",
    "discover",
    "docs",
    "estimate_tokens",
    "find_file",
    "expand_placeholders",
    "host_location",
    "install_package",
    "inventory",
    "load_skill",
    "match_path",
    "open_file",
    "read_file",
    "render_text",
    "render_xml",
    "sandbox_dir",
    "suggestions",
    "uninstall",
]
