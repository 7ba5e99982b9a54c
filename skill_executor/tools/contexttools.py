"""The ``context_*`` tools: an agent's context of a session (load, unload, select docs, render)
through the context service, each answer as a tool result."""

from __future__ import annotations

import json
from typing import Any

from ..context import ContextService
from ..errors import BadRequest
from .results import ToolResult


def context_tool(contexts: ContextService | None, name: str, arguments: dict[str, Any], tenant: str) -> ToolResult:
    """A ``context_*`` call on ``tenant``'s contexts (None: the tools are unavailable)."""
    if contexts is None:
        raise BadRequest(f"{name} is not available here", code="tool_unavailable")
    allowed = {"session", "skill", "evict", "messages", "budget", "docs", "all", "mode", "format"}
    unknown = set(arguments) - allowed
    if unknown:
        raise BadRequest(f"unknown argument(s) for {name}: {', '.join(sorted(unknown))}", code="invalid_arguments")
    session = arguments.get("session")
    if not isinstance(session, str) or not session:
        raise BadRequest("the 'session' argument is required", code="invalid_arguments")
    skill = arguments.get("skill")
    if name not in ("context_render", "context_clear") and (not isinstance(skill, str) or not skill):
        raise BadRequest("the 'skill' argument is required", code="invalid_arguments")
    messages = arguments.get("messages") or []
    if not isinstance(messages, list) or not all(isinstance(m, str) for m in messages):
        raise BadRequest("'messages' must be a list of strings", code="invalid_arguments")
    budget = arguments.get("budget")
    if budget is not None and not isinstance(budget, dict):
        raise BadRequest("'budget' must be an object", code="invalid_arguments")
    evict = arguments.get("evict") or "none"
    if not isinstance(evict, str):
        raise BadRequest("'evict' must be a string", code="invalid_arguments")
    data: dict[str, Any]
    if name == "context_load":
        data = contexts.load(tenant, session, str(skill), evict=evict, messages=messages, budget=budget)
        text = ("already loaded: " if data["already_loaded"] else "loaded ") + _item(data, data["loaded"])
    elif name == "context_unload":
        data = contexts.unload(tenant, session, str(skill))
        text = f"unloaded {data['unloaded']['skill']} ({data['unloaded']['tokens']} tokens)"
    elif name == "context_select_docs":
        docs_ = arguments.get("docs")
        if docs_ is not None and not isinstance(docs_, list):
            raise BadRequest("'docs' must be a list of doc paths", code="invalid_arguments")
        every, mode = arguments.get("all", False), arguments.get("mode", "add")
        if not isinstance(every, bool) or not isinstance(mode, str):
            raise BadRequest("'all' must be a boolean and 'mode' a string", code="invalid_arguments")
        data = contexts.select_docs(
            tenant,
            session,
            str(skill),
            docs=docs_,
            all=every,
            mode=mode,
            evict=evict,
            messages=messages,
            budget=budget,
        )
        text = (
            f"selected docs of {data['skill']}: {', '.join(data['selected']) or '(none)'}"
            + (f"; added {', '.join(data['added'])}" if data["added"] else "")
            + (f"; removed {', '.join(data['removed'])}" if data["removed"] else "")
        )
    elif name == "context_list_docs":
        data = contexts.list_docs(tenant, session, str(skill))
        text = (
            "\n".join(
                f"- {d['name']} ({d['tokens']} tokens{', selected' if d['selected'] else ''})" for d in data["docs"]
            )
            or "(no docs)"
        )
        return ToolResult(name, text, False, data)
    elif name == "context_touch":
        data = contexts.touch(tenant, session, str(skill))
        text = f"marked {skill} as used"
    elif name == "context_render":
        fmt = arguments.get("format", "text")
        if not isinstance(fmt, str):
            raise BadRequest("'format' must be a string", code="invalid_arguments")
        data = contexts.render(tenant, session, fmt)
        content = data["content"]
        return ToolResult(name, content if isinstance(content, str) else json.dumps(content, indent=1), False, data)
    else:
        data = contexts.clear(tenant, session)
        return ToolResult(name, "context cleared" if data["cleared"] else "the context was empty", False, data)
    text += f"\ncontext: {data['total_tokens']} of {data['budget']['limit']} tokens ({data['counter']})"
    text += "".join(
        f"\nevicted: {e['skill']}{'/' + e['doc'] if e['doc'] else ''} ({e['reason']}, {e['tokens']} tokens)"
        for e in data.get("evicted", [])
    )
    return ToolResult(name, text, False, data)


def _item(state: dict[str, Any], name: str) -> str:
    item = next(s for s in state["skills"] if s["name"] == name)
    version = f"version {item['version']}, " if item["version"] is not None else ""
    return f"{name} ({version}{item['tokens']} tokens)"
