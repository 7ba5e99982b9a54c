"""Budgets: what may enter a context, and what leaves it to make room.

A skill over the per-skill budget, or a doc over the per-doc budget, is refused
whatever the policy (nothing can make it fit).  An item that would take the context
past its high-water mark is refused under ``none``; ``lru`` first evicts the least
recently used skills and docs (a skill leaves with its docs); ``mention`` first evicts
the skills that the given recent messages do not mention (least recently used first),
then falls back to ``lru``.  The item being added and its skill are never evicted.
Evictions are planned in full before anything changes: when even evicting everything
else would not make room, nothing is evicted and the request is refused.  A request may
override the settings' budget (:func:`with_overrides`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..errors import BadRequest, Conflict
from .model import POLICIES, Budget, Context, Eviction, Policy, Reason

#: The largest budget a request may set (a billion tokens: larger is a mistake).
MAX_BUDGET_TOKENS = 1_000_000_000


class BudgetExceeded(Conflict):
    code = "budget_exceeded"


def check_policy(policy: str) -> Policy:
    for known in POLICIES:
        if policy == known:
            return known
    raise BadRequest(f"unknown eviction policy {policy!r}; use none, lru or mention", code="invalid_policy")


def check_item(what: str, tokens: int, budget: int, kind: str, counter: str) -> None:
    """Refuse one item (a skill, a doc) larger than its own budget."""
    if tokens > budget:
        raise BudgetExceeded(
            f"{what} is {tokens} tokens, over the per-{kind} budget of {budget} ({counter})",
            details={"item": what, "tokens": tokens, "budget": budget, "kind": kind, "counter": counter},
        )


def mentioned(name: str, text: str) -> bool:
    """``name`` (or, for ``pdf-tools``, ``pdf tools``) occurs as a word in ``text``, ignoring case."""
    variants = {name, name.replace("-", " "), name.replace("_", " ")}
    return any(re.search(rf"(?<![\w-]){re.escape(v)}(?![\w-])", text, re.IGNORECASE) for v in variants)


def plan(
    context: Context,
    *,
    what: str,
    need: int,
    base: int,
    budget: Budget,
    policy: Policy,
    messages: Sequence[str] = (),
    protect: str,
) -> list[Eviction]:
    """The evictions that make room for ``need`` more tokens (``base``: what the context
    takes besides its items, the overview); refuses with the numbers when none can."""
    total = base + context.items_tokens
    if total + need <= budget.limit:
        return []
    details = {
        "item": what,
        "tokens": need,
        "total_tokens": total,
        "limit": budget.limit,
        "max_tokens": budget.max_tokens,
        "high_water": budget.high_water,
        "counter": context.counter,
        "policy": policy,
    }
    after = (
        f"{what} ({need} tokens) would bring the context to {total + need} tokens, past its limit of "
        f"{budget.limit} ({budget.high_water:.0%} of {budget.max_tokens}, {context.counter})"
    )
    if policy == "none":
        raise BudgetExceeded(f"{after}; unload something, or ask for evict 'lru' or 'mention'", details=details)
    others = [s for s in context.skills if s.name.casefold() != protect.casefold()]
    # Units in eviction order: (skill, doc name or None, last used, load position).
    units: list[tuple[str, str | None, float, int]] = []
    for position, skill in enumerate(others):
        units.append((skill.name, None, skill.last_used, position))
        units += [(skill.name, d.name, d.last_used, position) for d in skill.docs]
    # On a tie (a skill and the docs selected with it), a doc goes before its skill.
    units.sort(key=lambda u: (u[2], u[3], u[1] is None, u[1] or ""))
    if policy == "mention":
        text = "\n".join(messages)
        stale = [u for u in units if u[1] is None and not mentioned(u[0], text)]
        units = stale + [u for u in units if u not in stale]
    by_name = {s.name: s for s in others}
    evictions: list[Eviction] = []
    gone_skills: set[str] = set()
    gone_docs: set[tuple[str, str]] = set()
    freed = 0
    for name, doc, _, _ in units:
        if total + need - freed <= budget.limit:
            break
        if name in gone_skills:
            continue
        skill = by_name[name]
        stale_skill = policy == "mention" and not mentioned(name, "\n".join(messages))
        reason: Reason = "mention" if stale_skill and doc is None else "lru"
        if doc is None:
            tokens = skill.tokens + sum(d.tokens for d in skill.docs if (name, d.name) not in gone_docs)
            gone_skills.add(name)
        else:
            item = skill.doc(doc)
            assert item is not None
            tokens = item.tokens
            gone_docs.add((name, doc))
        freed += tokens
        evictions.append(Eviction(name, doc, tokens, reason))
    if total + need - freed > budget.limit:
        raise BudgetExceeded(
            f"{after}, and evicting everything else ({freed} tokens) would not make room", details=details
        )
    return evictions


def with_overrides(defaults: Budget, overrides: Mapping[str, Any] | None) -> Budget:
    """The settings' budget with a request's overrides (``max_tokens``, ``skill_tokens``,
    ``doc_tokens``, ``high_water``)."""
    if not overrides:
        return defaults
    values: dict[str, Any] = {}
    for key in ("max_tokens", "skill_tokens", "doc_tokens"):
        value = overrides.get(key)
        if value is not None:
            if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= MAX_BUDGET_TOKENS:
                raise BadRequest(
                    f"budget.{key} must be an integer from 1 to {MAX_BUDGET_TOKENS}", code="invalid_budget"
                )
            values[key] = value
    high = overrides.get("high_water")
    if high is not None:
        if not isinstance(high, int | float) or isinstance(high, bool) or not 0 < high <= 1:
            raise BadRequest("budget.high_water must be a number in (0, 1]", code="invalid_budget")
        values["high_water"] = float(high)
    unknown = set(overrides) - {"max_tokens", "skill_tokens", "doc_tokens", "high_water"}
    if unknown:
        raise BadRequest(f"unknown budget field(s): {', '.join(sorted(unknown))}", code="invalid_budget")
    return replace(defaults, **values)
