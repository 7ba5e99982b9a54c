"""The agent-sandbox benchmark's cluster, in a process of its own: tests/fakekube.py and its
warm pods (tests/agentsandbox_pods.py: our in-pod server in containers of the runner image,
behind the farm's loopback relay), as a cluster's API server and pod network are outside a
worker's process (in the worker's, they would take its interpreter lock and distort its figures).

    python bench/kubehost.py [--oci-runtime runsc]

Prints one JSON line (``url``, ``rest_port``, ``grpc_port``) once it serves, and serves until
its stdin closes.  ``GET <url>/_bench/state``: the ready pods per pool and the API calls so far.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import deque
from pathlib import Path

from aiohttp import web

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.agentsandbox_pods import PodFarm  # noqa: E402
from tests.fakekube import FakeKube, Pool  # noqa: E402

POOL = "pool-a"


class BenchKube(FakeKube):
    def app(self) -> web.Application:
        app = super().app()
        app.router.add_get("/_bench/state", self.state)
        return app

    async def state(self, request: web.Request) -> web.Response:
        ready = {name: len(pool.ready) for name, pool in self.pools.items()}
        return web.json_response({"ready": ready, "calls": dict(self.calls)})


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--oci-runtime", default=None)
    parser.add_argument("--image", default=None)
    args = parser.parse_args()
    farm = PodFarm(oci_runtime=args.oci_runtime, image=args.image)
    try:
        kube = BenchKube({POOL: Pool(ready=deque([farm.make(), farm.make()]), make=farm.make, discard=farm.discard)})
        with kube.serving():
            line = {"url": kube.url, "rest_port": farm.rest_port, "grpc_port": farm.grpc_port, "pool": POOL}
            print(json.dumps(line), flush=True)
            sys.stdin.read()  # until the benchmark closes it (or exits)
    finally:
        farm.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
