"""What a context holds, as text: a skill's ``SKILL.md`` section, a doc's content, the
overview of the catalog, each with the path a run sees it at and its token count under
the configured counter.
"""

from __future__ import annotations

from ..registry import SkillRepository
from ..skills import Skill, expand_placeholders, inventory, read_file, sandbox_dir
from . import render as rendering
from .model import Context
from .tokens import Counter

#: Docs are read up to this size (a larger one is cut, and says so).
DOC_MAX_BYTES = 256 * 1024


class SkillTexts:
    """The texts of the repository's skills as a context renders them, counted."""

    def __init__(self, repository: SkillRepository, counter: Counter, visible_skills_dir: str | None) -> None:
        self.repository = repository
        self.counter = counter
        self.visible_skills_dir = visible_skills_dir

    def where(self, skill: Skill) -> str:
        return sandbox_dir(skill, self.visible_skills_dir)

    def skill(self, skill: Skill) -> rendering.SkillText:
        where = self.where(skill)
        text = rendering.SkillText(
            skill.id,
            skill.version,
            f"{where}/{skill.skill_file.name}",
            expand_placeholders(skill.body, where),
            inventory(skill),
        )
        text.tokens = self.counter.count(rendering.skill_section(text))
        return text

    def doc_content(self, skill: Skill, name: str) -> str:
        content = read_file(skill, name, max_bytes=DOC_MAX_BYTES)
        if content.text is None:
            return "(binary file)"
        text = expand_placeholders(content.text, self.where(skill))
        return text + ("\n[truncated]" if content.truncated else "")

    def doc_tokens(self, skill: Skill, name: str) -> int:
        return self.counter.count(rendering.doc_section(skill.id, name, self.doc_content(skill, name)))

    def overview(self, context: Context | None) -> list[rendering.OverviewEntry]:
        loaded = {s.name for s in context.skills} if context else set()
        out = []
        for skill in self.repository.list():
            where = self.where(skill)
            out.append(
                rendering.OverviewEntry(
                    skill.id, skill.description, f"{where}/{skill.skill_file.name}", skill.id in loaded
                )
            )
        return out

    def overview_tokens(self, context: Context | None) -> int:
        return self.counter.count(rendering.overview_text(self.overview(context)))
