"""Agent context: what an agent has loaded in a session, rendered within a token budget.

The context of ``{session}`` is the caller's own (its API key's tenant): another key's
context of the same session id is another context.  Operations run in the thread pool
(they read skill files and the embedded store).
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from ...access import Principal
from ...context import ContextService
from ..auth import principal
from ..schemas import ERRORS, ContextBudget, ContextLoad, ContextSelectDocs, ContextSkill

router = APIRouter(prefix="/v1/sessions/{session}/context", tags=["context"], responses=ERRORS)


def _contexts(request: Request) -> ContextService:
    contexts: ContextService = request.app.state.executor.contexts
    return contexts


def _budget(budget: ContextBudget | None) -> dict[str, Any] | None:
    return budget.model_dump(exclude_none=True) if budget is not None else None


@router.get("", summary="The context's state: loaded skills (versions, tokens, docs, last use), totals, budget")
def get_context(session: str, request: Request, who: Principal = Depends(principal)) -> dict[str, Any]:
    return _contexts(request).state(who.id, session)


@router.post("/load", summary="Load a skill's body and inventory into the context (refused or evicting when over)")
def load(session: str, body: ContextLoad, request: Request, who: Principal = Depends(principal)) -> dict[str, Any]:
    return _contexts(request).load(who.id, session, body.skill, evict=body.evict, messages=body.messages,
                                   budget=_budget(body.budget))


@router.post("/unload", summary="Unload a skill and its docs")
def unload(session: str, body: ContextSkill, request: Request, who: Principal = Depends(principal)) -> dict[str, Any]:
    return _contexts(request).unload(who.id, session, body.skill)


@router.post("/select-docs", summary="Select docs of a loaded skill: add, replace or clear")
def select_docs(
    session: str, body: ContextSelectDocs, request: Request, who: Principal = Depends(principal)
) -> dict[str, Any]:
    return _contexts(request).select_docs(who.id, session, body.skill, docs=body.docs, all=body.all,
                                          mode=body.mode, evict=body.evict, messages=body.messages,
                                          budget=_budget(body.budget))


@router.get("/docs", summary="A skill's docs with token counts and whether they are selected")
def list_docs(
    session: str, request: Request, skill: str = Query(min_length=1, max_length=300),
    who: Principal = Depends(principal),
) -> dict[str, Any]:
    return _contexts(request).list_docs(who.id, session, skill)


@router.post("/touch", summary="Mark a loaded skill as used (LRU eviction takes it last)")
def touch(session: str, body: ContextSkill, request: Request, who: Principal = Depends(principal)) -> dict[str, Any]:
    return _contexts(request).touch(who.id, session, body.skill)


_RENDERINGS: dict[str, Any] = {
    "content": {"application/json": {}, "text/plain": {}, "application/xml": {}, "text/markdown": {}}}


@router.get("/render", summary="The context block for the system message (text, xml, markdown or json)",
            response_model=None, responses={200: {"description": "the rendering (raw) or its envelope",
                                                  **_RENDERINGS}})
def render(
    session: str, request: Request,
    format: Literal["text", "xml", "markdown", "json"] = Query(default="text"),
    raw: bool = Query(default=False, description="answer the rendering itself (text/plain, application/xml, "
                                                 "text/markdown), not the JSON envelope"),
    who: Principal = Depends(principal),
) -> Response:
    rendered = _contexts(request).render(who.id, session, format)
    headers = {"X-Context-Tokens": str(rendered["tokens"]), "X-Token-Counter": rendered["counter"]}
    if raw and isinstance(rendered["content"], str):
        media = {"text": "text/plain", "xml": "application/xml", "markdown": "text/markdown"}[format]
        return PlainTextResponse(rendered["content"], media_type=f"{media}; charset=utf-8", headers=headers)
    return JSONResponse(rendered, headers=headers)


@router.delete("", summary="Empty the context")
def clear(session: str, request: Request, who: Principal = Depends(principal)) -> dict[str, Any]:
    return _contexts(request).clear(who.id, session)
