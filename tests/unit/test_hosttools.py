"""Running host tools over untrusted input (skill_executor/envs/hosttools.py), with real processes:
what a tool sees (environment, working directory, user), what is left of it afterwards
(processes, files, output), and what of a secret leaves the host process (nothing)."""

from __future__ import annotations

import stat
import sys
import time
from pathlib import Path

import pytest

from skill_executor.envs.hosttools import (
    OUTPUT_BYTES,
    PASSED,
    HostTools,
    HostToolsUnusable,
    ReclaimRefused,
    redact,
    tool_user,
    url_secrets,
)

from .. import untrusted
from ..helpers import eventually
from ..untrusted import AS_ROOT, TOOL_USER, Markers

open_tmp, markers = untrusted.open_tmp, untrusted.markers  # fixtures

needs_root = pytest.mark.skipif(not AS_ROOT, reason="switching users needs root")

#: Writes what the tool sees into the file named by $1.
RECORDER = """
out="$1"
{ echo "uid=$(id -u)"; echo "gid=$(id -g)"; echo "groups=$(id -G)"; echo "pwd=$(pwd)"; echo "umask=$(umask)";
  echo "cwd_entries=$(ls -A | tr '\\n' ' ')"; env | sed 's/^/env:/'; } > "$out"
touch probe-in-cwd 2>/dev/null && echo "cwd writable" >> "$out"
echo "https://u:s3cret-pw@index.example/simple?token=t0ken-value#frag"
echo "proxy is $https_proxy"
"""


def record(tools: HostTools, folder: Path) -> dict[str, list[str]]:
    scratch = tools.scratch(folder)
    result = tools.run(["/bin/sh", "-c", RECORDER, "sh", str(scratch.folder / "seen")], scratch, timeout=60)
    assert result.returncode == 0, result.output
    seen: dict[str, list[str]] = {"output": [result.output]}
    for line in (scratch.folder / "seen").read_text().splitlines():
        key, _, value = line.partition("=") if not line.startswith("env:") else ("env", "", line[4:])
        seen.setdefault(key, []).append(value)
    return seen


