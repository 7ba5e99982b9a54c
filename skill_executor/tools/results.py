"""A tool call's result: the text an agent loop feeds back (a failed run is an error for
the model, with the whole result in it -- within the tool-result budget,
:mod:`.budget`) and each format's tool-result message."""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from typing import Any

from ..access import LOCAL_TENANT
from ..artifacts.store import ArtifactInfo, ArtifactStore
from ..errors import BadRequest, ExecutorError, NotFound
from ..runs.models import ArtifactFile, RunResult
from .budget import Block, Embedded, Image, Link, ResultBudget, Shaped, Surface, Text, shape_run
from .catalogue import TOOL_FORMATS, Format

log = logging.getLogger("skill_executor.tools")


@dataclass(slots=True)
class ToolResult:
    name: str
    content: str
    is_error: bool
    data: Any
    #: The model view's blocks after the text (images, embedded files, links), when the
    #: result was shaped for a surface that has them.
    blocks: list[Block] = field(default_factory=list)
    #: The call's state in words (``process_poll``: running or ended, the next offset), apart
    #: from ``content``: a block of its own before it in every message, never a line inside
    #: text a program wrote, which could imitate it.
    status: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "content": self.content,
            "is_error": self.is_error,
            "data": self.data,
            "status": self.status,
        }

    def texts(self) -> list[str]:
        """The text parts in order: the status (if any), then the content (if not empty
        beside a status)."""
        if self.status is None:
            return [self.content]
        return [self.status, self.content] if self.content else [self.status]

    def message(self, fmt: Format, call_id: str) -> dict[str, Any]:
        """This result as the tool-result message of ``fmt``, answering the call ``call_id``.

        Anthropic: a ``tool_result`` block with ``is_error`` (its content the text, or
        the text and image blocks); MCP: a ``CallToolResult`` with ``isError`` and every
        block (``call_id`` is the JSON-RPC id's business, not the result's); OpenAI: a
        ``tool`` message, Responses: a ``function_call_output`` item -- neither has an
        error flag, so an error is told in the text, which then starts with ``error:``
        (every error result's does).
        """
        texts = self.texts()
        if fmt == "anthropic":
            images = [b for b in self.blocks if isinstance(b, Image)]
            content: Any = self.content
            if images or self.status is not None:
                content = [{"type": "text", "text": t} for t in texts] + [
                    {"type": "image", "source": {"type": "base64", "media_type": i.mime_type, "data": i.data}}
                    for i in images
                ]
            return {"type": "tool_result", "tool_use_id": call_id, "content": content, "is_error": self.is_error}
        if fmt == "mcp":
            blocks = [*(Text(t) for t in texts), *self.blocks]
            return {"content": [mcp_block(b) for b in blocks], "isError": self.is_error}
        if fmt == "openai":  # a status is a text part of its own
            parts: Any = self.content if self.status is None else [{"type": "text", "text": t} for t in texts]
            return {"role": "tool", "tool_call_id": call_id, "content": parts}
        if fmt == "openai-responses":  # a Responses input item; no error flag either
            output: Any = self.content if self.status is None else [{"type": "input_text", "text": t} for t in texts]
            return {"type": "function_call_output", "call_id": call_id, "output": output}
        raise BadRequest(f"unknown tool format {fmt!r}; use {', '.join(TOOL_FORMATS)}", code="invalid_format")


def mcp_block(block: Block) -> dict[str, Any]:
    """One block as an MCP content block (JSON)."""
    if isinstance(block, Text):
        return {"type": "text", "text": block.text}
    if isinstance(block, Image):
        return {"type": "image", "data": block.data, "mimeType": block.mime_type}
    if isinstance(block, Embedded):
        body = {"text": block.text} if block.text is not None else {"blob": block.blob}
        return {"type": "resource", "resource": {"uri": block.uri, "mimeType": block.mime_type, **body}}
    assert isinstance(block, Link)
    return {
        "type": "resource_link",
        "uri": block.uri,
        "name": block.name,
        "mimeType": block.mime_type,
        "size": block.size,
    }


def failed(result: RunResult) -> bool:
    """The command did not succeed: a non-zero (or no) exit code, a timeout, out of
    memory, or killed by a signal."""
    return (
        result.exit_code != 0
        or result.timed_out
        or result.oom_killed
        or result.signal is not None
        or result.policy_denied_exec is not None
    )


def from_shaped(shaped: Shaped, is_error: bool) -> ToolResult:
    return ToolResult("skill_run", shaped.text, is_error, shaped.structured, shaped.blocks[1:])


def run_result(
    result: RunResult,
    budget: ResultBudget | None = None,
    surface: Surface = "text",
    stream_refs: dict[str, str] | None = None,
) -> ToolResult:
    """``result`` shaped within ``budget`` (the default one) for ``surface``; a stream cut
    to fit names its ref in ``stream_refs`` (else its marker says it was not kept)."""
    bad = failed(result)
    return from_shaped(shape_run(result, budget or ResultBudget(), surface, failed=bad, stream_refs=stream_refs), bad)


def render_result(result: RunResult, budget: ResultBudget | None = None) -> str:
    """The run result as compact text for a model, within ``budget``; a failed command's
    starts with ``error:`` and says how it failed (an OpenAI tool message has no error flag)."""
    return run_result(result, budget).content


def kept_result(
    result: RunResult,
    budget: ResultBudget,
    surface: Surface,
    *,
    artifacts: ArtifactStore | None,
    tenant: str = LOCAL_TENANT,
) -> ToolResult:
    """:func:`run_result`, and each stream cut to fit saved whole (as the run kept it) as
    the artifact ``runs/<run id>/<stream>`` of ``tenant``, whose ref the marker names
    (and the structured view lists in ``artifact_files``).  Without a store: not kept."""
    bad = failed(result)
    shaped = shape_run(result, budget, surface, failed=bad)
    if not shaped.cut or artifacts is None:
        return from_shaped(shaped, bad)
    refs: dict[str, str] = {}
    kept: list[ArtifactFile] = []
    for name in shaped.cut:
        text = result.stdout if name == "stdout" else result.stderr
        try:
            info = _keep(artifacts, f"runs/{result.run_id}/{name}", text.encode("utf-8", "replace"), result, tenant)
        except (ExecutorError, OSError):  # the result still answers; its marker says the stream was not kept
            log.warning("the full %s of run %s could not be kept", name, result.run_id, exc_info=True)
            continue
        refs[name] = info.ref
        kept.append(ArtifactFile(name=info.name, version=info.version, ref=info.ref))
    shaped = shape_run(result, budget, surface, failed=bad, stream_refs=refs)
    shaped.structured["artifact_files"] += [k.model_dump() for k in kept]
    return from_shaped(shaped, bad)


def _keep(artifacts: ArtifactStore, name: str, data: bytes, result: RunResult, tenant: str) -> ArtifactInfo:
    """``data`` saved as ``name``, once: a result shaped again (an MCP task polled twice)
    names the version already kept rather than a new one."""
    try:
        info = artifacts.info(name, tenant=tenant)
    except NotFound:
        pass
    else:
        if info.run_id == result.run_id and info.sha256 == hashlib.sha256(data).hexdigest():
            return info
    return artifacts.put(name, data, mime_type="text/plain", run_id=result.run_id, tenant=tenant)
