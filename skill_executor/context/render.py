"""The context block an agent puts in its system message, in four formats.

Order is stable: the overview in the repository's order, then the loaded skills in the
order they were loaded (a new load appends), each followed by its selected docs in the
order they were selected.  The same context renders byte-identically every time, and a
load only appends to what was rendered before, so prompt caches stay warm.

* ``text``: ``[✓]``/``[○]`` overview lines, then ``# Skill:`` sections and ``## Doc:`` sections.
* ``xml``: ``<available_skills>`` (as skills-ref writes it, with a ``loaded`` attribute per
  skill), then ``<loaded_skills>`` with each skill's location, instructions, files and docs.
  Bodies and docs are put in as they are (the block is a prompt, not a document to parse).
* ``markdown``: the same as headed Markdown, ``- [x]``/``- [ ]`` in the overview.
* ``json``: the same content as a structure, for frameworks that lay out their own prompt.

Token numbers of items are counted on their ``text`` sections (:func:`skill_section`,
:func:`doc_section`, :func:`overview_text`); a rendering's total is counted on itself.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any, Literal

from ..skills.files import FileEntry

Format = Literal["text", "xml", "markdown", "json"]
FORMATS: tuple[Format, ...] = ("text", "xml", "markdown", "json")
LOADED, UNLOADED = "[✓]", "[○]"


@dataclass(frozen=True, slots=True)
class OverviewEntry:
    name: str
    description: str
    location: str
    loaded: bool


@dataclass(frozen=True, slots=True)
class DocText:
    name: str
    content: str
    tokens: int


@dataclass(slots=True)
class SkillText:
    """A loaded skill as it renders: ``missing`` says why its pinned version cannot be read."""

    name: str
    version: int | None
    location: str
    body: str
    files: list[FileEntry]
    tokens: int = 0
    docs: list[DocText] = field(default_factory=list)
    missing: str | None = None


def _title(skill: SkillText) -> str:
    return skill.name + (f" (version {skill.version})" if skill.version is not None else "")


def overview_text(entries: list[OverviewEntry]) -> str:
    lines = [f"Skills ({LOADED} loaded, {UNLOADED} metadata only):"]
    lines += [f"{LOADED if e.loaded else UNLOADED} {e.name}: {' '.join(e.description.split())}" for e in entries]
    return "\n".join(lines)


def skill_section(skill: SkillText) -> str:
    if skill.missing is not None:
        return f"# Skill: {_title(skill)}\n({skill.missing})"
    parts = [f"# Skill: {_title(skill)}", f"Location: {skill.location}", "", skill.body.strip("\n")]
    if skill.files:
        parts += ["", "Files (run scripts with skill_run; select docs with context_select_docs):"]
        parts += [f"- {f.path} ({f.size} bytes)" for f in skill.files]
    return "\n".join(parts)


def doc_section(skill: str, name: str, content: str) -> str:
    return f"## Doc: {skill}/{name}\n\n{content.strip(chr(10))}"


def render_text(overview: list[OverviewEntry], skills: list[SkillText]) -> str:
    blocks = [overview_text(overview)]
    for skill in skills:
        blocks.append(skill_section(skill))
        blocks += [doc_section(skill.name, d.name, d.content) for d in skill.docs]
    return "\n\n".join(blocks) + "\n"


def render_xml(overview: list[OverviewEntry], skills: list[SkillText]) -> str:
    lines = ["<available_skills>"]
    for e in overview:
        lines += [
            f'<skill loaded="{"true" if e.loaded else "false"}">',
            "<name>",
            html.escape(e.name),
            "</name>",
            "<description>",
            html.escape(e.description),
            "</description>",
            "<location>",
            e.location,
            "</location>",
            "</skill>",
        ]
    lines.append("</available_skills>")
    if skills:
        lines += ["", "<loaded_skills>"]
        for s in skills:
            version = f' version="{s.version}"' if s.version is not None else ""
            lines.append(f'<skill name="{html.escape(s.name)}"{version}>')
            if s.missing is not None:
                lines += ["<missing>", s.missing, "</missing>", "</skill>"]
                continue
            lines += ["<location>", s.location, "</location>", "<instructions>", s.body.strip("\n"), "</instructions>"]
            if s.files:
                lines.append("<files>")
                lines += [f'<file path="{html.escape(f.path)}" size="{f.size}" kind="{f.kind}"/>' for f in s.files]
                lines.append("</files>")
            for d in s.docs:
                lines += [f'<doc path="{html.escape(d.name)}">', d.content.strip("\n"), "</doc>"]
            lines.append("</skill>")
        lines.append("</loaded_skills>")
    return "\n".join(lines) + "\n"


def render_markdown(overview: list[OverviewEntry], skills: list[SkillText]) -> str:
    blocks = [
        "## Skills\n\n"
        + "\n".join(f"- [{'x' if e.loaded else ' '}] **{e.name}**: {' '.join(e.description.split())}" for e in overview)
    ]
    for s in skills:
        if s.missing is not None:
            blocks.append(f"## Skill: {_title(s)}\n\n({s.missing})")
            continue
        block = f"## Skill: {_title(s)}\n\nLocation: `{s.location}`\n\n{s.body.strip(chr(10))}"
        if s.files:
            block += "\n\nFiles:\n" + "\n".join(f"- `{f.path}` ({f.size} bytes)" for f in s.files)
        blocks.append(block)
        blocks += [f"### Doc: {d.name}\n\n{d.content.strip(chr(10))}" for d in s.docs]
    return "\n\n".join(blocks) + "\n"


def render_json(overview: list[OverviewEntry], skills: list[SkillText]) -> dict[str, Any]:
    return {
        "overview": [
            {"name": e.name, "description": e.description, "location": e.location, "loaded": e.loaded} for e in overview
        ],
        "skills": [
            {
                "name": s.name,
                "version": s.version,
                "location": s.location,
                "body": s.body,
                "tokens": s.tokens,
                "missing": s.missing,
                "files": [{"path": f.path, "size": f.size, "kind": f.kind} for f in s.files],
                "docs": [{"name": d.name, "content": d.content, "tokens": d.tokens} for d in s.docs],
            }
            for s in skills
        ],
    }


def render(fmt: Format, overview: list[OverviewEntry], skills: list[SkillText]) -> str | dict[str, Any]:
    if fmt == "text":
        return render_text(overview, skills)
    if fmt == "xml":
        return render_xml(overview, skills)
    if fmt == "markdown":
        return render_markdown(overview, skills)
    return render_json(overview, skills)
