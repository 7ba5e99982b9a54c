"""The Docker runtime: every run in its own fresh, hardened, network-less container.

A run gets a started container of the warm pool when one is ready (not for sessions,
whose ``work/`` must be mounted when the container starts), else a container of its
own (:mod:`.sandboxes`).  Every container is removed: after a normal exit, a timeout,
an error, and (through the start-up sweep and the deadline reaper) after a crash of
the service.  Containers carry their owner's token and a deadline as labels.

Modules: :mod:`.runtime` (the runtime: start, claim, health, close), :mod:`.cleanup`
(removing dead owners', expired and stray containers), :mod:`.engine` (configuration
and every engine call, errors mapped in one place), :mod:`.oci` (the engine's OCI
runtime, gVisor's registration), :mod:`.hostview` (a container seen from the host: its
init's pidfd, its cgroups), :mod:`.launcher` (the warm launcher's protocol),
:mod:`.sandboxes` (the two ways to run: boxes), :mod:`.pool` (warm containers, private
to this runtime), :mod:`.processes` (a session's host container), :mod:`.warmhome`
(the warm HOME template), :mod:`.appear` (waiting for a launcher's socket without polling).
"""

from __future__ import annotations

from .engine import LABEL_DEADLINE, LABEL_MANAGED, LABEL_OWNER, LABEL_RUN, connect
from .runtime import DockerRuntime

__all__ = ["DockerRuntime", "LABEL_DEADLINE", "LABEL_MANAGED", "LABEL_OWNER", "LABEL_RUN", "connect"]
