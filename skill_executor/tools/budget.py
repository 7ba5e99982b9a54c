"""Tool results sized for a model's context window: one budget for every surface.

A ``skill_run`` result is shaped here, and only here, for the REST tool-call endpoint,
MCP ``tools/call`` and the library's :class:`~skill_executor.tools.ToolExecutor`.  Pure
functions: no I/O, no store; whoever calls them saves what a marker refers to.

What a model reads (the *model view*: the text, and on surfaces that have them, image,
embedded-resource and link blocks) fits :class:`ResultBudget`:

* ``max_chars`` characters of text in all (embedded text and base64 included; images
  apart).  Long streams keep their head and tail around a marker that names the ref of
  the full stream: ``[... 912345 of 1000000 characters of stdout cut to fit the
  tool-result budget; the full stdout: artifact://runs/<id>/stdout@1]``.
* Files up to ``inline_bytes`` are inlined while they fit (at most half the text); larger
  ones are given by reference (their ``artifact://`` ref, a ``resource_link`` on MCP).
* Images (PNG, JPEG, GIF, WebP) up to ``image_bytes`` in all are image blocks where the
  surface has them (MCP, Anthropic), so multimodal models see them.
* Each byte at most once: a file's content is in exactly one place (inline in the text,
  or one block), never also in the structured view.

The *structured view* (REST ``data``) is the run's metadata in the
:class:`~skill_executor.runs.models.RunResult` shape: the same stream excerpts as the text,
files by ref with no content, and the streams' full copies listed in ``artifact_files``.
MCP's ``structuredContent`` is that view without the stream excerpts, which the text block
has (:func:`skill_executor.mcp.protocol.call_result`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..config import Settings
from ..runs.models import RunResult
from .neutral import neutralise

KiB = 1024
MiB = 1024 * KiB
#: 25,000 tokens at ~4 characters a token: an eighth of a 200k-token window (Claude Code's cap for MCP output).
DEFAULT_MAX_CHARS = 100_000
DEFAULT_INLINE_BYTES = 16 * KiB
DEFAULT_IMAGE_BYTES = 2 * MiB
#: The smallest budget a request may ask for: the status, the file lines and the markers need room.
MIN_CHARS = 2_000
#: Image types models take as image blocks.
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
#: Longest warning shown in the text (the structured view has them whole).
WARNING_CHARS = 300
#: What a stream keeps at least when files and warnings crowd the budget: its marker, ref and a few lines.
STREAM_ROOM = 480
#: Where a stream's kept head ends: this share of what is shown (the tail, where errors are, gets the rest).
HEAD_SHARE = 0.4

#: Where a result is read: ``text`` (one text: REST ``content``, OpenAI tool messages), ``anthropic``
#: (text and image blocks), ``mcp`` (text, image, embedded-resource and resource-link blocks).
Surface = Literal["text", "anthropic", "mcp"]
STREAMS = ("stdout", "stderr")


class ResultBudget(BaseModel):
    """How much of a result a model reads (the settings' ``TOOL_RESULT_*`` by default)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_chars: int = Field(
        default=DEFAULT_MAX_CHARS,
        ge=MIN_CHARS,
        le=10_000_000,
        description="characters of text a model reads in all (images apart); longer streams keep head and tail",
    )
    inline_bytes: int = Field(
        default=DEFAULT_INLINE_BYTES,
        ge=0,
        le=4 * MiB,
        description="output files up to this size are inlined; larger ones are given by reference",
    )
    image_bytes: int = Field(
        default=DEFAULT_IMAGE_BYTES,
        ge=0,
        le=16 * MiB,
        description="image outputs up to this many bytes in all are image blocks (MCP, Anthropic)",
    )


def default_budget(settings: Settings) -> ResultBudget:
    """The service's budget: ``SKILL_EXECUTOR_TOOL_RESULT_*``."""
    return ResultBudget(
        max_chars=settings.tool_result_max_chars,
        inline_bytes=settings.tool_result_inline_bytes,
        image_bytes=settings.tool_result_image_bytes,
    )


