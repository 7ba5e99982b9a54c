"""Command policy: which programs a run's command may start, per API key and per skill, and
whether a run waits for approval first.  The one place that judges commands: every path that
starts a run or a process asks :func:`check`.

The policy is a YAML file (``SKILL_EXECUTOR_POLICY_FILE``)::

    rules:
      - name: pdf-tools          # optional; errors name the rule by it (else rules[<index>])
        key: "*"                 # an API key id (a run's owner) or "*"
        skill: pdf               # a skill name (any case) or "*"
        allow: [python3, ls]     # optional: only these programs
        deny: [curl, wget]       # optional: never these
        approval: on-first-use   # always | never (default) | on-first-use
        approver: caller         # caller (default: the run's own key or an admin) | admin
        egress:                  # optional: the hosts runs may reach through the egress gateway
          allow: [api.github.com]
          inject: [{host: api.github.com, header: Authorization, value: "Bearer {secret:GITHUB_TOKEN}"}]

The first rule whose ``key`` and ``skill`` match applies; none: anything goes, no approval,
no network.  Its ``egress`` block (:mod:`.egress`; secrets from :mod:`.secretsfile`) decides a
run's network (:func:`network_plan`): none without one.

A command is a shell string (``bash -c``).  It is read by the project's shell parser
(tree-sitter bash, :mod:`skill_executor.shell`) and judged by *every* program the shell
would start: in lists, pipelines, subshells, command and process substitutions, function
bodies, here-document bodies, and through wrappers that only start another program (``env``,
``exec``, ``command``, ``nice``, ``nohup``, ``time``, ``timeout``, ``stdbuf``, ``setsid``,
``xargs``, ``find -exec``, ``sh -c '...'``, ...).  When a rule with ``allow`` or ``deny``
applies, anything whose program cannot be known before the run is refused (fail closed):
expansions, globs and braces in command position, ``eval``, ``source``, ``trap``, aliases,
``hash``, a shell reading commands from its input, assignments to ``PATH``, ``IFS``,
``BASH_ENV``, ``LD_*`` and the like (in the command or the request's ``env``), arithmetic
that reads a variable (it can run code), constructs the parser does not know, parse errors.

A program is named by its basename when it is a bare name or a path in a system directory
(``/usr/bin/python3`` is ``python3``); any other path is the program of that path, normalised
(``./x``, ``scripts/run.sh``, ``/tmp/x``: never the bare name ``x``).

The honest limit: a policy judges what the shell is asked to start.  A permitted program that
runs code it is given (``python3``, ``node``, ``awk``, ``git`` with its hooks, ...) can still
start anything; the sandbox, not the policy, is the security boundary.

The package, by job: :mod:`.rules` (the file's model), :mod:`.loading` (reading and validating
it), :mod:`.decision` (:func:`check`), :mod:`.analysis` (the programs a command starts, over
:mod:`.words` and :mod:`.vocabulary`), :mod:`.enforcement` (what the sandbox enforces at exec),
:mod:`.egress` (a rule's ``egress`` block), :mod:`.secretsfile` (the secrets it injects) and
:mod:`.network` (a run's network, and the grant its egress gateway gets).
"""

from .analysis import Analysis, analyse
from .decision import ALLOWED, CommandDenied, Decision, check
from .egress import Egress, HostError, HostPattern, Injection, parse_host
from .enforcement import ExecRule, PolicyUnenforceable, unenforceable
from .loading import PolicyError, load_policy, parse_policy, policy_of
from .network import (
    EgressUnavailable,
    Grant,
    NetworkNotAllowed,
    NetworkPlan,
    egress_unavailable,
    narrow,
    network_plan,
)
from .rules import Approval, Approver, Policy, Rule
from .secretsfile import Secrets, SecretsError, load_secrets, parse_secrets
from .vocabulary import program_name

__all__ = [
    "ALLOWED",
    "Analysis",
    "Approval",
    "Approver",
    "CommandDenied",
    "Decision",
    "Egress",
    "EgressUnavailable",
    "ExecRule",
    "Grant",
    "HostError",
    "HostPattern",
    "Injection",
    "NetworkNotAllowed",
    "NetworkPlan",
    "Policy",
    "PolicyError",
    "PolicyUnenforceable",
    "Rule",
    "Secrets",
    "SecretsError",
    "analyse",
    "check",
    "egress_unavailable",
    "load_policy",
    "load_secrets",
    "narrow",
    "network_plan",
    "parse_host",
    "parse_policy",
    "parse_secrets",
    "policy_of",
    "program_name",
    "unenforceable",
]
