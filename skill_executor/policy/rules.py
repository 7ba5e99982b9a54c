"""The policy file's model: its rules, and which rule applies to a key and a skill."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .egress import Egress
from .secretsfile import Secrets

Approval = Literal["always", "never", "on-first-use"]
Approver = Literal["caller", "admin"]


class Rule(BaseModel):
    """One rule of the policy file (unknown fields are refused)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = Field(default=None, min_length=1, max_length=128)
    key: str = Field(default="*", min_length=1, max_length=64, description="an API key id (tenant) or *")
    skill: str = Field(default="*", min_length=1, max_length=256, description="a skill name or *")
    allow: list[str] | None = Field(default=None, description="only these programs (none: any not denied)")
    deny: list[str] = Field(default_factory=list)
    approval: Approval = "never"
    approver: Approver = "caller"
    egress: Egress | None = Field(default=None, description="the hosts runs may reach (none: no network)")

    def matches(self, key: str, skill: str, bundled: bool = False) -> bool:
        """A rule naming a skill matches the installed skill only: an inline bundle's name is
        its sender's choice (it is matched by ``*`` rules)."""
        return self.key in ("*", key) and (self.skill == "*" or (not bundled and self.skill == skill.lower()))

    @property
    def judges(self) -> bool:
        """Whether the rule limits programs (then what cannot be known is refused)."""
        return self.allow is not None or bool(self.deny)


class PolicyFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    rules: list[Rule] = Field(default_factory=list)


@dataclass(frozen=True)
class Policy:
    rules: tuple[Rule, ...]
    source: str = "<policy>"
    #: key id -> its name (SKILL_EXECUTOR_API_KEYS_FILE's ``name=``): a rule's ``key`` is either
    names: Mapping[str, str] = field(default_factory=dict)
    #: the secrets file's values (SKILL_EXECUTOR_SECRETS_FILE; None: none), for egress ``inject``
    secrets: Secrets | None = None

    def rule(self, key: str, skill: str, bundled: bool = False) -> tuple[str, Rule] | None:
        """The first rule for ``key`` (its id; a rule may name it by its name) and ``skill``
        (``bundled``: an inline bundle), and the rule's name (``rules[i]`` when unnamed)."""
        name = self.names.get(key)
        for index, rule in enumerate(self.rules):
            if rule.matches(key, skill, bundled) or (name is not None and rule.matches(name, skill, bundled)):
                return rule.name or f"rules[{index}]", rule
        return None
