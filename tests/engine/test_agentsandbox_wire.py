"""The agent-sandbox runtime's wire path end to end: the real SDK claims a pod from
tests/fakekube.py, whose pods are our in-pod server in real hardened containers of the runner
image (tests/agentsandbox_pods.py); files go in (plain PUTs or one tar), the command streams
(stdin, env, deadline, cancel, caps), files come back into a worker-side Tree, the claim is
released and the pod replaced.  And a hostile pod: listings with ``..``, slashes, lies about
sizes, answered by a server of the attacker's, cannot write outside the worker's tree."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from k8s_agent_sandbox.connector import SandboxConnector
from k8s_agent_sandbox.models import SandboxdInClusterConnectionConfig

from skill_executor.runtimes.agentsandbox.claims import Claims, api_client
from skill_executor.runtimes.agentsandbox.client import PodClient
from skill_executor.runtimes.agentsandbox.process import SandboxLost, execute
from skill_executor.runtimes.agentsandbox.transfer import MirrorLimits
from skill_executor.workspace.fs import Tree

from ..agentsandbox_pods import PodFarm
from ..conftest import require_runtime
from ..fakekube import FakeKube, Pool


@dataclass
class Cluster:
    kube: FakeKube
    farm: PodFarm
    claims: Claims


@pytest.fixture(scope="module", params=["runc", "runsc"])
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    require_runtime("docker-runsc" if request.param == "runsc" else "docker")
    farm = PodFarm(oci_runtime="runsc" if request.param == "runsc" else None)
    try:
        kube = FakeKube({"pool-a": Pool(ready=deque([farm.make()]), make=farm.make, discard=farm.discard)})
        with kube.serving():
            claims = Claims(
                api_client(kube.url),
                pools={"base": "pool-a"},
                namespace="ns",
                worker_id="w",
                timeout=60,
                rest_port=farm.rest_port,
                grpc_port=farm.grpc_port,
            )
            yield Cluster(kube, farm, claims)
    finally:
        farm.close()


@pytest.fixture
def pod(cluster: Cluster, tmp_path: Path) -> Iterator[PodClient]:
    claim = cluster.claims.claim("base", "run", run_timeout=60)
    try:
        client = PodClient(claim.sandbox.connector, kill_grace=1.0)
        client.put({}, folders=["out"])
        yield client
    finally:
        assert cluster.claims.release(claim)


def run(pod: PodClient, script: str, *, timeout: float = 30, cap: int = 1 << 20, **kw: object) -> object:
    process = pod.start(["bash", "-c", script], cwd="/workspace", env={"HOME": "/tmp"}, timeout=timeout)
    return execute(process, timeout=timeout, stdout_max=cap, stderr_max=cap, **kw)  # type: ignore[arg-type]


def test_claim_put_start_get_release_on_the_real_wire(cluster: Cluster, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "skills" / "s" / "scripts").mkdir(parents=True)
    (ws / "skills" / "s" / "scripts" / "go.sh").write_text('#!/bin/sh\necho "go $1"\n')
    os.chmod(ws / "skills" / "s" / "scripts" / "go.sh", 0o750)
    (ws / "skills" / "s" / "SKILL.md").write_text("---\nname: s\n---\n")
    os.symlink("SKILL.md", ws / "skills" / "s" / "README.md")  # inside: kept
    os.symlink("/etc/passwd", ws / "skills" / "s" / "passwd")  # outside: not sent
    os.symlink("skills/s/scripts", ws / "scripts")  # the root's link into the skill
    (ws / "work" / "inputs").mkdir(parents=True)
    (ws / "work" / "inputs" / "in.txt").write_text("input\n")
    (ws / "run").mkdir()
    (ws / "work" / "empty").mkdir()
    claim = cluster.claims.claim("base", "r1", run_timeout=60)
    try:
        check_the_wire(cluster, claim.sandbox.connector, ws, tmp_path)
    finally:
        calls = dict(cluster.kube.calls)
        assert cluster.claims.release(claim)
    assert cluster.kube.calls["delete sandboxclaims"] == calls.get("delete sandboxclaims", 0) + 1
    deadline = time.monotonic() + 60  # single use: the pod is replaced
    while not cluster.kube.pools["pool-a"].ready and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(cluster.farm.pods) == 1


def check_the_wire(cluster: Cluster, connector: SandboxConnector, ws: Path, tmp_path: Path) -> None:
    pod = PodClient(connector)
    packed = pod.put({t: ws / t for t in ("skills", "work", "run")}, root=ws, folders=["out"])
    assert packed.tar is not None and any("passwd" in w for w in packed.warnings)
    done = execute(
        pod.start(
            [
                "bash",
                "-c",
                'find scripts/ -name go.sh -printf "%m %p\\\\n"; ./scripts/go.sh "$X"; test -d work/empty && echo empty; '
                "cat skills/s/README.md | head -1; test -e skills/s/passwd || echo nopasswd; "
                "cat - work/inputs/in.txt > out/copy.txt; mkdir out/d; printf x > out/d/y; echo err >&2; exit 3",
            ],
            cwd="/workspace",
            env={"X": "arg"},
            stdin=b"from stdin\n",
        ),
        timeout=30,
        stdout_max=1 << 20,
        stderr_max=1 << 20,
    )
    assert done.exit_code == 3 and done.stderr.data == b"err\n"
    assert done.stdout.data.decode().splitlines() == ["750 scripts/go.sh", "go arg", "empty", "---", "nopasswd"]
    assert [(e.name, e.type) for e in pod.entries("out")] == [("copy.txt", "file"), ("d", "directory")]
    back = tmp_path / "back"
    back.mkdir()
    with Tree(back) as tree:
        got = pod.get("out", tree, limits=MirrorLimits(max_bytes=1 << 20), owner=None)
    assert (got.files, got.warnings) == (2, [])
    assert (back / "copy.txt").read_text() == "from stdin\ninput\n" and (back / "d" / "y").read_text() == "x"


def test_a_staging_tar_past_the_memory_spool_streams_in_whole_and_leaves_nothing(
    cluster: Cluster, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    (ws / "work" / "inputs").mkdir(parents=True)
    big = os.urandom(1 << 20) * 20  # 20 MiB: past the 16 MiB the tar keeps in memory
    (ws / "work" / "inputs" / "big.bin").write_bytes(big)
    (ws / "work" / "inputs" / "small.txt").write_text("small\n")
    (ws / "run").mkdir()
    claim = cluster.claims.claim("base", "big", run_timeout=60)
    try:
        pod = PodClient(claim.sandbox.connector)
        packed = pod.put({t: ws / t for t in ("work", "run")}, folders=["out"])
        assert packed.tar is not None and packed.tar_bytes > 20 << 20 and packed.tar.closed
        # (`ls` of the current folder only: this gVisor rejects coreutils' statx of a path)
        done = run(pod, "sha256sum work/inputs/big.bin | cut -c1-64; ls -A; cd work/inputs && ls -A")
        assert done.exit_code == 0, done.stderr.data  # type: ignore[attr-defined]
        lines = done.stdout.data.decode().split()  # type: ignore[attr-defined]
        assert lines[0] == hashlib.sha256(big).hexdigest()
        assert lines[1:] == ["out", "run", "work", "big.bin", "small.txt"]  # no staging file left
    finally:
        assert cluster.claims.release(claim)


def test_a_few_files_go_as_plain_puts_with_their_modes(pod: PodClient, tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "a").write_text("a")
    os.chmod(tmp_path / "run" / "a", 0o604)
    packed = pod.put({"run": tmp_path / "run"})
    assert packed.tar is None and packed.files == 1
    done = run(pod, "find run/a -printf %m; echo; cat run/a")
    assert done.stdout.data == b"604\na"  # type: ignore[attr-defined]


def test_the_deadline_kills_the_group_and_keeps_partial_output(pod: PodClient) -> None:
    started = time.monotonic()
    done = run(pod, "echo partial; (sleep 60; echo late) & sleep 60", timeout=1.5)
    assert time.monotonic() - started < 20  # generous: it does not hang
    assert done.timed_out and done.stdout.data == b"partial\n"  # type: ignore[attr-defined]
    alive = "for p in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $p; echo; done 2>/dev/null | grep -c '^sleep 60' || true"
    assert run(pod, alive).stdout.data == b"0\n"  # type: ignore[attr-defined]  # the group is gone


def test_cancel_stops_the_run_with_its_output(pod: PodClient) -> None:
    cancel = threading.Event()
    threading.Timer(1.0, cancel.set).start()
    done = run(pod, "echo before; sleep 60", timeout=60, cancel=cancel)
    assert done.cancelled and not done.timed_out and done.stdout.data == b"before\n"  # type: ignore[attr-defined]


def test_output_over_the_cap_is_cut_and_flagged(pod: PodClient) -> None:
    done = run(pod, "head -c 5000000 /dev/zero", cap=100_000)
    assert done.exit_code == 0 and done.stdout.data == b"\0" * 100_000 and done.stdout.truncated  # type: ignore[attr-defined]


def test_a_pod_lost_mid_run_is_sandbox_lost(cluster: Cluster) -> None:
    claim = cluster.claims.claim("base", "lost", run_timeout=60)
    try:
        pod = PodClient(claim.sandbox.connector)
        process = pod.start(["bash", "-c", "echo up; sleep 60"], cwd="/workspace", env={})
        first = list(process.events(20))
        assert first == [("stdout", b"up\n")]
        ip = claim.sandbox.get_pod_ip()
        assert ip is not None
        cluster.farm.container(ip).kill()  # the pod is evicted
        with pytest.raises(SandboxLost) as lost:
            execute(process, timeout=60, stdout_max=100, stderr_max=100)
        assert lost.value.code == "sandbox_lost"
    finally:
        cluster.claims.release(claim)


def test_what_a_run_plants_in_out_cannot_leave_the_workers_tree(pod: PodClient, tmp_path: Path) -> None:
    run(
        pod,
        "cd out && ln -s /etc/passwd pw && ln -s .. up && mkfifo fifo && mkdir d && ln -s / d/root "
        "&& head -c 3000000 /dev/zero > big && echo ok > small",
    )
    back = tmp_path / "back"
    back.mkdir()
    with Tree(back) as tree:
        got = pod.get("out", tree, limits=MirrorLimits(max_bytes=1_000_000), owner=None)
    found = sorted(str(p.relative_to(back)) for p in back.rglob("*"))
    assert found == ["d", "small"]
    assert not any(stat.S_ISLNK(p.lstat().st_mode) for p in back.rglob("*"))
    assert any("big" in w for w in got.warnings)


class Hostile(BaseHTTPRequestHandler):
    """A pod of the attacker's: listings that name ``..``, paths, lie about sizes; huge bodies."""

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        path = self.path.split("?")[0]
        if path.endswith("/out"):
            entries = [
                {"name": "..", "size": 1, "type": "directory"},
                {"name": "../../escape", "size": 1, "type": "file"},
                {"name": "a/b", "size": 1, "type": "file"},
                {"name": "", "size": 1, "type": "file"},
                {"name": "nul\x00x", "size": 1, "type": "file"},
                {"name": "liar", "size": 1, "type": "file"},
                {"name": "ok", "size": 2, "type": "file", "mode": "4755"},
                {"name": "link", "size": 1, "type": "symlink"},
            ]
            body = json.dumps({"path": "/out", "entries": entries}).encode()
        elif path.endswith("liar"):
            body = b"x" * 5_000_000
        elif path.endswith("%2Fok"):
            body = b"ok"
        else:
            body = b"x"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_a_hostile_pods_listing_cannot_write_outside_the_tree(tmp_path: Path) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        config = SandboxdInClusterConnectionConfig(
            mode="in-cluster-pod-ip", rest_port=server.server_address[1], grpc_port=1
        )
        connector = SandboxConnector(
            sandbox_id="evil",
            namespace="ns",
            connection_config=config,
            k8s_helper=None,  # type: ignore[arg-type]
            get_pod_ip=lambda: "127.0.0.1",
        )
        pod = PodClient(connector)
        inside = tmp_path / "ws" / "out"
        inside.mkdir(parents=True)
        with Tree(inside) as tree:
            got = pod.get("out", tree, limits=MirrorLimits(max_bytes=1_000_000), owner=None)
        assert sorted(os.listdir(tmp_path)) == ["ws"] and sorted(os.listdir(tmp_path / "ws")) == ["out"]
        assert os.listdir(inside) == ["ok"]
        assert stat.S_IMODE((inside / "ok").stat().st_mode) == 0o755  # no set-id bit
        assert got.files == 1 and len(got.warnings) >= 5
    finally:
        server.shutdown()
