"""The MCP server's vocabulary, shared by its handlers: the Skills extension's settings,
instructions, tool annotations, request parameter models, JSON Schema helpers, and how
contents and results are shaped (text, errors, embedded resources, a run's result)."""

from __future__ import annotations

import base64
import binascii
import copy
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError
from pydantic import ConfigDict, TypeAdapter, ValidationError

from ..errors import BadRequest
from ..tools import BudgetOverride, ResultBudget, ToolResult, mcp_block

#: The Skills extension's settings: ``resources/directory/read`` is served.
SETTINGS = {"directoryRead": True}

#: Most bytes of one ``artifact_put`` over MCP.
ARTIFACT_MAX_BYTES = 16 * 1024 * 1024
#: Most bytes of an artifact one ``resources/read`` answers: a message stays under the 1 MiB
#: an SSE event may hold in the official SDK's HTTP client (base64 is 4/3 of this); larger
#: artifacts are read in parts (``artifact://name@v?offset=N&length=M``) or over HTTP.
READ_MAX_BYTES = 512 * 1024
#: The request ``_meta`` key of a ``tools/call``'s tool-result budget overrides.
BUDGET_META = "skill-executor/result_budget"
#: The request ``_meta`` key binding a ``tools/call`` to one session (the host's, as
#: ``session`` in a ``POST /v1/tools/call`` body): every tool with a session acts in it.
SESSION_META = "skill-executor/session"

INSTRUCTIONS = """This server runs Agent Skills in isolated sandboxes without network (unless the operator's
policy allows a skill some hosts: then those only, through a gateway that adds the credentials).
1. Overview: the skills_overview prompt (or skills/list, resources/list, skill_search) names every skill.
2. Load: call skill_load with the skill's name to get its instructions (SKILL.md body) and file list;
   skill_list_docs / skill_read_doc fetch extra docs on demand. Files are also resources skill://<name>/<path>.
3. Run: call skill_run with the skill and a shell command, as the instructions say (never paste scripts).
   The command starts in the skill's folder. Stage inputs with inputs=[{"from": "artifact://name" or
   "skill://...", "to": "inputs/x"}] (artifact_put uploads a file first); write results to out/ and ask
   for them with outputs={"globs": ["out/**"]}: small ones come back embedded, images as image blocks, the
   rest as resource links; every file (and a long stdout/stderr, which the result shows head and tail of)
   has an artifact:// ref: read it with resources/read (large ones in parts: ?offset=N&length=M) or
   artifact_get, or stage it as an input of the next skill_run.
4. Context: context_load / context_select_docs / context_unload keep, per session, what the agent has
   loaded (within a token budget); context_render gives the block for the system message."""

READ_ONLY = types.ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)
RUN = types.ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
WRITE = types.ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
)


class SkillsListParams(types.RequestParams):
    model_config = ConfigDict(extra="allow")
    cursor: str | None = None


class UriParams(types.RequestParams):
    model_config = ConfigDict(extra="allow")
    uri: str


class DirectoryParams(UriParams):
    cursor: str | None = None


def invalid_params(message: str, data: dict[str, Any] | None = None) -> MCPError:
    return MCPError(types.INVALID_PARAMS, message, data)


def internal_error(message: str) -> MCPError:
    return MCPError(types.INTERNAL_ERROR, message)


def inline_schema(schema: dict[str, Any]) -> dict[str, Any]:
    defs = schema.pop("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                return walk(copy.deepcopy(defs[node["$ref"].rsplit("/", 1)[-1]]))
            return {k: walk(v) for k, v in node.items() if k != "title"}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    inlined: dict[str, Any] = walk(schema)
    return inlined


def object_schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def text_content(text: str) -> types.TextContent:
    return types.TextContent(type="text", text=text)


def error_result(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[text_content(text)], is_error=True)


def payload_bytes(arguments: dict[str, Any]) -> bytes:
    text, encoded = arguments.get("text"), arguments.get("base64")
    if (text is None) == (encoded is None):
        raise BadRequest("give exactly one of 'text' and 'base64'", code="invalid_arguments")
    if isinstance(text, str):
        return text.encode()
    if not isinstance(encoded, str):
        raise BadRequest("'base64' must be a string", code="invalid_arguments")
    try:
        return base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest("'base64' is not valid base64", code="invalid_arguments") from None


def resource_contents(uri: str, mime: str, data: bytes) -> dict[str, Any]:
    try:
        if b"\x00" not in data:
            return {"uri": uri, "mimeType": mime, "text": data.decode("utf-8")}
    except UnicodeDecodeError:
        pass
    return {"uri": uri, "mimeType": mime, "blob": base64.b64encode(data).decode()}


def embedded_resource(contents: dict[str, Any]) -> types.EmbeddedResource:
    model = types.TextResourceContents if "text" in contents else types.BlobResourceContents
    return types.EmbeddedResource(type="resource", resource=model.model_validate(contents))


#: What a run's ``structuredContent`` leaves to the text block: the stream excerpts, so
#: each byte of a result is in it at most once (the text is what a model reads).
IN_TEXT = ("stdout", "stderr")


def call_result(result: ToolResult) -> types.CallToolResult:
    """A tool result as MCP content: the text, then its blocks (images, embedded files,
    resource links); ``structuredContent`` = its structured view -- for a run, its metadata,
    exit code and refs without the stream excerpts the text already has (:data:`IN_TEXT`)."""
    content = [TypeAdapter(types.ContentBlock).validate_python(mcp_block(b)) for b in result.blocks]
    structured = result.data if isinstance(result.data, dict) else None
    if structured is not None and "run_id" in structured:
        structured = {k: v for k, v in structured.items() if k not in IN_TEXT}
    return types.CallToolResult(
        content=[*(text_content(t) for t in result.texts()), *content],
        structured_content=structured,
        is_error=result.is_error,
    )


def run_output_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """skill_run's ``outputSchema``: a run's result without the streams (:data:`IN_TEXT`)."""
    properties = {k: v for k, v in schema["properties"].items() if k not in IN_TEXT}
    return {
        **schema,
        "properties": properties,
        "required": [r for r in schema.get("required", []) if r not in IN_TEXT],
        "description": "The run's metadata, exit code and refs. stdout and stderr are in the text content block "
        "(head and tail when long; the full stream's artifact:// ref in artifact_files), not here.",
    }


def request_session(meta: Any) -> str | None:
    """The session one ``tools/call`` is bound to: ``_meta["skill-executor/session"]``; None: unbound."""
    bound = meta.get(SESSION_META) if isinstance(meta, dict) else None
    if bound is None:
        return None
    if not isinstance(bound, str) or not 0 < len(bound) <= 128:
        raise BadRequest(f"_meta {SESSION_META!r} must be a session name (1-128 characters)", code="invalid_arguments")
    return bound


def request_budget(default: ResultBudget, meta: Any) -> ResultBudget:
    """The budget of one ``tools/call``: ``_meta["skill-executor/result_budget"]`` over the default."""
    asked = meta.get(BUDGET_META) if isinstance(meta, dict) else None
    if asked is None:
        return default
    try:
        return BudgetOverride.model_validate(asked).apply(default)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise BadRequest(f"invalid _meta {BUDGET_META!r}: {problems}", code="invalid_arguments") from None
