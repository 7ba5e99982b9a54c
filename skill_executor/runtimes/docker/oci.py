"""The engine's OCI runtime (``docker_oci_runtime``, e.g. gVisor's ``runsc``): checked at
start-up against what the engine has registered, with how to register it when it is not.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from ...errors import Unavailable

#: gVisor's arguments: no network of its own (else a network-less container fails with "cannot
#: run with network enabled in root network namespace"), the ptrace platform (kvm hangs on
#: many hosts), and host Unix sockets in its mounts: ``all`` is ``create`` (the warm pool's
#: launcher socket in the workspace) and ``open`` (the egress gateway's socket, mounted only
#: into a run with an egress grant).  A sandbox's mounts hold no other host socket.
RUNSC_ARGS = ("--network=none", "--platform=ptrace", "--host-uds=all")
RUNSC_REGISTRATION = json.dumps({"runtimes": {"runsc": {"path": "/usr/bin/runsc", "runtimeArgs": list(RUNSC_ARGS)}}})


@dataclass(frozen=True, slots=True)
class OciRuntime:
    """The engine's OCI runtime that runs the containers, as the engine registered it."""

    name: str
    path: str
    args: tuple[str, ...]

    @property
    def gvisor(self) -> bool:
        return PurePosixPath(self.path).name == "runsc"

    @property
    def opens_host_sockets(self) -> bool:
        """Whether a sandbox may connect to a host Unix socket in a mount (the egress
        gateway's): gVisor only with ``--host-uds=open`` or ``all``; runc always."""
        return not self.gvisor or bool({"--host-uds=open", "--host-uds=all", "--fsgofer-host-uds"} & set(self.args))

    def describe(self) -> str:
        command = " ".join([self.path, *self.args])
        return f"{self.name} ({command}{'; gVisor' if self.gvisor else ''})"


def check_oci_runtime(name: str | None, info: dict[str, Any], *, pool: bool) -> OciRuntime:
    """The runtime ``name`` (None: the engine's default) as the engine's ``info`` lists it,
    or a clear ``Unavailable`` naming what is missing and how to register it."""
    runtimes: dict[str, Any] = info.get("Runtimes") or {}
    chosen = name or info.get("DefaultRuntime") or "runc"
    how = (
        f"register it in the engine's config file (/etc/docker/daemon.json), e.g. {RUNSC_REGISTRATION}, "
        "then reload the engine (kill -HUP the dockerd process) or start it with --config-file; "
        "./scripts/test.sh and ./scripts/serve.sh do this for runsc"
    )
    if chosen not in runtimes:
        known = ", ".join(sorted(runtimes)) or "none"
        raise Unavailable(
            f"the OCI runtime {chosen!r} (SKILL_EXECUTOR_DOCKER_OCI_RUNTIME) is not registered with the "
            f"Docker engine (it has: {known}); {how}",
            code="oci_runtime_missing",
        )
    entry = runtimes[chosen] or {}
    runtime = OciRuntime(chosen, str(entry.get("path") or chosen), tuple(entry.get("runtimeArgs") or ()))
    if runtime.gvisor:
        missing = [] if "--network=none" in runtime.args else ["--network=none"]
        if pool and not {"--host-uds=create", "--host-uds=all"} & set(runtime.args):
            missing.append("--host-uds=all (create for the warm pool, or SKILL_EXECUTOR_POOL_SIZE=0; open for egress)")
        if missing:
            raise Unavailable(
                f"the OCI runtime {chosen!r} is gVisor registered without {', '.join(missing)} in its "
                f"runtimeArgs (it has: {' '.join(runtime.args) or 'none'}); {how}",
                code="oci_runtime_misconfigured",
            )
    return runtime
