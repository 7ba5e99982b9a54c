"""Python needs resolved with pip on the host: a dry run against the image's pins (free of
them when they conflict), then an install of what the image lacks, wheels only."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from ..image.inputs import DEFAULT_TIER, PythonTier
from ..skills.requirements import UNSAFE_TEXT, safe_python_need
from .declared import DependenciesUnmet
from .hosttools import HostToolResult, HostTools, Scratch
from .plan import EnvPlan, ImagePackages, Sources
from .resolving import RESOLVE_TIMEOUT, Usable, read_bounded, tail, unmet

#: A resolved pin as pip's report gives it (canonical name, a version).
_PIN = re.compile(r"^[a-z0-9][a-z0-9._-]*==[A-Za-z0-9.+!_-]+$")
_PIP_MISSING = re.compile(r"(?:No matching distribution found for|satisfies the requirement) ([^\s(]+)")


def pip_target_args(sources: Sources, tier: PythonTier = DEFAULT_TIER) -> list[str]:
    """pip options choosing wheels for a tier's Python (as the image build does) from the sources."""
    args = [
        "--disable-pip-version-check",
        "--only-binary=:all:",
        "--python-version",
        tier.python,
        "--implementation",
        "cp",
        "--abi",
        tier.abi,
        "--abi",
        "abi3",
        "--abi",
        "none",
    ]
    for platform in (*tier.platforms, "any"):
        args += ["--platform", platform]
    if sources.wheelhouse is not None:
        args += ["--no-index", "--find-links", str(sources.wheelhouse)]
    elif sources.index_url:
        args += ["--index-url", sources.index_url]
    return args


def run_pip(tools: HostTools, python: str, args: list[str], scratch: Scratch) -> HostToolResult:
    """pip install ``args`` through the host tools, isolated from every configuration."""
    # -I: no PYTHON* variable, no user site, no working directory on the path; --isolated
    # and PIP_CONFIG_FILE=/dev/null: no PIP_* variable and no configuration file.
    argv = [
        python,
        "-I",
        "-m",
        "pip",
        "--isolated",
        "install",
        "--no-input",
        "--no-cache-dir",
        "--quiet",
        *args,
    ]
    return tools.run(argv, scratch, timeout=RESOLVE_TIMEOUT, env={"PIP_CONFIG_FILE": os.devnull})


def resolve_python(
    planned: EnvPlan,
    temp: Path,
    *,
    python: str,
    tools: HostTools,
    sources: Sources,
    image: ImagePackages,
    usable: Usable,
) -> dict[str, str]:
    """Resolve the Python needs (preferring the image's pins), then install what the image lacks."""
    if not planned.python:
        return {}
    # The needs go as arguments, never in a requirements file (whose lines pip expands
    # and parses as options); format_requirement wrote each from a parsed requirement.
    needs = [need for need in planned.python if safe_python_need(need)]
    if len(needs) != len(planned.python):
        raise unmet(
            [
                {"need": n, "source": "python", "error": "refused: not a plain requirement on the index"}
                for n in planned.python
                if n not in needs
            ]
        )
    usable("pip", [python, "-I", "-c", "import pip"], [sources.wheelhouse])
    pins = "".join(f"{name}=={version}\n" for name, (version, _) in sorted(image.python.items()))

    def dry_run(attempt: str, constrained: bool) -> tuple[HostToolResult, Path]:
        scratch = tools.scratch(temp / f".resolve-{attempt}")
        (scratch.folder / "constraints.txt").write_text(pins)
        report = scratch.folder / "report.json"
        args = [
            "--dry-run",
            "--ignore-installed",
            "--target",
            str(scratch.folder / "dry"),
            *pip_target_args(sources, planned.tier),
            "--report",
            str(report),
        ]
        args += ["-c", str(scratch.folder / "constraints.txt")] if constrained else []
        return run_pip(tools, python, [*args, "--", *needs], scratch), report

    result, report = dry_run("pinned", True)
    if result.returncode != 0 and "ResolutionImpossible" in result.output:
        # The needs conflict with the image's pins: honour the skill's wish.
        result, report = dry_run("free", False)
    if result.returncode != 0:
        raise pip_failure(planned, result)
    items = json.loads(read_bounded(report)).get("install", [])
    chosen: dict[str, str] = {
        str(canonicalize_name(i["metadata"]["name"])): str(i["metadata"]["version"]) for i in items
    }
    wanted = [
        f"{name}=={version}"
        for name, version in sorted(chosen.items())
        if not (name in image.python and str(image.python[name][0]) == version)
    ]
    if any(UNSAFE_TEXT.search(w) or not _PIN.match(w) for w in wanted):
        raise unmet(
            [
                {"need": w, "source": "python", "error": "pip resolved an unexpected name or version"}
                for w in wanted
                if UNSAFE_TEXT.search(w) or not _PIN.match(w)
            ]
        )
    if wanted:
        scratch = tools.scratch(temp / ".install")
        result = run_pip(
            tools,
            python,
            [
                "--no-deps",
                "--no-compile",
                "--target",
                str(scratch.folder / "python"),
                *pip_target_args(sources, planned.tier),
                "--",
                *wanted,
            ],
            scratch,
        )
        if result.returncode != 0:
            raise pip_failure(planned, result)
        os.rename(scratch.folder / "python", temp / "python")
        shutil.rmtree(temp / "python" / "bin", ignore_errors=True)
    for folder in temp.glob(".resolve-*"):
        shutil.rmtree(folder, ignore_errors=True)
    shutil.rmtree(temp / ".install", ignore_errors=True)
    return chosen


def pip_failure(planned: EnvPlan, result: HostToolResult) -> DependenciesUnmet:
    """The refusal naming the needs pip could not resolve (all of them when it does not say)."""
    output = result.output
    missing = {canonicalize_name(re.split(r"[<>=!~\[;]", m, maxsplit=1)[0]) for m in _PIP_MISSING.findall(output)}
    failed = [n for n in planned.python if canonicalize_name(Requirement(n).name) in missing] or list(planned.python)
    return unmet([{"need": n, "source": "python", "error": "pip could not resolve it"} for n in failed], tail(output))
