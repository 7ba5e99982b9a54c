"""A tool call's result: the text an agent loop feeds back (a failed run is an error for
the model, with the whole result in it) and each format's tool-result message."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import BadRequest
from ..runs.models import RunResult
from .catalogue import TOOL_FORMATS, Format


@dataclass(slots=True)
class ToolResult:
    name: str
    content: str
    is_error: bool
    data: Any

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "content": self.content, "is_error": self.is_error, "data": self.data}

    def message(self, fmt: Format, call_id: str) -> dict[str, Any]:
        """This result as the tool-result message of ``fmt``, answering the call ``call_id``.

        Anthropic: a ``tool_result`` block with ``is_error``; MCP: a ``CallToolResult``
        with ``isError`` (``call_id`` is the JSON-RPC id's business, not the result's);
        OpenAI: a ``tool`` message, Responses: a ``function_call_output`` item -- neither has
        an error flag, so an error is told in the text, which then starts with ``error:``
        (every error result's does).
        """
        if fmt == "anthropic":
            return {"type": "tool_result", "tool_use_id": call_id, "content": self.content, "is_error": self.is_error}
        if fmt == "mcp":
            return {"content": [{"type": "text", "text": self.content}], "isError": self.is_error}
        if fmt == "openai":
            return {"role": "tool", "tool_call_id": call_id, "content": self.content}
        if fmt == "openai-responses":  # a Responses input item; no error flag either
            return {"type": "function_call_output", "call_id": call_id, "output": self.content}
        raise BadRequest(f"unknown tool format {fmt!r}; use {', '.join(TOOL_FORMATS)}", code="invalid_format")


def failed(result: RunResult) -> bool:
    """The command did not succeed: a non-zero (or no) exit code, a timeout, out of
    memory, or killed by a signal."""
    return result.exit_code != 0 or result.timed_out or result.oom_killed or result.signal is not None


def run_result(result: RunResult) -> ToolResult:
    return ToolResult("skill_run", render_result(result), failed(result), result.model_dump(mode="json"))


def render_result(result: RunResult) -> str:
    """The run result as compact text for a model; a failed command's starts with
    ``error:`` and says how it failed (an OpenAI tool message has no error flag)."""
    if result.timed_out:
        status = f"timed out (exit code {result.exit_code})"
    elif result.oom_killed:
        status = f"out of memory (exit code {result.exit_code})"
    elif result.signal is not None:
        status = f"killed by {result.signal} (exit code {result.exit_code})"
    elif result.exit_code is None:
        status = "no exit code"
    else:
        status = f"exit code {result.exit_code}"
    lines = [f"{'error: the command failed: ' if failed(result) else ''}{status} in {result.duration_ms} ms"]
    if result.stdout:
        lines += ["stdout:", result.stdout.rstrip("\n") + (" [truncated]" if result.stdout_truncated else "")]
    if result.stderr:
        lines += ["stderr:", result.stderr.rstrip("\n") + (" [truncated]" if result.stderr_truncated else "")]
    for item in result.output_files:
        lines.append(f"file {item.name} ({item.mime_type}, {item.size_bytes} bytes, {item.ref})")
        if item.encoding == "utf-8" and item.content is not None:
            lines.append(item.content.rstrip("\n") + (" [truncated]" if item.truncated else ""))
    lines += [f"warning: {w}" for w in result.warnings]
    return "\n".join(lines)
