"""The doctor's front: scan a skill, probe its sandbox once, report (:func:`diagnose`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..access import LOCAL, Principal
from ..envs import DependenciesUnmet
from ..errors import ExecutorError
from ..preflight import ImageNeeds, scan
from .model import DoctorFinding, DoctorReport
from .probe import NOT_CHECKED, PROBE_FAILED, ProbeFailed, run_probe
from .report import distribution, report

if TYPE_CHECKING:
    from ..core import Executor
    from ..lifecycle import RunManager

#: At most this many names (commands, modules) are probed; the rest is reported as not checked.
MAX_PROBE_NAMES = 500


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
            probed = run_probe(
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
        *(("k", n) for n in sorted({distribution(r) for r in needs.packages})),
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


def _image(executor: Executor) -> str | None:
    return executor.settings.docker_image if executor.settings.runtime == "docker" else None
