"""The command policy (skill_executor/policy/), pure: one bypass attempt per shell
metacharacter class, each denied or judged through to the program it starts; the policy
file's errors; the decision's stable error."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from skill_executor.errorcodes import CATALOGUE
from skill_executor.policy import PolicyError, analyse, check, parse_policy, program_name

#: allow python3 and ls only, deny curl and rm: what an agent loop's skill typically gets.
POLICY = parse_policy(
    """
rules:
  - name: tight
    key: "*"
    skill: math-tools
    allow: [python3, ls, cat]
    deny: [curl, rm]
    approval: never
  - name: open
    key: "*"
    skill: "*"
    deny: [curl]
    approval: on-first-use
"""
)


def decide(command: str, skill: str = "math-tools", env: dict[str, str] | None = None) -> tuple[bool, str | None]:
    decision = check(command, "key1", skill, POLICY, env)
    return decision.allowed, decision.reason


#: (class, command): each must be refused under the allow list (rm/curl never run).
BYPASSES = [
    ("semicolon", "ls; rm -rf x"),
    ("and", "ls && rm -rf x"),
    ("or", "ls || curl x"),
    ("pipe", "cat x | rm y"),
    ("pipe-stderr", "ls |& rm y"),
    ("background", "ls & rm y"),
    ("newline", "ls\nrm y"),
    ("command substitution in an argument", "ls $(rm y)"),
    ("command substitution as the program", "$(echo rm) y"),
    ("backticks as the program", "`echo rm` y"),
    ("backticks in a string", 'ls "`rm y`"'),
    ("process substitution", "cat <(rm y)"),
    ("output process substitution", "ls >(rm y)"),
    ("variable as the program", "x=rm; $x y"),
    ("quoted variable as the program", 'x=rm; "$x" y'),
    ("eval", "eval 'rm y'"),
    ("source", "source ./evil.sh"),
    ("dot", ". ./evil.sh"),
    ("exec", "exec rm y"),
    ("env", "env rm y"),
    ("env with options and assignments", "env -i A=1 rm y"),
    ("env -S", "env -S 'rm y'"),
    ("command", "command rm y"),
    ("builtin eval", "builtin eval 'rm y'"),
    ("xargs", "ls | xargs rm"),
    ("find -exec", "find . -exec rm {} ;"),
    ("nice", "nice -n 5 rm y"),
    ("timeout", "timeout 5 rm y"),
    ("nohup", "nohup rm y"),
    ("time", "time rm y"),
    ("stdbuf", "stdbuf -oL rm y"),
    ("sh -c", "sh -c 'rm y'"),
    ("bash -c after options", "bash -e -o pipefail -c 'ls; rm y'"),
    ("bash -c of an expansion", 'bash -c "$CMD"'),
    ("sudo", "sudo ls"),
    ("alias", "alias ls=rm; ls y"),
    ("function body", "f() { rm y; }; f"),
    ("heredoc-fed shell", "bash <<EOF\nrm y\nEOF"),
    ("here-string-fed shell", "bash <<< 'rm y'"),
    ("piped shell", "echo 'rm y' | sh"),
    ("shell reading stdin by path", "echo 'rm y' | bash /dev/stdin"),
    ("command substitution in a heredoc body", "cat <<EOF\n$(rm y)\nEOF"),
    ("path to a denied program", "/usr/bin/rm y"),
    ("relative path named like an allowed program", "./ls y"),
    ("path outside the system dirs", "/tmp/python3 x"),
    ("PATH prefix assignment", "PATH=/tmp python3 x"),
    ("PATH export", "export PATH=/tmp:$PATH; python3 x"),
    ("PATH through env", "env PATH=/tmp python3 x"),
    ("PATH as a loop variable", "for PATH in /tmp; do python3 x; done"),
    ("PATH by read", "read PATH < f; python3 x"),
    ("PATH by printf -v", "printf -v PATH /tmp; python3 x"),
    ("PATH by arithmetic", "((PATH=5)); python3 x"),
    ("nameref to PATH", "declare -n r=PATH; r=/tmp; python3 x"),
    ("hash -p", "hash -p /tmp/evil python3; python3 x"),
    ("IFS", "IFS=/; x=a/rm; $x"),
    ("BASH_ENV in the request's env", None),
    ("brace expansion as the program", "{rm,y}"),
    ("glob as the program", "/usr/bin/r?"),
    ("tilde as the program", "~/rm y"),
    ("ANSI-C quoted program", "$'\\x72m' y"),
    ("line continuation in the program's name", "r\\\nm y"),
    ("arithmetic injection", "x='a[$(rm y)]'; echo $((x))"),
    ("arithmetic test injection", "[[ $x -eq 1 ]]"),
    ("array subscript", "echo ${a[$x]}"),
    ("indirect expansion", "echo ${!x}"),
    ("prompt expansion", "echo ${x@P}"),
    ("trap", "trap 'rm y' EXIT"),
    ("coproc", "coproc rm y"),
    ("unparsable", "ls 'unclosed"),
    ("a keyword the parser reads as a program", "! ! rm y"),
    ("nested backticks", "ls `echo \\`rm y\\``"),
    ("a <<- here-document body", "cat <<-EOF\n\t$(rm y)\n\tEOF"),
    ("backticks in a default inside a string", 'ls "${x:-`rm y`}"'),
    # found by attacking the policy (issue 29): each ran rm or another program unjudged
    ("a vertical tab before a comment", "ls \v#$(rm y)"),
    ("a carriage return before a comment", "ls \r#$(rm y)"),
    ("a form feed before a comment", "ls\f#$(rm y)"),
    ("single quotes in a double-quoted default", "echo \"${x-'$(rm y)'}\""),
    ("single quotes in a here-string's default", "cat <<< \"${x:-'$(rm y)'}\""),
    ("a quoted string in arithmetic", "echo $(( 'a[$(rm y)]' ))"),
    ("a quoted string in (( ))", "(( 'a[$(rm y)]' ))"),
    ("a quoted string in $[ ]", "echo $[ 'a[$(rm y)]' ]"),
    ("an array literal's subscript", "x='$(rm y)'; a=([$x]=1)"),
    ("an array literal's ANSI-C subscript", "a+=([$'\\x24(rm y)']=1)"),
    ("unset of an array element", "a=(1); unset 'a[$(rm y)]'"),
    ("read into an array element", "read 'a[$(rm y)]' <<< x"),
    ("printf -v into an array element", "printf -v 'a[$(rm y)]' x"),
    ("test -v of an array element", "test -v 'a[$(rm y)]'"),
    ("[ -v of an array element", "[ -v 'a[$(rm y)]' ]"),
    ("[[ -v of an array element", "[[ -v 'a[$(rm y)]' ]]"),
    ("wait -p into an array element", "ls & wait -n -p 'a[$(rm y)]'"),
    ("getopts into an array element", "getopts x 'a[$(rm y)]'"),
    ("jobs -x", "jobs -x rm y"),
    ("getopts into PATH", "getopts x PATH; ls"),
    ("read into PATH[0]", "read PATH[0] <<< /tmp; ls"),
    ("read -a with the name attached", "read -aPATH <<< /tmp; ls"),
    ("printf -v PATH[0]", "printf -v PATH[0] /tmp; ls"),
    ("printf -v with the name attached", "printf -vPATH /tmp; ls"),
    ("unset of a quoted PATH", "unset 'PATH'; ls"),
    ("wait -p PATH", "wait -p PATH; ls"),
    ("wait -p with the name attached", "ls & wait -n -pPATH; ls"),
    ("builtin export", "builtin export PATH=/tmp; ls"),
    ("command unset", "command unset PATH; ls"),
    ("a redirection's variable named PATH", ": {PATH}>/dev/null; ls"),
    ("set -k (assignments anywhere)", "set -k; ls PATH=/tmp"),
    ("set -o keyword", "set -o keyword; ls PATH=/tmp"),
    ("bash -k", "bash -k -c 'ls PATH=/tmp'"),
    ("bash -O expand_aliases", "bash -O expand_aliases -c 'BASH_ALIASES[ls]=rm\nls'"),
    ("BASH_ALIASES", "BASH_ALIASES[ls]=rm; ls"),
    ("BASH_CMDS by read", "read BASH_CMDS <<< x; ls"),
    ("a login shell reads ~/.profile", "echo rm > ~/.profile; bash -lc ls"),
    ("a login sh", "echo rm > ~/.profile; sh -l -c ls"),
    ("exec -l makes a login shell", "echo rm > ~/.profile; exec -l bash -c ls"),
    ("exec -a -name makes a login shell", "echo rm > ~/.profile; exec -a -bash bash -c ls"),
    ("zsh reads ~/.zshenv for every command", "echo rm > ~/.zshenv; zsh -c ls"),
    # found by a fuzz of these pieces: bash reads a=(1)ls as one word, the parser as a=(1) and ls
    ("an array literal glued to the next word", "a=(1)ls rm y"),
    ("an element's array literal glued to the next word", "a[0]+=(1)'ls' rm y"),
    # found by the fuzz: bash expands the word of >& twice (once it is no descriptor number)
    ("a quoted substitution after >&", "ls >& '$(rm y)'"),
    ("an escaped substitution after 1>&", "ls 1>& \\$\\(rm y\\)"),
    ("a variable's substitution after >&", "x='$(rm y)'; ls >& \"$x\""),
    ("quoted backticks after >&", "exec >&'`rm y`'"),
]


@pytest.mark.parametrize("what,command", BYPASSES, ids=[b[0] for b in BYPASSES])
def test_a_bypass_attempt_is_denied_naming_the_rule(what: str, command: str | None) -> None:
    env = {"BASH_ENV": "./evil.sh"} if command is None else None
    decision = check(command or "python3 x.py", "key1", "math-tools", POLICY, env)
    assert not decision.allowed, what
    assert decision.rule == "tight"
    error = decision.error()
    assert error.code == "command_denied" and error.status == 403
    assert error.details is not None and error.details["rule"] == "tight"
    assert error.message.startswith("command refused by policy rule 'tight': ")


#: (class, command): each must be refused under a rule that only denies (curl): builtins that
#: change a lookup, reached through wrappers no allow list stops, and launchers.
DENY_ONLY_BYPASSES = [
    ("builtin export", "builtin export PATH=/tmp; ls"),
    ("command unset", "command unset PATH; ls"),
    ("builtin declare", "builtin declare 'PATH=/tmp'; ls"),
    ("builtin unset of an array element", "a=(1); builtin unset 'a[$(curl x)]'"),
    ("builtin getopts", "builtin getopts x PATH; ls"),
    ("command test -v", "command test -v 'a[$(curl x)]'"),
    ("setarch", "setarch x86_64 curl x"),
    ("linux64", "linux64 curl x"),
    ("x86_64", "x86_64 curl x"),
    ("ld.so", "ld.so /usr/bin/curl x"),
    ("the dynamic loader by path", "/lib64/ld-linux-x86-64.so.2 /usr/bin/curl x"),
    ("the dynamic loader by its other path", "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 /usr/bin/curl x"),
    ("sg", "sg users -c 'curl x'"),
    ("run-parts", "run-parts ./dir"),
    ("zsh", "zsh -c 'ls'"),
    ("a program by its file descriptor", "exec 3</usr/bin/curl; /proc/self/fd/3 x"),
    ("a program by /dev/fd", "exec 3</usr/bin/curl; /dev/fd/3 x"),
    ("a program by /proc/self/exe", "/proc/self/exe -c 'curl x'"),
    ("env with an assignment of a name no shell has", "env 'a-b=1' curl x"),
    ("env with such an assignment after --", "nice env -- x.y=1 curl x"),
    ("env exporting a function", "env 'BASH_FUNC_ls%%=() { curl x; }' bash -c ls"),
]


@pytest.mark.parametrize("what,command", DENY_ONLY_BYPASSES, ids=[b[0] for b in DENY_ONLY_BYPASSES])
def test_a_bypass_attempt_under_a_deny_only_rule_is_denied(what: str, command: str) -> None:
    decision = check(command, "key1", "other", POLICY)
    assert not decision.allowed, what
    assert decision.rule == "open"


#: Commands that make an allowed name start another file (found by attacking the policy):
#: real bash runs ./evil/ls for each; the policy must refuse them all.
LOOKUP_ATTACKS = [
    "getopts x PATH; ls",  # PATH="?": a folder named ? in the working directory
    "wait -p PATH; ls",  # PATH="": the working directory
    "unset 'PATH'; ls",  # no PATH: the working directory
    "read PATH[0] <<< ../evil; ls",
    "read -aPATH <<< ../evil; ls",
    "printf -v 'PATH[0]' ../evil; ls",
    "printf -vPATH ../evil; ls",
    "x=-v; printf $x PATH ../evil; ls",  # an expansion that is an option
    "x=-p; wait $x PATH; ls",
    "set -k; ls PATH=../evil",
    "bash -k -c 'ls PATH=../evil'",
    "echo 'PATH=../evil' > ~/.profile; bash -lc ls",
    "echo 'PATH=../evil' > ~/.profile; exec -a -bash bash -c ls",
]


@pytest.mark.parametrize("command", LOOKUP_ATTACKS)
def test_a_name_made_to_start_another_file_is_refused(tmp_path: Path, command: str) -> None:
    work, home = tmp_path / "work", tmp_path / "home"
    home.mkdir()
    for folder in (tmp_path / "evil", work / "?", work):  # ../evil, ?, the working directory
        folder.mkdir(parents=True, exist_ok=True)
        program = folder / "ls"
        program.write_text('#!/bin/bash\necho "evil-ls" >> "$POLICY_LOG"\n')
        program.chmod(0o755)
    log = tmp_path / "log"
    log.write_text("")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "POLICY_LOG": str(log)}
    subprocess.run(["bash", "-c", command], env=env, cwd=work, capture_output=True, timeout=5)
    assert "evil-ls" in log.read_text().split()  # the attack is real
    decision = check(command, "key1", "math-tools", POLICY)
    assert not decision.allowed and decision.rule == "tight"


def _catalog(path: Path, translations: dict[str, str]) -> None:
    """A gettext catalog (.mo) of ``translations``."""
    import struct

    keys = sorted({"": "Content-Type: text/plain; charset=UTF-8\n", **translations}.items())
    ids = strs = b""
    places = []
    for key, value in keys:
        places.append((len(key.encode()), len(ids), len(value.encode()), len(strs)))
        ids += key.encode() + b"\0"
        strs += value.encode() + b"\0"
    count = len(keys)
    first_id = 28 + 16 * count
    data = struct.pack("<7I", 0x950412DE, 0, count, 28, 28 + 8 * count, 0, 0)
    data += b"".join(struct.pack("<2I", length, first_id + at) for length, at, _, _ in places)
    data += b"".join(struct.pack("<2I", length, first_id + len(ids) + at) for _, _, length, at in places)
    path.parent.mkdir(parents=True)
    path.write_bytes(data + ids + strs)


def test_a_translated_string_is_refused_it_can_run_code(tmp_path: Path) -> None:
    """$"..." is looked up in a gettext catalog (TEXTDOMAINDIR, TEXTDOMAIN, LANGUAGE) and the
    translation is expanded as a double-quoted string: a catalog a skill or a bundle ships
    turns ``echo $"hi"`` into ``$(cmd)`` (bash translates a line as it reads it)."""
    _catalog(tmp_path / "locale" / "fr" / "LC_MESSAGES" / "t.mo", {"hi": "$(rm y)"})
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "rm").write_text('#!/bin/bash\necho rm >> "$POLICY_LOG"\n')
    (tmp_path / "bin" / "rm").chmod(0o755)
    command = 'TEXTDOMAINDIR=locale TEXTDOMAIN=t\necho $"hi"'  # LANGUAGE=fr: the request's env
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "LANG": "C.UTF-8", "LANGUAGE": "fr"}
    env["POLICY_LOG"] = str(tmp_path / "log")
    subprocess.run(["bash", "-c", command], env=env, cwd=tmp_path, capture_output=True, timeout=5)
    assert (tmp_path / "log").read_text().split() == ["rm"]  # the attack is real
    assert not check(command, "key1", "math-tools", POLICY, {"LANGUAGE": "fr"}).allowed
    assert not check('echo $"hi"', "key1", "math-tools", POLICY, {"TEXTDOMAINDIR": "locale"}).allowed


#: (command, the programs it is judged as): quotes, paths and wrappers see through.
JUDGED = [
    ("p''ython3 x.py", ("python3",)),
    ('"py"thon3 x.py', ("python3",)),
    ("p\\ython3 x.py", ("python3",)),
    ("/usr/bin/python3 scripts/x.py", ("python3",)),
    ("python3 scripts/x.py && ls | cat", ("cat", "ls", "python3")),
    ("cd sub && python3 x.py > out.txt", ("cd", "python3")),
    ("timeout 5 python3 x.py", ("python3", "timeout")),
    ("env -i A=1 python3 x.py", ("env", "python3")),
    ("sh -c 'python3 x.py; ls'", ("ls", "python3", "sh -c")),
    ("find . -name '*.py' -exec cat {} +", ("cat", "find")),
    ("python3 \\\n  x.py \\\n  --flag", ("python3",)),
    ("echo $((1 + 2))", ("echo",)),
]


@pytest.mark.parametrize("command,programs", JUDGED)
def test_a_command_is_judged_by_the_programs_it_starts(command: str, programs: tuple[str, ...]) -> None:
    assert analyse(command).problem is None
    assert analyse(command).sorted() == programs


def test_builtins_that_name_variables_pass_as_they_are_used() -> None:
    for command in (
        "ls & wait $!",
        'ls & pid=$!; wait "$pid"',
        "ls & wait -n",
        "read -r line < f; echo $line",
        "read -rd '' -a parts < f",
        "printf '%s\\n' \"$x\"",
        "printf -v out '%s' x",
        "getopts ab opt",
        "unset -v x y",
        '[ -n "$x" ]',
        '[ "$x" = y ]',
        "test -v x",
        "[[ -v x ]]",
        "set -euo pipefail; ls",
        "set -- a b",
        "bash -e -o pipefail -c 'ls'",
        "declare -a arr=(1 2); export A=1",
        "ls 2>&1 >&2",
    ):
        decision = check(command, "key1", "math-tools", POLICY)
        assert decision.allowed, (command, decision.reason)


def test_allowed_commands_pass_and_neutral_builtins_need_no_allow() -> None:
    assert decide("python3 scripts/x.py a b") == (True, None)
    assert decide("cd sub && echo hi && python3 x.py") == (True, None)
    assert decide("sh -c 'python3 x.py'") == (True, None)  # sh -c is judged through
    assert decide("wget x") == (False, "program 'wget' is not allowed")
    assert decide("rm x") == (False, "program 'rm' is denied")


def test_a_deny_only_rule_refuses_runners_it_cannot_see_through() -> None:
    assert decide("ls; wget x", skill="other") == (True, None)
    assert decide("env curl x", skill="other") == (False, "program 'curl' is denied")
    allowed, reason = decide("sudo curl x", skill="other")
    assert not allowed and reason is not None and "'sudo' starts programs" in reason


def test_program_names() -> None:
    assert program_name("/usr/bin/python3") == "python3"
    assert program_name("/bin/ls") == "ls"
    assert program_name("python3") == "python3"
    assert program_name("./x") == "./x"
    assert program_name("scripts/../x") == "./x"
    assert program_name("scripts/run.sh") == "scripts/run.sh"
    assert program_name("/tmp/python3") == "/tmp/python3"


def test_no_policy_or_no_rule_allows_without_approval() -> None:
    assert check("rm -rf x", "k", "s", None).allowed
    narrow = parse_policy("rules: [{key: abc, skill: pdf, deny: [rm]}]")
    decision = check("rm -rf x", "other", "pdf", narrow)
    assert decision.allowed and decision.rule is None and decision.approval == "never"
    assert not check("rm -rf x", "abc", "PDF", narrow).allowed  # skills match in any case


def test_on_first_use_remembers_programs() -> None:
    decision = check("ls && wget x", "k", "other", POLICY)
    assert decision.allowed and decision.approval == "on-first-use" and decision.programs == ("ls", "wget")
    assert decision.needs_approval(())
    assert decision.needs_approval({"ls"})
    assert not decision.needs_approval({"ls", "wget", "python3"})


def test_on_first_use_never_remembers_a_program_that_starts_others_unseen() -> None:
    """Approving ``flock l ls`` must not approve ``flock l curl``: a runner's programs are
    not known, so its run waits every time (as a command whose programs cannot be known)."""
    policy = parse_policy("rules: [{key: '*', skill: '*', allow: [flock, ls], approval: on-first-use}]")
    first = check("flock /tmp/l ls", "k", "s", policy)
    assert first.allowed and first.needs_approval(())
    later = check("flock /tmp/l curl x", "k", "s", policy)
    assert later.allowed and later.needs_approval(first.programs)
    lenient = parse_policy("rules: [{key: '*', skill: '*', approval: on-first-use}]")
    assert check("sudo curl x", "k", "s", lenient).needs_approval(check("sudo ls", "k", "s", lenient).programs)


def test_an_inline_bundle_is_judged_by_the_rules_for_any_skill() -> None:
    """A bundle's name is its sender's choice: a bundle named math-tools must not get the
    rule written for the installed math-tools (only a ``*`` rule)."""
    installed = check("wget x", "key1", "math-tools", POLICY)
    assert installed.rule == "tight" and not installed.allowed
    bundled = check("curl x", "key1", "math-tools", POLICY, bundled=True)
    assert bundled.rule == "open" and not bundled.allowed
    trusting = parse_policy(
        "rules: [{skill: math-tools, approval: never}, {skill: '*', allow: [ls], approval: always}]"
    )
    decision = check("python3 evil.py", "k", "math-tools", trusting, bundled=True)
    assert not decision.allowed and decision.rule == "rules[1]"


@pytest.mark.parametrize(
    "text,message",
    [
        ("rules: [", "policy file p.yaml: not valid YAML: "),
        ("- a\n- b", "policy file p.yaml: expected a mapping with 'rules', got list"),
        ("rules: []\nextra: 1", "policy file p.yaml: extra: Extra inputs are not permitted"),
        ("rules: [{key: '*', alow: [ls]}]", "policy file p.yaml: rules.0.alow: Extra inputs are not permitted"),
        (
            "rules: [{approval: sometimes}]",
            "policy file p.yaml: rules.0.approval: Input should be 'always', 'never' or 'on-first-use'",
        ),
        ("rules: [{allow: [/usr/bin/ls]}]", "policy file p.yaml: rules.0: '/usr/bin/ls' is not a program name"),
    ],
)
def test_a_bad_policy_file_is_refused_with_the_exact_problem(text: str, message: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy(text, "p.yaml")
    assert caught.value.message.startswith(message), caught.value.message
    assert caught.value.code == "invalid_policy_file"


def test_the_codes_are_catalogued() -> None:
    for code in (
        "command_denied",
        "invalid_policy_file",
        "approval_rejected",
        "approval_expired",
        "approval_not_pending",
    ):
        assert code in CATALOGUE
    assert CATALOGUE["command_denied"].status == 403


# -- differential: what real bash starts is always among what the policy judged -------------

#: Commands an attacker might try; the fake programs below log their names when bash starts them.
DIFFERENTIAL = [
    "x; y",
    "x && rm",
    "echo $(rm)",
    "x | xargs rm",
    "x | xargs -n1 rm",
    "find . -maxdepth 0 -exec rm {} \\;",
    "f(){ rm; }; f",
    "function f { rm; }; f",
    "function f() ( rm ); f",
    "x=(a $(rm))",
    'echo "a`rm`b"',
    '[ -n "$(rm)" ]',
    "[[ -n $(rm) ]]",
    "[[ a == $(rm) ]]",
    "for i in $(rm); do :; done",
    "for ((i=0;i<1;i++)); do rm; done",
    "select i in $(rm); do break; done </dev/null",
    "<x rm",
    ">out rm",
    "2>/dev/null rm",
    "A=1 rm",
    "A=$(rm) x",
    "declare a=$(rm)",
    "export a=$(rm)",
    "readonly b=$(rm)",
    "echo $(<$(rm))",
    "cat <(rm) >(x)",
    "coproc rm",
    "exec {fd}< <(rm)",
    'r"m"',
    "'r'm",
    "\\r\\m",
    "${x:-rm}",
    "rm #comment",
    "x ; # \\\nrm",
    "echo a \\\n; rm",
    "echo 'a\nb'; rm",
    ": ${x:=$(rm)}",
    "echo ${x/a/$(rm)}",
    "echo ${x//a/`rm`}",
    "case $(rm) in *) ;; esac",
    "case a in $(rm)) ;; esac",
    "until rm; do break; done",
    "echo $[ $(rm) ]",
    "(( $(rm) ))",
    "echo {a,b}$(rm)",
    "echo $'\\x41'$(rm)",
    'echo $"a"$(rm)',
    "x= rm",
    "rm=1; x",
    "{ x; } 2> >(rm)",
    "echo `echo \\`rm\\``",
    "cat <<-EOF\n\t$(rm)\n\tEOF",
    "cat <<E\\OF\n$(rm)\nEOF",
    "x <<EOF; rm\na\nEOF",
    "x <<EOF && rm\na\nEOF",
    "cat <<A <<B\n$(rm)\nA\n$(curl)\nB",
    'set -- rm; "$@"',
    'sh -c "echo \\$(rm)"',
    "bash -xc rm",
    "bash -c -- rm",
    "bash --norc -c rm",
    "env -- rm",
    "env -C /tmp rm",
    "xargs -a /dev/null rm",
    "echo a | xargs -I{} rm {}",
    "find . -maxdepth 0 -execdir rm \\;",
    "nice -5 rm",
    "timeout --signal=KILL 2 rm",
    "stdbuf -o0 rm",
    "command -p rm",
    "exec -a foo rm",
    "echo ok&rm",
    "x <<< a; rm",
    "echo $(( 1 )) ; rm",
    "x 'a'\"b\"$'c' ; rm",
    "r\\\nm",
    "cat <<EOF | sh\nrm\nEOF",
    "echo rm | xargs sh",
    "x $(: ; rm)",
    'echo "$(cat <<EOF\n$(rm)\nEOF\n)"',
    "alias x=rm\nx",
    'eval "$(echo rm)"',
    "echo ${x@P}",
    "x=rm; ${x}",
    'IFS=m; x="rXm"; $x',
    'f=rm; "$f"',
    "printf -v cmd rm; $cmd",
    "read -r c <<< rm; $c",
    "echo `rm` $(curl)",
    "case x in x) rm ;; esac",
    "if rm; then :; fi",
    "while rm; do break; done",
    "[[ $(rm) ]]",
    "x() { rm; }; x",
    "exec 3< <(rm)",
    ": <(rm)",
    "true | rm",
    "a&&b||c;d&e|f",
    'echo "${x:-`rm`}"',
    'echo "${x:-"$(rm)"}"',
    "echo ${x:-'$(rm)'}",
    ": $'$(rm)'",
    "echo $(echo \\$\\(rm\\))",
    'echo "\\$(rm)"',
    "echo \\`rm\\`",
    *(command for _, command in BYPASSES if command is not None and "/" not in command),
    'time a=1 x "$(rm)"',  # found by the fuzz below: time is a keyword, assignments first
    "! ! rm",  # found by the fuzz below: the parser reads the second ! as a program
]
FAKE = ("rm", "curl", "ls", "python3", "cat", "x", "y", "a", "b", "c", "d", "e", "f", "evil", "wget")


@pytest.fixture(scope="module")
def fake_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fake")
    (root / "bin").mkdir()
    (root / "work").mkdir()
    for name in FAKE:
        program = root / "bin" / name
        program.write_text('#!/bin/bash\necho "${0##*/}" >> "$POLICY_LOG"\n')
        program.chmod(0o755)
    return root


@pytest.mark.parametrize("command", DIFFERENTIAL)
def test_what_bash_starts_is_what_the_policy_judged(fake_bin: Path, command: str) -> None:
    log = fake_bin / "log"
    log.write_text("")
    env = {"PATH": f"{fake_bin / 'bin'}:/usr/bin:/bin", "HOME": str(fake_bin), "POLICY_LOG": str(log)}
    try:
        subprocess.run(
            ["bash", "-c", command],
            env=env,
            cwd=fake_bin / "work",
            capture_output=True,
            timeout=5,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        pass
    started = set(log.read_text().split())
    analysis = analyse(command)
    if analysis.problem is None:  # judged: every program bash started was among those judged
        judged = {p.removesuffix(" -c") for p in analysis.programs}
        assert started <= judged, f"bash started {sorted(started - judged)}, unseen by the policy"


#: Pieces the fuzz below joins: programs, quotes, substitutions, operators, keywords, wrappers.
PIECES = [
    "rm", "x", "`rm`", "$(rm)", "\\`rm\\`", "'rm'", '"rm"', "r''m", "\\rm", "${x:-rm}", "${x:-`rm`}", "$(x)",
    "<(rm)", ">(rm)", ";", "&&", "||", "|", "&", "\n", " ", " ", " ", "<<EOF\n$(rm)\nEOF\n",
    "<<-EOF\n\t$(rm)\n\tEOF\n", "<<'EOF'\n$(rm)\nEOF\n", "#", "\\\n", "{", "}", "(", ")", "$((1))", "((1))",
    '"', "'", "$'\\x72m'", "echo", "env", "exec", "command", "nice", "sh -c", "bash -c", "xargs", '"$(rm)"',
    "'$(rm)'", "$", "`", "$[1]", "a=1", "a=$(rm)", "!", "time", "then", "do", "if", "fi", "for", "in", "done",
    "case", "esac", ";;", "f()", "function", "[[", "]]", "=~", "cat",
    # what attacking the policy found: quotes in defaults, subscripts, builtins naming variables, >&, glued arrays
    "${x-'$(rm)'}", "'a[$(rm)]'", "read", "printf -v", "unset", "getopts x", "wait -p", "test -v", "[ -v", "]",
    "set -k", "a=(1)", ">&", "\v", "\r", "jobs -x",
]  # fmt: skip
FUZZ_CASES = 2000


def test_a_fuzz_of_shell_pieces_never_starts_an_unjudged_program(fake_bin: Path) -> None:
    """Random commands of tricky pieces (seeded): each the policy judges (does not refuse)
    is run by real bash, and everything it starts must be among what was judged."""
    import random

    chance = random.Random(2640)
    log = fake_bin / "log"
    env = {"PATH": f"{fake_bin / 'bin'}:/usr/bin:/bin", "HOME": str(fake_bin), "POLICY_LOG": str(log)}
    unseen = []
    judged = 0
    for _ in range(FUZZ_CASES):
        command = "".join(chance.choice(PIECES) + chance.choice(("", " ")) for _ in range(chance.randint(1, 7)))
        analysis = analyse(command)
        if analysis.problem is not None:
            continue
        judged += 1
        log.write_text("")
        try:
            subprocess.run(
                ["bash", "-c", command], env=env, cwd=fake_bin / "work", capture_output=True, timeout=3,
                stdin=subprocess.DEVNULL,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            pass
        started = set(log.read_text().split())
        if not started <= {p.removesuffix(" -c") for p in analysis.programs}:
            unseen.append((command, sorted(started)))
    assert unseen == []
    assert judged > FUZZ_CASES // 10  # the rest are refused (fail closed)
