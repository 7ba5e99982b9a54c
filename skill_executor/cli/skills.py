"""``skill-executor skills ...``: validate, list, prompt, show, search, doctor, install."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..config import Settings
from ..envs import SkillEnvs
from ..errors import ExecutorError
from ..registry import SkillRepository
from ..registry.roots import check_layout
from ..registry.store import Registry
from ..skills import (
    SkillLoadError,
    check,
    docs,
    expand_placeholders,
    inventory,
    load_skill,
    render_text,
    render_xml,
    sandbox_dir,
)
from . import registry
from .arguments import existing_dir
from .output import emit_json


def register(groups: Any) -> None:
    group = groups.add_parser("skills", help="inspect, validate and install skills")
    commands = group.add_subparsers(dest="command", required=True, metavar="SUBCOMMAND")

    validate = commands.add_parser("validate", help="check skills against the agentskills.io rules")
    validate.add_argument("paths", nargs="+", metavar="PATH", help="a skill directory or its SKILL.md")
    validate.add_argument("--strict", action="store_true", help="spec violations are errors, not warnings")
    validate.add_argument("--json", action="store_true", help="print a JSON array, one object per PATH")
    validate.set_defaults(handler=_validate)

    list_ = commands.add_parser("list", help="discover skills under roots")
    _roots(list_)
    list_.add_argument("--json", action="store_true")
    list_.add_argument("--all", action="store_true", help="include skills hidden from the overview")
    list_.set_defaults(handler=_list)

    prompt = commands.add_parser("prompt", help="render the overview for skills, in argument order")
    prompt.add_argument("paths", nargs="+", metavar="PATH")
    prompt.add_argument("--format", choices=("xml", "text"), default="xml")
    prompt.set_defaults(handler=_prompt)

    show = commands.add_parser(
        "show", help="load one skill: body (placeholders such as {baseDir} replaced) and file inventory"
    )
    show.add_argument("name")
    _roots(show)
    show.add_argument(
        "--runtime",
        choices=("docker", "local"),
        default=None,
        help="whose view of the skill folder replaces {baseDir}, ${CLAUDE_SKILL_DIR}, <path-to-skill> "
        "(default: SKILL_EXECUTOR_RUNTIME)",
    )
    show.add_argument("--raw", action="store_true", help="the body as written, placeholders kept")
    show.set_defaults(handler=_show)

    search = commands.add_parser("search", help="rank skills for a query")
    search.add_argument("query")
    _roots(search)
    search.add_argument("--limit", type=int, default=10)
    search.set_defaults(handler=_search)

    doctor = commands.add_parser(
        "doctor",
        help="preflight: the commands, Python imports and Node modules a skill uses, which the image "
        "(plus the skill's environment) has, and whether it needs the network",
        description="Exit status: 0 ok, 1 something required is missing or the skill needs the network, "
        "2 refused (unknown skill, ...).",
    )
    doctor.add_argument("name")
    doctor.add_argument(
        "--root",
        dest="skills_dirs",
        type=existing_dir,
        action="append",
        help="a skills root (repeatable; default: SKILL_EXECUTOR_SKILLS_DIRS)",
    )
    doctor.add_argument(
        "--runtime",
        choices=("docker", "local"),
        default=None,
        help="whose sandbox to probe (default: SKILL_EXECUTOR_RUNTIME)",
    )
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.set_defaults(handler=_doctor)

    install = commands.add_parser("install", help="install a skill from a .zip or .tar.gz")
    install.add_argument("package", type=Path)
    install.add_argument(
        "--root",
        type=Path,
        default=None,
        help="the install root (default: SKILL_EXECUTOR_INSTALL_DIR, else <SKILL_EXECUTOR_DATA_DIR>/skills); "
        "never one of SKILL_EXECUTOR_SKILLS_DIRS, whose skills it may not shadow either",
    )
    install.add_argument("--strict", action="store_true", help="refuse packages that break the spec")
    install.set_defaults(handler=_install)

    registry.register(commands)  # push, versions, pin, pull: a service's registry


def _roots(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--root", dest="roots", type=existing_dir, action="append", required=True, help="a skills root (repeatable)"
    )


def _validate(args: argparse.Namespace) -> int:

    verdicts = [check(Path(p), strict=args.strict) for p in args.paths]
    if args.json:
        emit_json([v.to_dict() for v in verdicts])
    else:
        for verdict in verdicts:
            status = "valid" if verdict.valid else "INVALID"
            print(f"{verdict.path}: {status}" + (f" ({verdict.name})" if verdict.name else ""))
            for diag in verdict.errors:
                print(f"  error   {diag.code}: {diag.message}")
            for diag in verdict.warnings:
                print(f"  warning {diag.code}: {diag.message}")
    return 0 if all(v.valid for v in verdicts) else 1


def _list(args: argparse.Namespace) -> int:

    catalog = SkillRepository(args.roots).reload()
    skills = catalog.skills if args.all else catalog.visible()
    if args.json:
        emit_json(
            {
                "skills": [
                    {
                        "name": s.name,
                        "id": s.id,
                        "description": s.description,
                        "path": str(s.path),
                        "warnings": [d.to_dict() for d in s.warnings],
                    }
                    for s in skills
                ],
                "rejected": [r.to_dict() for r in catalog.rejected],
            }
        )
        return 0
    for skill in skills:
        note = f"  [{len(skill.warnings)} warning(s)]" if skill.warnings else ""
        print(f"{skill.id}\t{skill.path}{note}")
    for rejected in catalog.rejected:
        print(f"REJECTED\t{rejected.to_dict()['path']}: {rejected.diagnostics[0].message}", file=sys.stderr)
    return 0


def _prompt(args: argparse.Namespace) -> int:
    try:
        skills = [load_skill(Path(p)) for p in args.paths]
    except SkillLoadError as exc:
        print(f"skill-executor: {exc}", file=sys.stderr)
        return 1
    print(render_xml(skills) if args.format == "xml" else render_text(skills))
    return 0


def _show(args: argparse.Namespace) -> int:

    skill = SkillRepository(args.roots).get(args.name)
    files = inventory(skill)
    body = skill.body if args.raw else expand_placeholders(skill.body, sandbox_dir(skill, _visible(args.runtime)))
    emit_json(
        {
            "name": skill.name,
            "id": skill.id,
            "description": skill.description,
            "path": str(skill.path),
            "body": body,
            "body_tokens": skill.body_tokens,
            "docs": [f.path for f in docs(files)],
            "files": [{"path": f.path, "size": f.size, "kind": f.kind} for f in files],
            "warnings": [d.to_dict() for d in skill.warnings],
        }
    )
    return 0


def _visible(runtime: str | None) -> str | None:
    """Where runs of ``runtime`` (default: the configured one) see the skills."""
    if (runtime or Settings().runtime) == "docker":
        from ..runtimes.docker import DockerRuntime

        return DockerRuntime.visible_skills_dir
    from ..runtimes.local import LocalRuntime

    return LocalRuntime.visible_skills_dir


def _search(args: argparse.Namespace) -> int:
    hits = SkillRepository(args.roots).search(args.query, args.limit)
    emit_json(
        [{"id": h.skill.id, "name": h.skill.name, "score": h.score, "description": h.skill.description} for h in hits]
    )
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from ..core import Executor
    from ..doctor import diagnose, render_table

    overrides: dict[str, Any] = {"pool_size": 0}  # one probe per process: warm containers would only cost
    if args.skills_dirs:
        overrides["skills_dirs"] = args.skills_dirs
    if args.runtime:
        overrides["runtime"] = args.runtime
    executor = Executor.from_settings(Settings(**overrides))
    try:
        report = diagnose(executor, args.name)
    finally:
        executor.close()
    if args.json:
        emit_json(report.model_dump(mode="json"))
    else:
        print(render_table(report))
    return 0 if report.ok else 1


def _install(args: argparse.Namespace) -> int:
    from ..core import open_database

    try:
        data = args.package.read_bytes()
    except OSError as exc:
        print(f"skill-executor: cannot read {args.package}: {exc.strerror}", file=sys.stderr)
        return 2
    try:
        settings = Settings()
        install_root = args.root or settings.install_root
        private = [settings.registry_dir, settings.data_dir, settings.workspaces]
        check_layout(settings.skills_dirs, install_root, private)
        database = open_database(settings)
        try:
            repository = SkillRepository(
                settings.skills_dirs,
                install_root=install_root,
                deps=SkillEnvs.from_settings(settings),
                registry=Registry(settings.registry_dir, database=database),
                service_dirs=private,
            )
            result = repository.install(data, strict=args.strict)
        finally:
            database.close()
    except ExecutorError as exc:
        print(f"skill-executor: {exc.code}: {exc.message}", file=sys.stderr)
        for item in exc.details.get("unmet", []) if exc.code == "skill_dependencies_unmet" else []:
            print(f"  unmet: {item.get('need')} ({item.get('source')}): {item.get('error')}", file=sys.stderr)
        for line in exc.details.get("log", []) if exc.code == "skill_dependencies_unmet" else []:
            print(f"  | {line}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(
            f"skill-executor: cannot install into {exc.filename or 'the install root'}: {exc.strerror}", file=sys.stderr
        )
        return 1
    emit_json(
        {
            "id": result.skill.id,
            "path": str(result.skill.path),
            "replaced": result.replaced,
            "version": result.version.number if result.version else None,
            "digest": result.version.digest if result.version else None,
            "files": [{"path": f.path, "size": f.size, "kind": f.kind} for f in result.files],
            "warnings": [d.to_dict() for d in result.skill.warnings],
        }
    )
    return 0
