"""What the policy knows of shell and programs: builtins, keywords, runners, shells, wrappers
and their options, dangerous variables, the syntax it reads, and how a program is named."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

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
#: Builtins judged by the variables they name and the options they take (:func:`.words.judge_builtin`).
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
