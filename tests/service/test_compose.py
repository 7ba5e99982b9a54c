"""docker-compose.yml: validated by docker-compose (v1), and brought up once for real."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import httpx
import pytest
import yaml

from skill_executor_client import Client

from ..api_server import free_port
from ..conftest import REPO, in_ci, require_runtime


def compose_binary() -> str:
    found = shutil.which("docker-compose")
    if found is None:
        if in_ci():
            pytest.fail("CI needs docker-compose (Debian's docker-compose package)")
        pytest.skip("docker-compose is not installed")
    return found


def compose(*args: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([compose_binary(), *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def compose_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILL_EXECUTOR_")}
    env["PWD"] = str(REPO)
    env.update(extra)
    return env


def test_compose_file_is_valid() -> None:
    result = compose("config", env=compose_env(SKILL_EXECUTOR_DATA_DIR="/srv/se-data"))
    assert result.returncode == 0, result.stderr
    config = yaml.safe_load(result.stdout)
    service = config["services"]["skill-executor"]
    assert service["network_mode"] == "host"
    volumes = service["volumes"]
    flat = [
        v if isinstance(v, str) else f"{v['source']}:{v['target']}{':ro' if v.get('read_only') else ''}"
        for v in volumes
    ]
    assert "/var/run/docker.sock:/var/run/docker.sock:rw" in flat
    assert f"{REPO}/skills:{REPO}/skills:ro" in flat
    # Identical path inside and outside; the volumes the service mounts there reach the engine.
    assert "/srv/se-data:/srv/se-data:rw,rshared" in flat
    # The hard disk cap's volumes: mounts, loop devices, ext4's reserved clusters.
    assert "/sys/fs/ext4:/sys/fs/ext4:rw" in flat
    assert service["cap_add"] == ["SYS_ADMIN"] and service["devices"] == ["/dev/loop-control"]
    assert service["environment"]["SKILL_EXECUTOR_DISK_CAP"] == "hard"
    assert service["environment"]["SKILL_EXECUTOR_SKILLS_DIRS"] == f"{REPO}/skills"


def test_compose_up_serves_a_run(tmp_path: Path) -> None:
    require_runtime("docker")
    compose_binary()
    import docker

    from skill_executor.image.build import build_service_image

    engine = docker.DockerClient(base_url="unix:///var/run/docker.sock", version="auto", timeout=600)
    build_service_image(engine)
    data = Path("/tmp") / f"se-compose-{uuid.uuid4().hex[:8]}"
    port = free_port()
    project = f"setest{uuid.uuid4().hex[:8]}"
    env = compose_env(SKILL_EXECUTOR_DATA_DIR=str(data), SKILL_EXECUTOR_PORT=str(port))
    # The hard disk cap: the data folder on a shared mount (what a systemd host's / already is).
    data.mkdir()
    shared = subprocess.run(
        ["sh", "-c", f"mount --bind {data} {data} && mount --make-shared {data}"], capture_output=True, text=True
    )
    assert shared.returncode == 0, shared.stderr
    up = compose("-p", project, "up", "-d", "--no-build", env=env)
    try:
        assert up.returncode == 0, up.stderr
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, compose("-p", project, "logs", env=env).stdout[-3000:]
            time.sleep(0.5)
        with Client(url) as client:
            assert client.health().checks["engine"].ok
            result = client.run(
                {
                    "skill": "math-tools",
                    "command": "python3 scripts/fib.py 7 > out/fib.txt",
                    "output_files": ["out/fib.txt"],
                }
            )
            assert result.exit_code == 0, result
            assert result.output_files[0].content == "0\n1\n1\n2\n3\n5\n8\n"
            record = client.get_run(result.run_id)
            assert record.status == "completed"
            health = client.health().checks["disk_cap"]
            assert health.ok and health.detail.startswith("hard:"), health
        # The image installs the mcp extra: /mcp is the MCP server, not 501 mcp_unavailable.
        mcp = httpx.post(
            f"{url}/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
            headers={"Accept": "application/json, text/event-stream"},
            timeout=10,
        )
        assert mcp.status_code != 501, mcp.text
    finally:
        down = compose("-p", project, "down", "--remove-orphans", env=env)
        subprocess.run(["umount", "--lazy", str(data)], capture_output=True)
        shutil.rmtree(data, ignore_errors=True)
    assert down.returncode == 0, down.stderr
    left = engine.api.containers(all=True, filters={"label": f"com.docker.compose.project={project}"})
    assert left == []


PROBE_GATEWAY = r"""
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b"GET http://api.example.test/ HTTP/1.1\r\nHost: api.example.test\r\nConnection: close\r\n\r\n")
print(s.recv(200).split(b"\r\n")[0].decode())
"""


def test_the_service_image_runs_the_egress_gateway(tmp_path: Path) -> None:
    """What compose and Kubernetes run: a policy rule with egress makes the image's service start
    its gateway from the image's own environment (/opt/egress), which answers a request without
    a run's credentials with 407."""
    require_runtime("docker")
    import docker

    from skill_executor.image.build import build_service_image

    engine = docker.DockerClient(base_url="unix:///var/run/docker.sock", version="auto", timeout=600)
    tag = build_service_image(engine).tag
    (tmp_path / "policy.yaml").write_text(
        'rules:\n  - key: "*"\n    skill: "*"\n    egress:\n      allow: [api.example.test]\n'
    )
    tmp_path.chmod(0o755)
    container = engine.containers.run(
        tag,
        ["serve", "--runtime", "local"],
        detach=True,
        network_mode="none",
        volumes={str(tmp_path): {"bind": "/cfg", "mode": "ro"}},
        environment={"SKILL_EXECUTOR_POLICY_FILE": "/cfg/policy.yaml"},
    )
    try:
        socket_path = "/srv/data/egress/socket/egress.sock"
        deadline = time.monotonic() + 60
        while container.exec_run(["test", "-S", socket_path]).exit_code != 0:
            container.reload()
            assert container.status == "running", container.logs().decode()[-3000:]
            assert time.monotonic() < deadline, container.logs().decode()[-3000:]
            time.sleep(0.5)
        probe = container.exec_run(["/opt/venv/bin/python", "-c", PROBE_GATEWAY, socket_path])
        assert probe.exit_code == 0, probe.output.decode()
        assert probe.output.decode().strip() == "HTTP/1.1 407 Proxy Authentication Required"
        assert b"did not start" not in container.logs()
    finally:
        container.remove(force=True)
