"""Walk one run's trip through the code: which of the package's modules a ``POST /v1/runs``
passes through, in this process and on its run threads.

    python bench/trip.py [--runtime docker] [--pool 1]

A *room* is a module of ``skill_executor`` (and, coarser, a package), a *floor* its layer
(the layer map of tests/unit/test_architecture.py, which docs/concepts/architecture.md
draws). A *stay* is a call from one room into another (each caller/callee pair counted
once), a *climb* a stay whose callee sits on a higher floor than its caller (a lower layer
calling back up: a listener, a hook, a callback, a protocol implemented above). Fewer stays
and climbs: a run's path is shorter and reads downwards. Only the run's own threads count
(the event loop, admission, the run's thread), not the housekeeping meanwhile.

The request is traced after a warm-up run of the same kind, so imports and first-use caches
do not count. Prints a JSON summary (and, with ``--edges``, every stay).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType
from typing import Any

REPO = Path(__file__).resolve().parent.parent
#: The threads a run's trip passes through: the event loop (and its thread pool), admission,
#: the manager's I/O and the run's own thread. Housekeeping that happens meanwhile (the
#: warm pool's refill, the janitor, supervised expiry) is not the run's trip.
TRIP_THREADS = ("asyncio-portal", "AnyIO worker thread", "run", "MainThread")


def _layers() -> Any:
    spec = importlib.util.spec_from_file_location("_arch", REPO / "tests" / "unit" / "test_architecture.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.layer


def _room(frame: FrameType | None) -> str | None:
    """The package module ``frame`` runs in (None: not ours)."""
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if isinstance(name, str) and (name == "skill_executor" or name.startswith("skill_executor.")):
            return name
        return None
    return None


class Tracer:
    def __init__(self, extra: tuple[str, ...] = ()) -> None:
        #: the run's threads (:data:`TRIP_THREADS`, and a worker's: ``extra``)
        self.threads_traced = TRIP_THREADS + extra
        self.edges: dict[tuple[str, str], int] = {}
        self.rooms: list[str] = []
        self._lock = threading.Lock()
        #: Set while the traced request is under way (the hook is installed in every thread
        #: from the start: threads that exist before ``threading.setprofile`` are not seen).
        self.on = False
        self.threads: set[str] = set()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or not self.on or not threading.current_thread().name.startswith(self.threads_traced):
            return
        callee = _room(frame)
        if callee is None:
            return
        caller_frame = frame.f_back
        caller = None
        while caller_frame is not None and caller is None:  # the nearest of ours up the stack
            caller = _room(caller_frame)
            caller_frame = caller_frame.f_back
        with self._lock:
            self.threads.add(threading.current_thread().name)
            if callee not in self.rooms:
                self.rooms.append(callee)
            if caller is not None and caller != callee:
                self.edges[(caller, callee)] = self.edges.get((caller, callee), 0) + 1


def package(module: str) -> str:
    """The package a module belongs to (``skill_executor.lifecycle.admission`` ->
    ``skill_executor.lifecycle``); a module at the package's root is its own."""
    return ".".join(module.split(".")[:2])


def walk(edges: Any, rooms: list[str], layer: Any, listed: bool) -> dict[str, Any]:
    climbs = sorted((a, b) for a, b in edges if layer(b) > layer(a))
    out: dict[str, Any] = {
        "stays": len(edges),
        "rooms": len(rooms),
        "floors": len({layer(room) for room in rooms}),
        "climbs": len(climbs),
        "climbs_list": [f"{a} -> {b}" for a, b in climbs],
    }
    if listed:
        out["edges"] = [f"{a} -> {b}" for a, b in sorted(edges)]
    return out


def report(tracer: Tracer, listed: bool) -> None:
    layer = _layers()
    summary: dict[str, Any] = {
        "modules": walk(tracer.edges, tracer.rooms, layer, listed),
        "packages": walk(
            {(package(a), package(b)) for a, b in tracer.edges if package(a) != package(b)},
            list(dict.fromkeys(package(room) for room in tracer.rooms)),
            layer,
            listed,
        ),
        "threads": sorted(tracer.threads),
    }
    print(json.dumps(summary, indent=2))


