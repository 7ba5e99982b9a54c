"""The in-pod server: sandboxd's wire protocol, served from the runner image.

``docker run <runner image> sandboxd`` (or a Kubernetes ``SandboxTemplate`` pointing at the
image) serves what agent-sandbox's ``sandboxd`` serves, so the ``k8s-agent-sandbox`` SDK drives
it unchanged:

* REST (default port 8080): ``GET|HEAD|PUT|DELETE /v1/files/{path}``, ``GET /v1/health`` and
  ``GET /v1/metadata`` (:mod:`.rest`, file access below the root in :mod:`.tree`);
* gRPC (default port 9090): ``process.v1.ProcessService`` (:mod:`.process`), each child started
  as ``launcher --exec -- ARGV`` so the launcher's seccomp filter applies to it.

It runs in the image's system Python, apart from the service: it imports the standard library,
grpcio and the SDK wheel's generated classes (:mod:`.stubs`), never the rest of
``skill_executor``.  See docs/guides/runtimes.md, "The in-pod server (sandboxd protocol)".
"""
