"""What the sandbox enforces at ``execve``: a rule's ``allow``/``deny`` serialised for the
launcher's exec supervisor, and the refusal of a runtime that cannot enforce it."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import Forbidden
from .vocabulary import NEUTRAL, TRANSPARENT


class PolicyUnenforceable(Forbidden):
    code = "policy_unenforceable"


def unenforceable(rule: ExecRule, runtime: str) -> PolicyUnenforceable:
    """The refusal of a run under a rule with allow/deny on a runtime that cannot enforce it
    at exec (fail closed: such a run never runs unenforced)."""
    return PolicyUnenforceable(
        f"policy rule {rule.rule!r} limits the programs this run may start, and the {runtime!r} runtime "
        "cannot enforce that inside its sandbox: use the docker or bwrap runtime",
        details={"rule": rule.rule, "runtime": runtime},
    )


#: Programs an allow list brings along at exec time, whatever it names: the shells that run
#: the command (and ``sh -c``, judged through by the parser), the wrappers judged through, and
#: the builtins that also exist as files (``env echo x`` runs ``/usr/bin/echo``).  Harmless:
#: whatever they start is judged at its own exec.
EXEC_COMPANIONS = ("bash", "sh", "dash")


@dataclass(frozen=True)
class ExecRule:
    """A rule's ``allow``/``deny`` as the sandbox enforces them at ``execve`` (the launcher's
    exec supervisor, ``images/runner/launcher.c``): the rule's name and its program names,
    resolved to files inside the sandbox."""

    rule: str
    allow: tuple[str, ...] | None
    deny: tuple[str, ...]

    def spec(self, *, root: str, trusted: int, nonce: str = "") -> bytes:
        """The launcher's serialised policy: NUL-separated key, value pairs.  ``root``: where
        relative names are resolved (the skill's folder, whatever the run's ``cwd``); ``trusted``: execs of the main
        process that are the runtime's own shell (not judged); ``nonce``: names the verdict
        file in exec mode."""
        pairs = [("rule", self.rule), ("root", root), ("trusted", str(trusted))]
        if nonce:
            pairs.append(("nonce", nonce))
        if self.allow is not None:
            companions = (*EXEC_COMPANIONS, *sorted(TRANSPARENT), *sorted(NEUTRAL))
            pairs += [("allow-list", "1"), *(("allow", p) for p in (*self.allow, *companions) if p not in self.deny)]
        pairs += [("deny", p) for p in self.deny]
        return b"".join(f"{k}\0{v.replace(chr(0), '?')}\0".encode() for k, v in pairs)
