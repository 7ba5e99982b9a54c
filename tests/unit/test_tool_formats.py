"""The tool definitions and tool-result shapes an agent loop uses, checked against the
OpenAI SDK's own types (Chat Completions and Responses) and against strict mode's rules.

Offline: the `openai` package's types and its strict-schema helper, no network.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema
import pytest
from openai.lib._pydantic import _ensure_strict_json_schema
from openai.types.chat import (
    ChatCompletionFunctionTool,
    ChatCompletionFunctionToolParam,
    ChatCompletionToolMessageParam,
)
from openai.types.responses import FunctionTool, FunctionToolParam, ResponseFunctionToolCall, ResponseInputItemParam
from openai.types.responses.response_input_param import FunctionCallOutput
from pydantic import TypeAdapter

from skill_executor.registry import SkillRepository
from skill_executor.runs.models import RunRequest, RunResult
from skill_executor.tools import CONTEXT_TOOLS, PROCESS_TOOLS, ToolExecutor, definitions, run_request
from skill_executor.tools.catalogue import TOOL_FORMATS, strict_schema

from ..conftest import REPO

SKILLS = REPO / "skills"
#: What OpenAI's strict mode accepts in a schema (Structured Outputs' supported subset).
ALLOWED = {
    "type", "description", "properties", "required", "additionalProperties", "items", "enum", "const",
    "anyOf", "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "multipleOf", "minItems", "maxItems",
}  # fmt: skip


def strict_violations(schema: dict[str, Any]) -> list[str]:
    """Every place ``schema`` breaks OpenAI strict mode's rules (empty: none)."""
    found: list[str] = []
    counted = {"properties": 0, "enum": 0}
    if schema.get("type") != "object" or "anyOf" in schema:
        found.append("$: the root must be an object, not a union")

    def walk(node: Any, path: str, depth: int) -> None:
        if not isinstance(node, dict):
            found.append(f"{path}: not a schema")
            return
        if depth > 10:
            found.append(f"{path}: nested deeper than 10 levels")
        found.extend(f"{path}: keyword {k!r} is not supported" for k in node if k not in ALLOWED)
        kinds = node.get("type")
        kinds = [kinds] if isinstance(kinds, str) else kinds or []
        if "object" in kinds or "properties" in node:
            properties = node.get("properties")
            if not isinstance(properties, dict):
                found.append(f"{path}: an object without properties")
                properties = {}
            if node.get("additionalProperties") is not False:
                found.append(f"{path}: additionalProperties is not false")
            if sorted(node.get("required", [])) != sorted(properties):
                found.append(f"{path}: required is not every property")
            counted["properties"] += len(properties)
            for name, sub in properties.items():
                walk(sub, f"{path}.{name}", depth + 1)
        if "enum" in node:
            counted["enum"] += len(node["enum"])
            if None in node["enum"] and "null" not in kinds:
                found.append(f"{path}: null in enum but not in type")
            if "null" in kinds and None not in node["enum"]:
                found.append(f"{path}: nullable type but null not in enum")
        if "array" in kinds and not isinstance(node.get("items"), dict):
            found.append(f"{path}: an array without items")
        if isinstance(node.get("items"), dict):
            walk(node["items"], f"{path}[]", depth + 1)
        for i, branch in enumerate(node.get("anyOf", [])):
            walk(branch, f"{path}|{i}", depth)
        if not kinds and "anyOf" not in node and "const" not in node and "enum" not in node:
            found.append(f"{path}: no type")

    walk(schema, "$", 0)
    if counted["properties"] > 5000 or counted["enum"] > 1000:
        found.append(f"$: too large ({counted})")
    return found


@pytest.fixture(scope="module")
def repository() -> SkillRepository:
    return SkillRepository([SKILLS])


