"""The command policy is enforced where programs really start: at ``execve``, in the sandbox.

The parser (:mod:`skill_executor.policy`) judges a command's text; a shell's working
folder, a copy, a memfd, the dynamic loader or a permitted interpreter's ``subprocess``
name the same program differently.  Each attack below gets past the parser (the run
starts), and the launcher's exec supervisor (``images/runner/launcher.c``) refuses the
program when the kernel is about to run it: the run ends at once, its result carries
``policy_denied_exec`` naming the rule, and nothing after the refused exec runs.  Allowed
work still runs.  On runc and gVisor, per-run containers and the warm pool, and on bwrap.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from skill_executor.core import Executor
from skill_executor.errors import ExecutorError
from skill_executor.policy import ExecRule, check, parse_policy
from skill_executor.runs.models import RunResult
from skill_executor.runtimes.docker.launcher import LauncherFrames
from skill_executor.runtimes.streams import ProtocolError

from ..conftest import HARDENING_RUNTIMES, make_settings, require_runtime
from ..helpers import run

POLICY = """
rules:
  - {name: no-id, key: '*', skill: math-tools, deny: [id]}
  - {name: python-only, key: '*', skill: exec-probe, allow: [python3, ls, cat, scripts/hello.pl]}
  - {name: no-python, key: '*', skill: no-python, deny: [python3]}
"""

#: Each gets past the parser under the rule ``no-id`` (deny: [id]) and runs /usr/bin/id.
DENY_ID_BYPASSES = {
    "cd and a relative name": "cd /usr/bin && ./id; echo after",
    "pushd": "pushd /usr/bin >/dev/null && ./id; echo after",
    "a path from /": "cd / && usr/bin/id; echo after",
    "a copy in out/": "cp /usr/bin/id /workspace/out/x && /workspace/out/x; echo after",
    "a copy in work/": "cp /usr/bin/id /workspace/work/x && /workspace/work/x; echo after",
    "a symbolic link": "ln -s /usr/bin/id /tmp/y && /tmp/y; echo after",
    # (the image's /usr is another file system than the workspace: a link of a copy)
    "a hard link": (
        "cp /usr/bin/id /workspace/work/a && ln /workspace/work/a /workspace/work/b && rm /workspace/work/a "
        "&& /workspace/work/b; echo after"
    ),
    "memfd and execveat": (
        "python3 -c \"import os; fd = os.memfd_create('m'); os.write(fd, open('/usr/bin/id', 'rb').read()); "
        "os.execve(fd, ['id'], {})\"; echo after"
    ),
    "python3's subprocess": "python3 -c \"import subprocess; subprocess.run(['id'])\"; echo after",
    "a thread's exec": (
        "python3 -c \"import os, threading; t = threading.Thread(target=lambda: os.execv('/usr/bin/id', ['id'])); "
        't.start(); t.join()"; echo after'
    ),
}

UNTRACED_CLONE = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
r = libc.syscall(56, 0x00800000 | 17, 0, 0, 0, 0)  # clone(CLONE_UNTRACED | SIGCHLD)
if r == 0:
    os.execv("/usr/bin/id", ["id"])
print("clone", r, ctypes.get_errno())
r = libc.syscall(435, 0, 0)  # clone3: its flags cannot be read by a filter
print("clone3", r, ctypes.get_errno())
"""


def write_skills(root: Path) -> None:
    probe = root / "exec-probe"
    (probe / "scripts").mkdir(parents=True, exist_ok=True)
    (probe / "SKILL.md").write_text(
        "---\nname: exec-probe\ndescription: Probe what a command may start under an allow list.\n---\n# probe\n"
    )
    script = probe / "scripts/hello.pl"
    script.write_text('#!/usr/bin/env perl\nprint "hello from perl\\n";\n')
    script.chmod(0o755)
    other = root / "no-python"
    other.mkdir(exist_ok=True)
    (other / "SKILL.md").write_text(
        "---\nname: no-python\ndescription: A skill whose runs may not start python3.\n---\n# none\n"
    )


@pytest.fixture(params=[*HARDENING_RUNTIMES, "bwrap"])
def executor(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Executor]:
    """An executor under :data:`POLICY`: Docker per-run and warm, on runc and gVisor, and bwrap."""
    require_runtime(request.param)
    (tmp_path / "policy.yaml").write_text(POLICY)
    write_skills(tmp_path / "extra-skills")
    made = Executor.from_settings(make_settings(tmp_path, request.param, policy_file=tmp_path / "policy.yaml"))
    try:
        pool = getattr(made.runtime, "pool", None)
        if pool is not None:
            assert pool.wait_ready()
        yield made
    finally:
        made.close()


