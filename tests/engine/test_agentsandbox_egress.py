"""agent-sandbox pods and the egress gateway: the real SDK claims a pod from tests/fakekube.py
(our in-pod server in a container of the runner image); a run with a grant gets the proxy
variables naming its worker's gateway at ``SKILL_EXECUTOR_EGRESS_ADVERTISE`` with its own
credential, the gateway CA's certificate as a file in its pod, its placeholders; a run without
one gets none of it; a worker whose gateway pods cannot reach refuses the grant before claiming.

The test pods have no network (``--network none``): what a pod reaches is the NetworkPolicy's
to decide in a cluster (deploy/kubernetes/overlays/egress), not asserted here."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from skill_executor.core import Executor
from skill_executor.runs.sandbox import STAGED_TOPS, RunSandbox
from skill_executor.runtimes.agentsandbox.runtime import POD_EGRESS_CA
from skill_executor.runtimes.base import Command, ExecResult, SandboxPlan
from skill_executor.runtimes.egress import EgressPath, EgressUnsupported
from skill_executor.workspace.layout import environment

from ..conftest import make_settings
from .test_egress_path import CERT

ADVERTISE = "10.244.1.7:3128"

SHOW = 'env | sort; echo "--"; cat "$SSL_CERT_FILE"; ls -ln "$SSL_CERT_FILE" | cut -c1-10; ls -A /workspace'


def execute(executor: Executor, command: str, egress: EgressPath | None, run_id: str) -> ExecResult:
    """Claim a pod for the plan, put the workspace in (as staging does), run ``command``."""
    plan = SandboxPlan(run_id, executor.repository.get("math-tools"), egress=egress)
    with RunSandbox(executor.runtime.claim(plan)) as sandbox:
        sandbox.box.put(STAGED_TOPS)
        cwd = f"{sandbox.root.rstrip('/')}/work"
        return sandbox.execute(
            Command(
                command=command,
                cwd=cwd,
                env={**environment(sandbox.root, "math-tools"), "PWD": cwd},
                stdin=None,
                timeout=60,
                stdout_max=1 << 20,
                stderr_max=1 << 20,
            )
        )


@pytest.fixture
def path(tmp_path: Path) -> EgressPath:
    cert = tmp_path / "ca-cert.pem"
    cert.write_bytes(CERT)
    return EgressPath(
        socket=tmp_path / "socket" / "egress.sock",  # a pod never sees it
        ca_cert=cert,
        credential="tok-pod-123",
        variables={"GH_TOKEN": "se-placeholder-0123"},
    )


@pytest.fixture
def executor(tmp_path: Path, agent_sandbox_farm: dict[str, object]) -> Iterator[Executor]:
    made = Executor.from_settings(
        make_settings(
            tmp_path, "agent-sandbox", egress_listen="0.0.0.0:3128", egress_advertise=ADVERTISE, **agent_sandbox_farm
        )
    )
    yield made
    made.close()


def test_a_pod_with_a_grant_gets_the_gateway_its_credential_and_the_ca(executor: Executor, path: EgressPath) -> None:
    result = execute(executor, SHOW, path, run_id="pod-egress-run")
    out = result.stdout.decode()
    assert result.exit_code == 0, result.stderr.decode()
    env, _, rest = out.partition("--\n")
    variables = dict(line.split("=", 1) for line in env.splitlines() if "=" in line)
    url = f"http://run:tok-pod-123@{ADVERTISE}"
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        assert variables[name] == url
    assert variables["NO_PROXY"] == "localhost,127.0.0.1" and variables["NODE_USE_ENV_PROXY"] == "1"
    ca = f"/workspace/{POD_EGRESS_CA}"
    for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "PIP_CERT", "CURL_CA_BUNDLE"):
        assert variables[name] == ca
    assert variables["GH_TOKEN"] == "se-placeholder-0123"
    assert rest.startswith(CERT.decode())  # the certificate, as the worker's gateway has it
    assert "-r--r--r--" in rest  # read-only (the run's own copy: it only trusts less if it changes it)


def test_a_pod_without_a_grant_gets_nothing_of_it(executor: Executor) -> None:
    result = execute(executor, "env | sort; ls -A /workspace", None, run_id="pod-plain-run")
    out = result.stdout.decode()
    assert result.exit_code == 0, result.stderr.decode()
    assert "PROXY" not in out.upper().replace("NO_PROXY", "") and "SSL_CERT_FILE" not in out
    assert POD_EGRESS_CA not in out


def test_a_worker_whose_gateway_pods_cannot_reach_refuses_before_claiming(
    tmp_path: Path, agent_sandbox_farm: dict[str, object], path: EgressPath
) -> None:
    """No SKILL_EXECUTOR_EGRESS_ADVERTISE: 501 egress_unsupported, naming the settings; no pod taken."""
    made = Executor.from_settings(make_settings(tmp_path, "agent-sandbox", **agent_sandbox_farm))
    try:
        before = made.runtime.stats()["sandbox_claims"]
        with pytest.raises(EgressUnsupported) as refused:
            execute(made, "true", path, run_id="pod-refused-run")
        assert refused.value.status == 501 and "SKILL_EXECUTOR_EGRESS_ADVERTISE" in refused.value.message
        assert made.runtime.stats()["sandbox_claims"] == before
    finally:
        made.close()
