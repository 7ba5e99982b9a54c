"""Reading the policy file (``SKILL_EXECUTOR_POLICY_FILE``): YAML in, a :class:`Policy` out, or
the exact problem that stops the service from starting."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import yaml
from pydantic import ValidationError

from ..access import key_names
from ..config import Settings
from ..errors import ExecutorError
from .egress import egress_problems, parse_host
from .rules import Policy, PolicyFile, Rule
from .secretsfile import Secrets, load_secrets
from .vocabulary import program_name


class PolicyError(ExecutorError):
    """The policy file cannot be used: the service refuses to start."""

    code = "invalid_policy_file"
    status = 500


PROGRAM = r"^[^\s]+$"


def parse_policy(
    text: str, source: str = "<policy>", names: Mapping[str, str] | None = None, secrets: Secrets | None = None
) -> Policy:
    """A policy from YAML text (``names``: key id -> name, what rules may call keys besides
    their ids; ``secrets``: the secrets file, which every ``{secret:NAME}`` of an egress block
    must name); :class:`PolicyError` with the exact problem otherwise."""
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
        if rule.egress is not None:
            found = egress_problems(rule.egress, secrets.names if secrets is not None else None)
            if found:
                where, problem = found[0]
                raise PolicyError(f"policy file {source}: rules.{index}.egress.{where}: {problem}")
    rules = tuple(_normalised(r) for r in parsed.rules)
    return Policy(rules, source, dict(names or {}), secrets)


def _normalised(rule: Rule) -> Rule:
    update: dict[str, object] = {"skill": rule.skill.lower()}
    if rule.egress is not None:
        hosts = [h.text for h in rule.egress.hosts()]
        inject = [i.model_copy(update={"host": parse_host(i.host).text}) for i in rule.egress.inject]
        update["egress"] = rule.egress.model_copy(update={"allow": hosts, "inject": inject})
    return rule.model_copy(update=update)


def load_policy(
    path: Path | None, names: Mapping[str, str] | None = None, secrets: Secrets | None = None
) -> Policy | None:
    """The policy file at ``path`` (None: no policy); ``names``: key id -> name; ``secrets``:
    the secrets file (:func:`~.secretsfile.load_secrets`)."""
    if path is None:
        return None
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise PolicyError(f"policy file {path}: cannot be read: {exc.strerror or exc}") from None
    return parse_policy(text, str(path), names, secrets)


def policy_of(settings: Settings) -> Policy | None:
    """The service's policy: ``SKILL_EXECUTOR_POLICY_FILE`` with the key names of
    ``SKILL_EXECUTOR_API_KEYS_FILE`` and the secrets of ``SKILL_EXECUTOR_SECRETS_FILE``, each
    read once; a file that cannot be used refuses the start (:class:`PolicyError`,
    :class:`~.secretsfile.SecretsError`) with its exact problem."""
    secrets = load_secrets(settings.secrets_file)
    return load_policy(settings.policy_file, key_names(settings.api_keys_file), secrets)
