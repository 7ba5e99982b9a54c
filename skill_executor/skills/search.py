"""Rank skills for a query: BM25 over name and description, name hits weighted more.

The index is built once per catalog snapshot, so a search over a thousand skills is a
handful of dictionary look-ups per query term.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

from .model import Skill

_TOKEN = re.compile(r"[a-z0-9]+")
_K1 = 1.2
_B = 0.75
NAME_WEIGHT = 3.0


def tokenize(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


@dataclass(frozen=True, slots=True)
class Hit:
    skill: Skill
    score: float


class _Field:
    """Term statistics of one text field over all documents."""

    def __init__(self, docs: list[list[str]]) -> None:
        self.tf = [Counter(doc) for doc in docs]
        self.lengths = [len(doc) for doc in docs]
        self.avg = (sum(self.lengths) / len(docs)) if docs else 0.0
        self.df: Counter[str] = Counter()
        for counts in self.tf:
            self.df.update(counts.keys())
        self.n = len(docs)

    def score(self, index: int, terms: list[str]) -> float:
        total = 0.0
        counts = self.tf[index]
        norm = _K1 * (1 - _B + _B * self.lengths[index] / self.avg) if self.avg else _K1
        for term in terms:
            freq = counts.get(term)
            if not freq:
                continue
            df = self.df[term]
            idf = math.log(1 + (self.n - df + 0.5) / (df + 0.5))
            total += idf * freq * (_K1 + 1) / (freq + norm)
        return total


class SearchIndex:
    """BM25 index over a fixed list of skills."""

    def __init__(self, skills: list[Skill]) -> None:
        self.skills = skills
        self._names = _Field([tokenize(f"{s.name} {s.id}") for s in skills])
        self._descriptions = _Field([tokenize(s.description) for s in skills])
        self._postings: dict[str, set[int]] = {}
        for field in (self._names, self._descriptions):
            for index, counts in enumerate(field.tf):
                for term in counts:
                    self._postings.setdefault(term, set()).add(index)

    def search(self, query: str, limit: int = 10) -> list[Hit]:
        terms = tokenize(query)
        if not terms:
            return []
        candidates: set[int] = set()
        for term in terms:
            candidates |= self._postings.get(term, set())
        wanted = query.strip().lower()
        hits = []
        for index in candidates:
            skill = self.skills[index]
            score = NAME_WEIGHT * self._names.score(index, terms) + self._descriptions.score(index, terms)
            if wanted in (skill.id, skill.name.lower()):
                score += 10.0
            hits.append(Hit(skill, round(score, 4)))
        hits.sort(key=lambda h: (-h.score, h.skill.id))
        return hits[:limit]
