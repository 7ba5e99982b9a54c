"""The bwrap runtime's box and process: the sandbox's ``bwrap`` command line (the
workspace, the environments, ``/etc/hosts``, the hosted products' links, the exec
supervisor under a rule with allow/deny), its init held on ``--block-fd`` until the
service has a pidfd of it and (where the runtime sets them) has joined the run's cgroups,
and the end: a SIGKILL to that init, after which the kernel has ended every process of
the PID namespace before the init's own exit is seen (:meth:`BwrapProcess.wait`).
The runtime itself (isolation arguments, limits, start-up checks) is :mod:`.bwrap`.
"""

from __future__ import annotations

import errno
import json
import os
import select
import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from ..config import Settings
from ..errors import Unavailable
from ..workspace.layout import EXEC_POLICY_FILE, Workspace, WorkspaceManager
from . import cgroups, syscalls
from .base import BoxVerdict, ProcessSpec, SandboxPlan
from .docker.engine import CONTAINER_ENVS, CONTAINER_WORKSPACE, LAUNCHER
from .docker.launcher import read_verdict
from .egress import SANDBOX_CA
from .host import SharedBox
from .janitor import Janitor
from .limits import Cap, DiskCap
from .local import LocalProcess

#: The hosted products' paths (the runner image makes the same links).
HOSTED_LINKS = {
    "/mnt/skills/public": f"{CONTAINER_WORKSPACE}/skills",
    "/mnt/skills/user": f"{CONTAINER_WORKSPACE}/skills",
    "/mnt/skills/examples": f"{CONTAINER_WORKSPACE}/skills",
    "/mnt/user-data/outputs": f"{CONTAINER_WORKSPACE}/out",
    "/mnt/user-data/uploads": f"{CONTAINER_WORKSPACE}/work/inputs",
    "/mnt/data": f"{CONTAINER_WORKSPACE}/work",
}
#: The most bwrap's ``--info-fd`` JSON may hold, and how long it may take to arrive.
INFO_MAX = 64 * 1024
INFO_SECONDS = 30.0
#: How long a killed sandbox's init may take to be gone (its namespace emptied).
END_SECONDS = 30.0
PATH = "/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin"


class BwrapHost(Protocol):
    """What a box needs of its runtime (:class:`~skill_executor.runtimes.bwrap.BwrapRuntime`)."""

    @property
    def settings(self) -> Settings: ...
    @property
    def janitor(self) -> Janitor: ...
    @property
    def workspaces(self) -> WorkspaceManager: ...
    @property
    def bwrap(self) -> str: ...
    @property
    def hosts_file(self) -> Path: ...
    @property
    def envs_dir(self) -> Path: ...
    @property
    def launcher(self) -> Path | None: ...
    @property
    def seccomp(self) -> bytes: ...
    @property
    def cgroups(self) -> str | None: ...

    def credentials(self) -> tuple[int | None, int | None, list[int] | None]: ...

    def isolation(self) -> list[str]: ...

    def limits(self) -> list[str]: ...


class BwrapBox(SharedBox):
    def __init__(self, runtime: BwrapHost, workspace: Workspace, plan: SandboxPlan) -> None:
        super().__init__(
            workspace,
            CONTAINER_WORKSPACE,
            runtime.janitor,
            discard=runtime.workspaces.discard,
            keep=runtime.settings.keep_workspaces,
        )
        self.runtime = runtime
        self.plan = plan

    def _start(self, spec: ProcessSpec) -> BwrapProcess:
        if self.plan.egress is not None:  # the path's variables win over the run's own
            spec = replace(spec, env={**spec.env, **self.plan.egress.environment()})
        runtime = self.runtime
        settings = runtime.settings
        disk: Cap = DiskCap(self.workspace, settings.docker_disk_bytes, self.plan.session_disk_max)
        groups = None
        if runtime.cgroups is None:
            groups = cgroups.RunGroups(settings, f"{runtime.workspaces.token}-{self.plan.run_id}")
        try:
            return BwrapProcess(self, spec, disk, groups)
        except BaseException:
            if groups is not None:
                groups.remove()
            raise

    #: The nonce naming the launcher's verdict file (a run under an exec policy).
    nonce: str | None = None

    def judge(self, disk: Cap, code: int | None, oom: bool) -> None:
        """The verdict once the process has ended."""
        hit = disk.reached(code)
        denied = read_verdict(self.workspace, self.nonce) if self.nonce is not None else None
        self._verdict = BoxVerdict(oom, hit, (disk.warning(),) if hit else (), policy_denied_exec=denied)

    def supervised(self, spec: ProcessSpec) -> list[str]:
        """The launcher's exec-mode arguments before the command under a rule with allow/deny
        (its policy file written; empty without such a rule)."""
        rule, egress = self.plan.exec_rule, self.plan.egress
        if rule is None and egress is None:
            return []
        options = egress.launcher_option() if egress is not None else []
        if rule is not None:
            self.nonce = self.write_exec_policy(rule, trusted=1)
            options += ["--policy", f"{CONTAINER_WORKSPACE}/{EXEC_POLICY_FILE}"]
        vsock = ["--allow-vsock"] if self.runtime.settings.docker_allow_vsock else []
        return [LAUNCHER, *vsock, "--exec", *options, "--"]