def assert_refused(result: RunResult, rule: str, program: str, what: str) -> None:
    denied = result.policy_denied_exec
    assert denied is not None, (what, result.exit_code, result.stdout, result.stderr)
    assert denied["rule"] == rule and denied["program"] == program, (what, denied)
    assert result.exit_code == 126 and "policy_denied_exec" in result.limits_hit, (what, result)
    assert "uid=" not in result.stdout and "after" not in result.stdout, (what, result.stdout)
    assert f"policy rule {rule!r} refused" in result.stderr, (what, result.stderr)
    assert any(f"policy rule {rule!r} refused to start the program {program!r}" in w for w in result.warnings)


def test_every_spelling_of_a_denied_program_is_refused_at_exec(executor: Executor) -> None:
    for what, command in DENY_ID_BYPASSES.items():
        assert check(command, "local", "math-tools", executor.runner.policy).allowed, what  # past the parser
        result = run(executor, command=command)
        assert_refused(result, "no-id", "id", what)
    # the dynamic loader run directly (by a permitted interpreter: the parser refuses it by name)
    loader = "python3 -c \"import os; os.execv('/lib64/ld-linux-x86-64.so.2', ['ld.so', '/usr/bin/true'])\""
    result = run(executor, command=f"{loader}; echo after")
    assert_refused(result, "no-id", "ld.so", "the loader")
    assert result.policy_denied_exec is not None
    assert result.policy_denied_exec["reason"] == "the dynamic loader may not be run directly"


def test_allowed_work_still_runs_under_a_deny_rule(executor: Executor) -> None:
    result = run(
        executor, command="python3 scripts/fib.py 10 && head -1 scripts/fib.py | cut -c1-2 && env true && echo ok"
    )
    assert result.exit_code == 0 and result.policy_denied_exec is None, (result.stdout, result.stderr)
    assert result.stdout.splitlines()[-2:] == ["#!", "ok"] and "policy_denied_exec" not in result.limits_hit
    # forks, background jobs and threads under the tracer, and nothing escapes it
    busy = "for i in 1 2 3; do (sleep 0.1; echo $i) & done; wait; seq 200 | xargs -n 1 -P 4 true; echo done"
    result = run(executor, command=busy)
    assert result.exit_code == 0 and sorted(result.stdout.split()) == ["1", "2", "3", "done"], result.stderr
    result = run(executor, command=f"python3 - <<'EOF'\n{UNTRACED_CLONE}\nEOF\necho after")
    assert result.policy_denied_exec is None and "uid=" not in result.stdout, result.stdout
    assert "clone -1 1" in result.stdout and "clone3 -1 38" in result.stdout, result.stdout  # EPERM, ENOSYS


def test_an_allow_list_refuses_what_a_permitted_interpreter_starts(executor: Executor) -> None:
    result = run(executor, skill="exec-probe", command="python3 -c \"import subprocess; subprocess.run(['id'])\"")
    assert_refused(result, "python-only", "id", "subprocess under allow")
    assert result.policy_denied_exec is not None and result.policy_denied_exec["reason"] == "not allowed"
    # what the list allows runs, with the shells and wrappers the parser judges through
    ok = run(executor, skill="exec-probe", command="cat scripts/hello.pl | cat && timeout 5 python3 -c 'print(6 * 7)'")
    assert ok.exit_code == 0 and ok.stdout.splitlines()[::2] == ["#!/usr/bin/env perl", "42"], (ok.stdout, ok.stderr)
    # a script the list names brings its interpreter (#!/usr/bin/env perl)
    script = run(executor, skill="exec-probe", command="scripts/hello.pl")
    assert script.exit_code == 0 and script.stdout == "hello from perl\n", (script.stdout, script.stderr)
    # a copy of an allowed program is another file: not allowed
    copy = run(executor, skill="exec-probe", command="python3 -c \"import shutil, os; "
               "shutil.copy('/bin/ls', 'l'); os.execv('l', ['l'])\"")  # fmt: skip
    assert_refused(copy, "python-only", "/workspace/skills/exec-probe/l", "a copy of an allowed program")


def test_a_denied_name_covers_its_aliases(executor: Executor) -> None:
    """``python3`` is a link to ``python3.11``: denying one is denying the file."""
    assert check("python3.11 -c 'print(1)'", "local", "no-python", executor.runner.policy).allowed
    result = run(executor, skill="no-python", command="python3.11 -c 'print(1)'; echo after")
    assert_refused(result, "no-python", "python3", "python3.11")
    assert result.policy_denied_exec is not None and result.policy_denied_exec["path"] == "/usr/bin/python3.11"


