"""The policy's decision about one command: which rule applies, whether the command's programs
pass its ``allow``/``deny``, and whether the run waits for approval (:func:`check`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from ..errors import Forbidden
from .analysis import analyse
from .enforcement import ExecRule
from .rules import Approval, Approver, Policy
from .vocabulary import NEUTRAL, TRANSPARENT, runner


class CommandDenied(Forbidden):
    code = "command_denied"


@dataclass(frozen=True)
class Decision:
    """What the policy says about one command of one key and skill."""

    allowed: bool
    #: the rule that applied (its name, or rules[<index>]); None: no rule, no limits
    rule: str | None = None
    approval: Approval = "never"
    approver: Approver = "caller"
    #: every program the command starts (sorted); empty when they cannot all be known
    programs: tuple[str, ...] = ()
    #: whether every program is known (an approval on first use can be remembered)
    known: bool = True
    #: why the command is refused, and the program refused (None: a construct)
    reason: str | None = None
    program: str | None = None
    #: the rule's allow/deny, for the sandbox to enforce at exec (None: no such rule)
    exec_rule: ExecRule | None = None

    def error(self) -> CommandDenied:
        return CommandDenied(
            f"command refused by policy rule {self.rule!r}: {self.reason}",
            details={"rule": self.rule, "program": self.program, "reason": self.reason},
        )

    def held_locally(self) -> CommandDenied:
        """The refusal of a run this decision holds, where no one can approve it (a local run)."""
        return CommandDenied(
            f"policy rule {self.rule!r} holds this run for approval; a local run cannot wait "
            "for one: submit it to the service (POST /v1/runs)",
            details={"rule": self.rule, "program": None, "reason": "approval needed"},
        )

    def needs_approval(self, approved: Iterable[str] = ()) -> bool:
        """Whether a run must wait for approval; ``approved``: programs approved before for
        this key and skill (``on-first-use``)."""
        if self.approval == "always":
            return True
        if self.approval == "on-first-use":
            return not self.known or not set(self.programs) <= set(approved)
        return False


ALLOWED = Decision(True)


def check(
    command: str,
    key: str,
    skill: str,
    policy: Policy | None,
    env: Mapping[str, str] | None = None,
    *,
    bundled: bool = False,
) -> Decision:
    """The policy's decision about running ``command`` (with ``env`` added to its environment)
    for API key id ``key`` in skill ``skill`` (``bundled``: an inline bundle, which only ``*``
    rules match), under ``policy`` (the service's is ``SkillRunner.policy``; None: no policy
    file).  Pure: no I/O.  A refusal is raised with ``decision.error()`` (403 ``command_denied``)."""
    if policy is None:
        return ALLOWED
    found = policy.rule(key, skill.lower(), bundled)
    if found is None:
        return ALLOWED
    name, rule = found
    exec_rule = ExecRule(name, tuple(rule.allow) if rule.allow is not None else None, tuple(rule.deny))
    base = Decision(True, name, rule.approval, rule.approver, exec_rule=exec_rule if rule.judges else None)
    analysis = analyse(command, env or {})
    # a runner's programs are not known: on-first-use never remembers them through it
    known = analysis.problem is None and not any(runner(p) for p in analysis.programs)
    if not rule.judges:
        return replace_decision(base, programs=analysis.sorted(), known=known)
    if analysis.problem is not None:
        return replace_decision(base, allowed=False, known=False, reason=analysis.problem)
    denied = set(rule.deny)
    allowed = set(rule.allow) if rule.allow is not None else None
    for program in analysis.programs:
        if program.removesuffix(" -c") in denied:
            return replace_decision(base, allowed=False, program=program, reason=f"program {program!r} is denied")
    for program in analysis.programs:
        if runner(program) and (allowed is None or program not in allowed):
            return replace_decision(
                base,
                allowed=False,
                program=program,
                reason=f"program {program!r} starts programs the policy cannot see; a rule must allow it by name",
            )
        if allowed is not None and program not in allowed | NEUTRAL | TRANSPARENT and not program.endswith(" -c"):
            return replace_decision(base, allowed=False, program=program, reason=f"program {program!r} is not allowed")
    return replace_decision(base, programs=analysis.sorted(), known=known)


def replace_decision(decision: Decision, **changes: object) -> Decision:
    return replace(decision, **changes)  # type: ignore[arg-type]
