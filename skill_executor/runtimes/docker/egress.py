"""The path in (:mod:`..egress`) on Docker: the mounts of a run with an egress grant, and
whether the engine's runtime can give it at all."""

from __future__ import annotations

from docker.types import Mount

from ..egress import SANDBOX_CA, SANDBOX_DIR, EgressPath, EgressUnsupported
from .engine import Engine


def egress_mounts(egress: EgressPath, *, bridge: bool) -> list[Mount]:
    """The CA certificate, and with ``bridge`` the gateway socket's folder (gVisor cannot
    mount a socket file: the folder, which holds only the socket), both read-only."""
    mounts = [Mount(SANDBOX_CA, str(egress.ca_cert), type="bind", read_only=True)]
    if bridge:
        mounts.append(Mount(SANDBOX_DIR, str(egress.socket.parent), type="bind", read_only=True))
    return mounts


def check_egress(engine: Engine, egress: EgressPath) -> None:
    """Refuse (``egress_unsupported``) a grant the engine's runtime cannot give a path in."""
    runtime = engine.oci_runtime
    if runtime is not None and not runtime.opens_host_sockets:
        raise EgressUnsupported(
            f"the OCI runtime {runtime.describe()} may not connect to the egress gateway's Unix socket: "
            "register gVisor's runsc with --host-uds=all in its runtimeArgs (open for the gateway's socket, "
            "create for the warm pool; ./scripts/serve.sh upgrades an older registration)"
        )
    egress.check()