def test_a_run_of_a_session_is_enforced_too(executor: Executor) -> None:
    """A session's runs are cold containers of their own (sharing the session's work/)."""
    assert run(executor, session="s1", command="cp /usr/bin/id /workspace/work/kept && echo ok").stdout == "ok\n"
    result = run(executor, session="s1", command="/workspace/work/kept; echo after")  # the copy a previous run left
    assert_refused(result, "no-id", "id", "a session's run")


# -- pure logic ------------------------------------------------------------------------------


def test_the_rule_reaches_the_launcher_as_its_files_are_named() -> None:
    policy = parse_policy("rules:\n  - {name: r, key: '*', skill: '*', allow: [python3, ./x], deny: [sh]}\n")
    decision = check("python3 -V", "k", "s", policy)
    assert decision.exec_rule == ExecRule("r", ("python3", "./x"), ("sh",))
    fields = decision.exec_rule.spec(root="/workspace/skills/s", trusted=1, nonce="ab").split(b"\0")
    pairs = list(zip(fields[0:-1:2], fields[1::2], strict=True))
    assert pairs[:5] == [(b"rule", b"r"), (b"root", b"/workspace/skills/s"), (b"trusted", b"1"), (b"nonce", b"ab"),
                         (b"allow-list", b"1")]  # fmt: skip
    allowed = {v for k, v in pairs if k == b"allow"}
    assert {b"python3", b"./x", b"bash", b"env", b"xargs"} <= allowed and b"sh" not in allowed  # deny wins
    assert (b"deny", b"sh") in pairs
    # no allow/deny: nothing for the sandbox to enforce (no tracing, no cost)
    assert check("ls", "k", "s", parse_policy("rules:\n  - {key: '*', approval: always}\n")).exec_rule is None


def frame(payload: bytes) -> memoryview:
    return memoryview(b"X" + len(payload).to_bytes(4, "big") + payload)


def test_the_exit_frame_carries_a_checked_verdict() -> None:
    verdict = {"rule": "r", "program": "id", "path": "/usr/bin/id", "reason": "denied"}
    frames = LauncherFrames(10, 10, None)
    frames.feed(frame(json.dumps({"exit_code": 126, "policy_denied_exec": verdict}).encode()))
    assert frames.exit_code == 126 and frames.policy_denied_exec == verdict
    for bad in ({**verdict, "extra": "x"}, {**verdict, "rule": 1}, "denied", None, {**verdict, "path": "x" * 5000}):
        with pytest.raises(ProtocolError, match="policy verdict"):
            LauncherFrames(10, 10, None).feed(frame(json.dumps({"exit_code": 126, "policy_denied_exec": bad}).encode()))


