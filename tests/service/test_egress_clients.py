"""The egress path with the clients skills use, on the real service and the real gateway, on
runc, gVisor (runsc) and bwrap: a run under a rule with ``egress`` reaches loopback HTTPS
upstreams under made-up names (SKILL_EXECUTOR_EGRESS_HOSTS, their test CA in
SKILL_EXECUTOR_EGRESS_CA_BUNDLE) with curl, Python's urllib, requests, httpx, ``pip download``
from a PEP 503 index (a wheel built here), ``git clone`` over HTTPS (the dumb protocol from a
bare repository) and Node's built-in ``fetch`` and ``https`` -- each only through the gateway,
with the secret injected on the way out, each request an ``egress`` event. One run per
runtime exercises every client (the variables of the path in do the work: no client is told
of a proxy or a CA).

A run without an egress rule reaches nothing: no proxy variables, nothing on the bridge's
port, no resolver, and neither the host's upstream nor the gateway's own loopback port.

The runner image has every client. On bwrap the sandbox runs the host's programs: a client
the host lacks (httpx), or a Node that predates ``NODE_USE_ENV_PROXY`` (22.21, 24.5), is
reported as a skip -- after checking that it failed closed (its request never arrived)."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import subprocess
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from ..api_server import Server
from ..conftest import require_runtime
from .test_egress_gateway import egress_python, make_upstream_certs, serve_https
from .test_egress_runs import KEY, http, run_with_events

SECRET = "ghs_client-matrix-secret-0123456789abcdef"
API, PYPI, GIT = "api.example.test", "pypi.example.test", "git.example.test"
NAMES = [API, PYPI, GIT]
#: Every host injects the secret: an API, a private package index, a private repository.
POLICY = f"""
rules:
  - name: clients
    key: "*"
    skill: math-tools
    egress:
      allow: [{API}, {PYPI}, {GIT}]
      inject:
        - host: {API}
          header: Authorization
          value: "Bearer {{secret:CLIENT_TOKEN}}"
        - host: {PYPI}
          header: Authorization
          value: "Bearer {{secret:CLIENT_TOKEN}}"
        - host: {GIT}
          header: Authorization
          value: "Bearer {{secret:CLIENT_TOKEN}}"
"""
WHEEL = "tinypkg-0.1-py3-none-any.whl"
#: The runtimes (tests/conftest.py names): runc, gVisor, bwrap.
RUNTIMES = ["docker", "docker-runsc", "bwrap"]

pytestmark = pytest.mark.skipif(
    egress_python() is None, reason="no egress environment (scripts/test.sh makes .venv-egress)"
)


def make_wheel(folder: Path) -> Path:
    """A tiny pure-Python wheel (``tinypkg`` 0.1, ``VALUE = 42``), RECORD and all."""
    files = {
        "tinypkg/__init__.py": b"VALUE = 42\n",
        "tinypkg-0.1.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tinypkg\nVersion: 0.1\n",
        "tinypkg-0.1.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: skill-executor-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = ""
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{name},sha256={digest},{len(data)}\n"
    files["tinypkg-0.1.dist-info/RECORD"] = (record + "tinypkg-0.1.dist-info/RECORD,,\n").encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
    path = folder / WHEEL
    path.write_bytes(buffer.getvalue())
    return path


def make_repository(folder: Path) -> Path:
    """A bare repository with one commit (README.md), ready for the dumb HTTP protocol."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(folder),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.test",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.test",
    }
    work, bare = folder / "git-work", folder / "skill.git"

    def git(*args: str) -> None:
        subprocess.run(["git", *args], env=env, check=True, capture_output=True, timeout=60)

    git("init", "-q", "-b", "main", str(work))
    (work / "README.md").write_text("cloned through the gateway\n")
    git("-C", str(work), "add", "README.md")
    git("-C", str(work), "commit", "-q", "-m", "one")
    git("clone", "-q", "--bare", str(work), str(bare))
    git("-C", str(bare), "update-server-info")  # info/refs, objects/info/packs: the dumb protocol's files
    return bare


