"""Preflight: what a skill needs from its image, and whether the image has it.

:func:`diagnose` scans the skill (:mod:`skill_executor.preflight`, static), then runs ONE
probe in the sandbox through the normal run pipeline -- so the skill's own environment
is part of the answer -- that looks for every command (``shutil.which``, as
``command -v``), Python module (``importlib.util.find_spec`` over the run's import path:
the skill folder, the run's ``PYTHONPATH``, the image's site-packages) and Node module
(``require.resolve`` from the skill folder with the run's ``NODE_PATH``), and prints JSON.

Nothing of the skill runs in the probe: Python starts isolated (``python3 -I -S``: no
``PYTHONPATH``, working directory or user site on its own path, so no ``sitecustomize.py``,
``json.py`` or ``.pth`` of the skill is imported), adds the image's site-packages itself
and looks the skill's paths up as data; Node starts from ``/`` with only ``PATH`` and
``NODE_PATH``.  The names come from untrusted skills: they travel as JSON on the probe's
stdin, never through a shell.  The answer is untrusted data too (:func:`parse_answer`:
bounded, strictly typed, exactly the names asked); anything else is a failed probe -- a
``doctor_probe_failed`` finding and ``ok: false``, never trusted and never a 5xx.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from packaging.requirements import Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, ValidationError

from .access import LOCAL, Principal
from .envs import DependenciesUnmet
from .errors import ExecutorError
from .preflight import PIP_REASON, ImageNeeds, locations, python_distribution, scan
from .runs.models import RunRequest
from .skills import Skill

if TYPE_CHECKING:
    from .core import Executor
    from .lifecycle.manager import RunManager

#: At most this many names (commands, modules) are probed; the rest is reported as not checked.
MAX_PROBE_NAMES = 500
#: Seconds the probe may take (capped by the server's maximum run timeout).
PROBE_TIMEOUT = 60.0

#: A command the probe did not check (no run could start).
NOT_CHECKED = ""
#: The most of the probe's output that is parsed (an answer is a few KiB per 100 names).
MAX_ANSWER_BYTES = 4 * 1024 * 1024
#: The finding of a probe that failed or answered something that is not an answer.
PROBE_FAILED = "doctor_probe_failed"

#: Network reasons the table shows (the JSON has them all).
TABLE_REASONS = 10

NO_NETWORK = "runs have no network access: whatever needs it fails at run time unless the image provides it"
NO_NETWORK_LOCAL = "the local runtime (development only) has the host's network; runs of the Docker runtime have none"

#: Looks for Node modules the way ``require`` would from the skill folder (NODE_PATH
#: included); a package whose entry point is not ``require``-able (ESM only, types only)
#: counts when its folder is on a lookup path.  Started from ``/``: the skill folder is
#: data (``dir`` on stdin), resolution only reads its ``package.json`` files.
NODE_PROBE = r"""
const fs = require('fs'), path = require('path'), Module = require('module');
let input = '';
process.stdin.on('data', d => input += d).on('end', () => {
  const {dir, names} = JSON.parse(input), found = {};
  const dirs = [...Module._nodeModulePaths(dir),
                ...(process.env.NODE_PATH || '').split(path.delimiter).filter(Boolean),
                ...(Module.globalPaths || [])];
  for (const name of names) {
    let ok = false;
    try { require.resolve(name, {paths: [dir]}); ok = true; } catch (e) {
      ok = dirs.some(d => fs.existsSync(path.join(d, name, 'package.json')));
    }
    found[name] = ok;
  }
  process.stdout.write(JSON.stringify(found));
});
"""

#: Runs in the sandbox as ``python3 -I -S`` with the names as JSON on stdin; prints one
#: JSON object.  Only the standard library and the image's site set-up run in it.
PROBE = r"""
import sys
sys.dont_write_bytecode = True
import importlib.util, json, os, shutil, site, subprocess
names = json.loads(sys.stdin.read(MAX_INPUT))
skill = os.getcwd()
out = {"commands": {}, "python": {}, "node": {}, "errors": [], "versions": {}}
if "python" in names.get("versions", []):
    import platform
    out["versions"]["python"] = platform.python_version()