class BwrapProcess(LocalProcess):
    """The sandbox's outer ``bwrap`` is this process's child (its pipes, its exit status);
    the sandbox's init, held by a pidfd, is what a kill ends."""

    def __init__(self, box: BwrapBox, spec: ProcessSpec, disk: Cap, groups: cgroups.RunGroups | None) -> None:
        self.box = box
        self.groups = groups
        self.init_fd = -1
        self.disk_cap = disk
        super().__init__(spec, {"PATH": PATH, **spec.env})
        self.disk: Cap | None = disk

    def _spawn(self, spec: ProcessSpec, env: dict[str, str]) -> subprocess.Popen[bytes]:
        runtime, workspace = self.box.runtime, self.box.workspace
        user, group, groups = runtime.credentials()
        supervisor = self.box.supervised(spec)
        traced = self.box.plan.exec_rule is not None
        program = syscalls.program(runtime.settings.docker_allow_vsock, supervised=True) if traced else None
        filter_r = syscalls.loadable(program or runtime.seccomp)
        info_r, info_w = os.pipe()
        block_r, block_w = os.pipe()
        try:
            args = [runtime.bwrap, *runtime.isolation(), "--seccomp", str(filter_r)]
            args += ["--ro-bind", str(runtime.hosts_file), "/etc/hosts"]
            args += ["--ro-bind", str(runtime.envs_dir), CONTAINER_ENVS]
            args += ["--bind", str(workspace.root), CONTAINER_WORKSPACE]
            if workspace.work != workspace.root / "work":
                args += ["--bind", str(workspace.work), f"{CONTAINER_WORKSPACE}/work"]
            for link, target in HOSTED_LINKS.items():
                args += ["--symlink", target, link]
            if supervisor:
                assert runtime.launcher is not None
                args += ["--ro-bind", str(runtime.launcher), LAUNCHER]
            egress = self.box.plan.egress
            if egress is not None:  # the gateway's socket (only it) and the CA certificate
                args += ["--ro-bind", str(egress.socket), egress.sandbox_socket]
                args += ["--ro-bind", str(egress.ca_cert), SANDBOX_CA]
            args += ["--remount-ro", "/", "--chdir", spec.cwd]
            args += [
                "--info-fd",
                str(info_w),
                "--block-fd",
                str(block_r),
                "--",
                *runtime.limits(),
                *supervisor,
                *spec.argv,
            ]
            proc = subprocess.Popen(
                args,
                cwd="/",
                env=env,
                stdin=subprocess.PIPE if spec.stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                close_fds=True,
                pass_fds=(filter_r, info_w, block_r),
                user=user,
                group=group,
                extra_groups=groups,
            )
        except BaseException:
            for fd in (info_r, block_w):
                os.close(fd)
            raise
        finally:
            for fd in (filter_r, info_w, block_r):
                os.close(fd)
        try:
            child = _read_info(info_r, proc)
            self.init_fd = os.pidfd_open(child)
            if self.groups is not None:
                self.groups.join(child)  # held: everything of the run starts in its groups
            os.write(block_w, b"1")  # the sandbox's init may start the command now
        except BaseException as exc:
            self._end()
            _kill(proc.pid)
            _, err = proc.communicate(timeout=END_SECONDS)
            self._close_init()
            said = err.decode(errors="replace").strip()
            if not said and not isinstance(exc, (Unavailable, OSError)):
                raise
            raise Unavailable(
                f"bwrap could not start the run's sandbox: {said or exc}", code="runtime_unavailable"
            ) from None
        finally:
            os.close(info_r)
            os.close(block_w)
        return proc

    def _end(self) -> None:
        """SIGKILL the sandbox's init (the kernel ends its whole PID namespace; bwrap then
        exits); before the init is known, bwrap itself (the init dies with it)."""
        if self.init_fd >= 0:
            try:
                signal.pidfd_send_signal(self.init_fd, signal.SIGKILL)
            except ProcessLookupError:
                pass
        elif hasattr(self, "proc"):
            _kill(self.proc.pid)

    def _ended(self) -> None:
        # The init's exit is seen only once the kernel has ended every process of its
        # PID namespace: then nothing of the run is alive.
        if self.init_fd >= 0 and not select.select([self.init_fd], [], [], END_SECONDS)[0]:
            self.warnings.append("the run's sandbox did not end in time")
        self._close_init()
        oom = False
        if self.groups is not None:
            oom = self.groups.oom_killed()
            self.groups.remove()
        code = self.proc.returncode
        self.box.judge(self.disk_cap, 128 - code if code < 0 else code, oom)

    def _close_init(self) -> None:
        if self.init_fd >= 0:
            os.close(self.init_fd)
            self.init_fd = -1


def _read_info(fd: int, proc: subprocess.Popen[bytes]) -> int:
    """The sandbox init's host PID, from bwrap's ``--info-fd`` (EOF first: bwrap failed)."""
    data = b""
    deadline = time.monotonic() + INFO_SECONDS
    while len(data) < INFO_MAX:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise Unavailable("bwrap did not report its sandbox in time", code="runtime_unavailable")
        chunk = os.read(fd, INFO_MAX)
        if not chunk:
            break
        data += chunk
        try:
            return int(json.loads(data)["child-pid"])
        except ValueError:
            continue
    raise Unavailable("bwrap did not start a sandbox", code="runtime_unavailable")


def _kill(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError as exc:
        if exc.errno not in (errno.ESRCH, errno.EPERM):
            raise