class BudgetOverride(BaseModel):
    """A request's overrides of the budget (unset fields keep the default)."""

    model_config = ConfigDict(extra="forbid")

    max_chars: int | None = Field(default=None, ge=MIN_CHARS, le=10_000_000)
    inline_bytes: int | None = Field(default=None, ge=0, le=4 * MiB)
    image_bytes: int | None = Field(default=None, ge=0, le=16 * MiB)

    def apply(self, budget: ResultBudget) -> ResultBudget:
        return budget.model_copy(update=self.model_dump(exclude_none=True))


# -- the model view's blocks ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Text:
    text: str


@dataclass(frozen=True, slots=True)
class Embedded:
    """A whole small file: ``text``, or ``blob`` (base64)."""

    uri: str
    mime_type: str
    text: str | None = None
    blob: str | None = None


@dataclass(frozen=True, slots=True)
class Image:
    uri: str
    mime_type: str
    data: str  # base64


@dataclass(frozen=True, slots=True)
class Link:
    uri: str
    name: str
    mime_type: str
    size: int


Block = Text | Embedded | Image | Link


@dataclass(slots=True)
class Shaped:
    """A result shaped for one surface: ``blocks[0]`` is the text; ``structured`` the
    structured view; ``cut``: the streams shown only in part (their full copy belongs at
    the refs the caller gave, or was not kept)."""

    blocks: list[Block]
    structured: dict[str, Any]
    cut: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        first = self.blocks[0]
        assert isinstance(first, Text)
        return first.text

    def chars(self) -> int:
        """Characters of text the model view holds (images apart): what ``max_chars`` bounds."""
        total = 0
        for block in self.blocks:
            if isinstance(block, Text):
                total += len(block.text)
            elif isinstance(block, Embedded):
                total += len(block.text or block.blob or "")
        return total


# -- pure helpers --------------------------------------------------------------------------


def marker(what: str, hidden: int, total: int, ref: str | None, *, run_cut: bool = False) -> str:
    """The line that stands where part of ``what`` was cut, naming where the whole is."""
    where = f"the full {what}: {ref}" if ref else f"the full {what} was not kept"
    also = f"; the run itself kept only the first part of its {what}" if run_cut else ""
    return f"[... {hidden} of {total} characters of {what} cut to fit the tool-result budget; {where}{also}]"


def head_tail(text: str, allowance: int, mark: Any) -> str:
    """``text`` in at most ``allowance`` characters: its head and tail around
    ``mark(hidden)`` (a function of how many characters are hidden), cut at line ends
    where that keeps most of each part.  ``text`` itself when it fits."""
    if len(text) <= allowance:
        return text
    room = allowance - len(mark(len(text))) - 2  # the two newlines around the marker
    if room <= 0:
        return str(mark(len(text)))[:allowance]
    head_len = int(room * HEAD_SHARE)
    head = text[:head_len]
    newline = head.rfind("\n")
    if newline >= head_len // 2:
        head = head[: newline + 1]
    tail_len = room - head_len
    tail = text[len(text) - tail_len :] if tail_len else ""
    newline = tail.find("\n")
    if 0 <= newline < tail_len // 2:
        tail = tail[newline + 1 :]
    hidden = len(text) - len(head) - len(tail)
    return f"{head.removesuffix(chr(10))}\n{mark(hidden)}\n{tail}"


def fit_text(text: str, budget: ResultBudget, *, what: str = "result", ref: str | None = None) -> str:
    """Any tool's text within the budget (head and tail, a marker naming ``ref``)."""
    return head_tail(text, budget.max_chars, lambda hidden: marker(what, hidden, len(text), ref))


def split(allowance: int, sizes: list[int]) -> list[int]:
    """Share ``allowance`` among parts of ``sizes``: a part that needs less than an even
    share keeps all it needs; the rest is shared evenly by the others."""
    shares = [0] * len(sizes)
    left = sorted(range(len(sizes)), key=lambda i: sizes[i])
    room = max(0, allowance)
    while left:
        even = room // len(left)
        i = left[0]
        if sizes[i] <= even:
            shares[i] = sizes[i]
            room -= sizes[i]
            left.pop(0)
            continue
        for j in left:
            shares[j] = even
        break
    return shares