def test_a_tool_sees_an_allow_listed_environment_and_a_fresh_empty_folder(
    open_tmp: Path, markers: Markers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The service's working directory (a skill checkout) and environment (credentials,
    PIP_*, npm_config_*, PYTHON*, NODE_*) never reach the tool."""
    checkout = open_tmp / "checkout"
    (checkout / "pip").mkdir(parents=True)
    (checkout / "pip" / "__init__.py").write_text(markers.python("pip"))
    (checkout / "sitecustomize.py").write_text(markers.python("sitecustomize"))
    (checkout / ".npmrc").write_text("registry=http://127.0.0.1:9/\n")
    monkeypatch.chdir(checkout)
    hostile = {
        "AWS_SECRET_ACCESS_KEY": "aws-secret",
        "SKILL_EXECUTOR_API_KEYS": "k1",
        "PIP_INDEX_URL": "http://x/",
        "PIP_CONFIG_FILE": str(checkout / "pip.conf"),
        "npm_config_registry": "http://x/",
        "PYTHONPATH": str(checkout),
        "PYTHONSTARTUP": str(checkout / "sitecustomize.py"),
        "NODE_OPTIONS": f"--require {checkout}/evil.js",
        "LD_PRELOAD": str(checkout / "evil.so"),
        "https_proxy": "http://proxyuser:proxy-pass@proxy.example:3128",
        "SSL_CERT_FILE": "/etc/ssl/x.pem",
        "NODE_EXTRA_CA_CERTS": "/etc/ssl/company-ca.pem",
    }
    for name, value in hostile.items():
        monkeypatch.setenv(name, value)
    tools = HostTools(tool_user(TOOL_USER), {"s3cret-pw"})
    seen = record(tools, open_tmp / "build")
    env = dict(line.split("=", 1) for line in seen["env"])
    assert set(env) <= {*PASSED, "PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "PWD"}, env
    assert env["https_proxy"] == hostile["https_proxy"] and env["SSL_CERT_FILE"] == "/etc/ssl/x.pem"  # on purpose
    assert env["NODE_EXTRA_CA_CERTS"] == "/etc/ssl/company-ca.pem"  # npm behind a re-signing proxy
    scratch = open_tmp / "build" / ".tool"
    assert seen["pwd"] == [str(scratch / "cwd")] and seen["cwd_entries"] == [""]  # fresh, empty ...
    assert "cwd writable" not in seen  # ... and not the tool's to fill
    assert env["HOME"] == str(scratch / "home") and env["TMPDIR"] == str(scratch / "tmp")
    assert seen["umask"] == ["0022"]
    if AS_ROOT:
        assert seen["uid"] == ["65534"] and seen["groups"] == [seen["gid"][0]]  # nobody, no extra groups
    # What the tool printed is redacted: URL credentials, queries, fragments, configured secrets.
    output = seen["output"][0]
    assert "https://index.example/***" in output and "simple" not in output
    assert "proxy is http://proxy.example:3128" in output
    for secret in ("s3cret-pw", "t0ken-value", "proxy-pass", "proxyuser", "frag"):
        assert secret not in output
    assert not (open_tmp / "build" / ".tool").exists()  # the scratch folders are gone
    assert markers.found() == []


@needs_root
def test_what_a_tool_wrote_becomes_the_services_without_following_links(open_tmp: Path) -> None:
    victim = open_tmp / "victim"
    victim.write_text("root only\n")
    victim.chmod(0o600)
    tools = HostTools(tool_user(TOOL_USER))
    scratch = tools.scratch(open_tmp / "build")
    script = (
        f"cd {scratch.folder} && mkdir -p out/sub && echo x > out/sub/f && chmod 777 out/sub/f"
        f" && echo y > out/plain && chmod 600 out/plain && ln -s {victim} out/link && ln -s / out/rootlink"
        f" && mkfifo out/fifo && chmod 777 out/sub"
    )
    result = tools.run(["/bin/sh", "-c", script], scratch, timeout=60)
    assert result.returncode == 0, result.output
    out = scratch.folder / "out"
    for path in [scratch.folder, out, out / "sub", out / "sub" / "f", out / "plain", out / "link"]:
        st = path.lstat()
        assert (st.st_uid, st.st_gid) == (0, 0), path
    assert stat.S_IMODE((out / "sub").stat().st_mode) == 0o755
    assert stat.S_IMODE((out / "sub" / "f").stat().st_mode) == 0o755  # executable stays executable
    assert stat.S_IMODE((out / "plain").stat().st_mode) == 0o644  # runs (another uid) read it
    assert not (out / "fifo").exists()  # neither a file nor a folder: removed
    assert (out / "link").is_symlink() and (out / "rootlink").is_symlink()
    st = victim.stat()  # the link's target was not touched
    assert (stat.S_IMODE(st.st_mode), st.st_uid) == (0o600, 0)
    assert stat.S_IMODE(Path("/").stat().st_mode) != 0o644


def test_a_file_with_several_links_is_refused(open_tmp: Path) -> None:
    """A hard link could be another owner's file: it is never taken over (or chmod-ed)."""
    victim = open_tmp / "victim"
    victim.write_text("someone else's\n")
    victim.chmod(0o600)
    tools = HostTools()  # the service's own user may link it; nobody (protected_hardlinks) may not
    scratch = tools.scratch(open_tmp / "build")
    with pytest.raises(ReclaimRefused) as info:
        tools.run(["/bin/ln", str(victim), str(scratch.folder / "hard")], scratch, timeout=60)
    assert info.value.code == "host_tool_output_refused"
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def test_the_tools_processes_are_gone_after_it_exits_or_times_out(open_tmp: Path) -> None:
    tools = HostTools(tool_user(TOOL_USER))
    scratch = tools.scratch(open_tmp / "bg")
    result = tools.run(["/bin/sh", "-c", f"sleep 300 & echo $! > {scratch.folder}/pid; exit 0"], scratch, timeout=60)
    assert result.returncode == 0
    # SIGKILL went to the whole group before the answer; the kernel ends them right after.
    background = int((scratch.folder / "pid").read_text())
    assert eventually(lambda: not alive(background), timeout=10)
    scratch = tools.scratch(open_tmp / "hang")
    started = time.monotonic()
    result = tools.run(["/bin/sh", "-c", f"sleep 300 & echo $! > {scratch.folder}/pid; sleep 300"], scratch, timeout=2)
    assert (result.returncode, result.timed_out) == (124, True)
    assert "timed out after 2 s" in result.output
    assert time.monotonic() - started < 60  # does not hang
    background = int((scratch.folder / "pid").read_text())
    assert eventually(lambda: not alive(background), timeout=10)


def test_output_is_bounded_and_a_missing_tool_is_a_result(open_tmp: Path) -> None:
    tools = HostTools(tool_user(TOOL_USER))
    scratch = tools.scratch(open_tmp / "loud")
    result = tools.run(
        ["/bin/sh", "-c", "head -c 20000000 /dev/zero | tr '\\0' x; echo; echo last line"], scratch, timeout=120
    )
    assert result.returncode == 0
    assert len(result.output) <= OUTPUT_BYTES and result.output.endswith("last line\n")
    scratch = tools.scratch(open_tmp / "missing")
    result = tools.run([str(open_tmp / "no-such-tool")], scratch, timeout=60)
    assert result.returncode == 127 and "cannot run" in result.output


