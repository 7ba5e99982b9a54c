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

The first rule whose ``key`` and ``skill`` match applies; none: anything goes, no approval.

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
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from tree_sitter import Node

from .errors import ExecutorError, Forbidden
from .shell import literal, parser

Approval = Literal["always", "never", "on-first-use"]
Approver = Literal["caller", "admin"]


class PolicyError(ExecutorError):
    """The policy file cannot be used: the service refuses to start."""

    code = "invalid_policy_file"
    status = 500


class CommandDenied(Forbidden):
    code = "command_denied"


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


# -- the file -------------------------------------------------------------------------------

PROGRAM = r"^[^\s]+$"


class Rule(BaseModel):
    """One rule of the policy file (unknown fields are refused)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = Field(default=None, min_length=1, max_length=128)
    key: str = Field(default="*", min_length=1, max_length=64, description="an API key id (tenant) or *")
    skill: str = Field(default="*", min_length=1, max_length=256, description="a skill name or *")
    allow: list[str] | None = Field(default=None, description="only these programs (none: any not denied)")
    deny: list[str] = Field(default_factory=list)
    approval: Approval = "never"
    approver: Approver = "caller"

    def matches(self, key: str, skill: str, bundled: bool = False) -> bool:
        """A rule naming a skill matches the installed skill only: an inline bundle's name is
        its sender's choice (it is matched by ``*`` rules)."""
        return self.key in ("*", key) and (self.skill == "*" or (not bundled and self.skill == skill.lower()))

    @property
    def judges(self) -> bool:
        """Whether the rule limits programs (then what cannot be known is refused)."""
        return self.allow is not None or bool(self.deny)


class PolicyFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    rules: list[Rule] = Field(default_factory=list)


@dataclass(frozen=True)
class Policy:
    rules: tuple[Rule, ...]
    source: str = "<policy>"
    #: key id -> its name (SKILL_EXECUTOR_API_KEYS_FILE's ``name=``): a rule's ``key`` is either
    names: Mapping[str, str] = field(default_factory=dict)

    def rule(self, key: str, skill: str, bundled: bool = False) -> tuple[str, Rule] | None:
        """The first rule for ``key`` (its id; a rule may name it by its name) and ``skill``
        (``bundled``: an inline bundle), and the rule's name (``rules[i]`` when unnamed)."""
        name = self.names.get(key)
        for index, rule in enumerate(self.rules):
            if rule.matches(key, skill, bundled) or (name is not None and rule.matches(name, skill, bundled)):
                return rule.name or f"rules[{index}]", rule
        return None


