"""Agent context: what an agent has loaded in a session, rendered within a token budget.

The context of ``{session}`` is the caller's own (its API key's tenant): another key's
context of the same session id is another context.  An admin key may address another
key's with ``?owner=<key id>`` (audited, as for artifacts).  Operations run in the thread pool
(they read skill files and the embedded store).
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from ...access import Principal, resolve_tenant_audited
from ...context import ContextService
from ...web.auth import principal
from ...web.content import download_headers
from ..schemas import ERRORS, ContextBudget, ContextLoad, ContextSelectDocs, ContextSkill

router = APIRouter(prefix="/v1/sessions/{session}/context", tags=["context"], responses=ERRORS)


def _contexts(request: Request) -> ContextService:
    contexts: ContextService = request.app.state.executor.contexts
    return contexts


def _owner() -> Any:
    return Query(default=None, max_length=64, description="admins: this key id's context (audited)")


def _tenant(who: Principal, owner: str | None, action: str, session: str) -> str:
    return resolve_tenant_audited(who, owner, action=f"context.{action}", target=session)


def _budget(budget: ContextBudget | None) -> dict[str, Any] | None:
    return budget.model_dump(exclude_none=True) if budget is not None else None


@router.get("", summary="The context's state: loaded skills (versions, tokens, docs, last use), totals, budget")
def get_context(
    session: str, request: Request, owner: str | None = _owner(), who: Principal = Depends(principal)
) -> dict[str, Any]:
    return _contexts(request).state(_tenant(who, owner, "read", session), session)


@router.post("/load", summary="Load a skill's body and inventory into the context (refused or evicting when over)")
def load(
    session: str,
    body: ContextLoad,
    request: Request,
    owner: str | None = _owner(),
    who: Principal = Depends(principal),
) -> dict[str, Any]:
    tenant = _tenant(who, owner, "load", session)
    return _contexts(request).load(
        tenant, session, body.skill, evict=body.evict, messages=body.messages, budget=_budget(body.budget)
    )


@router.post("/unload", summary="Unload a skill and its docs")
def unload(
    session: str,
    body: ContextSkill,
    request: Request,
    owner: str | None = _owner(),
    who: Principal = Depends(principal),
) -> dict[str, Any]:
    return _contexts(request).unload(_tenant(who, owner, "unload", session), session, body.skill)


@router.post("/select-docs", summary="Select docs of a loaded skill: add, replace or clear")
def select_docs(
    session: str,
    body: ContextSelectDocs,
    request: Request,
    owner: str | None = _owner(),
    who: Principal = Depends(principal),
) -> dict[str, Any]:
    tenant = _tenant(who, owner, "select_docs", session)
    return _contexts(request).select_docs(
        tenant,
        session,
        body.skill,
        docs=body.docs,
        all=body.all,
        mode=body.mode,
        evict=body.evict,
        messages=body.messages,
        budget=_budget(body.budget),
    )


@router.get("/docs", summary="A skill's docs with token counts and whether they are selected")
def list_docs(
    session: str,
    request: Request,
    skill: str = Query(min_length=1, max_length=300),
    owner: str | None = _owner(),
    who: Principal = Depends(principal),
) -> dict[str, Any]:
    return _contexts(request).list_docs(_tenant(who, owner, "read", session), session, skill)


@router.post("/touch", summary="Mark a loaded skill as used (LRU eviction takes it last)")
def touch(
    session: str,
    body: ContextSkill,
    request: Request,
    owner: str | None = _owner(),
    who: Principal = Depends(principal),
) -> dict[str, Any]:
    return _contexts(request).touch(_tenant(who, owner, "touch", session), session, body.skill)


_RENDERINGS: dict[str, Any] = {
    "content": {"application/json": {}, "text/plain": {}, "application/xml": {}, "text/markdown": {}}
}


@router.get(
    "/render",
    summary="The context block for the system message (text, xml, markdown or json)",
    response_model=None,
    responses={200: {"description": "the rendering (raw) or its envelope", **_RENDERINGS}},
)
def render(
    session: str,
    request: Request,
    format: Literal["text", "xml", "markdown", "json"] = Query(default="text"),
    raw: bool = Query(
        default=False,
        description="answer the rendering itself (text/plain, application/xml, text/markdown), not the JSON envelope",
    ),
    owner: str | None = _owner(),
    who: Principal = Depends(principal),
) -> Response:
    rendered = _contexts(request).render(_tenant(who, owner, "read", session), session, format)
    headers = {"X-Context-Tokens": str(rendered["tokens"]), "X-Token-Counter": rendered["counter"]}
    if raw and isinstance(rendered["content"], str):
        media = {"text": "text/plain", "xml": "application/xml", "markdown": "text/markdown"}[format]
        extension = {"text": "txt", "xml": "xml", "markdown": "md"}[format]
        headers |= download_headers(f"context-{session}.{extension}", media)  # skills' text: never active
        return PlainTextResponse(rendered["content"], media_type=f"{media}; charset=utf-8", headers=headers)
    return JSONResponse(rendered, headers=headers)


@router.delete("", summary="Empty the context")
def clear(
    session: str, request: Request, owner: str | None = _owner(), who: Principal = Depends(principal)
) -> dict[str, Any]:
    return _contexts(request).clear(_tenant(who, owner, "clear", session), session)
