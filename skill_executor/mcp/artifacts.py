"""Artifacts over MCP: ``artifact://`` resources (whole, or a part by offset and length) and the
``artifact_*`` tools, always the caller's key's."""

from __future__ import annotations

from typing import Any

import mcp_types as types

from ..access import Principal
from ..artifacts.names import parse_ref
from ..artifacts.store import ArtifactInfo, LocalArtifactStore
from ..errors import BadRequest, NotFound
from ..tools import ResultBudget
from .protocol import (
    ARTIFACT_MAX_BYTES,
    READ_MAX_BYTES,
    embedded_resource,
    payload_bytes,
    resource_contents,
    text_content,
)

#: Every artifact of the caller's key is a resource: the refs tool results print.
ARTIFACT_TEMPLATE = types.ResourceTemplate(
    name="artifact",
    uri_template="artifact://{+name}@{version}{?offset,length}",
    description="Your artifacts (files runs saved, and what tool results refer to); "
    f"a read answers at most {READ_MAX_BYTES} bytes: read larger ones in parts with offset and length",
)


def read_artifact(store: LocalArtifactStore, ref: str, who: Principal) -> tuple[ArtifactInfo, bytes, str]:
    """``artifact://name[@version][?offset=N&length=M]``: the caller's artifact (another
    key's is not found), whole or the part asked for, and the URI of what was read."""
    body, _, query = ref.removeprefix("artifact://").partition("?")
    name, version = parse_ref(body)
    info = store.info(name, version, tenant=who.id)
    if query:
        offset, length = _part(query, info)
        uri = f"{info.ref}?offset={offset}&length={length}"
    elif info.size > READ_MAX_BYTES:
        raise BadRequest(
            f"artifact {info.ref} is {info.size} bytes; one read answers at most {READ_MAX_BYTES}: read it "
            f"in parts ({info.ref}?offset=0&length={READ_MAX_BYTES}, then the next offset), or over HTTP "
            f"(GET /v1/artifacts/{info.name}?version={info.version})",
            code="artifact_too_large",
        )
    else:
        offset, length, uri = 0, info.size, info.ref
    with store.open(info) as handle:
        skipped = 0
        while skipped < offset:  # a stream from the object store: read up to the part
            chunk = handle.read(min(1024 * 1024, offset - skipped))
            if not chunk:
                break
            skipped += len(chunk)
        data = handle.read(length)
    return info, data, uri


def artifact_tool(
    store: LocalArtifactStore, name: str, arguments: dict[str, Any], who: Principal, budget: ResultBudget
) -> types.CallToolResult:
    """The ``artifact_*`` tools on the caller's artifacts (``artifact_get`` of a large one: a link)."""
    if name == "artifact_list":
        items = [i.to_dict() for i in store.names(tenant=who.id)]
        text = "\n".join(f"- {i['ref']} ({i['size']} bytes, {i['mime_type']})" for i in items) or "(none)"
        return types.CallToolResult(content=[text_content(text)], structured_content={"artifacts": items})
    if name == "artifact_put":
        artifact = arguments.get("name")
        if not isinstance(artifact, str):
            raise BadRequest("the 'name' argument is required", code="invalid_arguments")
        data = payload_bytes(arguments)
        mime = arguments.get("mime_type")
        if not isinstance(mime, str):
            mime = "text/plain" if "text" in arguments else "application/octet-stream"
        info = store.put(artifact, data, mime_type=mime, tenant=who.id, max_bytes=ARTIFACT_MAX_BYTES)
        return types.CallToolResult(
            content=[text_content(f"stored {info.ref} ({info.size} bytes)")], structured_content=info.to_dict()
        )
    if name == "artifact_get":
        ref = arguments.get("ref")
        if not isinstance(ref, str):
            raise BadRequest("the 'ref' argument is required", code="invalid_arguments")
        body, _, _ = ref.removeprefix("artifact://").partition("?")
        name, version = parse_ref(body)
        info = store.info(name, version, tenant=who.id)
        said = f"{info.ref} ({info.size} bytes, {info.mime_type})"
        if info.size * 4 // 3 + 4 > budget.max_chars or info.size > READ_MAX_BYTES:  # by reference
            link = types.ResourceLink(
                type="resource_link", uri=info.ref, name=info.name, mime_type=info.mime_type, size=info.size
            )
            note = (
                f"{said}: larger than the tool-result budget ({budget.max_chars} characters); read it with "
                f"resources/read ({info.ref}, in parts of at most {READ_MAX_BYTES} bytes: "
                f"{info.ref}?offset=0&length={READ_MAX_BYTES}) or stage it as a skill_run input"
            )
            return types.CallToolResult(content=[text_content(note), link], structured_content=info.to_dict())
        _, data, uri = read_artifact(store, info.ref, who)
        return types.CallToolResult(
            content=[text_content(said), embedded_resource(resource_contents(uri, info.mime_type, data))],
            structured_content=info.to_dict(),
        )
    raise NotFound(f"unknown tool {name!r}", code="tool_not_found")


def _part(query: str, info: ArtifactInfo) -> tuple[int, int]:
    """``offset=N&length=M`` of a part read: within the artifact, at most READ_MAX_BYTES."""
    fields: dict[str, int] = {}
    for pair in query.split("&"):
        key, _, value = pair.partition("=")
        if key not in ("offset", "length") or key in fields or not value.isdigit() or len(value) > 19:
            raise BadRequest(
                f"invalid part {query[:80]!r} of {info.ref}: give offset=N&length=M (bytes)",
                code="invalid_artifact_ref",
            )
        fields[key] = int(value)
    offset = fields.get("offset", 0)
    length = min(fields.get("length", READ_MAX_BYTES), READ_MAX_BYTES, max(0, info.size - offset))
    if offset > info.size:
        raise BadRequest(
            f"offset {offset} is past the end of {info.ref} ({info.size} bytes)", code="invalid_artifact_ref"
        )
    return offset, length
