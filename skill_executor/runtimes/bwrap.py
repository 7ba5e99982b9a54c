"""The bwrap runtime: every run in a fresh bubblewrap sandbox, for machines without Docker.

The local runtime's process (:mod:`.local`: pipes read without threads, stdin fed, the
same box over a host folder), started under ``bwrap`` with what a Docker container of
the Docker runtime gets, as far as a sandbox without an image can:

* new user, mount, PID, network (only ``lo``), IPC, UTS and (where possible) cgroup
  namespaces; no further user namespaces inside (``--disable-userns``);
* the run's user: ``DOCKER_USER`` (1000:1000) inside; outside, that user when the service
  runs as root (bwrap is started as it), else the service's own user;
* no capabilities, ``no-new-privileges`` (bwrap sets it);
* a read-only root: an empty tmpfs remounted read-only, holding only the host's system
  folders read-only (``/usr``, ``/etc`` and the ``/bin``-style links), a fresh ``/proc``
  and minimal ``/dev``, a size-capped tmpfs ``/tmp`` and ``/dev/shm``, the containers'
  ``/etc/hosts``, the skills' dependency environments read-only at ``/opt/skill-envs``,
  the workspace at ``/workspace`` (a session's ``work/`` at ``/workspace/work``) and the
  hosted products' ``/mnt/...`` links into it.  The host's home folders, ``/root``,
  ``/var``, ``/run``, ``/srv``, ``/opt`` and the service's data are not there at all;
* bwrap runs as the run's user, so the folders it binds must be reachable by that user:
  a root service checks at start that the workspace root and the environments' folder
  are (the default workspace root inside the sealed data dir is not:
  ``SKILL_EXECUTOR_WORKSPACE_ROOT`` must name a folder outside it);
* ``nofile``, ``fsize`` and ``nproc`` limits (set inside the sandbox right before the
  command: there ``nproc`` counts the processes of the sandbox's own user namespace);
* a seccomp filter (:mod:`.syscalls`: what Docker's default profile and the warm launcher's
  filter refuse), loaded by bwrap right before the command;
* memory (no swap), pids and CPU limits in cgroups of the run's own where the host lets a
  root service set them (:mod:`.cgroups`: cgroup v1), the sandbox's init joining them
  while it is held; an OOM kill is reported.
* ``--die-with-parent``: the sandbox dies with the thread that started it.
* under a command-policy rule with allow/deny, the runner image's launcher
  (``images/runner/launcher.c``, compiled on this host at start with ``cc``) runs the
  command as its exec supervisor, as in a container (:func:`build_launcher`); without a
  compiler such runs are refused (``policy_unenforceable``).

The sandbox's init (bwrap's, PID 1 of its namespace) is held on ``--block-fd`` until the
service has a pidfd of it.  A kill is a SIGKILL to that init: the kernel then ends every
process of the PID namespace (``setsid`` escapees too) before the init's own exit is seen,
which :meth:`.bwrapbox.BwrapProcess.wait` waits for: nothing of the run is alive once it
returns.  The box and its process (the bwrap command line, the held init) are :mod:`.bwrapbox`.

Not provided (documented in docs/guides/runtimes.md): cgroup limits elsewhere (cgroup v2,
a service that is not root) and a hard disk cap (the soft, polled one applies).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
from pathlib import Path

from ..config import Settings
from ..errors import Unavailable
from ..image.inputs import RUNNER_PINS
from ..policy import unenforceable
from . import cgroups, syscalls
from .base import SandboxPlan
from .bwrapbox import INFO_SECONDS, PATH, BwrapBox
from .docker.engine import CONTAINER_ENVS, CONTAINER_WORKSPACE, parse_user, write_hosts
from .egress import EgressUnsupported
from .hostpython import check_host_python
from .housekeeping import Housekeeping
from .skillcopy import provide

log = logging.getLogger(__name__)

#: The host's system folders a run sees (read-only); a link among them (``/bin`` ->
#: ``usr/bin`` on a merged-/usr system) is recreated as the same link.
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")


def find_bwrap() -> str:
    """The ``bwrap`` binary, or ``Unavailable`` saying how to get it."""
    found = shutil.which("bwrap")
    if found is None:
        raise Unavailable(
            "the bwrap runtime needs bubblewrap's bwrap on PATH (Debian: apt-get install bubblewrap)",
            code="runtime_unavailable",
        )
    return found


class BwrapRuntime(Housekeeping):
    name = "bwrap"
    #: Where a run sees the skills and their dependency environments (as in a container).
    visible_skills_dir: str | None = f"{CONTAINER_WORKSPACE}/skills"
    visible_envs_dir: str | None = CONTAINER_ENVS
    skill_envs = True
    #: Polled (no file system per workspace), plus the ``fsize`` limit on every file.
    disk_cap = "soft"

    def __init__(self, settings: Settings) -> None:
        self.bwrap = find_bwrap()
        super().__init__(settings, "bwrap")
        self.settings = settings
        #: The run's user inside the sandbox; outside too when this process is root.
        self.inside = parse_user(settings.docker_user)
        self.owner: tuple[int, int] | None = self.inside if os.geteuid() == 0 else None
        self.hosts_file = write_hosts(self.workspaces.root / "hosts")
        self.envs_dir = settings.envs_dir
        self.envs_dir.mkdir(parents=True, exist_ok=True)
        self.version = _version(self.bwrap)
        #: The exec supervisor (a launcher built here), or why there is none: then runs under a
        #: rule with allow/deny are refused (policy_unenforceable).
        self.launcher, self.launcher_problem = build_launcher(self.workspaces.root)
        self.exec_policy = self.launcher is not None
        if self.launcher_problem is not None:
            log.warning("the bwrap runtime cannot enforce the command policy at exec: %s", self.launcher_problem)
        try:
            self.seccomp = syscalls.program(settings.docker_allow_vsock)
        except (ImportError, OSError, RuntimeError) as exc:
            self.close()
            raise Unavailable(
                f"the bwrap runtime's seccomp filter needs libseccomp (Debian: libseccomp2): {exc}",
                code="runtime_unavailable",
            ) from None
        if self.owner is not None:
            data_dir = settings.data_dir.resolve()
            for path in (self.workspaces.root / "runs", self.envs_dir):
                # The data dir's folders but the environments' are sealed (0700) once the service starts.
                sealed = path != self.envs_dir and (path == data_dir or data_dir in path.resolve().parents)
                blocked = data_dir if sealed else unreachable(path, self.owner)
                if blocked is not None:
                    self.close()
                    raise Unavailable(
                        f"the bwrap runtime starts its sandboxes as the run's user {self.owner[0]}, who cannot "
                        f"reach {path} ({blocked} is closed to it): set SKILL_EXECUTOR_WORKSPACE_ROOT to a folder "
                        "outside the data dir whose parents others may traverse (mode o+x)",
                        code="runtime_unavailable",
                    )
        #: Why runs get no cgroup limits here (None: they do).
        self.cgroups = cgroups.available()
        if self.cgroups is None:
            cgroups.sweep()
        else:
            log.warning("the bwrap runtime sets no memory, CPU or pids cgroup limits: %s", self.cgroups)
        self.problem = self._probe()
        if self.problem is not None:
            self.close()
            raise Unavailable(f"bwrap cannot make a sandbox here: {self.problem}", code="runtime_unavailable")

    def _probe(self) -> str | None:
        """Start one sandbox of the kind runs get (None: it works; else bwrap's complaint)."""
        user, group, groups = self.credentials()
        filter_r = syscalls.loadable(self.seccomp)
        try:
            result = subprocess.run(
                [self.bwrap, *self.isolation(), "--seccomp", str(filter_r), "--", "true"],
                pass_fds=(filter_r,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env={"PATH": PATH},
                cwd="/",
                timeout=INFO_SECONDS,
                user=user,
                group=group,
                extra_groups=groups,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return str(exc)
        finally:
            os.close(filter_r)
        if result.returncode != 0:
            return result.stderr.decode(errors="replace").strip() or f"exit status {result.returncode}"
        return None

    def credentials(self) -> tuple[int | None, int | None, list[int] | None]:
        """Popen's ``user``, ``group`` and ``extra_groups``: bwrap starts as the run's user when
        this process is root (else as this process's user)."""
        if self.owner is None:
            return None, None, None
        return self.owner[0], self.owner[1], []

    def isolation(self) -> list[str]:
        """bwrap's arguments for the namespaces, the user and the system folders."""
        uid, gid = self.inside
        args = [
            "--unshare-user",
            "--unshare-ipc",
            "--unshare-pid",
            "--unshare-net",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--disable-userns",
            "--die-with-parent",
            "--new-session",
            "--uid",
            str(uid),
            "--gid",
            str(gid),
            "--hostname",
            "sandbox",
        ]
        for path in SYSTEM:
            if os.path.islink(path):
                args += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                args += ["--ro-bind", path, path]
        size = str(self.settings.docker_tmpfs_bytes)
        args += ["--proc", "/proc", "--dev", "/dev", "--size", size, "--tmpfs", "/tmp"]
        args += ["--size", size, "--tmpfs", "/dev/shm"]
        return args

    def limits(self) -> list[str]:
        """The wrapper that sets the command's limits inside the sandbox, then execs it (a
        constant text: the command's argv follows as arguments, never spliced in).  Set
        inside, ``nproc`` counts only the processes of the sandbox's own user namespace."""
        s = self.settings
        text = f'ulimit -n {s.docker_nofile} -u {s.docker_pids_limit} -f {s.docker_disk_bytes // 1024} && exec "$@"'
        return ["bash", "-c", text, "limits"]

    def claim(self, plan: SandboxPlan) -> BwrapBox:
        if plan.exec_rule is not None and not self.exec_policy:
            raise unenforceable(plan.exec_rule, self.name)
        if plan.egress is not None:
            if self.launcher is None:  # the bridge is the launcher's
                raise EgressUnsupported(
                    f"the bwrap runtime has no launcher for the egress bridge: {self.launcher_problem}"
                )
            plan.egress.check()
        check_host_python(plan.python, "bwrap", PATH)
        workspace = self.workspaces.create(
            plan.run_id,
            plan.skill.id,
            session_work=plan.session_work,
            session=plan.session,
            owner=self.owner,
            tenant=plan.tenant,
        )
        box = BwrapBox(self, workspace, plan)
        try:
            box.warnings += provide(workspace, plan.skill.id, plan.skill.path, self.owner, None)
        except BaseException:
            box.release()
            raise
        return box

    def health(self) -> dict[str, tuple[bool, str]]:
        return {
            "runtime": (
                True,
                f"bubblewrap {self.version}: user, mount, PID, network, IPC and UTS namespaces; "
                "a seccomp filter; "
                + (
                    "cgroup v1 memory, pids and CPU limits"
                    if self.cgroups is None
                    else f"no memory, CPU or pids cgroup limits ({self.cgroups})"
                ),
            ),
            "disk_cap": (True, f"soft: {self.settings.docker_disk_bytes} bytes per run, polled; fsize per file"),
        }


def build_launcher(folder: Path) -> tuple[Path | None, str | None]:
    """The runner image's launcher compiled for this host (once per source: its hash names
    the binary), in ``folder`` (the workspaces' root, which the run's user reaches); or
    None and why it cannot be built."""
    source = RUNNER_PINS / "launcher.c"
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None, "no C compiler (cc, gcc) to build the launcher with (Debian: gcc, libc6-dev)"
    try:
        text = source.read_bytes()
    except OSError as exc:
        return None, f"the launcher's source {source} cannot be read: {exc}"
    target = folder / f"launcher-{hashlib.sha256(text).hexdigest()[:16]}"
    if target.is_file():
        return target, None
    partial = folder / f".{target.name}.{os.getpid()}.tmp"
    try:
        done = subprocess.run(
            [compiler, "-O2", "-Wall", "-Wextra", "-Werror", "-static", "-o", str(partial), str(source)],
            capture_output=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            return None, f"compiling the launcher failed: {done.stderr.decode(errors='replace').strip()[-500:]}"
        os.chmod(partial, 0o755)
        os.replace(partial, target)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"compiling the launcher failed: {exc}"
    finally:
        partial.unlink(missing_ok=True)
    return target, None


def unreachable(path: Path, user: tuple[int, int]) -> Path | None:
    """The first folder on the way to ``path`` that ``user`` may not traverse (None: none)."""
    uid, gid = user
    for folder in [*reversed(path.resolve().parents), path.resolve()]:
        st = folder.stat()
        bit = 0o100 if st.st_uid == uid else 0o010 if st.st_gid == gid else 0o001
        if not st.st_mode & bit:
            return folder
    return None


def _version(bwrap: str) -> str:
    try:
        out = subprocess.run([bwrap, "--version"], capture_output=True, timeout=10, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.decode(errors="replace").split()[-1] if out.split() else "unknown"