def published(repository: SkillRepository) -> list[tuple[str, str, dict[str, Any]]]:
    """Every OpenAI tool schema we publish: both shapes, with and without the context tools,
    with the skills' enum and without (an empty repository)."""
    out = []
    for repo in (repository, SkillRepository([])):
        for fmt in ("openai", "openai-responses"):
            for tool in definitions(repo, fmt, context=True, processes=True):  # type: ignore[arg-type]
                function = tool.get("function", tool)
                out.append((fmt, function["name"], function["parameters"]))
    return out


def test_every_published_openai_schema_is_valid_under_strict_mode(repository: SkillRepository) -> None:
    tools = published(repository)
    assert len(tools) == 2 * 2 * (4 + len(CONTEXT_TOOLS) + len(PROCESS_TOOLS))
    for fmt, name, schema in tools:
        assert strict_violations(schema) == [], (fmt, name)
        # a fixed point of the OpenAI SDK's own strict-schema transform: nothing left for it to change
        assert _ensure_strict_json_schema(copy.deepcopy(schema), path=(), root={}) == schema, (fmt, name)
        jsonschema.Draft202012Validator.check_schema(schema)


def test_the_strict_rules_are_checked() -> None:
    """The checker above finds what strict mode refuses (so a green run means something)."""
    loose = {
        "type": "object",
        "properties": {"a": {"type": "string", "minLength": 1}, "b": {"type": "object", "properties": {}}},
        "required": ["a"],
    }
    assert strict_violations(loose) == [
        "$: additionalProperties is not false",
        "$: required is not every property",
        "$.a: keyword 'minLength' is not supported",
        "$.b: additionalProperties is not false",
    ]
    assert strict_violations(strict_schema(loose)) == []
    assert strict_schema(loose)["properties"]["b"]["type"] == ["object", "null"]  # optional: nullable
    with pytest.raises(ValueError, match="a map has no strict form"):
        strict_schema({"type": "object", "additionalProperties": {"type": "string"}})


def test_definitions_parse_as_the_openai_sdk_types(repository: SkillRepository) -> None:
    chat = definitions(repository, "openai", context=True)
    responses = definitions(repository, "openai-responses", context=True)
    assert [t["function"]["name"] for t in chat] == [t["name"] for t in responses]
    for tool in chat:
        assert TypeAdapter(ChatCompletionFunctionToolParam).validate_python(tool) == tool
        parsed = ChatCompletionFunctionTool.model_validate(tool)
        assert parsed.function.strict is True and parsed.function.parameters == tool["function"]["parameters"]
    for tool in responses:
        assert set(tool) == {"type", "name", "description", "parameters", "strict"}
        assert TypeAdapter(FunctionToolParam).validate_python(tool) == tool
        parsed_r = FunctionTool.model_validate(tool)
        assert parsed_r.type == "function" and parsed_r.strict is True
    # the other shapes keep the plain schemas: optional fields optional
    anthropic = {t["name"]: t["input_schema"] for t in definitions(repository, "anthropic")}
    assert anthropic["skill_run"]["required"] == ["skill", "command"]
    assert "env" in anthropic["skill_run"]["properties"] and "output_files" in anthropic["skill_run"]["properties"]
    assert set(TOOL_FORMATS) == {"openai", "openai-responses", "anthropic", "mcp"}


