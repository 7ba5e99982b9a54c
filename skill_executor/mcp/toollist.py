"""The MCP tools as ``tools/list`` answers them: the REST catalogue's definitions in MCP
shape, MCP's own tools (``skill_read_doc``, ``skill_search``, ``artifact_*``), annotations and
``skill_run``'s output schema."""

from __future__ import annotations

from typing import Any

import mcp_types as types

from ..registry import SkillRepository
from ..runs.models import RunResult
from ..tools import CONTEXT_TOOLS, PROCESS_TOOLS, definitions
from .protocol import READ_ONLY, RUN, WRITE, inline_schema, object_schema, run_output_schema


def tool_list(repository: SkillRepository, *, processes: bool) -> list[types.Tool]:
    """The MCP tools, with their annotations; ``processes``: the process tools too."""
    by_name = {d["name"]: d for d in definitions(repository, "mcp", context=True, processes=True)}
    skill = by_name["skill_list_docs"]["inputSchema"]["properties"]["skill"]
    output = run_output_schema(inline_schema(RunResult.model_json_schema()))
    specs: list[tuple[str, str, dict[str, Any], types.ToolAnnotations, dict[str, Any] | None]] = [
        ("skill_load", by_name["skill_load"]["description"], by_name["skill_load"]["inputSchema"], READ_ONLY, None),
        (
            "skill_list_docs",
            by_name["skill_list_docs"]["description"],
            by_name["skill_list_docs"]["inputSchema"],
            READ_ONLY,
            None,
        ),
        (
            "skill_read_doc",
            "Read one doc of a skill (a path from skill_list_docs).",
            object_schema(
                {"skill": skill, "path": {"type": "string", "description": "the doc's path"}}, ["skill", "path"]
            ),
            READ_ONLY,
            None,
        ),
        (
            "skill_search",
            "Search the skills by words; returns the best matching names and descriptions.",
            object_schema(
                {"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1, "maximum": 50}}, ["query"]
            ),
            READ_ONLY,
            None,
        ),
        ("skill_run", by_name["skill_run"]["description"], by_name["skill_run"]["inputSchema"], RUN, output),
        (
            "artifact_put",
            "Store a file as the next version of an artifact (text, or base64 for binary); "
            "returns its artifact:// ref for skill_run inputs.",
            object_schema(
                {
                    "name": {"type": "string"},
                    "text": {"type": "string"},
                    "base64": {"type": "string", "description": "the content, base64-encoded"},
                    "mime_type": {"type": "string"},
                },
                ["name"],
            ),
            WRITE,
            None,
        ),
        (
            "artifact_get",
            "Read an artifact (a name, name@version or artifact:// ref).",
            object_schema({"ref": {"type": "string"}}, ["ref"]),
            READ_ONLY,
            None,
        ),
        ("artifact_list", "List your artifacts (latest version of each).", object_schema({}, []), READ_ONLY, None),
    ]
    specs += [
        (
            name,
            by_name[name]["description"],
            by_name[name]["inputSchema"],
            READ_ONLY if name in ("context_list_docs", "context_render") else WRITE,
            None,
        )
        for name in CONTEXT_TOOLS
    ]
    if processes:
        specs += [
            (name, by_name[name]["description"], by_name[name]["inputSchema"], RUN, None) for name in PROCESS_TOOLS
        ]
    return [
        types.Tool(name=n, description=d, input_schema=i, annotations=a, output_schema=o) for n, d, i, a, o in specs
    ]
