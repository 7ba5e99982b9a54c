"""The agent-sandbox runtime's parts (Kubernetes: kubernetes-sigs/agent-sandbox warm pods).

* :mod:`.claims` -- one pod per run from its tier's SandboxWarmPool, with the real
  ``k8s-agent-sandbox`` SDK; refusals, the bounded wait, release, figures for the metrics;
* :mod:`.client` -- sandboxd's wire protocol for one pod: files in and out, processes;
* :mod:`.process` -- a process's ``Start`` stream driven by us (deadline, kill, partial output);
* :mod:`.transfer` -- a workspace's files as plain PUTs or one tar, and a pod's folder mirrored
  back into a worker-side tree, bounded and link-free.

The ``Runtime``/``Box`` that the runtime seam asks for is assembled from these once the seam
(``Runtime.claim(plan) -> Box``) is in place; see docs/guides/runtimes.md.
"""

from ...extras import require

require("kubernetes")  # its modules import k8s_agent_sandbox, kubernetes and grpc at the top