def strict_arguments(schema: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """What a model under strict mode sends: every property, null where it gives none."""
    return {name: given.get(name) for name in schema["properties"]}


def test_strict_mode_arguments_are_read_as_not_given(repository: SkillRepository) -> None:
    by_name = {t["name"]: t["parameters"] for t in definitions(repository, "openai-responses", context=True)}
    run_schema = by_name["skill_run"]
    arguments = strict_arguments(
        run_schema,
        {
            "skill": "csv-report",
            "command": "python3 scripts/report.py",
            "env": [{"name": "LANG", "value": "C.UTF-8"}],
            "inputs": [
                {"from": "skill://csv-report/assets/sample.csv", "file_id": None, "to": None, "mode": None, "pin": None}
            ],
            "outputs": {
                **strict_arguments(run_schema["properties"]["outputs"]["anyOf"][0], {"globs": ["out/**"]}),
            },
        },
    )
    jsonschema.validate(arguments, run_schema)  # what strict mode lets the model write
    request = run_request(arguments)
    assert request == RunRequest.model_validate(
        {
            "skill": "csv-report",
            "command": "python3 scripts/report.py",
            "env": {"LANG": "C.UTF-8"},
            "inputs": [{"from": "skill://csv-report/assets/sample.csv"}],
            "outputs": {"globs": ["out/**"]},
        }
    )
    assert request.inputs[0].mode == "copy" and request.timeout is None
    seen: list[RunRequest] = []

    def run(req: RunRequest) -> RunResult:
        seen.append(req)
        return RunResult.model_validate({"run_id": "r1", "skill": req.skill, "exit_code": 0, "duration_ms": 1})

    tools = ToolExecutor(repository, run)
    assert not tools.call("skill_run", json.dumps(arguments)).is_error
    # ... run as a tool's run: its outputs kept as runs/<run id>/<path>, so the refs its result prints round-trip
    assert request.outputs is not None
    kept = request.outputs.model_copy(update={"save": True, "name_template": "runs/{run_id}/{safe_path}"})
    assert seen == [request.model_copy(update={"outputs": kept})]
    loaded = tools.call("skill_load", strict_arguments(by_name["skill_load"], {"skill": "csv-report"}))
    assert not loaded.is_error, loaded.content
    bad_env = tools.call("skill_run", {**arguments, "env": [{"name": "A"}]})
    assert bad_env.is_error and bad_env.data["error"]["code"] == "invalid_arguments"


@pytest.mark.parametrize(
    ("name", "arguments", "code"),
    [
        ("rm_rf", {}, "tool_not_found"),
        ("", None, "tool_not_found"),
        ("x" * 10_000, {}, "tool_not_found"),
        ("skill_load", "{not json", "invalid_arguments"),
        ("skill_load", [1, 2], "invalid_arguments"),
        ("skill_load", 7, "invalid_arguments"),
        ("skill_load", "[]", "invalid_arguments"),
        ("skill_run", "null null", "invalid_arguments"),
        ("skill_run", {"skill": "csv-report"}, "invalid_arguments"),
    ],
)
def test_the_models_mistakes_are_error_results(
    repository: SkillRepository, name: str, arguments: Any, code: str
) -> None:
    """An unknown tool or malformed arguments: an error result with the code and message,
    to hand back to the model (never an exception the loop has to translate)."""

    def run(req: RunRequest) -> RunResult:
        raise AssertionError("not run")

    result = ToolExecutor(repository, run).call(name, arguments)
    assert result.is_error and result.data["error"]["code"] == code
    assert result.content.startswith(f"error ({code}): ") and len(result.content) < 1000
    if code == "tool_not_found":
        assert "skill_load, skill_list_docs, skill_select_docs, skill_run" in result.content
    for fmt, call_id in (("openai", "call_1"), ("openai-responses", "call_1"), ("anthropic", "toolu_1")):
        message = result.message(fmt, call_id)  # type: ignore[arg-type]
        if fmt == "openai":
            assert TypeAdapter(ChatCompletionToolMessageParam).validate_python(message) == message
        elif fmt == "openai-responses":
            assert TypeAdapter(FunctionCallOutput).validate_python(message) == message
            assert TypeAdapter(ResponseInputItemParam).validate_python(message) == message
        else:
            assert message["is_error"] is True
    assert result.message("mcp", "")["isError"] is True


def test_a_responses_function_call_item_is_a_tool_call() -> None:
    """The item a model emits (the SDK's own type) carries what /v1/tools/call reads."""
    from skill_executor.api.schemas import FunctionCallItem, ToolCall

    item = ResponseFunctionToolCall(
        type="function_call",
        id="fc_1",
        call_id="call_9",
        name="skill_load",
        arguments='{"skill":"x"}',
        status="completed",
    )
    call = FunctionCallItem.model_validate(item.model_dump(mode="json")).as_call()
    assert call == ToolCall(name="skill_load", arguments='{"skill":"x"}', format="openai-responses", id="call_9")