@needs_root
def test_a_tool_the_user_cannot_run_is_a_set_up_error(open_tmp: Path) -> None:
    private = open_tmp / "private"
    private.mkdir(mode=0o700)
    (private / "python").symlink_to(sys.executable)
    tools = HostTools(tool_user(TOOL_USER))
    (open_tmp / "check").mkdir()
    with pytest.raises(HostToolsUnusable) as info:
        tools.check([str(private / "python"), "-I", "-c", "import pip"], open_tmp / "check")
    assert (info.value.status, info.value.code) == (503, "host_tools_unusable")
    assert "SKILL_EXECUTOR_HOST_TOOLS_USER" in info.value.message
    unreadable = open_tmp / "wheels"
    unreadable.mkdir(mode=0o700)
    (open_tmp / "check2").mkdir()
    with pytest.raises(HostToolsUnusable) as info:
        tools.check(["/bin/true"], open_tmp / "check2", [unreadable])
    assert f"cannot read {unreadable}" in info.value.message
    # A data dir under a folder only root may enter (a `mktemp -d`): the tool still starts in
    # its folder (entered before the user switch), but cannot reach the absolute paths pip
    # and npm are given there -- a set-up error, not "pip could not resolve" every need.
    closed = open_tmp / "closed"
    closed.mkdir(mode=0o700)
    (closed / "envs" / "check3").mkdir(parents=True, mode=0o755)
    (closed / "envs").chmod(0o755)
    with pytest.raises(HostToolsUnusable) as info:
        tools.check(["/bin/true"], closed / "envs" / "check3")
    assert (info.value.status, info.value.code) == (503, "host_tools_unusable")
    assert f"cannot read {closed / 'envs' / 'check3'} (every folder above it must be searchable by nobody)" in (
        info.value.message
    )
    closed.chmod(0o755)
    (closed / "envs" / "check4").mkdir(mode=0o755)
    tools.check(["/bin/true"], closed / "envs" / "check4")  # reachable: passes


def test_tool_users() -> None:
    if AS_ROOT:
        nobody = tool_user("nobody")
        assert nobody is not None and nobody.uid == 65534
        assert tool_user("1234:5678") is not None and tool_user("1234:5678").gid == 5678  # type: ignore[union-attr]
        assert tool_user("root") is None and tool_user("0") is None  # the service's own, on purpose
        with pytest.raises(HostToolsUnusable):
            tool_user("no-such-user-here")
    else:
        assert tool_user("nobody") is None  # not root: tools run as the service (it cannot switch)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("https://user:pass@pypi.example/simple/", "https://pypi.example/***"),
        ("see http://tok@h.example/a?token=abc&x=1#sha256=00 now", "see http://h.example/*** now"),
        ("git+https://u:p@git.example/r.git@v1", "git+https://git.example/***"),
        ("https://registry.example/@scope/pkg", "https://registry.example/***"),
        ("no url here: user@host", "no url here: user@host"),
        # a token in the path, quoted by pip in its own words: only scheme and host stay
        ("Looking in indexes: https://idx.example/simple/t0ken/", "Looking in indexes: https://idx.example/***"),
        ("(from https://IDX.example:8443/t0ken/simple/pkg/)", "(from https://idx.example:8443/***)"),
        ('{"url": "https://idx.example/x/t0ken"}', '{"url": "https://idx.example/***"}'),
        ("https://idx.example and https://idx.example/", "https://idx.example and https://idx.example/"),
        ("https://u:p@ss@idx.example/", "https://idx.example/"),
    ],
)
def test_redact(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_secrets_of_a_configured_url_are_redacted_wherever_they_appear() -> None:
    url = "https://alice:p%40ss-word@idx.example/simple/?token=t0ken-123&x=1"
    secrets = url_secrets(url)
    assert {"p%40ss-word", "p@ss-word", "t0ken-123", "alice"} <= secrets
    # pip quotes a query-bearing index's path without its scheme (a retry warning).
    line = "Retrying after connection broken: /simple/?token=t0ken-123/tinypkg/ (p@ss-word)"
    assert redact(line, secrets) == "Retrying after connection broken: /simple/?token=***/tinypkg/ (***)"
    assert redact("x", {"a"}) == "x"  # secrets shorter than 4 only go inside URLs
    # a token in the path is secret too: pip quotes the path alone as well
    in_path = url_secrets("https://idx.example/simple/t0ken-in-path/")
    assert {"t0ken-in-path", "simple/t0ken-in-path"} <= in_path and "simple" not in in_path
    line = "Retrying after connection broken: /simple/t0ken-in-path/tinypkg/"
    assert redact(line, in_path) == "Retrying after connection broken: /***/tinypkg/"


def test_the_python_that_runs_pip_is_a_setting(tmp_path: Path) -> None:
    """HOST_TOOLS_PYTHON picks the interpreter pip runs with (the service's own by default)."""
    import sys

    from skill_executor.config import Settings
    from skill_executor.envs import SkillEnvs

    default = SkillEnvs.from_settings(Settings(data_dir=tmp_path / "a", skills_dirs=[]))
    chosen = SkillEnvs.from_settings(
        Settings(data_dir=tmp_path / "b", skills_dirs=[], host_tools_python="/usr/bin/python3")
    )
    assert (default.python, chosen.python) == (sys.executable, "/usr/bin/python3")
