"""The tool catalogue: the four progressive-disclosure tools and the context tools, as
OpenAI (Chat Completions and Responses), Anthropic or MCP definitions (one catalogue for
``/v1/tools`` and MCP).

The OpenAI definitions are ``strict``: their parameters follow Structured Outputs' rules
(:func:`strict_schema`): every property required, an optional one nullable (``null`` means
"not given"; the executor drops nulls before reading the arguments), ``additionalProperties:
false`` on every object, only the keywords strict mode accepts (a default is told in the
description).  skill_run's ``env`` map is a list of ``{name, value}`` there (a map has no
strict form) and its legacy fields are left out."""

from __future__ import annotations

import copy
import json
from typing import Any, Literal

from ..context.render import FORMATS
from ..errors import BadRequest
from ..registry import SkillRepository
from ..runs.models import RunRequest

Format = Literal["openai", "openai-responses", "anthropic", "mcp"]
TOOL_FORMATS: tuple[Format, ...] = ("openai", "openai-responses", "anthropic", "mcp")
#: Up to this many skills, ``skill`` parameters carry an ``enum`` of their names.
ENUM_LIMIT = 64

_DOCS = {"type": "array", "items": {"type": "string"}, "description": "doc paths as listed by skill_list_docs"}


def _skill_param(names: list[str]) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string", "description": "the skill's name"}
    if 0 < len(names) <= ENUM_LIMIT:
        schema["enum"] = names
    return schema


def _run_schema() -> dict[str, Any]:
    """skill_run's parameters: the RunRequest JSON Schema, inlined for tool use."""
    schema = RunRequest.model_json_schema()
    defs = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                return inline(copy.deepcopy(defs[node["$ref"].rsplit("/", 1)[-1]]))
            return {k: inline(v) for k, v in node.items() if k != "title"}
        if isinstance(node, list):
            return [inline(v) for v in node]
        return node

    inlined: dict[str, Any] = inline(schema)
    # A model names a skill: an inline bundle (the base64 of an archive) is its caller's program's
    # to send (POST /v1/runs and MCP skill_run take one all the same; not offered to a model).
    properties = inlined["properties"]
    properties.pop("bundle", None)
    named = properties["skill"]
    properties["skill"] = {
        **named["anyOf"][0],
        "description": "skill name (case-insensitive), optionally pinned: name@3, name@latest, name@sha256:<hex>",
    }
    inlined["required"] = ["skill", *inlined.get("required", [])]
    return inlined


#: The keywords OpenAI's strict mode accepts (Structured Outputs' supported subset).
STRICT_KEYWORDS = frozenset(
    {
        "type", "description", "properties", "required", "additionalProperties", "items", "enum", "const",
        "anyOf", "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
        "multipleOf", "minItems", "maxItems",
    }
)  # fmt: skip
#: skill_run fields kept for old callers of ``POST /v1/runs``; ``outputs`` says it all.
_LEGACY_RUN_FIELDS = ("output_files", "save_as_artifacts", "omit_inline_content", "artifact_prefix")
_ENV_ITEM = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "value": {"type": "string"}},
    "required": ["name", "value"],
    "additionalProperties": False,
}


def _nullable(node: dict[str, Any]) -> dict[str, Any]:
    if "anyOf" in node:
        branches = node["anyOf"]
        return node if {"type": "null"} in branches else {**node, "anyOf": [*branches, {"type": "null"}]}
    kind = node.get("type")
    out = dict(node)
    if isinstance(kind, str) and kind != "null":
        out["type"] = [kind, "null"]
    elif isinstance(kind, list) and "null" not in kind:
        out["type"] = [*kind, "null"]
    if "enum" in out and None not in out["enum"]:
        out["enum"] = [*out["enum"], None]
    return out