def cluster_trip(args: Any) -> int:
    """One warm run through an API replica (its TestClient) executed by a worker (its job
    loop on a thread of this process): both sides of the trip, traced alike."""
    import asyncio

    from fastapi.testclient import TestClient

    sys.path.insert(0, str(REPO))
    from skill_executor.api.app import create_app
    from skill_executor.config import Settings
    from skill_executor.service import Service
    from tests.pgserver import PostgresServer

    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        server = PostgresServer(base / "pg-records")
        server.start()
        try:
            common: dict[str, Any] = {
                "database_url": server.url(server.create_database()),
                "object_store": str(base / "objects"),
                "skills_dirs": [REPO / "skills"],
                "skills_refresh_seconds": 0.0,
                "disk_cap": "soft",
                "worker_poll_seconds": 0.5,
            }
            replica_settings = Settings(data_dir=base / "replica", **common)
            worker_settings = Settings(data_dir=base / "worker", pool_size=args.pool, **common)
            tracer = Tracer(extra=("claim", "worker-loop", "run-events"))
            threading.setprofile(tracer)
            sys.setprofile(tracer)
            worker = Service.start(worker_settings, role="worker")
            stop = asyncio.Event()
            loop = asyncio.new_event_loop()
            job_loop = threading.Thread(
                target=lambda: loop.run_until_complete(worker.work(stop)), name="worker-loop", daemon=True
            )
            job_loop.start()
            try:
                app = create_app(replica_settings, role="api")
                with TestClient(app, base_url="http://127.0.0.1", client=("127.0.0.1", 50000)) as client:
                    body = {"skill": "math-tools", "command": "true"}
                    for _ in range(3):  # warm-up: imports, caches, the pool, the worker's lease
                        response = client.post("/v1/runs", json=body)
                        assert response.status_code == 200, response.text
                    tracer.on = True
                    response = client.post("/v1/runs", json=body)
                    tracer.on = False
                    assert response.status_code == 200, response.text
            finally:
                sys.setprofile(None)
                threading.setprofile(None)  # type: ignore[arg-type]
                loop.call_soon_threadsafe(stop.set)
                job_loop.join(timeout=60)
                worker.close(timeout=30)
        finally:
            server.close()
    report(tracer, args.edges)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runtime", default="docker")
    parser.add_argument("--pool", type=int, default=1)
    parser.add_argument("--edges", action="store_true", help="list every stay")
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="a cluster run: an API replica and a worker (in this process, both traced) over a "
        "throw-away Postgres (tests/pgserver.py) and a shared folder as the object store",
    )
    args = parser.parse_args()
    if args.cluster:
        return cluster_trip(args)

    from fastapi.testclient import TestClient

    from skill_executor.api.app import create_app
    from skill_executor.config import Settings

    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            runtime=args.runtime,
            pool_size=args.pool,
            skills_dirs=[REPO / "skills"],
            data_dir=Path(tmp) / "data",
            skills_refresh_seconds=0.0,
            disk_cap="soft",  # the trip is the same; a hard cap needs a shared mount here
        )
        body = {"skill": "math-tools", "command": "true"}
        tracer = Tracer()
        threading.setprofile(tracer)
        sys.setprofile(tracer)
        try:
            with TestClient(create_app(settings), base_url="http://127.0.0.1", client=("127.0.0.1", 50000)) as client:
                for _ in range(2):  # warm-up: imports, caches, the pool's first container
                    response = client.post("/v1/runs", json=body)
                    assert response.status_code in (200, 201), response.text
                tracer.on = True
                response = client.post("/v1/runs", json=body)
                tracer.on = False
                assert response.status_code in (200, 201), response.text
        finally:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]
    report(tracer, args.edges)
    return 0


if __name__ == "__main__":
    sys.exit(main())
