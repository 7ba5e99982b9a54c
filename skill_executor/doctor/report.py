"""The report from the scan and the probe's answer (pure): each need found or not, what is
missing, whether the skill needs the network, the verdict."""

from __future__ import annotations

from typing import Any

from packaging.requirements import Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from ..envs import DependenciesUnmet
from ..preflight import PIP_REASON, ImageNeeds, locations, python_distribution
from ..skills import Skill
from .model import (
    NO_NETWORK,
    NO_NETWORK_LOCAL,
    CommandNeed,
    DoctorFinding,
    DoctorReport,
    FileNeed,
    Missing,
    Network,
    NetworkReason,
    NodeNeed,
    PackageNeed,
    PythonNeed,
    RuntimeNeed,
)
from .probe import NOT_CHECKED, PROBE_FAILED


def report(
    skill: Skill, image: str | None, needs: ImageNeeds, probed: dict[str, Any], findings: list[DoctorFinding]
) -> DoctorReport:
    """The report from the scan and the probe's answer (pure); names the probe did not
    check (over the bound) are left out."""
    found_commands: dict[str, str | None] = probed.get("commands", {})
    found_python: dict[str, bool | None] = probed.get("python", {})
    found_node: dict[str, bool | None] = probed.get("node", {})

    def flag(value: bool | None) -> bool | None:
        return None if value is None else bool(value)

    commands = [
        CommandNeed(
            name=n,
            found=None if found_commands[n] == NOT_CHECKED else found_commands[n] is not None,
            path=found_commands[n] or None,
            optional=needs.commands[n].optional,
            confidence="sure" if needs.commands[n].sure else "guess",
            used_in=locations(needs.commands[n].uses),
        )
        for n in sorted(needs.commands, key=lambda n: (not needs.commands[n].sure, n))
        if n in found_commands
    ]
    python = [
        PythonNeed(
            module=n,
            distribution_hint=python_distribution(n),
            found=flag(found_python[n]),
            optional=needs.python[n].optional,
            used_in=locations(needs.python[n].uses),
        )
        for n in sorted(needs.python)
        if n in found_python
    ]
    node = [
        NodeNeed(module=n, found=flag(found_node[n]), used_in=locations(needs.node[n]))
        for n in sorted(needs.node)
        if n in found_node
    ]
    found_packages: dict[str, str | None] = probed.get("packages", {})
    packages = [
        _package(requirement, need.sure, found_packages, locations(need.uses))
        for requirement, need in sorted(needs.packages.items())
        if distribution(requirement) in found_packages
    ]
    found_versions: dict[str, str | None] = probed.get("versions", {})
    runtimes = [
        RuntimeNeed(
            name=name,
            requires=spec,
            version=found_versions.get(name),
            found=None if name not in found_versions else _satisfies(spec, found_versions[name]),
            used_in=locations(uses),
        )
        for name in sorted(needs.runtimes)
        if name in ("node", "python")
        for spec, uses in sorted(needs.runtimes[name].items())
    ]
    missing = Missing(
        packages=[k.requirement for k in packages if k.found is False and k.confidence == "sure"],
        commands=[c.name for c in commands if c.found is False and not c.optional and c.confidence == "sure"],
        guessed=[c.name for c in commands if c.found is False and not c.optional and c.confidence == "guess"],
        python=[p.module for p in python if p.found is False and not p.optional],
        node=[m.module for m in node if m.found is False],
        runtimes=[f"{r.name}{r.requires}" for r in runtimes if r.found is False],
        files=sorted(needs.files),
    )
    # A `pip install` line whose every package the sandbox has downloads nothing.
    satisfied = {use for k in packages if k.found for use in k.used_in} - {
        use for k in packages if not k.found for use in k.used_in
    }
    reasons = [r for r in needs.network if not (r.why == PIP_REASON and f"{r.file}:{r.line}" in satisfied)]
    levels = {r.level for r in reasons}
    network = Network(
        needed="yes" if "yes" in levels else "maybe" if levels else "no",
        reasons=[NetworkReason(file=r.file, line=r.line, why=r.why, level=r.level) for r in reasons],
        note=NO_NETWORK if image is not None else NO_NETWORK_LOCAL,
    )
    unchecked = any(f.code in (DependenciesUnmet.code, PROBE_FAILED) for f in findings)
    ok = (
        not (
            missing.commands
            or missing.python
            or missing.node
            or missing.packages
            or missing.files
            or missing.runtimes
            or unchecked
        )
        and network.needed != "yes"
    )
    return DoctorReport(
        skill=skill.id,
        image=image,
        commands=commands,
        python=python,
        packages=packages,
        node=node,
        runtimes=runtimes,
        files=[FileNeed(path=f, used_in=locations(needs.files[f])) for f in sorted(needs.files)],
        missing=missing,
        network=network,
        findings=findings,
        ok=ok,
    )


def _satisfies(spec: str, version: str | None) -> bool:
    if version is None:
        return False
    try:
        return SpecifierSet(spec).contains(version, prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return False


def distribution(requirement: str) -> str:
    return Requirement(requirement).name


def _package(requirement: str, sure: bool, found: dict[str, str | None], used_in: list[str]) -> PackageNeed:
    """Whether the sandbox's version of ``requirement``'s distribution satisfies it."""
    version = found[distribution(requirement)]
    if version == NOT_CHECKED:
        ok, version = None, None
    elif version is None:
        ok = False
    else:
        try:
            ok = Requirement(requirement).specifier.contains(Version(version), prereleases=True)
        except InvalidVersion:
            ok = False
    return PackageNeed(
        requirement=requirement, found=ok, version=version, confidence="sure" if sure else "guess", used_in=used_in
    )
