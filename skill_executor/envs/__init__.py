"""Per-skill dependency environments: what a skill declares (:mod:`.declared`), what the
runner image already has and the key of the rest (:mod:`.plan`), and the content-addressed
environments resolved on the host, never in a run (:mod:`.store`)."""

from ..skills.requirements import normalise_requirement, safe_npm_spec, safe_python_need
from .declared import (
    DependenciesUnmet,
    Needs,
    RefusedNeed,
    declared,
    parse_package_json,
    parse_pyproject,
    parse_requirements,
    parse_script,
    signature,
    with_documented,
)
from .plan import EnvPlan, ImagePackages, Sources, env_key, npm_range_accepts, plan
from .shared import MANIFEST
from .store import Mode, SkillEnvs

__all__ = [
    "MANIFEST",
    "DependenciesUnmet",
    "EnvPlan",
    "RefusedNeed",
    "ImagePackages",
    "Mode",
    "Needs",
    "SkillEnvs",
    "Sources",
    "declared",
    "env_key",
    "normalise_requirement",
    "npm_range_accepts",
    "parse_package_json",
    "parse_pyproject",
    "parse_requirements",
    "parse_script",
    "plan",
    "safe_npm_spec",
    "safe_python_need",
    "signature",
    "with_documented",
]
