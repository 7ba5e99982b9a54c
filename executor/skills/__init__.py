"""The skills layer: spec rules, parsing, discovery, progressive disclosure, packages."""

from .files import FileContent, FileEntry, docs, inventory, read_file
from .loader import SkillLoadError, Verdict, check, load_skill
from .model import Skill, estimate_tokens
from .package import Installed, PackageLimits, install_package, uninstall
from .render import host_location, render_text, render_xml
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
    "PackageLimits",
    "Skill",
    "SkillLoadError",
    "SkillRepository",
    "Verdict",
    "check",
    "discover",
    "docs",
    "estimate_tokens",
    "host_location",
    "install_package",
    "inventory",
    "load_skill",
    "read_file",
    "render_text",
    "render_xml",
    "uninstall",
]
