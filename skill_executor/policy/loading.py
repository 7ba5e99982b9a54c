"""Reading the policy file (``SKILL_EXECUTOR_POLICY_FILE``): YAML in, a :class:`Policy` out, or
the exact problem that stops the service from starting."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import yaml
from pydantic import ValidationError

from ..errors import ExecutorError
from .rules import Policy, PolicyFile
from .vocabulary import program_name


class PolicyError(ExecutorError):
    """The policy file cannot be used: the service refuses to start."""

    code = "invalid_policy_file"
    status = 500


PROGRAM = r"^[^\s]+$"


def parse_policy(text: str, source: str = "<policy>", names: Mapping[str, str] | None = None) -> Policy:
    """A policy from YAML text (``names``: key id -> name, what rules may call keys besides
    their ids); :class:`PolicyError` with the exact problem otherwise."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PolicyError(f"policy file {source}: not valid YAML: {exc}".replace("\n", " ")) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PolicyError(f"policy file {source}: expected a mapping with 'rules', got {type(data).__name__}")
    try:
        parsed = PolicyFile.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors(include_url=False)
        )
        raise PolicyError(f"policy file {source}: {problems}") from None
    for index, rule in enumerate(parsed.rules):
        for entry in [*(rule.allow or ()), *rule.deny]:
            if not re.match(PROGRAM, entry) or entry != program_name(entry):
                raise PolicyError(
                    f"policy file {source}: rules.{index}: {entry!r} is not a program name "
                    f"(write it as {program_name(entry)!r})"
                )
        if rule.key != "*" and rule.key != rule.key.lower():
            raise PolicyError(f"policy file {source}: rules.{index}.key: key ids are lower case: {rule.key!r}")
    rules = tuple(r.model_copy(update={"skill": r.skill.lower()}) for r in parsed.rules)
    return Policy(rules, source, dict(names or {}))


def load_policy(path: Path | None, names: Mapping[str, str] | None = None) -> Policy | None:
    """The policy file at ``path`` (None: no policy); ``names``: key id -> name."""
    if path is None:
        return None
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise PolicyError(f"policy file {path}: cannot be read: {exc.strerror or exc}") from None
    return parse_policy(text, str(path), names)
