"""The context operations: load, unload, select/list docs, touch, render, clear.

One :class:`ContextService` per executor serves the library, REST, MCP and tool calls
alike.  A context is addressed by (tenant, session): the tenant comes from the caller's
API key, so a key only ever reaches its own contexts (the same session id used by two
keys names two unrelated contexts, as for runs).
"""

from __future__ import annotations

import datetime
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from ..access import check_tenant
from ..errors import BadRequest, Conflict, NotFound
from ..registry import SkillRepository
from ..skills import Skill, docs, inventory, match_path
from ..workspace.sessions import SESSION_ID
from . import render as rendering
from .budget import check_item, check_policy, plan, with_overrides
from .model import Budget, Context, DocItem, Eviction, SkillItem
from .store import ContextStore
from .texts import SkillTexts
from .tokens import Counter

Mode = Literal["add", "replace", "clear"]


class NotLoaded(NotFound):
    code = "not_loaded"


class UnknownDoc(NotFound):
    code = "unknown_doc"


def _iso(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def check_session(session: str) -> str:
    if not isinstance(session, str) or not SESSION_ID.match(session):
        raise BadRequest(f"invalid session id {str(session)[:80]!r}", code="invalid_session")
    return session


class ContextService:
    def __init__(
        self,
        repository: SkillRepository,
        store: ContextStore,
        *,
        budget: Budget,
        counter: Counter,
        visible_skills_dir: str | None = None,
    ) -> None:
        self.repository = repository
        self.store = store
        self.defaults = budget
        self.counter = counter
        self.visible_skills_dir = visible_skills_dir
        self.texts = SkillTexts(repository, counter, visible_skills_dir)
        self._lock = threading.Lock()

    # -- helpers ------------------------------------------------------------------------

    def budget(self, overrides: Mapping[str, Any] | None = None) -> Budget:
        """The settings' budget with a request's overrides (:func:`.budget.with_overrides`)."""
        return with_overrides(self.defaults, overrides)

    def _pinned(self, item: SkillItem) -> Skill:
        return self.repository.get(item.ref)

    def _available(self, item: SkillItem) -> bool:
        """Whether the version ``item`` is pinned to still exists (it may have been deleted)."""
        try:
            self._pinned(item)
        except NotFound:
            return False
        return True

    def _loaded(self, context: Context, name: str) -> SkillItem:
        item = context.skill(name.partition("@")[0])
        if item is None:
            loaded = ", ".join(s.name for s in context.skills) or "none"
            raise NotLoaded(
                f"skill {name!r} is not loaded in the context of session {context.session!r} "
                f"(loaded: {loaded}); load it first",
                details={"skill": name, "loaded": loaded},
            )
        return item

    def _context(self, tenant: str, session: str) -> Context:
        return self.store.get(check_tenant(tenant), check_session(session)) or Context(
            tenant, session, self.counter.name
        )

    def _change(self, tenant: str, session: str, fn: Callable[[Context, float], dict[str, Any]]) -> dict[str, Any]:
        check_tenant(tenant)
        check_session(session)
        with self._lock:
            return self.store.change(tenant, session, self.counter.name, fn)

    def view(self, context: Context, budget: Budget | None = None) -> dict[str, Any]:
        """The state as JSON: skills with versions, token counts and last use; totals; budget."""
        budget = budget or self.defaults
        overview = self.texts.overview_tokens(context)
        return {
            "session": context.session,
            "skills": [
                {
                    "name": s.name,
                    "version": s.version,
                    "tokens": s.tokens,
                    "docs": [{"name": d.name, "tokens": d.tokens, "last_used": _iso(d.last_used)} for d in s.docs],
                    "loaded_at": _iso(s.loaded_at),
                    "last_used": _iso(s.last_used),
                }
                for s in context.skills
            ],
            "overview_tokens": overview,
            "total_tokens": overview + context.items_tokens,
            "budget": budget.to_dict(),
            "counter": context.counter or self.counter.name,
            "expires_at": _iso(context.updated + self.store.ttl) if context.updated else None,
        }

    @staticmethod
    def _apply(context: Context, evictions: Sequence[Eviction]) -> None:
        for e in evictions:
            if e.doc is None:
                context.skills = [s for s in context.skills if s.name != e.skill]
                continue
            item = context.skill(e.skill)
            if item is not None:
                item.docs = [d for d in item.docs if d.name != e.doc]

    def _recount(self, context: Context) -> None:
        """Counts made by another counter (the setting changed): count again with this one."""
        if context.counter == self.counter.name:
            return
        for item in context.skills:
            try:
                skill = self._pinned(item)
            except NotFound:
                continue
            item.tokens = self.texts.skill(skill).tokens
            for doc in item.docs:
                try:
                    doc.tokens = self.texts.doc_tokens(skill, doc.name)
                except NotFound:
                    pass
        context.counter = self.counter.name

    # -- operations ----------------------------------------------------------------------

    def state(self, tenant: str, session: str, *, budget: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return self.view(self._context(tenant, session), self.budget(budget))

    def load(
        self,
        tenant: str,
        session: str,
        skill: str,
        *,
        evict: str = "none",
        messages: Sequence[str] = (),
        budget: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Load a skill's body and inventory (pinned to the version loaded).  Loading a
        skill already loaded marks it used; ``name@<ref>`` of another version replaces it."""
        policy = check_policy(evict)
        limits = self.budget(budget)
        found = self.repository.get(skill)
        text = self.texts.skill(found)
        check_item(f"skill {found.id!r}", text.tokens, limits.skill_tokens, "skill", self.counter.name)

        def change(context: Context, now: float) -> dict[str, Any]:
            self._recount(context)
            existing = context.skill(found.id)
            if (
                existing is not None
                and (existing.version == found.version or "@" not in skill)
                and self._available(existing)
            ):
                existing.last_used = now
                return {**self.view(context, limits), "loaded": existing.name, "already_loaded": True, "evicted": []}
            replaced: list[Eviction] = []
            if existing is not None:  # another version: it leaves with its docs
                replaced = [Eviction(existing.name, None, existing.total, "version")]
                self._apply(context, replaced)
            evictions = plan(
                context,
                what=f"skill {found.id!r}",
                need=text.tokens,
                base=self.texts.overview_tokens(context),
                budget=limits,
                policy=policy,
                messages=messages,
                protect=found.id,
            )
            self._apply(context, evictions)
            context.skills.append(SkillItem(found.id, found.version, found.digest, text.tokens, now, now))
            return {
                **self.view(context, limits),
                "loaded": found.id,
                "already_loaded": False,
                "evicted": [e.to_dict() for e in [*replaced, *evictions]],
            }

        return self._change(tenant, session, change)

    def unload(self, tenant: str, session: str, skill: str) -> dict[str, Any]:
        def change(context: Context, now: float) -> dict[str, Any]:
            item = self._loaded(context, skill)
            context.skills = [s for s in context.skills if s is not item]
            return {
                **self.view(context),
                "unloaded": {"skill": item.name, "tokens": item.total, "docs": [d.name for d in item.docs]},
            }

        return self._change(tenant, session, change)

    def _doc_names(self, skill: Skill, wanted: Sequence[str] | None, everything: bool) -> list[str]:
        available = [e.path for e in docs(inventory(skill))]
        if everything:
            return available
        names = []
        for name in wanted or []:
            if not isinstance(name, str):
                raise BadRequest("'docs' must be a list of doc paths", code="invalid_arguments")
            try:
                names.append(match_path(skill, name, available).path)
            except NotFound as exc:
                listing = ", ".join(available) or "none"
                raise UnknownDoc(
                    f"{exc.message} (available: {listing})",
                    details={"skill": skill.id, "doc": name, "available": available},
                ) from None
        return list(dict.fromkeys(names))

    def select_docs(
        self,
        tenant: str,
        session: str,
        skill: str,
        *,
        docs: Sequence[str] | None = None,
        all: bool = False,
        mode: str = "add",
        evict: str = "none",
        messages: Sequence[str] = (),
        budget: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Select docs of a loaded skill: ``add`` to the selection, ``replace`` it, or ``clear`` it;
        ``docs`` names them, ``all`` means every doc the skill ships."""
        if mode not in ("add", "replace", "clear"):
            raise BadRequest(f"unknown mode {mode!r}; use add, replace or clear", code="invalid_mode")
        if mode == "clear" and (docs or all):
            raise BadRequest("mode 'clear' takes no docs", code="invalid_arguments")
        if mode != "clear" and docs is None and not all:
            raise BadRequest(f"mode {mode!r} needs 'docs' (a list) or 'all': true", code="invalid_arguments")
        if docs is not None and all:
            raise BadRequest("give 'docs' or 'all', not both", code="invalid_arguments")
        policy = check_policy(evict)
        limits = self.budget(budget)
        pinned = self._loaded(self._context(tenant, session), skill)
        if mode == "clear":  # needs nothing of the skill (its version may be gone)
            names: list[str] = []
        else:
            found = self._pinned(pinned)
            names = self._doc_names(found, docs, all)
        counted = {}
        for name in names:
            if pinned.doc(name) is None:
                counted[name] = self.texts.doc_tokens(found, name)
                check_item(
                    f"doc {name!r} of skill {found.id!r}", counted[name], limits.doc_tokens, "doc", self.counter.name
                )

        def change(context: Context, now: float) -> dict[str, Any]:
            self._recount(context)
            item = self._loaded(context, skill)
            if (item.version, item.digest) != (pinned.version, pinned.digest):
                raise Conflict(
                    f"skill {item.name!r} was loaded again (version {item.version}) while its docs were "
                    "being selected; select them again",
                    code="context_changed",
                )
            keep = item.docs if mode == "add" else [d for d in item.docs if d.name in names]
            removed = [d.name for d in item.docs if d not in keep]
            for d in keep:
                if d.name in names:
                    d.last_used = now
            kept = {d.name for d in keep}
            new = [
                DocItem(n, counted[n] if n in counted else self.texts.doc_tokens(found, n), now)
                for n in names
                if n not in kept
            ]
            item.docs = keep  # what replace drops is gone before the new docs are measured
            evictions = (
                plan(
                    context,
                    what=f"docs {', '.join(d.name for d in new) or '-'} of skill {item.name!r}",
                    need=sum(d.tokens for d in new),
                    base=self.texts.overview_tokens(context),
                    budget=limits,
                    policy=policy,
                    messages=messages,
                    protect=item.name,
                )
                if new
                else []
            )
            self._apply(context, evictions)
            item.docs = [*keep, *new]
            item.last_used = now
            return {
                **self.view(context, limits),
                "skill": item.name,
                "selected": [d.name for d in item.docs],
                "added": [d.name for d in new],
                "removed": removed,
                "evicted": [e.to_dict() for e in evictions],
            }

        return self._change(tenant, session, change)

    def list_docs(self, tenant: str, session: str, skill: str) -> dict[str, Any]:
        """A skill's docs with sizes, token counts and whether they are selected (the loaded
        version's when it is loaded)."""
        context = self._context(tenant, session)
        item = context.skill(skill.partition("@")[0])
        found = self._pinned(item) if item is not None and "@" not in skill else self.repository.get(skill)
        selected = {d.name for d in item.docs} if item is not None else set()
        listed = [
            {
                "name": e.path,
                "size": e.size,
                "tokens": self.texts.doc_tokens(found, e.path),
                "selected": e.path in selected,
            }
            for e in docs(inventory(found))
        ]
        return {
            "session": session,
            "skill": found.id,
            "version": found.version,
            "loaded": item is not None,
            "docs": listed,
            "counter": self.counter.name,
        }

    def touch(self, tenant: str, session: str, skill: str) -> dict[str, Any]:
        def change(context: Context, now: float) -> dict[str, Any]:
            self._loaded(context, skill).last_used = now
            return self.view(context)

        return self._change(tenant, session, change)

    def used(self, tenant: str, session: str | None, skill: str | None) -> bool:
        """A run of ``skill`` in ``session``: mark the skill used when it is loaded there (an
        agent's runs keep their skills from LRU eviction); anything else -- a run of an inline
        bundle without a skill name too -- changes nothing."""
        if skill is None or session is None or not SESSION_ID.match(session) or not check_tenant(tenant):
            return False
        context = self.store.get(tenant, session)
        if context is None or context.skill(skill.partition("@")[0]) is None:
            return False
        try:
            self.touch(tenant, session, skill)
        except NotLoaded:  # unloaded meanwhile
            return False
        return True

    def clear(self, tenant: str, session: str) -> dict[str, Any]:
        check_tenant(tenant)
        check_session(session)
        return {"session": session, "cleared": self.store.delete(tenant, session)}

    def render(self, tenant: str, session: str, fmt: str = "text") -> dict[str, Any]:
        """The context block: overview with markers, then each loaded skill and its docs."""
        if fmt not in rendering.FORMATS:
            raise BadRequest(f"unknown format {fmt!r}; use text, xml, markdown or json", code="invalid_format")
        context = self._context(tenant, session)
        self.store.keep_alive(tenant, session)
        skills = []
        for item in context.skills:
            try:
                found = self._pinned(item)
            except NotFound as exc:
                skills.append(
                    rendering.SkillText(
                        item.name, item.version, "", "", [], item.tokens, missing=f"no longer available: {exc.message}"
                    )
                )
                continue
            text = self.texts.skill(found)
            text.tokens = item.tokens
            for doc in item.docs:
                try:
                    content = self.texts.doc_content(found, doc.name)
                except NotFound:
                    content = "(no longer available)"
                text.docs.append(rendering.DocText(doc.name, content, doc.tokens))
            skills.append(text)
        body = rendering.render(fmt, self.texts.overview(context), skills)
        counted = body if isinstance(body, str) else _json(body)
        return {
            "session": session,
            "format": fmt,
            "content": body,
            "tokens": self.counter.count(counted),
            "counter": self.counter.name,
            "skills": [s.name for s in context.skills],
        }


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)
