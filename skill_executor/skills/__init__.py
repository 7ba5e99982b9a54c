"""The SKILL.md format: spec rules, parsing, loading one skill folder, its files and
progressive disclosure (rendering, search).  Pure: no engine, no store, no process."""

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
from .render import expand_placeholders, host_location, render_text, render_xml, sandbox_dir
from .rules import Diagnostic
from .search import Hit

__all__ = [
    "Diagnostic",
    "FileContent",
    "FileEntry",
    "Hit",
    "Match",
    "Skill",
    "SkillLoadError",
    "Verdict",
    "check",
    "docs",
    "estimate_tokens",
    "find_file",
    "expand_placeholders",
    "host_location",
    "inventory",
    "load_skill",
    "match_path",
    "open_file",
    "read_file",
    "render_text",
    "render_xml",
    "sandbox_dir",
    "suggestions",
]
