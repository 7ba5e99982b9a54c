"""The egress gateway's added latency per request: HTTPS, keep-alive, through the gateway vs direct.

    python bench/egress_latency.py [--requests N] [--out FILE]

A loopback HTTPS upstream with a test CA under a made-up name (the service tests' upstream,
tests/service/test_egress_gateway.py); one httpx client per path, one connection kept alive,
N small GETs each after a warm-up. Through the gateway the request is judged, the secret
injected, TLS terminated and re-made upstream (one upstream connection, kept alive too).
Needs the egress environment (SKILL_EXECUTOR_EGRESS_PYTHON or .venv-egress).
"""

from __future__ import annotations

import argparse
import json
import ssl
import statistics
import sys
import tempfile
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from skill_executor import egress  # noqa: E402
from skill_executor.config import Settings  # noqa: E402
from skill_executor.policy import Egress, Injection, NetworkPlan, Secrets  # noqa: E402
from tests.service.test_egress_gateway import Upstream, egress_python, make_upstream_certs  # noqa: E402


def timings(client: httpx.Client, url: str, n: int) -> list[float]:
    for _ in range(20):
        client.get(url).raise_for_status()
    found = []
    for _ in range(n):
        start = time.perf_counter()
        client.get(url).raise_for_status()
        found.append((time.perf_counter() - start) * 1000)
    return found


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"p50_ms": round(statistics.median(ordered), 3), "p99_ms": round(ordered[int(len(ordered) * 0.99) - 1], 3)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--out")
    args = parser.parse_args()
    python = egress_python()
    if python is None:
        sys.exit("no egress environment (.venv-egress or SKILL_EXECUTOR_EGRESS_PYTHON)")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        ca, pem = make_upstream_certs(folder)
        Upstream.seen = []
        server = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(pem)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        port = server.server_address[1]
        started = time.perf_counter()
        gateway = egress.start(
            Settings(
                data_dir=folder / "data",
                egress_python=python,
                egress_ca_bundle=ca,
                egress_hosts={"api.example.test": f"127.0.0.1:{port}"},
            )
        )
        start_s = time.perf_counter() - started
        block = Egress(
            allow=["api.example.test"],
            inject=[Injection(host="api.example.test", header="Authorization", value="Bearer {secret:T}")],
        )
        grant = NetworkPlan("bench", block, block.hosts()).grant("bench", Secrets({"T": "bench-secret-value"}))
        token = gateway.grant(grant)
        try:
            direct_ctx = ssl.create_default_context(cafile=str(ca))
            direct_ctx.check_hostname = False  # the direct path dials 127.0.0.1 (the name is the gateway's)
            with httpx.Client(verify=direct_ctx) as client:
                direct = timings(client, f"https://127.0.0.1:{port}/small", args.requests)
            with httpx.Client(
                proxy=gateway.proxy_url(token), verify=ssl.create_default_context(cafile=str(gateway.ca_cert))
            ) as client:
                proxied = timings(client, "https://api.example.test/small", args.requests)
        finally:
            gateway.close()
            server.shutdown()
    result = {
        "requests": args.requests,
        "gateway_start_s": round(start_s, 3),
        "direct": summary(direct),
        "gateway": summary(proxied),
        "added_p50_ms": round(statistics.median(proxied) - statistics.median(direct), 3),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
