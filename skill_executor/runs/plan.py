"""What a ``skill_run`` request means, checked before anything exists.

:func:`check_request` refuses everything that can be refused up front (unknown skill,
timeout, sizes, environment, ``cwd`` syntax, output caps) and settles the run's
:class:`RunPlan`; :func:`resolve_cwd` places the command's working folder once the
workspace exists.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from ..access import LOCAL_TENANT
from ..config import Settings
from ..errors import BadRequest, NotFound, TooLarge
from ..outputs.collect import CollectLimits, resolve_globs
from ..outputs.naming import DEFAULT_TEMPLATE, NameTemplate
from ..paths import clean_relative, resolve_within
from ..policy import ALLOWED, Decision, NetworkPlan
from ..registry import SkillRepository
from ..registry.bundles import BundleStore
from ..skills import Skill
from ..workspace.layout import Workspace, expand_path_variable
from .models import RunRequest

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: The kernel's limit for one ``NAME=value`` string (MAX_ARG_STRLEN, its NUL included).
MAX_ENV_ENTRY_BYTES = 128 * 1024 - 1
FORBIDDEN_ENV = frozenset({"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "BASH_ENV", "ENV"})
RESERVED_ENV = frozenset(
    {"WORKSPACE_DIR", "SKILLS_DIR", "SKILL_DIR", "SKILL_NAME", "WORK_DIR", "OUTPUT_DIR", "RUN_DIR"}
)


@dataclass(slots=True)
class OutputPlan:
    globs: list[str]
    inline: bool
    inline_binary: bool
    save: bool
    name_template: NameTemplate
    limits: CollectLimits


@dataclass(frozen=True, slots=True)
class RunPlan:
    """What :func:`check_request` settled about a request (reused when it runs)."""

    skill: Skill
    timeout: float
    outputs: OutputPlan
    #: other skills the run sees beside its own, read-only (asked for, or referred to as ../<name>/)
    siblings: tuple[Skill, ...] = ()
    #: the skill came with the request (an inline bundle), not from the catalog
    bundled: bool = False
    #: what the command policy said (:func:`skill_executor.policy.check`)
    decision: Decision = ALLOWED
    #: what the run may reach through the egress gateway (:func:`skill_executor.policy.network_plan`;
    #: None: no network)
    network: NetworkPlan | None = None


def check_request(
    request: RunRequest,
    settings: Settings,
    repository: SkillRepository,
    *,
    bundles: BundleStore | None = None,
    tenant: str = LOCAL_TENANT,
) -> RunPlan:
    """Everything that can be refused before a workspace exists. Pure: a request's inline
    bundle is named by its digest (installed by admission: :func:`~skill_executor.registry.
    bundles.installed`), and only read here."""
    s = settings
    _check_text(request.model_dump(by_alias=True), "request")
    skill = _skill(request, settings, repository, bundles, tenant)
    timeout = request.timeout if request.timeout is not None else s.default_timeout
    if timeout > s.max_timeout:
        raise BadRequest(
            f"timeout {timeout:g}s exceeds the server maximum of {s.max_timeout:g}s", code="timeout_too_large"
        )
    if len(request.command.encode()) > s.max_command_bytes:
        raise TooLarge(f"command is longer than {s.max_command_bytes} bytes", code="command_too_large")
    if "\x00" in request.command:
        raise BadRequest("command contains a NUL byte", code="invalid_command")
    if request.stdin is not None and len(request.stdin.encode()) > s.max_stdin_bytes:
        raise TooLarge(f"stdin is larger than {s.max_stdin_bytes} bytes", code="stdin_too_large")
    check_env(request.env, s)
    if len(request.inputs) > s.max_inputs:
        raise BadRequest(f"at most {s.max_inputs} inputs per run", code="too_many_inputs")
    if request.cwd is not None:
        cwd_logical(request.cwd)
    siblings = _siblings(skill, request.with_skills, repository, request.command)
    return RunPlan(skill, timeout, _output_plan(request, s), siblings, bundled=request.bundle is not None)


#: A sibling a SKILL.md refers to: ``../<name>/`` (obra's skills say ``../other-skill/SKILL.md``).
_SIBLING_REFERENCE = re.compile(r"\.\./([A-Za-z0-9][A-Za-z0-9._-]{0,63})/")
#: A sibling the run's command names: ``../<name>`` as a whole argument or path prefix
#: (``./render-graphs.js ../some-skill``, as obra's writing-skills tells an agent).
_COMMAND_SIBLING = re.compile(r"""(?:^|[\s'"=])\.\./([A-Za-z0-9][A-Za-z0-9._-]{0,63})(?=$|[/\s'";|&)])""")
#: At most this many skills referred to in a SKILL.md (and its run's command) are brought beside it.
MAX_REFERRED_SKILLS = 16


def _siblings(skill: Skill, asked: list[str], repository: SkillRepository, command: str = "") -> tuple[Skill, ...]:
    """The skills asked for (unknown ones refused, ``skill_not_found``), then those the
    skill's SKILL.md refers to as ``../<name>/`` and the command as ``../<name>`` that exist
    (others are ignored)."""
    found: dict[str, Skill] = {}
    for name in asked:
        other = repository.get(name)
        if other.id != skill.id:
            found.setdefault(other.id, other)
    referred = dict.fromkeys(m.group(1) for m in _SIBLING_REFERENCE.finditer(skill.raw))
    referred |= dict.fromkeys(m.group(1) for m in _COMMAND_SIBLING.finditer(command))
    for name in list(referred)[:MAX_REFERRED_SKILLS]:
        if name.lower() == skill.id or name.lower() in found:
            continue
        try:
            other = repository.get(name)
        except NotFound:
            continue
        found.setdefault(other.id, other)
    return tuple(found.values())


def _skill(
    request: RunRequest, settings: Settings, repository: SkillRepository, bundles: BundleStore | None, tenant: str
) -> Skill:
    """The installed skill a request names, or the one its bundle holds (which ``skill``, when
    given, must name: 400 ``name_mismatch``)."""
    bundle = request.bundle
    if bundle is None:
        assert request.skill is not None  # RunRequest: a skill or a bundle
        return repository.get(request.skill)
    if bundles is None:
        raise BadRequest("this service runs no inline bundles", code="invalid_bundle")
    if bundle.digest is None:  # pragma: no cover - admission installs every bundle first
        raise BadRequest("an inline bundle is installed before its run is planned", code="invalid_bundle")
    skill = bundles.get(tenant, bundle.digest)
    if request.skill is not None and request.skill.lower() not in (skill.id.lower(), skill.name.lower()):
        raise BadRequest(
            f"the bundle is the skill {skill.id!r}, not {request.skill!r}; name its skill or leave skill out",
            code="name_mismatch",
        )
    return skill


def check_env(env: dict[str, str], settings: Settings) -> None:
    """A request's environment variables (a run's, a process's), or why not."""
    if len(env) > settings.max_env_vars:
        raise BadRequest(f"at most {settings.max_env_vars} environment variables", code="invalid_env")
    total = 0
    for name, value in env.items():
        if not ENV_NAME.match(name) or len(name) > 1024:
            raise BadRequest(f"invalid environment variable name {name[:64]!r}", code="invalid_env")
        if name in FORBIDDEN_ENV:
            raise BadRequest(f"environment variable {name} is not allowed", code="env_refused")
        if name in RESERVED_ENV:
            raise BadRequest(f"environment variable {name} is set by the service", code="env_refused")
        if "\x00" in value:
            raise BadRequest(f"environment variable {name} contains a NUL byte", code="invalid_env")
        size = len(name.encode()) + 1 + len(value.encode("utf-8", "surrogatepass"))
        if size > MAX_ENV_ENTRY_BYTES:
            raise TooLarge(
                f"environment variable {name} is {size} bytes; the most one variable may hold is "
                f"{MAX_ENV_ENTRY_BYTES} bytes",
                code="env_too_large",
            )
        total += size + 1
    if total > settings.max_env_bytes:
        raise TooLarge(
            f"the environment variables take {total} bytes; the most is {settings.max_env_bytes}",
            code="env_too_large",
        )


def _output_plan(request: RunRequest, s: Settings) -> OutputPlan:
    spec = request.outputs
    raw_globs = [*(spec.globs if spec else []), *request.output_files]
    limits = CollectLimits(
        max_files=spec.max_files if spec else 100,
        max_file_bytes=spec.max_file_bytes if spec else 4 * 1024 * 1024,
        max_total_bytes=spec.max_total_bytes if spec else 64 * 1024 * 1024,
    )
    for field, asked, most in (
        ("max_files", limits.max_files, s.max_output_files),
        ("max_file_bytes", limits.max_file_bytes, s.max_output_file_bytes),
        ("max_total_bytes", limits.max_total_bytes, s.max_output_total_bytes),
    ):
        if asked > most:
            raise BadRequest(f"outputs.{field} {asked} exceeds the server maximum of {most}", code="output_caps")
    template = NameTemplate.parse((spec.name_template if spec else None) or DEFAULT_TEMPLATE)
    return OutputPlan(
        globs=resolve_globs(raw_globs),
        inline=(spec.inline if spec else True) and not request.omit_inline_content,
        inline_binary=bool(spec and spec.inline_binary) and not request.omit_inline_content,
        save=bool(spec and spec.save) or request.save_as_artifacts,
        name_template=template,
        limits=limits,
    )


def cwd_logical(cwd: str) -> tuple[str, PurePosixPath]:
    """("skill" | "workspace", relative path) for a request's cwd."""
    expanded = expand_path_variable(cwd)
    if expanded is not None:
        return "workspace", clean_relative(expanded, what="cwd", allow_empty=True)
    return "skill", clean_relative(cwd, what="cwd", allow_empty=True)


def resolve_cwd(cwd: str | None, workspace: Workspace, skill: Skill, visible_root: str) -> str:
    """Where the command starts, as the command sees it; checked without following links."""
    root = visible_root.rstrip("/")
    skill_root = f"{root}/skills/{workspace.skill_id}"
    if cwd is None:
        return skill_root
    kind, rel = cwd_logical(cwd)
    if kind == "workspace" or rel.parts[0] in ("out", "work", "inputs"):
        if str(rel) == ".":
            return root
        logical = workspace.logical(str(rel), what="cwd")
        top, rest = workspace.locate(logical, what="cwd")
        with workspace.tree(top) as tree:
            if not tree.is_dir(rest, what=f"cwd {cwd!r}"):
                raise BadRequest(f"cwd {cwd!r} is not a folder in the workspace", code="invalid_cwd")
        return f"{root}/{logical}"
    if str(rel) == ".":
        return skill_root
    source = resolve_within(skill.path, rel, what="cwd")
    if not source.is_dir():
        raise BadRequest(f"cwd {cwd!r} is not a folder of the skill", code="invalid_cwd")
    return f"{skill_root}/{rel}"


def _check_text(value: object, where: str) -> None:
    """Every string of a request must be encodable as UTF-8 (JSON can carry lone surrogates)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            message = f"{where} is not valid Unicode text (it holds a lone surrogate)"
            raise BadRequest(message, code="invalid_text") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_text(key, f"{where} key")
            _check_text(item, f"{where}.{key}" if isinstance(key, str) and key.isprintable() else where)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_text(item, f"{where}[{index}]")
