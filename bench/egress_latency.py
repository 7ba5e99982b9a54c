"""The egress gateway's cost per request: through the gateway vs direct, HTTP and HTTPS, kept alive.

    python bench/egress_latency.py [--requests N] [--throughput N] [--no-sandbox] [--quick] [--out FILE]
    ./scripts/bench.sh --egress [same options]

Loopback upstreams under made-up names (the service tests' handler and test CA,
tests/service/test_egress_gateway.py): ``api.example.test`` over HTTPS (the grant injects a
header toward it) and ``plain.example.test`` over plain HTTP (every secret's forms are looked
for in its requests). One gateway, the service's (``skill_executor.egress.start``), serves:

* the host: an httpx client per path and protocol, one connection kept alive, N small GETs
  after a warm-up, direct and through the gateway taken in turn (blocks of 50) since this
  machine drifts; then throughput: 4 threads, a kept-alive client each, many small GETs;
* a real sandbox (the library's runner, Docker runc, a cold container, the launcher's
  bridge): a run under a policy rule with ``egress`` times the same GETs with httpx from
  inside (through ``HTTPS_PROXY``, as any skill) and prints them.  The sandbox has no
  network, so its "added" is against the host's direct p50.

Prints one JSON document (also written to --out): per path p50/p99 ms, added p50/p99 (gateway
minus direct), requests/s; ``goal_added_p50_ms`` (2.0) with whether each HTTPS/HTTP keep-alive
row meets it, and the load average while it ran.  Needs the egress environment
(SKILL_EXECUTOR_EGRESS_PYTHON or .venv-egress) and, for the sandbox rows, a Docker engine and
the runner image (SKILL_EXECUTOR_DOCKER_IMAGE, as ./scripts/bench.sh sets it).
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import statistics
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from skill_executor import egress  # noqa: E402
from skill_executor.config import Settings  # noqa: E402
from skill_executor.policy import Egress, Injection, NetworkPlan, Secrets  # noqa: E402
from tests.service.test_egress_gateway import Upstream, egress_python, make_upstream_certs  # noqa: E402

GOAL_ADDED_P50_MS = 2.0
SECRET = "bench-secret-value-0123456789"
HTTPS_HOST = "api.example.test"
HTTP_HOST = "plain.example.test"
POLICY = f"""
rules:
  - name: bench-net
    key: "*"
    skill: math-tools
    egress:
      allow: [{HTTPS_HOST}, {HTTP_HOST}]
      inject:
        - host: {HTTPS_HOST}
          header: Authorization
          value: "Bearer {{secret:BENCH_TOKEN}}"