def _status(result: RunResult, failed: bool) -> str:
    if result.timed_out:
        status = f"timed out (exit code {result.exit_code})"
    elif result.oom_killed:
        status = f"out of memory (exit code {result.exit_code})"
    elif result.policy_denied_exec is not None:
        denied = result.policy_denied_exec
        refused = f"policy rule {denied['rule']!r} refused the program {denied['program']!r}"
        status = f"stopped: {refused} (exit code {result.exit_code})"
    elif result.signal is not None:
        status = f"killed by {result.signal} (exit code {result.exit_code})"
    elif result.exit_code is None:
        status = "no exit code"
    else:
        status = f"exit code {result.exit_code}"
    return f"{'error: the command failed: ' if failed else ''}{status} in {result.duration_ms} ms"


def _readable(ref: str | None) -> bool:
    """A ref a later call can use: the artifact store's (a run's workspace is gone)."""
    return ref is not None and ref.startswith("artifact://")


def _at(ref: str | None) -> str:
    return ref if ref is not None else "not kept"


@dataclass(slots=True)
class _File:
    index: int
    how: Literal["inline", "embed", "image", "ref"]
    line: str
    content: str = ""  # what "inline" puts in the text


def shape_run(
    result: RunResult,
    budget: ResultBudget,
    surface: Surface,
    *,
    failed: bool,
    stream_refs: Mapping[str, str] | None = None,
) -> Shaped:
    """``result`` for ``surface`` within ``budget``.  ``stream_refs``: where the full
    stdout/stderr were kept (shape once without, save the streams the answer's ``cut``
    names, shape again with their refs: the same streams are cut)."""
    refs = dict(stream_refs or {})
    total = budget.max_chars
    images_left = budget.image_bytes if surface != "text" else 0
    files_left = total // 2
    files: list[_File] = []
    for i, item in enumerate(result.output_files):
        desc = f"file {neutralise(item.name)} ({item.mime_type}, {item.size_bytes} bytes"
        whole = item.content is not None and not item.truncated
        if whole and item.encoding == "base64" and item.mime_type in IMAGE_TYPES and 0 < item.size_bytes <= images_left:
            images_left -= item.size_bytes
            files.append(_File(i, "image", f"{desc}): the image below; {_at(item.ref)}"))
            continue
        small = whole and item.size_bytes <= budget.inline_bytes
        shown_text = neutralise(item.content or "") if item.encoding == "utf-8" else ""  # what the text shows
        size = len(shown_text) if item.encoding == "utf-8" else len(item.content or "")
        if small and item.encoding == "utf-8" and size <= files_left:
            files_left -= size
            if surface == "mcp" and item.ref is not None:  # an embedded resource is named by its URI
                files.append(_File(i, "embed", f"{desc}): embedded below; {item.ref}"))
            else:
                files.append(_File(i, "inline", f"{desc}, {_at(item.ref)}):", shown_text))
            continue
        if small and item.encoding == "base64" and surface == "mcp" and item.ref is not None and size <= files_left:
            files_left -= size
            files.append(_File(i, "embed", f"{desc}): embedded below; {item.ref}"))
            continue
        if _readable(item.ref):
            why = (
                "cut by outputs.max_file_bytes"
                if item.truncated
                else f"over the inline size ({budget.inline_bytes} bytes)"
                if item.size_bytes > budget.inline_bytes
                else "not inlined"
            )
            files.append(_File(i, "ref", f"{desc}): {why}; full content at {item.ref}"))
        else:
            why = (
                "cut by outputs.max_file_bytes; not kept"
                if item.truncated
                else "not kept: not saved as an artifact (outputs.save is false, or see the warnings)"
            )
            files.append(_File(i, "ref", f"{desc}): {why}"))
    warnings = [neutralise(w) for w in result.warnings]
    warnings = [w if len(w) <= WARNING_CHARS else w[: WARNING_CHARS - 3] + "..." for w in warnings]
    status = _status(result, failed)

    def fixed_size(listed: list[_File], warned: list[str]) -> int:
        lines = [status, *(f.line for f in listed), *(f"warning: {w}" for w in warned)]
        size = sum(len(x) + 1 for x in lines)
        size += sum(len(f.content.rstrip("\n")) + 1 for f in listed if f.how == "inline")
        size += sum(len(result.output_files[f.index].content or "") for f in listed if f.how == "embed")
        return size

    # What the program wrote, neutralised (:mod:`.neutral`): no escape in it is interpreted.
    texts = {"stdout": neutralise(result.stdout).rstrip("\n"), "stderr": neutralise(result.stderr).rstrip("\n")}
    run_cuts = {"stdout": result.stdout_truncated, "stderr": result.stderr_truncated}
    notes = {s: f" [cut by the run: {s}_max_bytes]" if run_cuts[s] else "" for s in STREAMS}
    present = [s for s in STREAMS if texts[s]]
    # Room kept for the streams (a cut one's marker and its ref at least) and the closing notes.
    reserve = 160 + sum(min(len(texts[s]) + len(notes[s]) + 16, STREAM_ROOM) for s in present)
    # Too much for the budget even without streams: inline less, then list less.
    while fixed_size(files, warnings) > total - reserve and any(f.how in ("inline", "embed") for f in files):
        last = max(f.index for f in files if f.how in ("inline", "embed"))
        item = result.output_files[last]
        where = f"full content at {item.ref}" if _readable(item.ref) else "not kept"
        name = neutralise(item.name)
        desc = f"file {name} ({item.mime_type}, {item.size_bytes} bytes): over the tool-result budget; {where}"
        files = [f if f.index != last else _File(last, "ref", desc) for f in files]
    listed, unlisted = files, 0
    warned, unwarned = warnings, 0
    while fixed_size(listed, warned) > total - reserve and (warned or listed):
        if warned:
            warned, unwarned = warned[:-1], unwarned + 1
        else:
            listed, unlisted = listed[:-1], unlisted + 1
    tail_lines = []
    if unlisted:
        tail_lines.append(f"[{unlisted} more output file(s) not listed here; their refs are in the structured result]")
    if unwarned:
        tail_lines.append(f"[{unwarned} more warning(s) not shown]")
    # The streams share what is left.
    fixed = fixed_size(listed, warned) + sum(len(x) + 1 for x in tail_lines)
    headers = sum(len(f"{s}:\n") + 1 for s in present)
    shares = split(total - fixed - headers, [len(texts[s]) + len(notes[s]) for s in present])
    shown: dict[str, str] = {}
    cut: list[str] = []
    for name, share in zip(present, shares, strict=True):
        body = texts[name]
        if len(body) + len(notes[name]) <= share:
            shown[name] = body + notes[name]
            continue
        cut.append(name)
        shown[name] = head_tail(
            body,
            share,
            lambda hidden, n=name, b=body: marker(n, hidden, len(b), refs.get(n), run_cut=run_cuts[n]),
        )
    lines = [status]
    for name in present:
        lines += [f"{name}:", shown[name]]
    for f in listed:
        lines.append(f.line)
        if f.how == "inline":
            lines.append(f.content.rstrip("\n"))
    lines += [f"warning: {w}" for w in warned]
    lines += tail_lines
    blocks: list[Block] = [Text("\n".join(lines))]
    for f in listed:
        item = result.output_files[f.index]
        if f.how == "image":
            blocks.append(Image(item.ref or "", item.mime_type, item.content or ""))
        elif f.how == "embed":
            uri = item.ref or ""  # an embedded file always has one (above)
            if item.encoding == "base64":
                blocks.append(Embedded(uri, item.mime_type, blob=item.content))
            else:
                blocks.append(Embedded(uri, item.mime_type, text=item.content))
        elif f.how == "ref" and surface == "mcp" and item.ref is not None and _readable(item.ref):
            blocks.append(Link(item.ref, item.name, item.mime_type, item.size_bytes))
    structured = result.model_dump(mode="json")
    for name in STREAMS:  # neutralised as the text (the raw streams: GET /v1/runs/{id}, the kept artifact)
        structured[name] = neutralise(structured[name])
    for name in cut:  # the same excerpt as the text
        structured[name] = shown[name]
        structured[f"{name}_truncated"] = True
    for entry in structured["output_files"]:
        entry["content"], entry["encoding"] = None, None
    return Shaped(blocks, structured, cut)
