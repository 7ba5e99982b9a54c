"""Tool calls: definitions, a call (or an OpenAI Responses item) and its result."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from ...tools.budget import BudgetOverride

#: The longest tool name a call may give (the model APIs allow 64 or 128 characters): longer
#: is no call a model made, and is refused (422) before anything echoes it.
TOOL_NAME_MAX = 256


ToolFormat = Literal["openai", "openai-responses", "anthropic", "mcp"]


class ToolList(BaseModel):
    format: ToolFormat
    tools: list[dict[str, Any]]


class ToolCall(BaseModel):
    name: str = Field(
        max_length=TOOL_NAME_MAX,
        description="the tool the model called; an unknown one is answered with an error result (tool_not_found)",
    )
    arguments: Any = Field(
        default=None,
        description="an object or its JSON text, as the model wrote it; anything else is answered with an "
        "error result (invalid_arguments)",
    )
    format: ToolFormat | None = Field(
        default=None, description="also answer `message`: the result as this format's tool-result message"
    )
    id: str | None = Field(
        default=None,
        max_length=256,
        description="the model's id of this call (tool_use_id, tool_call_id, call_id), put in `message`",
    )
    session: str | None = Field(
        default=None,
        max_length=128,
        description="the session this call is bound to (the framework's conversation): skill_run, "
        "process_* and context_* act in it; arguments naming another session are refused (403 session_mismatch)",
    )
    result_budget: BudgetOverride | None = Field(
        default=None,
        description="overrides of the tool-result budget for this call (SKILL_EXECUTOR_TOOL_RESULT_* otherwise)",
    )


class FunctionCallItem(BaseModel):
    """An OpenAI Responses ``function_call`` output item, as the model produced it; answered
    with its ``function_call_output`` item in ``message``."""

    type: Literal["function_call"]
    call_id: str = Field(min_length=1, max_length=256)
    name: str = Field(max_length=TOOL_NAME_MAX)
    arguments: Any = Field(default=None, description="the arguments' JSON text")
    id: str | None = Field(default=None, description="the item's id (not the call's)")
    status: str | None = None
    session: str | None = Field(
        default=None,
        max_length=128,
        description="the session this call is bound to (the framework's conversation): skill_run, "
        "process_* and context_* act in it; arguments naming another session are refused (403 session_mismatch)",
    )
    result_budget: BudgetOverride | None = Field(
        default=None,
        description="overrides of the tool-result budget for this call (SKILL_EXECUTOR_TOOL_RESULT_* otherwise)",
    )

    def as_call(self) -> ToolCall:
        return ToolCall(
            name=self.name,
            arguments=self.arguments,
            format="openai-responses",
            id=self.call_id,
            session=self.session,
            result_budget=self.result_budget,
        )


class ToolCallResult(BaseModel):
    name: str
    content: str = Field(description="the text for the model; what a program wrote is neutralised (escapes shown)")
    is_error: bool
    data: Any = None
    status: str | None = Field(
        default=None,
        description="the call's state in words (process_poll: running or ended, the next offset), apart from "
        "`content`: a text block of its own in `message`, never a line inside a program's output",
    )
    message: dict[str, Any] | None = Field(
        default=None,
        description="with `format`: the message to append to the conversation as it is -- "
        "Anthropic tool_result block (is_error), OpenAI tool message or Responses "
        "function_call_output item (an error's text starts with 'error:'), MCP CallToolResult (isError)",
    )