def parse_policy(text: str, source: str = "<policy>", names: Mapping[str, str] | None = None) -> Policy:
    """A policy from YAML text (``names``: key id -> name, what rules may call keys besides
    their ids); :class:`PolicyError` with the exact problem otherwise."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PolicyError(f"policy file {source}: not valid YAML: {exc}".replace("\n", " ")) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PolicyError(f"policy file {source}: expected a mapping with 'rules', got {type(data).__name__}")
    try:
        parsed = PolicyFile.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors(include_url=False)
        )
        raise PolicyError(f"policy file {source}: {problems}") from None
    for index, rule in enumerate(parsed.rules):
        for entry in [*(rule.allow or ()), *rule.deny]:
            if not re.match(PROGRAM, entry) or entry != program_name(entry):
                raise PolicyError(
                    f"policy file {source}: rules.{index}: {entry!r} is not a program name "
                    f"(write it as {program_name(entry)!r})"
                )
        if rule.key != "*" and rule.key != rule.key.lower():
            raise PolicyError(f"policy file {source}: rules.{index}.key: key ids are lower case: {rule.key!r}")
    rules = tuple(r.model_copy(update={"skill": r.skill.lower()}) for r in parsed.rules)
    return Policy(rules, source, dict(names or {}))


def load_policy(path: Path | None, names: Mapping[str, str] | None = None) -> Policy | None:
    """The policy file at ``path`` (None: no policy); ``names``: key id -> name."""
    if path is None:
        return None
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise PolicyError(f"policy file {path}: cannot be read: {exc.strerror or exc}") from None
    return parse_policy(text, str(path), names)


# -- decisions -------------------------------------------------------------------------------


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


# -- reading a command -----------------------------------------------------------------------

#: Directories whose programs are named by their basename (``/usr/bin/python3`` is ``python3``).
SYSTEM_DIRS = frozenset({"/bin", "/sbin", "/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin"})
#: Builtins that start nothing and change no lookup: allowed whatever ``allow`` says (``deny``
#: may still name them).
NEUTRAL = frozenset(
    {
        ":", "true", "false", "cd", "pwd", "echo", "printf", "test", "[", "exit", "return", "shift",
        "set", "read", "wait", "break", "continue", "umask", "getopts", "jobs", "type",
    }
)  # fmt: skip
#: Shell features that run code the command holds as data, or change how names are looked up.
UNKNOWABLE = {
    "eval": "eval runs a string as code",
    "source": "source runs a file's code in the shell",
    ".": ". runs a file's code in the shell",
    "trap": "trap runs a string as code",
    "alias": "aliases rename commands",
    "unalias": "aliases rename commands",
    "enable": "enable loads builtins",
    "hash": "hash changes where a name is looked up",
    "shopt": "shopt changes how commands are read",
    "let": "let evaluates arithmetic, which can run code",
    "coproc": "coproc is not judged",
    "fc": "fc runs commands from the history",
    "bind": "bind runs commands on keys",
    "complete": "complete runs commands",
    "compgen": "compgen runs commands",
    "mapfile": "mapfile runs callbacks",
    "readarray": "readarray runs callbacks",
    "caller": "caller is not judged",
}
#: Shell reserved words: never a program (``time`` is a wrapper, below).
KEYWORDS = frozenset(
    {"!", "{", "}", "[[", "]]", "if", "then", "elif", "else", "fi", "case", "esac", "for", "select",
     "while", "until", "do", "done", "in", "function"}
)  # fmt: skip
#: Programs known to start another program from their arguments whose command is not read
#: here: refused unless the rule's ``allow`` names them.
RUNNERS = frozenset(
    {
        "sudo", "doas", "su", "runuser", "chroot", "unshare", "nsenter", "setpriv", "flock", "watch",
        "strace", "ltrace", "script", "parallel", "ssh", "busybox", "chrt", "taskset", "prlimit",
        "systemd-run", "expect", "tclsh", "entr", "inotifywait", "setarch", "linux32", "linux64", "x86_64", "i386",
        "ld.so", "sg", "newgrp", "run-parts", "zsh", "fish",
    }
)  # fmt: skip
#: Shells: ``-c '<literal>'`` is judged through; a script is the shell's own; none reads input.
#: (zsh and fish are runners: they read their user's startup files for every command.)
SHELLS = frozenset({"sh", "bash", "dash", "ksh", "mksh", "ash", "rbash", "posh", "yash"})
#: A variable name a builtin may assign, unset or test (an array element by a number only).
SAFE_NAME = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?:\[[0-9]+\])?$")
#: Builtins judged by the variables they name and the options they take (:func:`_builtin`).
NAMING = frozenset(
    {"read", "printf", "getopts", "wait", "unset", "test", "[", "jobs", "set", "declare", "typeset", "local",
     "export", "readonly"}
)  # fmt: skip
#: ``test``'s binary operators (the word before one is an operand, never ``-v``).
BINARY_TESTS = frozenset(
    {"=", "==", "!=", "<", ">", "-eq", "-ne", "-lt", "-le", "-gt", "-ge", "-nt", "-ot", "-ef", "-a", "-o", "=~"}
)  # fmt: skip
#: ``set``'s (and a shell's) one-letter options that change nothing of how commands are read.
SAFE_SET_LETTERS = "abefhmnptuvxBCEPT"
#: ``set -o``'s options that change nothing of how commands are read (not keyword, history,
#: histexpand, posix, emacs, vi).
SAFE_SET_NAMES = frozenset(
    {"allexport", "braceexpand", "errexit", "errtrace", "functrace", "hashall", "ignoreeof", "monitor",
     "noclobber", "noexec", "noglob", "nolog", "notify", "nounset", "onecmd", "physical", "pipefail",
     "privileged", "verbose", "xtrace"}
)  # fmt: skip
#: A shell's ``-O`` options allowed (not expand_aliases, extglob, extdebug, ...).
SAFE_SHOPT_NAMES = frozenset({"nullglob", "failglob", "dotglob", "globstar", "nocaseglob", "nocasematch",
                              "inherit_errexit", "lastpipe"})  # fmt: skip
#: Variables whose value changes what a command starts (or loads into it).
DANGEROUS_VARIABLE = re.compile(
    r"^(PATH|IFS|BASH_ENV|ENV|CDPATH|SHELLOPTS|BASHOPTS|GLOBIGNORE|PS4|PROMPT_COMMAND|EXECIGNORE"
    r"|BASH_LOADABLES_PATH|BASH_XTRACEFD|FUNCNEST|LD_\w+|BASH_FUNC_\S+|GCONV_PATH|NODE_OPTIONS"
    r"|PYTHONSTARTUP|PYTHONPATH|PYTHONHOME|PERL5OPT|PERL5LIB|RUBYOPT|GIT_\w+|BASH_CMDS|BASH_ALIASES)$"
)


@dataclass(frozen=True)
class WrapperSpec:
    """The options of a program that only starts the command after them."""

    valued: frozenset[str] = frozenset()  # options taking the next word (or =value)
    flags: frozenset[str] = frozenset()  # options taking nothing
    refused: Mapping[str, str] = field(default_factory=dict)  # options that make it unknowable
    operands: int = 0  # words before the command (timeout's duration)
    numeric: bool = False  # -N options (nice -5)
    assignments: bool = False  # NAME=VALUE words before the command (env)
    any_assignment: bool = False  # any word with = is one, also after -- (env)
    queries: frozenset[str] = frozenset()  # options with which it starts nothing (command -v)
    default: str | None = None  # the program it starts when none is given (xargs: echo)


def _spec(valued: str = "", flags: str = "", **kw: object) -> WrapperSpec:
    return WrapperSpec(frozenset(valued.split()), frozenset(flags.split()), **kw)  # type: ignore[arg-type]


#: Wrappers judged through: the program they start is judged (they themselves need no ``allow``).
WRAPPERS: dict[str, WrapperSpec] = {
    "env": _spec(
        "-u --unset -C --chdir",
        "-i --ignore-environment -0 --null - -v --debug",
        refused={"-S": "env -S splits a string into a command", "--split-string": "env -S splits a string"},
        assignments=True,
        any_assignment=True,
    ),
    "exec": _spec(
        "",
        "-c",
        refused={
            "-a": "exec -a names the program (a leading - makes a login shell; multi-call programs read it)",
            "-l": "exec -l makes a login shell (it runs ~/.profile first)",
        },
    ),
    "command": _spec("", "-p", queries=frozenset({"-v", "-V"})),
    "builtin": _spec(),
    # the keyword: what follows is a whole command, assignments first
    "time": _spec("-f --format -o --output", "-p -a --append -v --verbose -q --quiet --portability", assignments=True),
    "nohup": _spec(),
    "nice": _spec("-n --adjustment", numeric=True),
    "timeout": _spec("-s --signal -k --kill-after", "--preserve-status --foreground -v --verbose", operands=1),
    "stdbuf": _spec("-i --input -o --output -e --error"),
    "setsid": _spec("", "-c --ctty -f --fork -w --wait"),
    "ionice": _spec("-c --class -n --classdata", "-t --ignore"),
    "xargs": _spec(
        "-a --arg-file -d --delimiter -E -I -L --max-lines -n --max-args -P --max-procs -s --max-chars "
        "--process-slot-var",
        "-0 --null -o --open-tty -p --interactive -r --no-run-if-empty -t --verbose -x --exit",
        default="echo",
    ),
}
TRANSPARENT = frozenset(WRAPPERS)
FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
#: Named syntax nodes a command may hold; any other is refused (fail closed).
KNOWN_NODES = frozenset(
    {
        "program", "list", "pipeline", "command", "command_name", "word", "string", "raw_string",
        "string_content", "concatenation", "number", "simple_expansion", "expansion", "variable_name",
        "variable_assignment", "variable_assignments", "subscript", "redirected_statement", "file_redirect",
        "heredoc_redirect", "heredoc_start", "heredoc_body", "heredoc_content", "heredoc_end",
        "herestring_redirect", "file_descriptor", "negated_command", "subshell", "compound_statement",
        "if_statement", "elif_clause", "else_clause", "while_statement", "for_statement", "do_group",
        "case_statement", "case_item", "function_definition", "test_command", "binary_expression",
        "unary_expression", "parenthesized_expression", "test_operator", "declaration_command",
        "unset_command", "command_substitution", "process_substitution", "arithmetic_expansion",
        "brace_expression", "ansi_c_string", "comment", "regex", "extglob_pattern",
        "special_variable_name", "array", "postfix_expression", "ternary_expression", "c_style_for_statement",
    }
)  # fmt: skip
#: What arithmetic may hold: numbers and operators (a quoted 'a[$(cmd)]' runs cmd too).
ARITHMETIC_NODES = frozenset(
    {
        "number", "binary_expression", "unary_expression", "parenthesized_expression", "ternary_expression",
        "postfix_expression", "arithmetic_expansion", "compound_statement", "c_style_for_statement",
    }
)  # fmt: skip
#: Arithmetic comparisons of ``[[ ]]`` (their operands are evaluated as arithmetic).
ARITHMETIC_TESTS = frozenset({"-eq", "-ne", "-lt", "-le", "-gt", "-ge"})
#: A backslash-newline right after a word's character: the shell joins the lines into one word.
CONTINUED_WORD = re.compile(r"[^\s\\](?:\\\\)*\\\n")
#: Control characters other than tab and new line (the parser reads \r, \v and \f as blanks).
CONTROL = re.compile(r"[\x01-\x08\x0b-\x1f\x7f]")
#: Characters that make a name in command position expand (glob, brace, tilde) or span lines.
EXPANDING = re.compile(r"[*?\[\]{}~\n]|^$")


class Unknowable(Exception):
    """The programs of a command cannot all be known before it runs."""


@dataclass
class Analysis:
    programs: list[str] = field(default_factory=list)
    problem: str | None = None

    def sorted(self) -> tuple[str, ...]:
        return tuple(sorted(set(self.programs)))


#: The dynamic loader, which runs the program it is given (``/lib64/ld-linux-x86-64.so.2 /usr/bin/curl``).
LOADER = re.compile(r"^ld(-linux[\w.-]*|-musl[\w.-]*)?\.so(\.\d+)*$")


def runner(program: str) -> bool:
    """Whether ``program`` starts programs from its arguments in ways not read here."""
    return program in RUNNERS or bool(LOADER.match(posixpath.basename(program)))


def program_name(word: str) -> str:
    """How a program is named: a bare name, or a path in a system directory, by its basename;
    any other path by itself, normalised (never a bare name: ``./x`` stays ``./x``)."""
    if "/" not in word:
        return word
    path = posixpath.normpath(word)
    if path.startswith("//"):
        path = path[1:]
    head, base = posixpath.split(path)
    if head in SYSTEM_DIRS and base:
        return base
    return path if "/" in path else f"./{path}"


def analyse(command: str, env: Mapping[str, str] | None = None) -> Analysis:
    """Every program ``command`` starts, or the reason that cannot be known."""
    found = Analysis()
    try:
        for name in env or {}:
            if DANGEROUS_VARIABLE.match(name):
                raise Unknowable(f"the request's env sets {name}, which changes what commands start")
        _walk_source(command, found.programs, depth=0)
    except Unknowable as exc:
        found.problem = str(exc)
    return found


MAX_DEPTH = 8


def _walk_source(source: str, out: list[str], depth: int) -> None:
    if depth > MAX_DEPTH:
        raise Unknowable("shells nest too deeply to judge")
    if "\x00" in source:
        raise Unknowable("the command holds a NUL character")
    control = CONTROL.search(source)
    if control is not None:  # \r, \v, \f: blanks to the parser, a word's characters to bash
        raise Unknowable(
            f"the command holds the control character {control.group()!r} (the parser and bash read it differently)"
        )
    if CONTINUED_WORD.search(source):
        raise Unknowable("a line continuation inside a word (the parser and the shell read it differently)")
    data = source.encode("utf-8", "surrogateescape")
    tree = parser().parse(data)
    if tree.root_node.has_error:
        raise Unknowable("the command does not parse as shell code")
    _unread_substitutions(tree.root_node, data)
    _glued_arrays(tree.root_node, data)
    _walk(tree.root_node, out, depth)


#: Where a command substitution (or arithmetic) may begin: ``$(``, ``$[``, a backtick; and a
#: translated string ``$"..."``: bash expands the translation a catalog holds (``TEXTDOMAINDIR``),
#: and a skill or a bundle can ship the catalog.
SUBSTITUTION = re.compile(rb'\$\(|\$\[|`|\$"')


def _unread_substitutions(root: Node, data: bytes) -> None:
    """Refuse text the shell would run as a command substitution but the parser read as
    something else (nested backticks, ``<<-`` here-document bodies, backticks in a
    ``${x:-...}`` inside a string): every ``$(``, ``$[`` and backtick must open or close a
    substitution (or arithmetic) the parser read, or sit in single quotes, a comment or the
    body of a here-document with a quoted delimiter."""
    read: set[int] = set()
    inert: list[tuple[int, int]] = []
    stack = [(root, False)]
    while stack:
        node, quoted = stack.pop()  # quoted: inside double quotes or a here-document body
        kind = node.type
        if kind in ("command_substitution", "arithmetic_expansion", "process_substitution"):
            if node.children:
                read.add(node.children[0].start_byte)
                if node.children[-1].type == "`":
                    read.add(node.children[-1].start_byte)
            quoted = False  # a substitution's code is read afresh
        elif kind == "comment" or (kind in ("raw_string", "ansi_c_string") and not quoted):
            # single quotes in "${x-'...'}" or a here-document are no quotes to bash
            inert.append((node.start_byte, node.end_byte))
            continue
        elif kind == "heredoc_redirect":
            start = next((c for c in node.children if c.type == "heredoc_start"), None)
            if start is not None and re.search(r"['\"\\]", _text(start)):
                inert += [(c.start_byte, c.end_byte) for c in node.children if c.type == "heredoc_body"]
        quoted = quoted or kind in ("string", "heredoc_body")
        stack.extend((child, quoted) for child in node.children)
    for match in SUBSTITUTION.finditer(data):
        at = match.start()
        if at in read or any(start <= at < end for start, end in inert):
            continue
        shown = data[max(0, at - 20) : at + 20].decode("utf-8", "replace")
        if match.group() == b'$"':
            raise Unknowable(f"a translated string is not judged (its catalog's translation can run code): {shown!r}")
        raise Unknowable(f"a command substitution the parser did not read: {shown!r}")


#: What may follow an array literal's ``)``: a blank, an operator, the end.
AFTER_ARRAY = frozenset(b" \t\n;&|)<>")


def _glued_arrays(root: Node, data: bytes) -> None:
    """Refuse an array literal glued to the next word: bash reads ``a=(1)ls rm`` as one
    assignment word and runs ``rm``; the parser reads ``a=(1)`` and the command ``ls rm``."""
    stack = [root]
    while stack:
        node = stack.pop()
        if node.type == "array" and node.end_byte < len(data) and data[node.end_byte] not in AFTER_ARRAY:
            shown = data[node.start_byte : node.end_byte + 20].decode("utf-8", "replace")
            raise Unknowable(f"an array literal glued to the next word is not judged: {shown!r}")
        stack.extend(node.children)


def _text(node: Node) -> str:
    return (node.text or b"").decode("utf-8", "surrogateescape")


def _walk(root: Node, out: list[str], depth: int) -> None:
    stack = [root]
    while stack:
        node = stack.pop()
        if node.is_named:
            kind = node.type
            if kind not in KNOWN_NODES:
                raise Unknowable(f"{kind.replace('_', ' ')} is not judged: {_text(node)[:60]!r}")
            if kind == "variable_name" and DANGEROUS_VARIABLE.match(_text(node)):
                raise Unknowable(f"the command uses {_text(node)}, which changes what commands start")
            if kind == "command":
                _command(node, out, depth)
            elif kind == "declaration_command":
                _declaration(node)
            elif kind == "unset_command":
                _unset(node)
            elif kind == "file_redirect":
                _duplication(node)
            elif kind == "unary_expression" and node.children and _text(node.children[0]) in ("-v", "-R"):
                _tested(node)
            elif kind == "expansion":
                _expansion(node)
            elif kind == "subscript":
                _arithmetic(node.child_by_field_name("index"), "an array subscript")
            elif kind == "array":  # a=([i]=v): i is arithmetic (of an indexed array)
                for element in node.children:
                    text = _text(element)
                    if text.startswith("[") and not re.match(r"^\[[0-9]+\]\+?=", text):
                        raise Unknowable(f"an array subscript {text[:60]!r} is not judged (it can run code)")
            elif kind == "c_style_for_statement":
                for part in node.children:
                    if part.type not in ("do_group", "compound_statement"):
                        _arithmetic(part, "arithmetic")
            elif kind == "arithmetic_expansion" or (
                kind == "compound_statement" and node.children and node.children[0].type == "(("
            ):
                _arithmetic(node, "arithmetic")
            elif kind == "binary_expression" and _operator(node) in ARITHMETIC_TESTS:
                for side in (node.child_by_field_name("left"), node.child_by_field_name("right")):
                    if side is not None and side.type != "number":
                        raise Unknowable(f"an arithmetic test reads {_text(side)!r}, which can run code")
        stack.extend(reversed(node.children))


def _operator(node: Node) -> str:
    op = node.child_by_field_name("operator")
    return _text(op) if op is not None else ""


def _arithmetic(node: Node | None, what: str) -> None:
    """Arithmetic evaluates the values of the variables it reads as arithmetic, and a value
    such as ``a[$(cmd)]`` runs ``cmd``: arithmetic may only hold numbers."""
    if node is None:
        return
    stack = [node]
    while stack:
        current = stack.pop()
        if current.is_named and current.type not in ARITHMETIC_NODES:  # a name, an expansion, a string
            raise Unknowable(f"{what} reads {_text(current)!r}, which can run code")
        stack.extend(current.children)


def _expansion(node: Node) -> None:
    text = _text(node)
    if text.startswith("${!"):
        raise Unknowable(f"indirect expansion {text[:60]!r} is not judged")
    if re.search(r"@[A-Za-z]\}$", text):
        raise Unknowable(f"a transforming expansion {text[:60]!r} is not judged (@P runs code)")
    # ${x:offset:length}: the offsets are arithmetic
    children = node.children
    for index, child in enumerate(children):
        if child.type == ":" and index + 1 < len(children):
            for rest in children[index + 1 :]:
                _arithmetic(rest, "a substring offset") if rest.type not in ("}", ":") else None
            break


def _declaration(node: Node) -> None:
    keyword = node.children[0].type if node.children else ""
    words: list[str | None] = []
    for child in node.children[1:]:
        if child.type == "word":
            words.append(literal(child))
        elif child.type not in ("variable_assignment", "variable_name", "comment"):
            raise Unknowable(f"{keyword} with {_text(child)[:60]!r} is not judged")
    _assignments(keyword, words)


def _tested(node: Node) -> None:
    """``[[ -v NAME ]]``: a subscript of NAME is arithmetic (it can run code)."""
    operand = node.children[1] if len(node.children) > 1 else None
    if operand is not None and operand.type == "variable_name":
        word: str | None = _text(operand)
    else:
        word = None if operand is None else literal(operand)
    _name(word, f"[[ {_text(node.children[0])}")


def _duplication(node: Node) -> None:
    """``>& word``: once the word is no descriptor number, bash expands it again, so
    ``ls >& '$(cmd)'`` runs ``cmd``: the word must be a literal without ``$`` or backticks."""
    if not any(child.type in (">&", "<&", ">&-", "<&-") for child in node.children):
        return
    target = node.child_by_field_name("destination")
    word = literal(target) if target is not None else ""
    if word is None or re.search(r"[$`]", word):
        raise Unknowable(f"a duplication {_text(node)[:60]!r} is not judged (bash expands its word twice)")


def _unset(node: Node) -> None:
    words: list[str | None] = []
    for child in node.children[1:]:
        if child.type in ("variable_name", "subscript"):
            words.append(_text(child))
        elif child.type != "comment":
            words.append(literal(child))
    _builtin("unset", words)


def _words(node: Node) -> list[str | None]:
    """The command's words, name first: each literal, or None where it expands."""
    name = node.child_by_field_name("name")
    assert name is not None
    first = name.children[0] if name.children else name
    words: list[str | None] = [literal(first)]
    for child in node.children_by_field_name("argument"):
        words.append(literal(child))
    return words


def _command(node: Node, out: list[str], depth: int) -> None:
    name = node.child_by_field_name("name")
    if name is None:  # assignments (and redirections) alone
        return
    words = _words(node)
    for word in words[1:]:  # {NAME}>file assigns NAME a descriptor
        braced = re.match(r"^\{([A-Za-z_][A-Za-z0-9_]*(?:\[.*\])?)\}$", word or "")
        if braced is not None:
            _name(braced.group(1), "a redirection")
    if words[0] is None:
        raise Unknowable(f"the program {_text(name)[:60]!r} is only known when the command runs")
    _program(words, out, depth, _text(name))


def _program(words: list[str | None], out: list[str], depth: int, shown: str) -> None:
    """Judge a command of ``words`` (the first known) and what it starts."""
    while True:
        head = words[0]
        if head is None:
            raise Unknowable(f"a wrapper starts {shown!r}, which is only known when the command runs")
        if EXPANDING.search(head) and head not in ("[",):
            raise Unknowable(f"the program {head!r} expands (a glob, a brace, a tilde or a new line)")
        if head in UNKNOWABLE:
            raise Unknowable(UNKNOWABLE[head])
        if head in KEYWORDS:  # the parser and the shell disagree (``! ! cmd``): not judged
            raise Unknowable(f"the shell keyword {head!r} read as a program")
        program = program_name(head)
        if program.startswith(("/proc/", "/dev/fd/", "/dev/stdin")):
            raise Unknowable(f"the program {program!r} is a file only known when the command runs")
        shell_code = _shell(program, words[1:]) if program in SHELLS else None
        # a shell running -c code is judged through ("sh -c": a deny of sh still holds)
        out.append(f"{program} -c" if shell_code is not None else program)
        if head in NAMING:
            _builtin(head, words[1:])
        if runner(program):
            return  # judged by name: refused unless allowed by name
        if shell_code is not None:
            _walk_source(shell_code, out, depth + 1)
            return
        if program in SHELLS:
            return
        if program == "find":
            _find(words[1:], out, depth)
            return
        spec = WRAPPERS.get(program)
        if spec is None:
            return
        rest = _through(program, spec, words[1:])
        if rest is None:
            return
        words = rest


def _name(word: str | None, what: str) -> None:
    """A variable a builtin assigns, unsets or tests: a plain name (an array element by a
    number only: a subscript is arithmetic, and ``a[$(cmd)]`` runs ``cmd``), never one of
    :data:`DANGEROUS_VARIABLE`."""
    if word is None:
        raise Unknowable(f"{what} names a variable only known when the command runs")
    match = SAFE_NAME.match(word)
    if match is None:
        raise Unknowable(f"{what} names {word[:60]!r}, which is not judged (an array subscript can run code)")
    if DANGEROUS_VARIABLE.match(match.group(1)):
        raise Unknowable(f"{what} assigns {match.group(1)}, which changes what commands start")


def _getopt(head: str, args: list[str | None], valued: str, flags: str) -> tuple[list[tuple[str, str | None]], int]:
    """A builtin's options as bash reads them (``-a NAME``, ``-aNAME``, ``-ra NAME``): the
    (letter, value) pairs and the index of its first operand (an expansion is taken for one:
    see :func:`_after_expansion`)."""
    found: list[tuple[str, str | None]] = []
    index = 0
    while index < len(args):
        word = args[index]
        if word is None:
            break
        if word == "--":
            return found, index + 1
        if not word.startswith("-") or word == "-":
            break
        index += 1
        for at, letter in enumerate(word[1:], start=1):
            if letter in valued:
                value = word[at + 1 :] or (args[index] if index < len(args) else None)
                if not word[at + 1 :]:
                    index += 1
                found.append((letter, value))
                break
            if letter not in flags:
                raise Unknowable(f"{head} option {word!r} is not judged")
            found.append((letter, None))
    return found, index


def _after_expansion(head: str, words: list[str | None]) -> None:
    """An expansion among a builtin's words can be an option (``x=-p; wait $x PATH``): every
    word after one must be a literal, and a name there a plain one."""
    expanded = False
    for word in words:
        if expanded:
            if word is None:
                raise Unknowable(f"{head} is given expansions that can be options naming a variable")
            if re.match(r"^[A-Za-z_]", word):
                _name(word, head)
        expanded = expanded or word is None


def _builtin(head: str, args: list[str | None]) -> None:
    """Builtins that assign, unset or test a variable by name (``read``, ``printf -v``,
    ``getopts``, ``wait -p``, ``unset``, ``test -v``, ``declare`` and its kin), ``set`` (its
    options) and ``jobs -x`` (which runs a command)."""
    if head == "read":
        options, first = _getopt(head, args, "adinNptu", "ers")
        for letter, value in options:
            if letter == "a":
                _name(value, "read -a")
        for word in args[first:]:
            _name(word, head)
    elif head == "printf":
        options, _ = _getopt(head, args[:2] if args and args[0] and args[0].startswith("-v") else [], "v", "")
        for _, value in options:
            _name(value, "printf -v")
        _after_expansion(head, args[:2])
    elif head == "getopts":
        if len(args) > 1:
            _name(args[1], head)
    elif head == "wait":
        options, first = _getopt(head, args, "p", "fn")
        for letter, value in options:
            if letter == "p":
                _name(value, "wait -p")
        _after_expansion(head, args[first:])
    elif head == "unset":
        _, first = _getopt(head, args, "", "fvn")
        for word in args[first:]:
            _name(word, head)
    elif head in ("test", "["):
        operands = args[:-1] if head == "[" and args and args[-1] == "]" else args
        for index, word in enumerate(operands):
            following = operands[index + 1] if index + 1 < len(operands) else None
            if word in ("-v", "-R") and index + 1 < len(operands):
                _name(following, f"{head} {word}")
            elif word is None and index + 1 < len(operands) and following not in BINARY_TESTS:
                raise Unknowable(f"{head} is given an expansion that can be -v, which runs an array subscript")
    elif head == "jobs":
        if any(word is None or (word.startswith("-") and "x" in word) for word in args):
            raise Unknowable("jobs -x runs a command")
    elif head == "set":
        _set_options(head, args)
    else:  # declare, typeset, local, export, readonly
        _assignments(head, args)


def _assignments(head: str, args: list[str | None]) -> None:
    for word in args:
        if word is None:
            raise Unknowable(f"{head} with an expansion is not judged")
        if word.startswith(("-", "+")):
            if set(word[1:]) & set("nif") or not word[1:].isalpha():
                raise Unknowable(f"{head} {word} is not judged (namerefs, integers, functions)")
            continue
        name, equals, value = word.partition("=")
        _name(name.removesuffix("+"), head)
        if equals and value.startswith("("):  # a quoted compound assignment: subscripts again
            raise Unknowable(f"{head} {word[:60]!r} is not judged (an array subscript can run code)")


def _set_options(head: str, args: list[str | None]) -> None:
    """``set``'s options: those that change how a command is read (``-k``: assignments
    anywhere, ``-o keyword``, ``-H``, ...) are refused."""
    index = 0
    while index < len(args):
        word = args[index]
        if word is None:
            raise Unknowable(f"{head} is given an expansion among its options")
        if word in ("--", "-") or word[:1] not in "-+" or len(word) < 2 or word.startswith("--"):
            return
        index += 1 + _option_word(head, word, args[index + 1 :], "")


def _option_word(head: str, word: str, following: list[str | None], own: str) -> int:
    """One word of set's (or a shell's) one-letter options, ``own`` the shell's own letters
    (``c``); how many following words its ``-o``/``-O`` take."""
    taken = 0
    for letter in word[1:]:
        if letter in "oO":
            value = following[taken] if taken < len(following) else None
            taken += 1
            allowed = SAFE_SET_NAMES if letter == "o" else SAFE_SHOPT_NAMES
            if value not in allowed and not (value is None and head == "set"):
                raise Unknowable(f"{head} {word[0]}{letter} {value!r} is not judged (it changes how commands are read)")
        elif letter not in SAFE_SET_LETTERS and letter not in own:
            raise Unknowable(f"{head} option {word!r} is not judged (it changes how commands are read)")
    return taken


def _through(head: str, spec: WrapperSpec, args: list[str | None]) -> list[str | None] | None:
    """The words of the command ``head`` starts (None: it starts none)."""
    index = 0
    operands = spec.operands
    while index < len(args):
        word = args[index]
        if word is None:
            raise Unknowable(f"{head} is given {'an expansion'} before its command")
        if word == "--":
            index += 1
            break
        if word.startswith("-") and word != "-" or (word == "-" and "-" in spec.flags):
            option, _, attached = word.partition("=")
            if option in spec.refused:
                raise Unknowable(spec.refused[option])
            if option in spec.queries:
                return None
            if option in spec.flags:
                index += 1
                continue
            if option in spec.valued:
                index += 1 if attached or "=" in word else 2
                continue
            if spec.numeric and re.match(r"^-\d+$", word):
                index += 1
                continue
            short = word[:2]
            if short in spec.valued and not word.startswith("--"):  # -oL, -n5
                index += 1
                continue
            raise Unknowable(f"{head} option {word!r} is not judged")
        if spec.assignments and _assignment(head, spec, word):
            index += 1
            continue
        if operands:
            operands -= 1
            index += 1
            continue
        break
    while spec.any_assignment and index < len(args) and _assignment(head, spec, args[index]):
        index += 1  # env -- A=1 cmd: still assignments
    rest = args[index:]
    if not rest:
        return [spec.default] if spec.default else None
    return rest


def _assignment(head: str, spec: WrapperSpec, word: str | None) -> bool:
    """Whether ``word`` is an assignment ``head`` makes (env: any word with ``=``, whatever its
    name: ``env 'a-b=1' cmd`` starts cmd); never of a variable that changes what starts."""
    if word is None or "=" not in word:
        return False
    if not spec.any_assignment and not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", word):
        return False
    variable = word.split("=", 1)[0]
    if DANGEROUS_VARIABLE.match(variable):
        raise Unknowable(f"{head} sets {variable}, which changes what commands start")
    return True


def _shell(program: str, args: list[str | None]) -> str | None:
    """The code a shell runs from ``-c`` (None: a script file, the shell's own business);
    refused when it reads commands from its input."""
    index = 0
    inline = False
    while index < len(args):
        word = args[index]
        if word is None:
            raise Unknowable(f"{program} is given an expansion among its options")
        if word == "--" or word == "-":
            index += 1
            break
        if word in ("--rcfile", "--init-file"):
            index += 2
            continue
        if word.startswith("--"):
            if word in ("--norc", "--noprofile", "--posix", "--restricted", "--noediting"):
                index += 1
                continue
            raise Unknowable(f"{program} option {word!r} is not judged")
        if word[:1] in "-+" and len(word) > 1:
            letters = word[1:]
            if not re.match(r"^[a-zA-Z]+$", letters) or "s" in letters or "i" in letters:
                raise Unknowable(f"{program} {word} reads commands from its input")
            if "l" in letters:
                raise Unknowable(f"{program} {word} is a login shell: it runs ~/.profile first")
            inline = inline or "c" in letters
            # -e, -o pipefail, -O nullglob: judged as set's (-eo pipefail takes the next word)
            index += 1 + _option_word(program, word, args[index + 1 :], "c")
            continue
        break
    rest = args[index:]
    if inline:
        if not rest or rest[0] is None:
            raise Unknowable(f"{program} -c runs a string only known when the command runs")
        return rest[0]
    if not rest:
        raise Unknowable(f"{program} without a script reads commands from its input")
    if rest[0] is None:
        raise Unknowable(f"{program} runs a script only known when the command runs")
    if rest[0] == "/dev/stdin" or rest[0].startswith(("/dev/fd/", "/proc/")):
        raise Unknowable(f"{program} {rest[0]} reads commands from its input")
    return None


def _find(args: list[str | None], out: list[str], depth: int) -> None:
    index = 0
    while index < len(args):
        word = args[index]
        if word in FIND_EXEC:
            end = index + 1
            while end < len(args) and args[end] not in (";", "+"):
                end += 1
            inner = args[index + 1 : end]
            if not inner:
                raise Unknowable(f"find {word} without a command")
            _program(inner, out, depth, "find " + str(word))
            index = end
        index += 1
