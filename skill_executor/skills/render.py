"""Layer 1 of progressive disclosure: the overview an agent always has in context."""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Iterable

from .model import Skill

#: Maps a skill to the ``<location>`` an agent sees (host path, or the path in the sandbox).
Locator = Callable[[Skill], str]


def host_location(skill: Skill) -> str:
    """Resolved absolute path of the skill's ``SKILL.md``, as skills-ref reports it."""
    return skill.location


def render_xml(skills: Iterable[Skill], locate: Locator = host_location) -> str:
    """The ``<available_skills>`` block, byte-identical to skills-ref's ``to-prompt``.

    One value per line, ``html.escape`` (quote=True) on name and description, the
    location as a plain path -- exactly what the reference library writes.
    """
    items = list(skills)
    if not items:
        return "<available_skills>\n</available_skills>"
    lines = ["<available_skills>"]
    for skill in items:
        lines += [
            "<skill>",
            "<name>",
            html.escape(skill.name),
            "</name>",
            "<description>",
            html.escape(skill.description),
            "</description>",
            "<location>",
            locate(skill),
            "</location>",
            "</skill>",
        ]
    lines.append("</available_skills>")
    return "\n".join(lines)


def render_text(skills: Iterable[Skill]) -> str:
    """Plain lines, ``- id: description``, the cheapest overview for a prompt."""
    return "\n".join(f"- {skill.id}: {' '.join(skill.description.split())}" for skill in skills)


#: ``$CLAUDE_SKILL_DIR`` as a whole token (not ``$CLAUDE_SKILL_DIRS``, not ``${...}``).
_PLACEHOLDERS = re.compile(r"\{baseDir\}|\$\{CLAUDE_SKILL_DIR\}|\$CLAUDE_SKILL_DIR(?![A-Za-z0-9_])|<path-to-skill>")


def expand_placeholders(text: str, skill_dir: str) -> str:
    """``text`` with the skill-folder placeholders of published skills replaced by ``skill_dir``.

    ``{baseDir}``, ``${CLAUDE_SKILL_DIR}``, ``$CLAUDE_SKILL_DIR`` (the whole token only)
    and ``<path-to-skill>`` all mean "the folder this skill lives in"; a run sees it at
    ``skill_dir`` (``/workspace/skills/<id>`` in Docker, the host path locally).
    """
    return _PLACEHOLDERS.sub(lambda _: skill_dir, text)


def sandbox_dir(skill: Skill, visible_skills_dir: str | None) -> str:
    """The skill's folder as a run sees it: ``<visible_skills_dir>/<id>`` (Docker:
    ``/workspace/skills/<id>``), or its host path when runs see host paths (local)."""
    return f"{visible_skills_dir}/{skill.id}" if visible_skills_dir else str(skill.path.resolve())