def test_runtimes_that_cannot_enforce_refuse_the_run(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text(POLICY)
    executor = Executor.from_settings(make_settings(tmp_path, "local", policy_file=tmp_path / "policy.yaml"))
    try:
        with pytest.raises(ExecutorError) as info:
            run(executor, command="python3 scripts/fib.py 3")
        assert info.value.code == "policy_unenforceable" and info.value.status == 403
        assert info.value.details == {"rule": "no-id", "runtime": "local"}
        # a run no rule limits runs as before
        assert run(executor, skill="csv-report", command="echo ok").stdout == "ok\n"
    finally:
        executor.close()
    # agent-sandbox's pods start commands without the launcher: the same refusal at claim
    from skill_executor.runtimes.agentsandbox.runtime import AgentSandboxRuntime

    assert AgentSandboxRuntime.exec_policy is False
    assert os.path.exists(tmp_path)


SUPERVISOR_KILLED = r"""
printf 'rule\0r\0nonce\0n\0deny\0id\0' > /tmp/policy
/opt/skill-executor/launcher --exec --policy /tmp/policy -- \
  bash -c '(sleep 1; echo alive > /tmp/alive; /usr/bin/id > /tmp/leak) & sleep 0.3; kill -9 $PPID' 2>/dev/null
echo "launcher $?"
sleep 2.5
cat /tmp/alive /tmp/leak 2>/dev/null || echo "nothing ran"
"""


@pytest.mark.parametrize("runtime", ["docker", "docker-runsc"])
def test_a_supervisor_killed_by_the_command_takes_the_command_with_it(runtime: str, tmp_path: Path) -> None:
    """Fail closed: the command may signal its launcher (same user), and then nothing of it
    goes on untraced (PTRACE_O_EXITKILL; in a run the container ends with it besides)."""
    require_runtime(runtime)
    import docker

    settings = make_settings(tmp_path, runtime)
    client = docker.from_env()
    try:
        out = client.containers.run(
            settings.docker_image,
            ["bash", "-c", SUPERVISOR_KILLED],
            remove=True,
            user="1000:1000",
            network_mode="none",
            tmpfs={"/tmp": "mode=1777"},
            runtime=settings.docker_oci_runtime,
            init=True,
        )
    finally:
        client.close()
    assert out.decode().split("\n")[:2] == ["launcher 137", "nothing ran"], out


def test_a_tool_result_says_which_rule_stopped_the_run() -> None:
    """An agent reads why its run ended: the tool result is an error naming the rule."""
    from skill_executor.tools.results import failed, render_result

    verdict = {"rule": "no-id", "program": "id", "path": "/usr/bin/id", "reason": "denied"}
    result = RunResult(run_id="r", skill="math-tools", exit_code=126, policy_denied_exec=verdict)
    assert failed(result)
    assert "stopped: policy rule 'no-id' refused the program 'id' (exit code 126)" in render_result(result)


#: Each rewrites the skill's own ``scripts/hello.pl`` (the allow list names it; the run's copy
#: of the skill is writable) with ``/usr/bin/id``, then runs it by its allowed name.
ALLOWED_SCRIPT_REWRITES = {
    "in place (same inode)": "cat /usr/bin/id > scripts/hello.pl && scripts/hello.pl; echo after",
    "replaced (a new file at the path)": (
        "python3 -c \"import shutil, os; shutil.copy('/usr/bin/id', 'n'); os.replace('n', 'scripts/hello.pl')\" "
        "&& scripts/hello.pl; echo after"
    ),
}


def test_an_allowed_script_rewritten_by_the_run_is_not_allowed(executor: Executor) -> None:
    """An allow list's skill script is a file the run may write (its copy of the skill): what
    it holds when it is run must be what it held when the run started."""
    for what, command in ALLOWED_SCRIPT_REWRITES.items():
        assert check(command, "local", "exec-probe", executor.runner.policy).allowed, what  # past the parser
        result = run(executor, skill="exec-probe", command=command)
        assert_refused(result, "python-only", "/workspace/skills/exec-probe/scripts/hello.pl", what)
        assert result.policy_denied_exec is not None and result.policy_denied_exec["reason"] == "not allowed"
    # the script as the skill ships it still runs
    script = run(executor, skill="exec-probe", command="scripts/hello.pl")
    assert script.exit_code == 0 and script.stdout == "hello from perl\n", (script.stdout, script.stderr)


def test_a_command_cannot_hide_its_refusal_by_locking_the_verdict_folder(executor: Executor) -> None:
    """A per-run container's launcher leaves its verdict in ``run/``, a folder the command's
    user owns: the command makes it read-only first, and a refused exec must still be
    reported as one (not as a mere exit code 126)."""
    command = "chmod 555 /workspace/run && python3 -c \"import os; os.execv('/usr/bin/id', ['id'])\"; echo after"
    assert check(command, "local", "math-tools", executor.runner.policy).allowed  # past the parser
    result = run(executor, command=command)
    assert_refused(result, "no-id", "id", "a read-only run/")


def test_a_rule_names_the_skills_script_whatever_the_runs_cwd(executor: Executor) -> None:
    """``allow: [scripts/hello.pl]`` names the skill's script.  A request whose ``cwd`` is its
    own ``work/`` must not make the name mean ``work/scripts/hello.pl``, a file the run
    writes (here a copy of ``/usr/bin/id``)."""
    command = (
        "python3 -c \"import os, shutil; os.makedirs('scripts'); shutil.copy('/usr/bin/id', 'scripts/hello.pl')\" "
        "&& scripts/hello.pl; echo after"
    )
    assert check(command, "local", "exec-probe", executor.runner.policy).allowed  # past the parser
    result = run(executor, skill="exec-probe", cwd="$WORK_DIR", command=command)
    assert_refused(result, "python-only", "/workspace/work/scripts/hello.pl", "cwd in work/")
    assert result.policy_denied_exec is not None and result.policy_denied_exec["reason"] == "not allowed"
    # allowed work from work/ still runs
    ok = run(executor, skill="exec-probe", cwd="$WORK_DIR", command="python3 -V")
    assert ok.exit_code == 0 and ok.stdout.startswith("Python 3."), (ok.stdout, ok.stderr)
