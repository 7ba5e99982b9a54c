"""Driver for one peer of bench/peers.py; runs INSIDE that peer's virtualenv.

    <venv>/bin/python bench/peers_driver.py PEER IMAGE SAMPLES THROUGHPUT_RUNS CONCURRENCY LABEL INTERVAL

Runs ``true`` through the peer: two warm-up runs, SAMPLES sequential runs (latency; one started every INTERVAL
seconds), then
THROUGHPUT_RUNS runs spread over CONCURRENCY threads (runs/s).  Prints one JSON object on
the last line of stdout.  Only imports the peer it measures (and the standard library), so
it works in any one of the peer virtualenvs.  Every container it makes is labelled
``LABEL=1`` or named with the prefix ``LABEL-`` (epicbox: ``epicbox-``) for clean-up.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from typing import Any, Callable


def runtime_configs(label: str) -> dict[str, Any]:
    # The image's CMD is an interactive bash, which ignores SIGTERM: without an init and a
    # command that exits on SIGTERM, every close() would wait out Docker's 10 s stop grace.
    return {"labels": {label: "1"}, "network_disabled": True, "init": True, "command": ["sleep", "infinity"]}


def llm_sandbox_setup(image: str, label: str, mode: str) -> tuple[Callable[[], None], Callable[[], None], str]:
    from llm_sandbox import SandboxSession

    common: dict[str, Any] = {
        "lang": "python",
        "image": image,
        "keep_template": True,
        "skip_environment_setup": True,
        "runtime_configs": runtime_configs(label),
    }
    version = metadata.version("llm-sandbox")
    if mode == "session":  # a fresh container per run: open, execute, close

        def run() -> None:
            with SandboxSession(**common) as session:
                check(session.execute_command("true").exit_code)

        return run, lambda: None, version
    if mode == "shared":  # one session (one container) reused by every run
        session = SandboxSession(**common)
        session.open()
        lock = threading.Lock()  # one session is not meant for concurrent commands

        def run_shared() -> None:
            with lock:
                check(session.execute_command("true").exit_code)

        return run_shared, session.close, version
    from llm_sandbox.pool import PoolConfig, PooledSandboxSession, create_pool_manager

    pool = create_pool_manager(
        backend="docker",
        config=PoolConfig(min_pool_size=2, max_pool_size=4),
        lang="python",
        image=image,
        keep_template=True,
        skip_environment_setup=True,
        runtime_configs=runtime_configs(label),
    )

    def run_pooled() -> None:
        with PooledSandboxSession(pool_manager=pool) as session:
            check(session.execute_command("true").exit_code)

    return run_pooled, pool.close, version


def autogen_measure(
    image: str, label: str, samples: int, tp_runs: int, concurrency: int, interval: float
) -> dict[str, Any]:
    """AutoGen's executor is asynchronous: measured on its own event loop (concurrency by tasks)."""
    import os

    from autogen_core import CancellationToken
    from autogen_core.code_executor import CodeBlock
    from autogen_ext.code_executors.docker import DockerCommandLineCodeExecutor

    async def measure() -> dict[str, Any]:
        work = tempfile.mkdtemp(prefix="se-bench-autogen-")
        os.chmod(work, 0o777)  # the image runs as uid 1000; the code files are written by this process
        executor = DockerCommandLineCodeExecutor(
            image=image, container_name=f"{label}-autogen-{uuid.uuid4().hex[:8]}", work_dir=work, timeout=60
        )
        await executor.start()

        async def run() -> None:
            result = await executor.execute_code_blocks([CodeBlock(code="true", language="sh")], CancellationToken())
            if result.exit_code != 0:
                raise RuntimeError(f"`true` exited with {result.exit_code}: {result.output}")

        try:
            for _ in range(2):
                await run()
            latencies = []
            for _ in range(samples):
                began = time.perf_counter()
                await run()
                latencies.append((time.perf_counter() - began) * 1000)
                await asyncio.sleep(max(0.0, interval - (time.perf_counter() - began)))
            gate = asyncio.Semaphore(concurrency)

            async def gated() -> None:
                async with gate:
                    await run()

            began = time.perf_counter()
            await asyncio.gather(*(gated() for _ in range(tp_runs)))
            throughput = tp_runs / (time.perf_counter() - began)
        finally:
            await executor.stop()
        return {
            "version": metadata.version("autogen-ext"),
            "latency_ms": latencies,
            "throughput_runs_per_s": throughput,
        }

    return asyncio.run(measure())


def epicbox_setup(image: str) -> tuple[Callable[[], None], Callable[[], None], str]:
    import logging

    import epicbox
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    epicbox.configure(profiles=[epicbox.Profile("bench", image)])

    def run() -> None:
        check(epicbox.run("bench", "true")["exit_code"])

    return run, lambda: None, metadata.version("epicbox")


def check(code: int | None) -> None:
    if code != 0:
        raise RuntimeError(f"`true` exited with {code}")


def main() -> int:
    peer, image, samples, tp_runs, concurrency, label, interval = sys.argv[1:8]
    if peer.startswith("llm-sandbox:"):
        run, close, version = llm_sandbox_setup(image, label, peer.split(":", 1)[1])
    elif peer == "autogen":
        print(json.dumps(autogen_measure(image, label, int(samples), int(tp_runs), int(concurrency), float(interval))))
        return 0
    elif peer == "epicbox":
        run, close, version = epicbox_setup(image)
    else:
        raise SystemExit(f"unknown peer: {peer}")
    try:
        for _ in range(2):
            run()
        latencies = []
        for _ in range(int(samples)):
            began = time.perf_counter()
            run()
            latencies.append((time.perf_counter() - began) * 1000)
            time.sleep(max(0.0, float(interval) - (time.perf_counter() - began)))
        began = time.perf_counter()
        with ThreadPoolExecutor(int(concurrency)) as pool:
            list(pool.map(lambda _: run(), range(int(tp_runs))))
        throughput = int(tp_runs) / (time.perf_counter() - began)
    finally:
        close()
    print(json.dumps({"version": version, "latency_ms": latencies, "throughput_runs_per_s": throughput}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