"""

#: Runs inside the sandbox (stdin of ``python3 -``): the same measures as the host's, through
#: the run's proxy variables and CA certificate; prints JSON.
SANDBOX_SCRIPT = textwrap.dedent(
    """
    import json, os, ssl, statistics, sys, time
    from concurrent.futures import ThreadPoolExecutor
    import httpx

    n, total, threads = (int(x) for x in sys.argv[1:4])
    proxy = os.environ["HTTPS_PROXY"]
    ctx = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])

    def client():
        return httpx.Client(proxy=proxy, verify=ctx, trust_env=False)

    def timings(c, url, count):
        for _ in range(20):
            c.get(url).raise_for_status()
        found = []
        for _ in range(count):
            start = time.perf_counter()
            c.get(url).raise_for_status()
            found.append((time.perf_counter() - start) * 1000)
        return found

    def rate(url):
        clients = [client() for _ in range(threads)]
        for c in clients:
            c.get(url).raise_for_status()
        per = total // threads
        def work(c):
            for _ in range(per):
                c.get(url).raise_for_status()
        start = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(work, clients))
        elapsed = time.perf_counter() - start
        for c in clients:
            c.close()
        return per * threads / elapsed

    out = {}
    for name, url in (("https", "https://%s/small"), ("http", "http://%s/small")):
        with client() as c:
            out[name] = timings(c, url, n)
        out[name + "_rps"] = rate(url) if total else None
    print(json.dumps(out))
    """
    % (HTTPS_HOST, HTTP_HOST)
)


def summary(values: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(values, n=100)
    return {"p50_ms": round(statistics.median(values), 3), "p99_ms": round(cuts[98], 3), "n": len(values)}


def warm_timings(client: httpx.Client, url: str) -> Callable[[int], list[float]]:
    """A function timing ``count`` GETs of ``url`` on ``client`` (warmed up once)."""
    for _ in range(20):
        client.get(url).raise_for_status()

    def run(count: int) -> list[float]:
        found = []
        for _ in range(count):
            start = time.perf_counter()
            client.get(url).raise_for_status()
            found.append((time.perf_counter() - start) * 1000)
        return found

    return run


def in_turn(paths: dict[str, Callable[[int], list[float]]], total: int, block: int = 50) -> dict[str, list[float]]:
    found: dict[str, list[float]] = {name: [] for name in paths}
    while len(next(iter(found.values()))) < total:
        for name, run in paths.items():
            found[name] += run(min(block, total - len(found[name])))
    return found


def rate(make: Callable[[], httpx.Client], url: str, total: int, threads: int = 4) -> float:
    """Requests per second: ``threads`` kept-alive clients doing ``total`` small GETs in all."""
    clients = [make() for _ in range(threads)]
    for client in clients:
        client.get(url).raise_for_status()
    per = total // threads

    def work(client: httpx.Client) -> None:
        for _ in range(per):
            client.get(url).raise_for_status()

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(work, clients))
    elapsed = time.perf_counter() - started
    for client in clients:
        client.close()
    return round(per * threads / elapsed, 1)


class Server(ThreadingHTTPServer):
    """The upstream, counting the connections it accepts (the gateway's to it are kept alive)."""

    connections = 0

    def process_request(self, request: Any, client_address: Any) -> None:
        self.connections += 1
        super().process_request(request, client_address)


def serve(tls_pem: Path | None) -> Server:
    server = Server(("127.0.0.1", 0), Upstream)
    if tls_pem is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(tls_pem)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def cpu_seconds(pid: int) -> float | None:
    """The CPU time (user + system) process ``pid`` has used so far (Linux), or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def added(through: dict[str, float], direct: dict[str, float]) -> dict[str, float]:
    return {
        "added_p50_ms": round(through["p50_ms"] - direct["p50_ms"], 3),
        "added_p99_ms": round(through["p99_ms"] - direct["p99_ms"], 3),
    }


def bench_host(
    gateway: egress.Gateway, ca: Path, servers: dict[str, Server], requests: int, total: int
) -> dict[str, Any]:
    block = Egress(
        allow=[HTTPS_HOST, HTTP_HOST],
        inject=[Injection(host=HTTPS_HOST, header="Authorization", value="Bearer {secret:T}")],
    )
    grant = NetworkPlan("bench", block, block.hosts()).grant("bench-host", Secrets({"T": SECRET}))
    token = gateway.grant(grant)
    direct_ctx = ssl.create_default_context(cafile=str(ca))
    direct_ctx.check_hostname = False  # the direct path dials 127.0.0.1 (the name is the gateway's)
    gateway_ctx = ssl.create_default_context(cafile=str(gateway.ca_cert))

    def direct_client() -> httpx.Client:
        return httpx.Client(verify=direct_ctx)

    def gateway_client() -> httpx.Client:
        return httpx.Client(proxy=gateway.proxy_url(token), verify=gateway_ctx)

    ports = {name: server.server_address[1] for name, server in servers.items()}
    urls = {
        "https": (f"https://127.0.0.1:{ports['https']}/small", f"https://{HTTPS_HOST}/small"),
        "http": (f"http://127.0.0.1:{ports['http']}/small", f"http://{HTTP_HOST}/small"),
    }
    out: dict[str, Any] = {}
    try:
        for name, (direct_url, gateway_url) in urls.items():
            with direct_client() as direct, gateway_client() as through:
                paths = {"direct": warm_timings(direct, direct_url), "gateway": warm_timings(through, gateway_url)}
                cpu_before, accepted = cpu_seconds(gateway.process.pid), servers[name].connections
                samples = in_turn(paths, requests)
                cpu_after, accepted = cpu_seconds(gateway.process.pid), servers[name].connections - accepted
            row: dict[str, Any] = {"direct": summary(samples["direct"]), "gateway": summary(samples["gateway"])}
            row.update(added(row["gateway"], row["direct"]))
            row["upstream_connections_opened_while_timed"] = accepted  # 0: both paths kept theirs alive
            if cpu_before is not None and cpu_after is not None:
                # the gateway's own CPU per request: what load on the machine does not change much
                row["gateway_cpu_ms_per_request"] = round((cpu_after - cpu_before) * 1000 / requests, 3)
            if total:
                row["direct_rps"] = rate(direct_client, direct_url, total)
                row["gateway_rps"] = rate(gateway_client, gateway_url, total)
            out[name] = row
    finally:
        gateway.revoke(token)
    return out


def bench_sandbox(
    root: Path, settings: Settings, gateway: egress.Gateway, requests: int, total: int, host: dict[str, Any]
) -> dict[str, Any]:
    from skill_executor.core import Executor
    from skill_executor.runs.models import RunRequest

    executor = Executor.from_settings(settings)
    executor.runner.gateway = gateway
    try:
        request = RunRequest.model_validate(
            {
                "skill": "math-tools",
                "command": f"python3 - {requests} {total} 4",
                "stdin": SANDBOX_SCRIPT,
                "timeout": 600,
            }
        )
        started = time.perf_counter()
        result = executor.runner.run(request)
        seconds = time.perf_counter() - started
        if result.exit_code != 0:
            raise RuntimeError(f"the sandbox's run failed ({result.exit_code}): {result.stderr[-2000:]}")
        found = json.loads(result.stdout.strip().splitlines()[-1])
    finally:
        executor.close()
    out: dict[str, Any] = {"runtime": "docker (runc), the launcher's bridge", "run_seconds": round(seconds, 1)}
    for name in ("https", "http"):
        row: dict[str, Any] = {"gateway": summary(found[name])}
        row.update(added(row["gateway"], host[name]["direct"]))  # no network inside: against the host's direct
        if found.get(name + "_rps") is not None:
            row["gateway_rps"] = round(found[name + "_rps"], 1)
        out[name] = row
    return out


def bench_egress(requests: int, total: int, sandbox: bool) -> dict[str, Any]:
    python = egress_python()
    if python is None:
        raise RuntimeError("no egress environment (.venv-egress or SKILL_EXECUTOR_EGRESS_PYTHON)")
    load_before = os.getloadavg()
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-egress-") as tmp:
        root = Path(tmp)
        ca, pem = make_upstream_certs(root)
        Upstream.seen = []
        https_server, http_server = serve(pem), serve(None)
        servers = {"https": https_server, "http": http_server}
        ports = {name: server.server_address[1] for name, server in servers.items()}
        (root / "policy.yaml").write_text(POLICY)
        (root / "secrets.yaml").write_text(f"BENCH_TOKEN: {SECRET}\n")
        settings = Settings(  # type: ignore[call-arg]
            runtime="docker",
            pool_size=0,
            skills_dirs=[REPO / "skills"],
            data_dir=root / "data",
            policy_file=root / "policy.yaml",
            secrets_file=root / "secrets.yaml",
            egress_python=python,
            egress_ca_bundle=ca,
            egress_hosts={HTTPS_HOST: f"127.0.0.1:{ports['https']}", HTTP_HOST: f"127.0.0.1:{ports['http']}"},
        )
        started = time.perf_counter()
        gateway = egress.start(settings)
        start_s = time.perf_counter() - started
        try:
            result: dict[str, Any] = {
                "requests": requests,
                "throughput_requests": total,
                "gateway_start_s": round(start_s, 3),
                "goal_added_p50_ms": GOAL_ADDED_P50_MS,
            }
            result["host"] = bench_host(gateway, ca, servers, requests, total)
            if sandbox:
                result["sandbox"] = bench_sandbox(root, settings, gateway, requests, total, result["host"])
        finally:
            gateway.close()
            https_server.shutdown()
            http_server.shutdown()
    result["goal_met"] = {
        f"{where} {name}": result[where][name]["added_p50_ms"] <= GOAL_ADDED_P50_MS
        for where in ("host", "sandbox")
        if where in result
        for name in ("https", "http")
    }
    result["load_average"] = {
        "before": [round(x, 2) for x in load_before],
        "after": [round(x, 2) for x in os.getloadavg()],
    }
    result["cpus"] = os.cpu_count()
    result["seconds"] = round(time.perf_counter() - began, 1)
    return result


def report(result: dict[str, Any]) -> str:
    lines = [
        f"{'where':8} {'proto':6} {'direct p50/p99 ms':>20} {'gateway p50/p99 ms':>20} {'added p50/p99':>16} {'req/s direct/gw':>18}"
    ]
    for where in ("host", "sandbox"):
        for name in ("https", "http"):
            row = result.get(where, {}).get(name)
            if row is None:
                continue
            d = row.get("direct") or result["host"][name]["direct"]
            g = row["gateway"]
            rps = f"{row.get('direct_rps', '-')}/{row.get('gateway_rps', '-')}"
            lines.append(
                f"{where:8} {name:6} {d['p50_ms']:>9.2f}/{d['p99_ms']:<9.2f} {g['p50_ms']:>9.2f}/{g['p99_ms']:<9.2f}"
                f" {row['added_p50_ms']:>7.2f}/{row['added_p99_ms']:<7.2f} {rps:>18}"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=500, help="timed GETs per path and protocol")
    parser.add_argument("--throughput", type=int, default=2000, help="GETs of the throughput rows (0: none)")
    parser.add_argument("--no-sandbox", action="store_true", help="the host's rows only (no Docker)")
    parser.add_argument("--quick", action="store_true", help="200 GETs, 800 for throughput")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    requests, total = (200, 800) if args.quick else (args.requests, args.throughput)
    result = bench_egress(requests, total, not args.no_sandbox)
    print(report(result), file=sys.stderr)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
