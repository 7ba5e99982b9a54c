"""A session's processes: start and poll latency, against a plain ``docker exec`` on the same container.

    python bench/process_latency.py [--runs N] [--oci-runtime runsc] [--out FILE]

Through the library (:class:`~skill_executor.processes.manager.ProcessManager`, no HTTP), per sample:

* ``first_start``: a session's first process (``cat``): the session's container made and
  started, then the exec -- the call's return;
* ``start``: another process in a session whose container is up -- the call's return;
* ``start_to_output``: ``echo ready`` started, until a poll has its output;
* ``echo_round_trip``: a line written to a ``cat``, until a poll (``wait``) has it back;
* ``poll``: a poll with nothing new (no wait);
* floor, on the same session container: ``docker_exec_api`` (exec create + start of ``true``
  through the engine's API, to its end) and ``docker_exec_cli`` (``docker exec <id> true``).

Then over HTTP, against ``skill-executor serve`` on loopback (the Python client): ``rest_start``
(another process in a session with one), ``rest_poll`` (nothing new, no wait) and
``rest_echo_round_trip`` (a write, then polls with ``wait`` until the line is back).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from skill_executor_client import Client  # noqa: E402

from skill_executor.config import Settings  # noqa: E402
from skill_executor.core import Executor  # noqa: E402
from skill_executor.processes.manager import ProcessManager  # noqa: E402

T = "local"


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]
    return {"p50": round(statistics.median(ordered), 2), "p95": round(p95, 2), "n": len(ordered)}


def ms(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1000


def until_output(pm: ProcessManager, session: str, pid: str, wanted: str, after: int = 0) -> int:
    seen = ""
    while wanted not in seen:
        polled = pm.poll(T, session, pid, after=after, wait=5)
        seen += polled.output
        after = polled.next
    return after


def rest(runs: int, oci_runtime: str | None) -> dict[str, list[float]]:
    from tests.api_server import Server

    env = {"SKILL_EXECUTOR_RUNTIME": "docker", "SKILL_EXECUTOR_POOL_SIZE": "0"}
    if oci_runtime:
        env["SKILL_EXECUTOR_DOCKER_OCI_RUNTIME"] = oci_runtime
    server = Server(Path(tempfile.mkdtemp(prefix="process-bench-rest-")), env=env).start(timeout=120)
    out: dict[str, list[float]] = {"rest_start": [], "rest_poll": [], "rest_echo_round_trip": []}
    try:
        with Client(server.url, timeout=60) as client:
            for i in range(runs):
                session = f"rest-{i}"
                cat = client.process_start(session, "cat").id
                out["rest_start"].append(ms(lambda s=session: client.process_start(s, "sleep 30")))
                after = 0
                for n in range(3):
                    line, seen = f"line {n}\n", ""
                    started = time.perf_counter()
                    client.process_write(session, cat, line)
                    while line not in seen:
                        polled = client.process_poll(session, cat, after, wait=5)
                        seen, after = seen + polled.output, polled.next
                    out["rest_echo_round_trip"].append((time.perf_counter() - started) * 1000)
                    out["rest_poll"].append(ms(lambda s=session, a=after: client.process_poll(s, cat, a)))
                for process in client.processes(session).processes:
                    client.process_kill(session, process.id)
    finally:
        server.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--oci-runtime", default=None, help="the engine's OCI runtime (runsc: gVisor)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    data = Path(tempfile.mkdtemp(prefix="process-bench-"))
    settings = Settings(
        runtime="docker", pool_size=0, data_dir=data, docker_oci_runtime=args.oci_runtime, skills_dirs=[REPO / "skills"]
    )
    executor = Executor.from_settings(settings)
    pm = executor.processes
    results: dict[str, list[float]] = {
        k: []
        for k in (
            "first_start",
            "start",
            "start_to_output",
            "echo_round_trip",
            "poll",
            "docker_exec_api",
            "docker_exec_cli",
        )
    }
    try:
        for i in range(args.runs):
            session = f"bench-{i}"
            holder: list[str] = []
            results["first_start"].append(ms(lambda s=session: holder.append(pm.start(T, s, "cat").id)))
            cat = holder[0]
            results["start"].append(ms(lambda s=session: holder.append(pm.start(T, s, "sleep 30").id)))

            def echo(s: str = session) -> None:
                until_output(pm, s, pm.start(T, s, "echo ready").id, "ready")

            results["start_to_output"].append(ms(echo))
            after = 0
            for n in range(3):
                line = f"line {n}\n"
                started = time.perf_counter()
                pm.write(T, session, cat, line.encode())
                after = until_output(pm, session, cat, line, after)
                results["echo_round_trip"].append((time.perf_counter() - started) * 1000)
                results["poll"].append(ms(lambda s=session, a=after: pm.poll(T, s, cat, after=a)))
            entry = pm.hosts.get((T, session))
            assert entry is not None
            host = entry.host  # the floor: the same container, a plain exec
            api = executor.runtime.client.api  # type: ignore[attr-defined]

            def exec_api(cid: str = host.id) -> None:
                exec_id = api.exec_create(cid, ["true"], user=settings.docker_user)["Id"]
                api.exec_start(exec_id)

            results["docker_exec_api"].append(ms(exec_api))
            results["docker_exec_cli"].append(
                ms(lambda cid=host.id: subprocess.run(["docker", "exec", cid, "true"], check=True))
            )
            executor.runner.sessions.end(session, T)
    finally:
        executor.close()
    results.update(rest(args.runs, args.oci_runtime))
    report = {
        "oci_runtime": args.oci_runtime or "runc",
        "runs": args.runs,
        "ms": {name: summary(samples) for name, samples in results.items() if samples},
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
