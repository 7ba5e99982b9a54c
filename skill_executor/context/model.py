"""What an agent has in its context: loaded skills (pinned versions) and their selected docs."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

Policy = Literal["none", "lru", "mention"]
Reason = Literal["lru", "mention", "version"]
POLICIES: tuple[Policy, ...] = ("none", "lru", "mention")


@dataclass(slots=True)
class DocItem:
    name: str
    tokens: int
    last_used: float

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "tokens": self.tokens, "last_used": self.last_used}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DocItem:
        return cls(str(data["name"]), int(data["tokens"]), float(data["last_used"]))


@dataclass(slots=True)
class SkillItem:
    """A loaded skill: ``tokens`` is its section (location, body, file inventory);
    its docs count on their own."""

    name: str
    version: int | None
    digest: str | None
    tokens: int
    loaded_at: float
    last_used: float
    docs: list[DocItem] = field(default_factory=list)

    @property
    def ref(self) -> str:
        """The name that gets exactly this version back from the repository."""
        return f"{self.name}@{self.version}" if self.version is not None else self.name

    @property
    def total(self) -> int:
        return self.tokens + sum(d.tokens for d in self.docs)

    def doc(self, name: str) -> DocItem | None:
        return next((d for d in self.docs if d.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "digest": self.digest,
            "tokens": self.tokens,
            "docs": [d.to_dict() for d in self.docs],
            "loaded_at": self.loaded_at,
            "last_used": self.last_used,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SkillItem:
        return cls(
            str(data["name"]),
            data.get("version"),
            data.get("digest"),
            int(data["tokens"]),
            float(data["loaded_at"]),
            float(data["last_used"]),
            [DocItem.from_dict(d) for d in data.get("docs", [])],
        )


@dataclass(slots=True)
class Context:
    """One session's context (per tenant).  ``skills`` keep their load order: rendering
    appends, so what was rendered before stays a prefix (prompt caches stay warm)."""

    tenant: str
    session: str
    counter: str
    skills: list[SkillItem] = field(default_factory=list)
    created: float = 0.0
    updated: float = 0.0

    def skill(self, name: str) -> SkillItem | None:
        folded = name.casefold()
        return next((s for s in self.skills if s.name.casefold() == folded), None)

    @property
    def items_tokens(self) -> int:
        return sum(s.total for s in self.skills)

    def to_dict(self) -> dict[str, Any]:
        return {
            "counter": self.counter,
            "skills": [s.to_dict() for s in self.skills],
            "created": self.created,
            "updated": self.updated,
        }

    @classmethod
    def from_dict(cls, tenant: str, session: str, data: dict[str, Any]) -> Context:
        return cls(
            tenant,
            session,
            str(data.get("counter", "")),
            [SkillItem.from_dict(s) for s in data.get("skills", [])],
            float(data.get("created", 0.0)),
            float(data.get("updated", 0.0)),
        )


@dataclass(frozen=True, slots=True)
class Budget:
    """``max_tokens``: the context window; loads stop at ``high_water`` of it (``limit``)."""

    max_tokens: int
    skill_tokens: int
    doc_tokens: int
    high_water: float

    @property
    def limit(self) -> int:
        return math.floor(self.max_tokens * self.high_water)

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_tokens": self.max_tokens,
            "skill_tokens": self.skill_tokens,
            "doc_tokens": self.doc_tokens,
            "high_water": self.high_water,
            "limit": self.limit,
        }


@dataclass(frozen=True, slots=True)
class Eviction:
    """What left the context to make room: a whole skill (``doc`` None) or one doc."""

    skill: str
    doc: str | None
    tokens: int
    reason: Reason

    def to_dict(self) -> dict[str, Any]:
        return {"skill": self.skill, "doc": self.doc, "tokens": self.tokens, "reason": self.reason}
