"""The doctor's report for people (``skill-executor skills doctor`` without ``--json``)."""

from __future__ import annotations

from ..envs import DependenciesUnmet
from .model import DoctorReport
from .probe import PROBE_FAILED

#: Network reasons the table shows (the JSON has them all).
TABLE_REASONS = 10


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
