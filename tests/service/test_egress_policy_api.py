"""The policy's egress side on the real service, whose egress gateway cannot start here (its
interpreter is /bin/false; tests/service/test_egress_runs.py has a working one): a request's
``network`` where no egress rule applies, or asking more than its rule, is 422
``network_not_allowed``; a run under a rule with ``egress`` is refused (503
``egress_unavailable``, saying why) rather than run without the network it was promised; a bad secrets
file, or a policy naming a secret it lacks, stops the start; no secret value is in any answer
or log line."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from skill_executor_client import Client as ExecutorClient
from skill_executor_client.calls import ApiError
from skill_executor_client.models import NetworkRequest, RunRequest

from ..api_server import Server, free_port
from ..conftest import REPO

KEY = "egress-tenant-key"
KEY_ID = hashlib.sha256(KEY.encode()).hexdigest()[:12]
TOKEN = "ghp_service-test-secret-0123456789abcdef"
POLICY = """
rules:
  - name: math-net
    key: "*"
    skill: math-tools
    egress:
      allow: [api.example.test, "*.cdn.example.test"]
      inject:
        - host: api.example.test
          header: Authorization
          value: "Bearer {secret:GITHUB_TOKEN}"
  - name: everyone
    key: "*"
    skill: "*"
    deny: [curl]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    base = tmp_path_factory.mktemp("egress-policy")
    (base / "policy.yaml").write_text(POLICY)
    (base / "secrets.yaml").write_text("GITHUB_TOKEN: env:EGRESS_TEST_TOKEN\n")
    srv = Server(
        base,
        env={
            "SKILL_EXECUTOR_API_KEYS": KEY,
            "SKILL_EXECUTOR_POLICY_FILE": str(base / "policy.yaml"),
            "SKILL_EXECUTOR_SECRETS_FILE": str(base / "secrets.yaml"),
            "EGRESS_TEST_TOKEN": TOKEN,
            "SKILL_EXECUTOR_POOL_SIZE": "0",
            "SKILL_EXECUTOR_EGRESS_PYTHON": "/bin/false",
        },
    ).start()
    yield srv
    srv.stop()
    assert TOKEN not in "\n".join(srv.log_lines())


def post(server: Server, body: dict[str, object]) -> httpx.Response:
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as http:
        before = http.get("/v1/runs").json()["runs"]
        answer = http.post("/v1/runs", json=body)
        assert TOKEN not in answer.text
        assert http.get("/v1/runs").json()["runs"] == before  # refused before anything is recorded
        return answer


def test_network_on_a_skill_without_an_egress_rule_is_422(server: Server) -> None:
    answer = post(server, {"skill": "csv-report", "command": "true", "network": {"allow": ["api.example.test"]}})
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["code"] == "network_not_allowed"
    assert error["message"] == (
        "this run cannot have network: policy rule 'everyone' has no egress; a run of skill 'csv-report' has none "
        "(leave 'network' out)"
    )
    assert error["details"] == {"rule": "everyone", "host": "api.example.test"}


def test_network_asking_more_than_the_rule_is_422_naming_the_host(server: Server) -> None:
    body = {"skill": "math-tools", "command": "true", "network": {"allow": ["api.example.test", "evil.example.test"]}}
    answer = post(server, body)
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["code"] == "network_not_allowed"
    assert error["details"] == {"rule": "math-net", "host": "evil.example.test"}
    assert "'evil.example.test' is not allowed by policy rule 'math-net'" in error["message"]


def test_a_malformed_host_is_an_invalid_request(server: Server) -> None:
    answer = post(server, {"skill": "math-tools", "command": "true", "network": {"allow": ["*"]}})
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["code"] == "invalid_request"
    assert "'*' would allow every host" in answer.json()["error"]["message"]


def test_a_run_under_an_egress_rule_is_refused_when_no_gateway_serves_it(server: Server) -> None:
    for body in (
        {"skill": "math-tools", "command": "true"},
        {"skill": "math-tools", "command": "true", "network": {"allow": ["x.cdn.example.test"]}},
    ):
        answer = post(server, body)
        assert answer.status_code == 503, answer.text
        error = answer.json()["error"]
        assert error["code"] == "egress_unavailable" and error["details"] == {"rule": "math-net"}
        assert "the egress gateway did not start (it exited with 1" in error["message"]
    # asking for no network at all is a network-less run, as today
    with ExecutorClient(server.url, api_key=KEY) as client:
        request = RunRequest(skill="math-tools", command="echo ok", network=NetworkRequest(allow=[]))
        assert client.run(request).stdout == "ok\n"


def test_the_request_cannot_set_a_secrets_variable(server: Server) -> None:
    body = {"skill": "math-tools", "command": "true", "env": {"GITHUB_TOKEN": "mine"}}
    answer = post(server, body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == "env_refused"
    with ExecutorClient(server.url, api_key=KEY) as client, pytest.raises(ApiError) as caught:
        client.run({"skill": "csv-report", "command": "true", "network": {"allow": []}})
    assert (caught.value.status, caught.value.code) == (422, "network_not_allowed")


def serve(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("SKILL_EXECUTOR_")}
    full.update({"SKILL_EXECUTOR_RUNTIME": "local", **env})
    return subprocess.run(
        [sys.executable, "-m", "skill_executor.cli.main", "serve", "--port", str(free_port())]
        + ["--data-dir", str(tmp_path / "d")],
        cwd=REPO,
        env=full,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_bad_secrets_file_or_a_missing_secret_stops_the_start(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text(POLICY)
    (tmp_path / "secrets.yaml").write_text(f"OTHER: {TOKEN}\nGITHUB_TOKEN: [{TOKEN}]\n")
    done = serve(
        tmp_path,
        {
            "SKILL_EXECUTOR_POLICY_FILE": str(tmp_path / "policy.yaml"),
            "SKILL_EXECUTOR_SECRETS_FILE": str(tmp_path / "secrets.yaml"),
        },
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr == f"skill-executor: secrets file {tmp_path / 'secrets.yaml'}: GITHUB_TOKEN: a list\n"
    (tmp_path / "secrets.yaml").write_text(f"OTHER: {TOKEN}\n")
    done = serve(
        tmp_path,
        {
            "SKILL_EXECUTOR_POLICY_FILE": str(tmp_path / "policy.yaml"),
            "SKILL_EXECUTOR_SECRETS_FILE": str(tmp_path / "secrets.yaml"),
        },
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        f"skill-executor: policy file {tmp_path / 'policy.yaml'}: rules.0.egress.inject.0.value: "
        "{secret:GITHUB_TOKEN}: no secret 'GITHUB_TOKEN' in the secrets file\n"
    )
    assert TOKEN not in done.stdout + done.stderr