if "node" in names.get("versions", []):
    node, out["versions"]["node"] = shutil.which("node"), None
    try:
        if node:
            done = subprocess.run([node, "--version"], cwd="/", capture_output=True, text=True, timeout=10)
            out["versions"]["node"] = done.stdout.strip().lstrip("v")[:40] if done.returncode == 0 else None
    except Exception:
        pass
for name in names["commands"]:
    out["commands"][name] = shutil.which(name)
site.main()  # the image's site-packages (-I: none of the user's, nothing of the skill)
sys.path[:0] = [skill, *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
for name in names["python"]:
    try:  # a top-level name only: find_spec imports the parents of a dotted one
        out["python"][name] = name.isidentifier() and importlib.util.find_spec(name) is not None
    except Exception:
        out["python"][name] = False
import importlib.metadata
out["packages"] = {}
for name in names.get("packages", []):  # a distribution's name: its installed version, or None
    try:
        out["packages"][name] = importlib.metadata.version(name)
    except Exception:
        out["packages"][name] = None
if names["node"]:
    node = shutil.which("node")
    if node is None:
        out["errors"].append("node is not on PATH: no Node module can be loaded")
        out["node"] = {name: False for name in names["node"]}
    else:
        try:
            env = {k: os.environ[k] for k in ("PATH", "NODE_PATH") if k in os.environ}
            done = subprocess.run([node, "-e", names["node_probe"]], cwd="/", env=env,
                                  input=json.dumps({"dir": skill, "names": names["node"]}),
                                  capture_output=True, text=True, timeout=names["node_timeout"])
            found = json.loads(done.stdout[:MAX_INPUT])
            out["node"] = {name: found.get(name) is True for name in names["node"]}
        except Exception as exc:
            out["errors"].append(f"the Node probe failed: {type(exc).__name__}")
            out["node"] = {name: False for name in names["node"]}
print("\n" + json.dumps(out))
""".replace("MAX_INPUT", str(MAX_ANSWER_BYTES))


class CommandNeed(BaseModel):
    name: str
    found: bool | None = Field(description="null: not checked (no run could start; see findings)")
    path: str | None = Field(default=None, description="where the sandbox finds it")
    optional: bool = Field(
        default=False, description="only looked for (shutil.which, command -v) or run in try/except FileNotFoundError"
    )
    confidence: Literal["sure", "guess"] = Field(
        default="sure",
        description="sure: run by the skill's code or a shell block of its docs; guess: every use is read from "
        "prose (an untagged block, a line the shell parser could not read, an installer's line in the docs)",
    )
    used_in: list[str] = Field(description="file:line of each use")


class PythonNeed(BaseModel):
    module: str = Field(description="the top-level import name")
    distribution_hint: str | None = Field(default=None, description="the usual distribution, when named otherwise")
    found: bool | None = Field(description="null: not checked (no run could start; see findings)")
    optional: bool = Field(description="every import of it is guarded (try/except ImportError, TYPE_CHECKING)")
    used_in: list[str]


class PackageNeed(BaseModel):
    requirement: str = Field(description="what a `pip install` line of the skill installs (normalised)")
    found: bool | None = Field(description="installed and satisfying the requirement; null: not checked")
    version: str | None = Field(default=None, description="the version the sandbox has")
    confidence: Literal["sure", "guess"] = Field(default="sure", description="as for commands")
    used_in: list[str]


class NodeNeed(BaseModel):
    module: str
    found: bool | None = Field(description="null: not checked (no run could start; see findings)")
    used_in: list[str]


class FileNeed(BaseModel):
    path: str = Field(description="a script the skill's instructions run, relative to the skill, that it does not hold")
    used_in: list[str] = Field(description="file:line of each instruction running it")


class RuntimeNeed(BaseModel):
    name: str = Field(description="`node` or `python`")
    requires: str = Field(description="the version asked for, as a specifier (`>=22`)")
    version: str | None = Field(default=None, description="the sandbox's (null: absent, or not checked)")
    found: bool | None = Field(description="the sandbox's version satisfies it; null: not checked")
    used_in: list[str] = Field(description="file:line: requires-python, engines.node, the docs' prose")


class Missing(BaseModel):
    commands: list[str] = Field(
        default_factory=list, description="required commands the skill surely runs (optional ones and guesses are not)"
    )
    guessed: list[str] = Field(
        default_factory=list,
        description="commands not found whose every use is a guess (read from prose): not counted in ok",
    )
    python: list[str] = Field(default_factory=list, description="required modules only (optional ones are not)")
    packages: list[str] = Field(
        default_factory=list,
        description="what `pip install` lines (sure ones) install that the sandbox does not have: runs cannot fetch it",
    )
    node: list[str] = Field(default_factory=list)
    runtimes: list[str] = Field(
        default_factory=list,
        description="interpreter versions the skill asks for that the sandbox's do not satisfy (`node>=22`)",
    )
    files: list[str] = Field(
        default_factory=list,
        description="scripts the instructions run by the skill's own path ({baseDir}/..., scripts/... in SKILL.md) "
        "that the skill does not hold (code left beside it in its repository, a renamed script)",
    )


class NetworkReason(BaseModel):
    file: str
    line: int
    why: str
    level: Literal["yes", "maybe"]


class Network(BaseModel):
    needed: Literal["yes", "maybe", "no"]
    reasons: list[NetworkReason] = Field(default_factory=list)
    note: str = NO_NETWORK


class DoctorFinding(BaseModel):
    code: str
    message: str
    file: str | None = None
    line: int | None = None


class DoctorReport(BaseModel):
    """What a skill needs, what the image (plus the skill's environment) has, what is missing."""

    skill: str
    image: str | None = Field(description="the runner image probed (None: the local runtime, the host)")
    commands: list[CommandNeed]
    python: list[PythonNeed]
    packages: list[PackageNeed] = Field(default_factory=list)
    node: list[NodeNeed]
    runtimes: list[RuntimeNeed] = Field(default_factory=list)
    files: list[FileNeed] = Field(default_factory=list)
    missing: Missing
    network: Network
    findings: list[DoctorFinding]
    ok: bool = Field(description="nothing required is missing and the skill does not need the network")


def diagnose(
    executor: Executor, name: str, *, principal: Principal = LOCAL, runs: RunManager | None = None
) -> DoctorReport:
    """Scan skill ``name`` and probe its sandbox (one run of ``principal`` through ``runs``, the
    service's run manager, or else the executor's front door). Blocking: call it off an event loop."""
    skill = executor.repository.get(name)
    needs = scan(skill, max_bytes=executor.settings.max_file_read_bytes)
    findings = [DoctorFinding(code=n.code, message=n.message, file=n.file, line=n.line) for n in needs.notes]
    commands, python, node, packages = _bounded(needs, findings)
    versions = sorted(needs.runtimes)
    probed: dict[str, Any] = {"commands": {}, "python": {}, "node": {}, "packages": {}, "versions": {}}
    if commands or python or node or packages or versions:  # nothing to look for: no run
        unchecked = {
            "commands": dict.fromkeys(commands, NOT_CHECKED),
            "python": dict.fromkeys(python),
            "node": dict.fromkeys(node),
            "packages": dict.fromkeys(packages, NOT_CHECKED),
        }
        try:
            probed = _probe(
                executor, runs or executor.runs(), skill, commands, python, node, packages, principal, versions
            )
        except ExecutorError as exc:  # no run can start: say so, and what the scan found
            if exc.code != DependenciesUnmet.code:
                raise
            unmet = exc.details.get("unmet") if isinstance(exc.details, dict) else None
            findings.append(DoctorFinding(code=exc.code, message=exc.message + (f": {unmet}" if unmet else "")))
            probed = unchecked
        except ProbeFailed as exc:  # no answer to trust: nothing was checked
            findings.append(DoctorFinding(code=PROBE_FAILED, message=str(exc)))
            probed = unchecked
    findings += [DoctorFinding(code="probe", message=m) for m in probed.get("errors", [])]
    return report(skill, _image(executor), needs, probed, findings)


def _bounded(needs: ImageNeeds, findings: list[DoctorFinding]) -> tuple[list[str], list[str], list[str], list[str]]:
    names = [
        *(("c", n) for n in sorted(needs.commands)),
        *(("p", n) for n in sorted(needs.python)),
        *(("n", n) for n in sorted(needs.node)),
        *(("k", n) for n in sorted({_distribution(r) for r in needs.packages})),
    ]
    if len(names) > MAX_PROBE_NAMES:
        left = [n for _, n in names[MAX_PROBE_NAMES:]]
        findings.append(
            DoctorFinding(
                code="too_many_names",
                message=f"only {MAX_PROBE_NAMES} names were checked; not checked: {', '.join(left[:20])}"
                + (" ..." if len(left) > 20 else ""),
            )
        )
        names = names[:MAX_PROBE_NAMES]
    return (
        [n for k, n in names if k == "c"],
        [n for k, n in names if k == "p"],
        [n for k, n in names if k == "n"],
        [n for k, n in names if k == "k"],
    )


def _distribution(requirement: str) -> str:
    return Requirement(requirement).name


def _package(requirement: str, sure: bool, found: dict[str, str | None], used_in: list[str]) -> PackageNeed:
    """Whether the sandbox's version of ``requirement``'s distribution satisfies it."""
    version = found[_distribution(requirement)]
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


def _image(executor: Executor) -> str | None:
    return executor.settings.docker_image if executor.settings.runtime == "docker" else None


def _probe(
    executor: Executor,
    runs: RunManager,
    skill: Skill,
    commands: list[str],
    python: list[str],
    node: list[str],
    packages: list[str],
    principal: Principal,
    versions: Sequence[str] = (),
) -> dict[str, Any]:
    timeout = min(PROBE_TIMEOUT, executor.settings.max_timeout)
    names = {
        "commands": commands,
        "python": python,
        "node": node,
        "packages": packages,
        "versions": list(versions),
        "node_probe": NODE_PROBE,
        "node_timeout": max(1.0, timeout * 0.8),
    }
    request = RunRequest(
        skill=skill.id, command=f"python3 -I -S -c {shlex.quote(PROBE)}", stdin=json.dumps(names), timeout=timeout
    )
    result = runs.run(request, principal=principal)
    if result.timed_out or result.exit_code != 0:
        why = "timed out" if result.timed_out else f"exit {result.exit_code}"
        stderr = _printable(result.stderr.strip()[-500:])
        raise ProbeFailed(f"the probe of skill {skill.id!r} failed ({why}): {stderr or 'no output'}")
    answer = parse_answer(result.stdout, commands, python, node, packages, versions)
    if answer is None:
        raise ProbeFailed(f"the probe of skill {skill.id!r} gave no valid answer: nothing was checked")
    return answer


class ProbeFailed(Exception):
    """The probe gave no answer to trust (internal: :func:`diagnose` makes it a finding)."""


class _Answer(BaseModel):
    """What the probe prints, strictly: unknown fields, wrong types and over-long lists refused."""

    model_config = ConfigDict(extra="forbid", strict=True)
    commands: dict[StrictStr, StrictStr | None]
    python: dict[StrictStr, StrictBool]
    node: dict[StrictStr, StrictBool]
    packages: dict[StrictStr, StrictStr | None] = Field(default_factory=dict)
    errors: list[StrictStr] = Field(default_factory=list, max_length=10)
    versions: dict[StrictStr, StrictStr | None] = Field(default_factory=dict)


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
#: An interpreter's version as the probe reports it (``3.11.2``, ``18.20.4``).
VERSION_TEXT = re.compile(r"[0-9][0-9A-Za-z.+-]{0,39}")


def _printable(text: str) -> str:
    """One line without control characters (for a finding's message)."""
    return _CONTROL.sub("?", " ".join(text.split()))


def parse_answer(
    stdout: str,
    commands: list[str],
    python: list[str],
    node: list[str],
    packages: Sequence[str] = (),
    versions: Sequence[str] = (),
) -> dict[str, Any] | None:
    """The probe's answer from its output, or None: the output is over
    :data:`MAX_ANSWER_BYTES`, its last line is not the JSON object the probe prints, a value
    has the wrong type, a path is not a plain absolute path, or the names are not exactly
    the ones asked."""
    if len(stdout) > MAX_ANSWER_BYTES:
        return None
    lines = stdout.strip().splitlines()
    try:
        answer = _Answer.model_validate_json(lines[-1]) if lines else None
    except (ValidationError, ValueError):
        return None
    if answer is None or (
        set(answer.commands),
        set(answer.python),
        set(answer.node),
        set(answer.packages),
        set(answer.versions),
    ) != (set(commands), set(python), set(node), set(packages), set(versions)):
        return None
    if any(v is not None and not VERSION_TEXT.fullmatch(v) for v in answer.versions.values()):
        return None
    if any(v is not None and (len(v) > 200 or _CONTROL.search(v)) for v in answer.packages.values()):
        return None
    if any(
        path is not None and (not path.startswith("/") or len(path) > 4096 or _CONTROL.search(path))
        for path in answer.commands.values()
    ):
        return None
    return {
        "commands": answer.commands,
        "python": answer.python,
        "node": answer.node,
        "packages": answer.packages,
        "versions": answer.versions,
        "errors": [_printable(e[:1000]) for e in answer.errors],
    }


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
        if _distribution(requirement) in found_packages
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


def render_table(doctor: DoctorReport) -> str:
    """The report for people: one line per need, then what is missing and the verdict."""
    lines = [f"skill {doctor.skill}  image {doctor.image or '(local runtime: the host)'}", ""]

    def row(kind: str, name: str, found: bool | None, extra: str, used: list[str]) -> str:
        where = ", ".join(used[:3]) + (f" (+{len(used) - 3})" if len(used) > 3 else "")
        status = "?" if found is None else "ok" if found else "MISSING"
        return f"  {kind:<8} {name:<28} {status:<8} {extra:<34} {where}".rstrip()

    lines.append(f"  {'KIND':<8} {'NAME':<28} {'STATUS':<8} {'DETAIL':<34} USED IN")
    for c in doctor.commands:
        flags = ("optional" if c.optional else "", "guess" if c.confidence == "guess" else "")
        detail = " ".join(x for x in (c.path or "", *flags) if x)
        lines.append(row("command", c.name, c.found, detail, c.used_in))
    for p in doctor.python:
        detail = " ".join(
            x
            for x in (f"pip: {p.distribution_hint}" if p.distribution_hint else "", "optional" if p.optional else "")
            if x
        )
        lines.append(row("python", p.module, p.found, detail, p.used_in))
    for k in doctor.packages:
        detail = " ".join(x for x in (k.version or "", "guess" if k.confidence == "guess" else "") if x)
        lines.append(row("package", k.requirement, k.found, detail, k.used_in))
    for m in doctor.node:
        lines.append(row("node", m.module, m.found, "", m.used_in))
    for runtime in doctor.runtimes:
        name = f"{runtime.name}{runtime.requires}"
        lines.append(row("runtime", name, runtime.found, runtime.version or "", runtime.used_in))
    for file in doctor.files:
        lines.append(row("file", file.path, False, "not in the skill", file.used_in))
    if not (doctor.commands or doctor.python or doctor.packages or doctor.node or doctor.files or doctor.runtimes):
        lines.append("  (the skill uses no command or module the scan could see)")
    lines.append("")
    lines.append(f"network: {doctor.network.needed}" + (f" -- {doctor.network.note}" if doctor.network.reasons else ""))
    for r in doctor.network.reasons[:TABLE_REASONS]:
        lines.append(f"  {r.level:<5} {r.file}:{r.line}  {r.why}")
    if len(doctor.network.reasons) > TABLE_REASONS:
        lines.append(f"  ... and {len(doctor.network.reasons) - TABLE_REASONS} more (--json lists them all)")
    for f in doctor.findings:
        where = f" {f.file}:{f.line}" if f.file and f.line else f" {f.file}" if f.file else ""
        lines.append(f"finding {f.code}:{where} {f.message}")
    missing = [
        *doctor.missing.commands,
        *doctor.missing.python,
        *doctor.missing.packages,
        *doctor.missing.node,
        *doctor.missing.files,
        *doctor.missing.runtimes,
    ]
    lines.append("")
    if doctor.missing.guessed:
        lines.append("possibly missing (read from the docs' prose, not counted): " + ", ".join(doctor.missing.guessed))
    if doctor.ok:
        lines.append("ok: everything the skill needs is there")
    else:
        parts = []
        if any(f.code == DependenciesUnmet.code for f in doctor.findings):
            parts.append("its declared dependencies cannot be met (nothing was checked)")
        if any(f.code == PROBE_FAILED for f in doctor.findings):
            parts.append("the probe failed (nothing was checked)")
        if missing:
            parts.append("missing " + ", ".join(missing))
        if doctor.network.needed == "yes":
            parts.append("needs the network")
        lines.append("NOT OK: " + "; ".join(parts))
    return "\n".join(lines)