class Upstream(BaseHTTPRequestHandler):
    """The three hosts on one loopback HTTPS port, told apart by ``Host``: the API says which
    path it was asked for; the index serves ``tinypkg``; the git host serves the bare
    repository's files. Keeps what it saw (never reflects headers to the run)."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    seen: list[dict[str, Any]] = []
    wheel: Path
    repository: Path

    def do_GET(self) -> None:
        host = (self.headers.get("Host") or "").rsplit(":", 1)[0].lower()
        path = self.path.partition("?")[0]
        headers = {k.title(): v for k, v in self.headers.items()}
        Upstream.seen.append({"host": host, "path": path, "headers": headers, "method": self.command})
        body, kind = self.answer(host, path)
        if body is None:
            self.send_response(404)
            self.send_header("content-length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_HEAD = do_GET  # uv asks whether a wheel's server takes range requests

    def answer(self, host: str, path: str) -> tuple[bytes | None, str]:
        """The body for this host and path (None: 404) and its type."""
        binary = "application/octet-stream"
        if host == API:
            return f"hello {path}\n".encode(), "text/plain"
        if host == PYPI:
            digest = hashlib.sha256(self.wheel.read_bytes()).hexdigest()
            if path == "/simple/tinypkg/":  # PEP 503: an anchor per file, its hash in the fragment
                link = f"https://{PYPI}/packages/{WHEEL}#sha256={digest}"
                page = f'<!DOCTYPE html><html><body><a href="{link}">{WHEEL}</a></body></html>\n'
                return page.encode(), "text/html"
            return (self.wheel.read_bytes() if path == f"/packages/{WHEEL}" else None), binary
        if host == GIT and path.startswith("/skill.git/"):  # the files, as a static server has them
            target = (self.repository / path.removeprefix("/skill.git/")).resolve()
            if target.is_relative_to(self.repository) and target.is_file():
                return target.read_bytes(), "text/plain" if path.endswith("/info/refs") else binary
        return None, "text/plain"

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    folder = tmp_path_factory.mktemp("egress-clients-upstream")
    ca, pem = make_upstream_certs(folder, NAMES)
    Upstream.wheel = make_wheel(folder)
    Upstream.repository = make_repository(folder).resolve()
    server = serve_https(Upstream, pem)
    yield server.server_address[1], ca
    server.shutdown()


@pytest.fixture(scope="module", params=RUNTIMES)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, upstream: tuple[int, Path]
) -> Iterator[Server]:
    runtime = str(request.param)
    require_runtime(runtime)
    port, ca = upstream
    base = tmp_path_factory.mktemp(f"egress-clients-{runtime}")
    (base / "policy.yaml").write_text(POLICY)
    (base / "secrets.yaml").write_text("CLIENT_TOKEN: env:EGRESS_CLIENTS_TOKEN\n")
    env = {
        "SKILL_EXECUTOR_API_KEYS": KEY,
        "SKILL_EXECUTOR_POLICY_FILE": str(base / "policy.yaml"),
        "SKILL_EXECUTOR_SECRETS_FILE": str(base / "secrets.yaml"),
        "SKILL_EXECUTOR_EGRESS_PYTHON": str(egress_python()),
        "SKILL_EXECUTOR_EGRESS_CA_BUNDLE": str(ca),
        "SKILL_EXECUTOR_EGRESS_HOSTS": json.dumps({name: f"127.0.0.1:{port}" for name in NAMES}),
        "EGRESS_CLIENTS_TOKEN": SECRET,
        "SKILL_EXECUTOR_POOL_SIZE": "1",  # the run without a grant may take the warm one
        "SKILL_EXECUTOR_RUNTIME": "bwrap" if runtime == "bwrap" else "docker",
    }
    if runtime == "docker-runsc":
        env["SKILL_EXECUTOR_DOCKER_OCI_RUNTIME"] = "runsc"
    if runtime == "bwrap":  # bwrap starts as the run's user: the workspaces outside the sealed data dir
        env["SKILL_EXECUTOR_WORKSPACE_ROOT"] = str(base / "workspaces")
        if os.geteuid() == 0:
            for folder in (base, *base.parents):
                os.chmod(folder, os.stat(folder).st_mode | 0o001)
    srv = Server(base, env=env).start(timeout=60)
    yield srv
    srv.stop()
    assert SECRET not in "\n".join(srv.log_lines())


#: Every client in one run, each told nothing but what the path in's variables say. A client
#: that fails prints ``FAILED <client>`` and its error; one the sandbox lacks ``ABSENT``.
COMMAND = r"""
set +e
cd /tmp
echo "NODE $(node --version 2>&1)"
curl -sS --max-time 30 https://api.example.test/curl || echo "FAILED curl"
python3 -c "import urllib.request; print(urllib.request.urlopen('https://api.example.test/urllib', timeout=30).read().decode().strip())" 2>&1 || echo "FAILED urllib"
if python3 -c "import requests" 2>/dev/null; then
  python3 -c "import requests; print(requests.get('https://api.example.test/requests', timeout=30).text.strip())" 2>&1 || echo "FAILED requests"
else echo "ABSENT requests"; fi
if python3 -c "import httpx" 2>/dev/null; then
  python3 -c "import httpx; print(httpx.get('https://api.example.test/httpx', timeout=30).text.strip())" 2>&1 || echo "FAILED httpx"
