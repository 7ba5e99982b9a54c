"""A tool call's arguments: parsed (nulls left out), bound to the framework's session, and
``skill_run``'s made a :class:`RunRequest` that keeps what its result refers to; a refusal as
the error result fed back to the model."""

from __future__ import annotations

import json
from typing import Any, cast

from pydantic import ValidationError

from ..errors import BadRequest, ExecutorError, Forbidden
from ..runs.models import OutputSpec, RunRequest
from .budget import Surface
from .results import ToolResult

#: The artifact names a tool's run saves its outputs under, so every ref its result prints
#: can be read (REST, MCP) and staged by a later run.
OUTPUT_TEMPLATE = "runs/{run_id}/{safe_path}"


def _without_nulls(value: Any) -> Any:
    """``value`` with every object's null members left out: in a strict-mode call (OpenAI)
    an optional argument is there, null, when the model does not give it."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def call_arguments(name: str, arguments: Any) -> dict[str, Any] | ToolResult:
    """A call's arguments as a dict (nulls left out), or the error result to feed back."""
    if isinstance(arguments, str):
        try:
            arguments = cast(Any, json.loads(arguments) if arguments.strip() else {})
        except ValueError:
            return refusal(name, BadRequest("arguments are not valid JSON", code="invalid_arguments"))
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return refusal(name, BadRequest("arguments must be a JSON object", code="invalid_arguments"))
    return cast(dict[str, Any], _without_nulls(arguments))


def refusal(name: str, exc: ExecutorError) -> ToolResult:
    return ToolResult(name, f"error ({exc.code}): {exc.message}", True, exc.to_dict())


def _env_pairs(env: Any) -> Any:
    """skill_run's ``env`` as a map; strict-mode definitions give it as ``{name, value}`` pairs."""
    if not isinstance(env, list):
        return env
    pairs: dict[str, Any] = {}
    for item in env:
        if not isinstance(item, dict) or set(item) != {"name", "value"}:
            raise BadRequest("invalid skill_run arguments: env: items must be {name, value}", code="invalid_arguments")
        pairs[item["name"]] = item["value"]
    return pairs


def run_request(arguments: dict[str, Any]) -> RunRequest:
    """skill_run's arguments as a :class:`RunRequest` (400 ``invalid_arguments`` if not one).
    Null members mean "not given"; ``env`` may be a list of ``{name, value}`` pairs."""
    arguments = cast(dict[str, Any], _without_nulls(arguments))
    if "env" in arguments:
        arguments = {**arguments, "env": _env_pairs(arguments["env"])}
    try:
        return RunRequest.model_validate(arguments)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise BadRequest(f"invalid skill_run arguments: {problems}", code="invalid_arguments") from None


def keep_outputs(request: RunRequest, surface: Surface) -> RunRequest:
    """A tool's run keeps what its result refers to: unless the request says otherwise
    (``outputs.save``, legacy ``save_as_artifacts``), every collected file is saved as the
    artifact ``runs/<run id>/<path>`` (:data:`OUTPUT_TEMPLATE`; characters a name cannot
    hold as ``_``), so its ``artifact://`` ref round-trips; binary outputs are read for the
    surfaces that show them (MCP blobs, MCP and Anthropic image blocks)."""
    spec = request.outputs
    if spec is None and not request.output_files:
        return request
    spec = spec or OutputSpec()
    update: dict[str, Any] = {}
    if "save" not in spec.model_fields_set and not request.save_as_artifacts:
        update["save"] = True
        if spec.name_template is None and not request.artifact_prefix:
            update["name_template"] = OUTPUT_TEMPLATE
    if "inline_binary" not in spec.model_fields_set and surface != "text":
        update["inline_binary"] = True
    return request.model_copy(update={"outputs": spec.model_copy(update=update)}) if update else request


def run_arguments(arguments: Any, surface: Surface, session: str | None = None) -> RunRequest | ToolResult:
    """A ``skill_run`` call's request; under a binding (``session``), in the bound session
    (arguments naming another one: 403 ``session_mismatch``)."""
    parsed = call_arguments("skill_run", arguments)
    if isinstance(parsed, ToolResult):
        return parsed
    return keep_outputs(run_request(bound("skill_run", parsed, session)), surface)


def bound(name: str, parsed: dict[str, Any], session: str | None) -> dict[str, Any]:
    """The arguments with the framework's session, which binds (the model cannot reach another one)."""
    if session is None:
        return parsed
    named = parsed.get("session")
    if named is not None and named != session:
        raise Forbidden(
            f"this call is bound to session {session!r}; the arguments name {str(named)[:80]!r}",
            code="session_mismatch",
        )
    return {**parsed, "session": session}


def text_argument(arguments: dict[str, Any], key: str) -> str:
    value = arguments.get(key)
    if not isinstance(value, str) or not value:
        raise BadRequest(f"the {key!r} argument is required", code="invalid_arguments")
    return value