def strict_schema(node: Any) -> Any:
    """``node`` (a JSON Schema without ``$ref``) under OpenAI strict mode's rules: every
    object closed with every property required (the optional ones nullable), defaults moved
    into descriptions, keywords strict mode refuses dropped.  A map (``additionalProperties``
    a schema) has no strict form: ValueError."""
    if isinstance(node, list):
        return [strict_schema(v) for v in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties":
            required = set(node.get("required", []))
            out[key] = {
                name: strict_schema(sub) if name in required else _nullable(strict_schema(sub))
                for name, sub in value.items()
            }
        elif key in ("items", "anyOf"):
            out[key] = strict_schema(value)
        elif key in STRICT_KEYWORDS:
            out[key] = value
    if "default" in node and node["default"] is not None:
        told = f"default {json.dumps(node['default'])}"
        out["description"] = f"{node['description']} ({told})" if node.get("description") else told
    if node.get("type") == "object" or "properties" in node:
        extra = node.get("additionalProperties", False)
        if extra not in (False, None) and not node.get("properties"):
            raise ValueError(f"a map has no strict form: {json.dumps(node)[:200]}")
        out["properties"] = out.get("properties", {})
        out["required"] = list(out["properties"])
        out["additionalProperties"] = False
    return out


def _strict_run_schema(run: dict[str, Any]) -> dict[str, Any]:
    """skill_run's parameters for strict mode: ``env`` as ``{name, value}`` pairs, no legacy fields."""
    properties = {k: v for k, v in run["properties"].items() if k not in _LEGACY_RUN_FIELDS}
    properties["env"] = {
        "type": "array",
        "items": _ENV_ITEM,
        "description": "environment variables of the command, as name/value pairs",
    }
    schema = {**run, "properties": properties, "required": [r for r in run["required"] if r in properties]}
    return dict(strict_schema(schema))


_SESSION = {"type": "string", "description": "the session id whose context this is (the framework's, as for runs)"}
_EVICT = {
    "type": "string",
    "enum": ["none", "lru", "mention"],
    "description": "when the context would overflow: none (refuse), lru (unload the least recently used "
    "first), mention (unload skills the recent messages do not mention first)",
}
_MESSAGES = {
    "type": "array",
    "items": {"type": "string"},
    "description": "the text of the last few messages (for evict: mention)",
}
_BUDGET = {
    "type": "object",
    "additionalProperties": False,
    "description": "overrides of the context budget",
    "properties": {
        "max_tokens": {"type": "integer", "minimum": 1, "maximum": 1_000_000_000},
        "skill_tokens": {"type": "integer", "minimum": 1, "maximum": 1_000_000_000},
        "doc_tokens": {"type": "integer", "minimum": 1, "maximum": 1_000_000_000},
        "high_water": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
    },
}
#: The context tools: what an agent has loaded, kept by the service per session.
CONTEXT_TOOLS = (
    "context_load",
    "context_unload",
    "context_select_docs",
    "context_list_docs",
    "context_touch",
    "context_render",
    "context_clear",
)


def _context_tools(skill: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    def obj(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {"session": _SESSION, **properties},
            "required": ["session", *required],
            "additionalProperties": False,
        }

    return [
        (
            "context_load",
            "Load a skill into your context (its instructions and file list stay there, pinned to "
            "this version, until unloaded or evicted). Refused with the numbers when it does not fit the budget.",
            obj({"skill": skill, "evict": _EVICT, "messages": _MESSAGES, "budget": _BUDGET}, ["skill"]),
        ),
        (
            "context_unload",
            "Unload a skill (and its selected docs) from your context.",
            obj({"skill": skill}, ["skill"]),
        ),
        (
            "context_select_docs",
            "Select docs of a loaded skill into your context: mode add (to the selection), "
            "replace (the selection) or clear; docs lists them, all selects every doc.",
            obj(
                {
                    "skill": skill,
                    "docs": _DOCS,
                    "all": {"type": "boolean"},
                    "mode": {"type": "string", "enum": ["add", "replace", "clear"]},
                    "evict": _EVICT,
                    "messages": _MESSAGES,
                    "budget": _BUDGET,
                },
                ["skill", "mode"],
            ),
        ),
        (
            "context_list_docs",
            "List a skill's docs with token counts and whether they are selected.",
            obj({"skill": skill}, ["skill"]),
        ),
        (
            "context_touch",
            "Mark a loaded skill as used (it is then the last to be evicted).",
            obj({"skill": skill}, ["skill"]),
        ),
        (
            "context_render",
            "Render your context: the skills overview with loaded markers, each loaded skill and its selected docs.",
            obj({"format": {"type": "string", "enum": list(FORMATS)}}, []),
        ),
        ("context_clear", "Empty your context.", obj({}, [])),
    ]


#: The process tools: a long-lived process in a session's sandbox (a REPL, a dev server).
PROCESS_TOOLS = ("process_start", "process_write", "process_poll", "process_kill")
_PROCESS_SESSION = {"type": "string", "description": "the session id whose sandbox runs the process (as for runs)"}
_PROCESS = {"type": "string", "description": "the process id process_start answered"}


def _process_tools() -> list[tuple[str, str, dict[str, Any]]]:
    def obj(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {"session": _PROCESS_SESSION, **properties},
            "required": ["session", *required],
            "additionalProperties": False,
        }

    return [
        (
            "process_start",
            "Start a long-lived process (a REPL, a dev server, a tool that asks questions) in the session's "
            "network-less sandbox, in its work/ folder; runs of the same session reach its servers on 127.0.0.1. "
            "Returns its process id; then process_write, process_poll, process_kill.",
            obj(
                {
                    "command": {"type": "string", "description": "a shell command, e.g. 'python3 -i -u'"},
                    "pty": {"type": "boolean", "description": "run it on a pseudo-terminal", "default": False},
                    "timeout": {"type": "number", "exclusiveMinimum": 0, "description": "wall-clock limit, seconds"},
                    "idle_timeout": {
                        "type": "number",
                        "exclusiveMinimum": 0,
                        "description": "killed after this long with no input and no output, seconds",
                    },
                },
                ["command"],
            ),
        ),
        (
            "process_write",
            "Write text to a process's stdin (end a line with \\n); eof closes its stdin.",
            obj(
                {
                    "process": _PROCESS,
                    "data": {"type": "string"},
                    "eof": {"type": "boolean", "default": False},
                },
                ["process", "data"],
            ),
        ),
        (
            "process_poll",
            "Read a process's output after a byte offset (0 first, then the `next` offset the last poll "
            "gave), waiting up to `wait` seconds for some; says whether it still runs and its exit code.",
            obj(
                {
                    "process": _PROCESS,
                    "after": {"type": "integer", "minimum": 0, "default": 0},
                    "wait": {"type": "number", "minimum": 0, "maximum": 30, "default": 2},
                },
                ["process"],
            ),
        ),
        (
            "process_kill",
            "Kill a process and everything it started (or send it another signal: INT, TERM, HUP, ...).",
            obj(
                {"process": _PROCESS, "signal": {"type": "string", "default": "KILL"}},
                ["process"],
            ),
        ),
    ]


def definitions(
    repository: SkillRepository, fmt: Format = "openai", *, context: bool = False, processes: bool = False
) -> list[dict[str, Any]]:
    """The tools in ``fmt``'s shape; ``context``: the context tools too (``context_*``);
    ``processes``: the process tools too (``process_*``)."""
    names = [s.id for s in repository.list()]
    skill = _skill_param(names)
    run = _run_schema()
    run["properties"]["skill"] = {**run["properties"]["skill"], **skill}
    tools = [
        (
            "skill_load",
            "Load a skill's full instructions (its SKILL.md body) before using it. Call this when a task "
            "matches a skill from the overview; read the instructions, then follow them. Optionally include docs.",
            {
                "type": "object",
                "properties": {"skill": skill, "docs": _DOCS, "include_all_docs": {"type": "boolean"}},
                "required": ["skill"],
                "additionalProperties": False,
            },
        ),
        (
            "skill_list_docs",
            "List the extra docs (references, guides) a skill ships, with sizes and token estimates, so you can "
            "select only the ones the task needs.",
            {"type": "object", "properties": {"skill": skill}, "required": ["skill"], "additionalProperties": False},
        ),
        (
            "skill_select_docs",
            "Read selected docs of a skill (after skill_list_docs). Prefer a few relevant docs over all of them.",
            {
                "type": "object",
                "properties": {"skill": skill, "docs": _DOCS, "include_all_docs": {"type": "boolean"}},
                "required": ["skill"],
                "additionalProperties": False,
            },
        ),
        (
            "skill_run",
            "Run a shell command of a skill in a fresh, isolated workspace without network (unless the operator's "
            "policy allows the skill some hosts: then those only, credentials added outside), as the skill's "
            "instructions say (e.g. 'python3 scripts/x.py > out/result.txt'). Scripts run here; never paste them. "
            "The command starts in the skill's folder; write results to out/ and list them in outputs.globs "
            "(e.g. ['out/**']) to get them back. Stage files with inputs (artifact://, skill://, workspace://). "
            "Long output comes back as its head and tail; every file and cut stream has an artifact:// ref "
            "that a later run can stage as an input.",
            run,
        ),
    ]
    if context:
        tools += _context_tools(skill)
    if processes:
        tools += _process_tools()
    if fmt in ("openai", "openai-responses"):
        strict = [(n, d, _strict_run_schema(p) if n == "skill_run" else strict_schema(p)) for n, d, p in tools]
        if fmt == "openai-responses":
            return [
                {"type": "function", "name": n, "description": d, "parameters": p, "strict": True} for n, d, p in strict
            ]
        return [
            {"type": "function", "function": {"name": n, "description": d, "parameters": p, "strict": True}}
            for n, d, p in strict
        ]
    if fmt == "anthropic":
        return [{"name": n, "description": d, "input_schema": p} for n, d, p in tools]
    if fmt == "mcp":
        return [{"name": n, "description": d, "inputSchema": p} for n, d, p in tools]
    raise BadRequest(f"unknown tool format {fmt!r}; use {', '.join(TOOL_FORMATS)}", code="invalid_format")