else echo "ABSENT httpx"; fi
python3 -m pip download --no-deps --no-cache-dir --disable-pip-version-check --index-url https://pypi.example.test/simple/ -d /tmp/pipdl tinypkg 2>&1 | tail -n 3
sha256sum /tmp/pipdl/*.whl 2>&1 | sed 's/^/PIPSHA /' || echo "FAILED pip"
if command -v uv >/dev/null; then
  uv pip install --no-cache --quiet --target /tmp/uvt --index-url https://pypi.example.test/simple/ tinypkg 2>&1
  PYTHONPATH=/tmp/uvt python3 -c "import tinypkg; print('UV', tinypkg.VALUE)" 2>&1 || echo "FAILED uv"
else echo "ABSENT uv"; fi
git clone -q https://git.example.test/skill.git /tmp/clone 2>&1 && sed 's/^/GIT /' /tmp/clone/README.md || echo "FAILED git"
node -e '
fetch("https://api.example.test/node-fetch", {signal: AbortSignal.timeout(30000)})
  .then(r => r.text()).then(t => console.log(t.trim()), e => console.log("FAILED node-fetch", (e.cause && e.cause.code) || e.message))
' 2>&1
node -e '
require("https").get("https://api.example.test/node-https", {timeout: 30000}, r => {
  let b = ""; r.on("data", d => b += d); r.on("end", () => console.log(b.trim()));
}).on("error", e => console.log("FAILED node-https", e.code || e.message))
' 2>&1
echo DONE
"""

#: client -> what its output holds, its User-Agent's start (Node's https sends none), and the
#: (host, path)s the upstream and the events must show.
CLIENTS: dict[str, tuple[str, str, list[tuple[str, str]]]] = {
    "curl": ("hello /curl", "curl/", [(API, "/curl")]),
    "urllib": ("hello /urllib", "Python-urllib/", [(API, "/urllib")]),
    "requests": ("hello /requests", "python-requests/", [(API, "/requests")]),
    "httpx": ("hello /httpx", "python-httpx/", [(API, "/httpx")]),
    "pip": (f"/tmp/pipdl/{WHEEL}", "pip/", [(PYPI, "/simple/tinypkg/"), (PYPI, f"/packages/{WHEEL}")]),
    "uv": ("UV 42", "uv/", [(PYPI, "/simple/tinypkg/"), (PYPI, f"/packages/{WHEEL}")]),
    "git": ("GIT cloned through the gateway", "git/", [(GIT, "/skill.git/info/refs"), (GIT, "/skill.git/HEAD")]),
    "node-fetch": ("hello /node-fetch", "node", [(API, "/node-fetch")]),
    "node-https": ("hello /node-https", "", [(API, "/node-https")]),
}


def node_uses_env_proxy(version: str) -> bool:
    """Whether this Node honours NODE_USE_ENV_PROXY for fetch and https (22.21+, 24.5+)."""
    found = re.fullmatch(r"v(\d+)\.(\d+)\.\d+", version)
    if found is None:
        return False
    major, minor = int(found[1]), int(found[2])
    return (major, minor) >= (22, 21) and (major, minor) != (23, 0) and not (major == 24 and minor < 5)


@pytest.fixture(scope="module")
def matrix(server: Server) -> dict[str, Any]:
    """The one run of every client, on this runtime: its record, live events and what the
    upstream saw during it."""
    before = len(Upstream.seen)
    record, events, raw = run_with_events(server, {"skill": "math-tools", "command": COMMAND, "timeout": 240})
    return {
        "record": record,
        "events": events,
        "raw": raw,
        "seen": Upstream.seen[before:],
        "runtime": runtime_of(server),
    }


def runtime_of(server: Server) -> str:
    """The server's runtime as tests/conftest.py names it."""
    if server.env["SKILL_EXECUTOR_RUNTIME"] == "bwrap":
        return "bwrap"
    return "docker-runsc" if server.env.get("SKILL_EXECUTOR_DOCKER_OCI_RUNTIME") == "runsc" else "docker"


def missing_on_this_runtime(matrix: dict[str, Any], client: str) -> str | None:
    """Why the sandbox cannot have this client (bwrap: the host's programs), or None."""
    out = matrix["record"]["result"]["stdout"]
    if client.startswith("node-"):
        version = next((line[5:] for line in out.splitlines() if line.startswith("NODE ")), "")
        if not node_uses_env_proxy(version):
            return f"the sandbox's node {version} predates NODE_USE_ENV_PROXY (22.21, 24.5)"
    elif f"ABSENT {client}" in out:
        return f"the sandbox has no {client}"
    return None


@pytest.mark.parametrize("client", list(CLIENTS))
def test_the_client_reaches_its_host_through_the_gateway(matrix: dict[str, Any], client: str) -> None:
    record = matrix["record"]
    assert record["status"] == "completed", record
    result = record["result"]
    out = result["stdout"]
    assert "DONE" in out, (out, result["stderr"])
    marker, agent, requests = CLIENTS[client]
    seen = {
        (entry["host"], entry["path"]): entry["headers"]
        for entry in matrix["seen"]
        if entry["headers"].get("User-Agent", "").startswith(agent)
    }
    missing = missing_on_this_runtime(matrix, client)
    if missing is not None:
        assert matrix["runtime"] == "bwrap", f"{missing}: the runner image must have it"
        assert not any(key in seen for key in requests)  # it failed closed: nothing of it arrived
        pytest.skip(missing)
    assert marker in out and f"FAILED {client}" not in out, out
    for key in requests:
        assert key in seen, (key, sorted(seen))
        headers = seen[key]
        assert headers.get("Authorization") == f"Bearer {SECRET}", headers  # injected toward its host
        assert "Proxy-Authorization" not in headers
    kept = {(e["host"], e["path"]): e for e in result["egress"] if e["method"] == "GET"}
    for key in requests:
        event = kept[key]
        assert (event["method"], event["status"], event["decision"], event["rule"]) == (
            "GET",
            200,
            "allowed",
            "clients",
        )
    if client == "pip":
        digest = hashlib.sha256(Upstream.wheel.read_bytes()).hexdigest()
        assert f"PIPSHA {digest}  /tmp/pipdl/{WHEEL}" in out
    if client == "git":  # the dumb protocol walked the repository's objects
        assert any(host == GIT and path.startswith("/skill.git/objects/") for host, path in seen)


def test_the_runs_events_are_its_requests_and_it_never_sees_the_secret(matrix: dict[str, Any]) -> None:
    record = matrix["record"]
    result = record["result"]
    live = [data for kind, data in matrix["events"] if kind == "egress"]
    assert live == result["egress"] and live, (live, result["egress"])
    # every request the upstream saw is one event, and every event an allowed request of this rule
    assert sorted((e["method"], e["host"], e["path"]) for e in live) == sorted(
        (s["method"], s["host"], s["path"]) for s in matrix["seen"]
    )
    assert all(e["decision"] == "allowed" and e["rule"] == "clients" for e in live)
    assert SECRET not in matrix["raw"]


#: What a run without a grant tries: the bridge's port, the host's upstream and gateway ports
#: (loopback: the sandbox's own), a resolver for the made-up names; and what it can see.
ISOLATED = r"""
import os, socket
for name, port in (("bridge", 3128), ("upstream", {upstream}), ("gateway", {gateway})):
    s = socket.socket(); s.settimeout(5)
    try:
        s.connect(("127.0.0.1", port)); print("CONNECTED", name)
    except OSError as exc:
        print("refused", name, type(exc).__name__)
for host in ("api.example.test", "pypi.example.test"):
    try:
        socket.getaddrinfo(host, 443); print("RESOLVED", host)
    except socket.gaierror as exc:
        print("unresolved", host)
print("proxy variables:", sorted(k for k in os.environ if "proxy" in k.lower()))
print("CA variables:", sorted(k for k in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "PIP_CERT") if k in os.environ))
print("socket folder:", os.path.exists("/run/skill-executor"))
"""


def gateway_port(server: Server) -> int:
    """The gateway process's loopback TCP port on the host (its child of the service)."""
    assert server.process is not None
    children = Path(f"/proc/{server.process.pid}/task/{server.process.pid}/children").read_text().split()
    for pid in children:
        if b"proxy.py" not in Path(f"/proc/{pid}/cmdline").read_bytes():
            continue
        inodes = set()
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
        for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes and fields[1].startswith("0100007F:"):
                return int(fields[1].split(":")[1], 16)
    raise AssertionError(f"no gateway listening among the service's children {children}")


def test_a_run_without_an_egress_rule_reaches_nothing(server: Server, upstream: tuple[int, Path]) -> None:
    port, _ = upstream
    script = ISOLATED.format(upstream=port, gateway=gateway_port(server))
    before = len(Upstream.seen)
    command = f"python3 - <<'PY'\n{script}PY\ncurl -sS --max-time 5 https://{API}/ ; echo curl=$?"
    with http(server) as client:
        answer = client.post("/v1/runs", json={"skill": "csv-report", "command": command})
    assert answer.status_code == 200, answer.text
    result = answer.json()
    out = result["stdout"]
    assert "CONNECTED" not in out and out.count("refused") == 3, out
    assert "RESOLVED" not in out and out.count("unresolved") == 2, out
    assert "proxy variables: []" in out and "CA variables: []" in out and "socket folder: False" in out, out
    assert "curl=6" in out  # no resolver
    assert result["egress"] == []
    assert len(Upstream.seen) == before
