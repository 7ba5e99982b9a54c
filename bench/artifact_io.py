"""Artifact saves and reads on one machine: the embedded defaults (SQLite, the local object
store under the data dir), through :class:`~skill_executor.core.Executor`'s artifact store.

    python bench/artifact_io.py [--rounds N] [--data DIR] [--json FILE]

Sizes 1 KB and 10 MB; each round saves a new content (so every save writes a blob) and
reads it back whole.  Prints the median and p90 per operation in milliseconds.  Run it
with ``PYTHONPATH`` pointing at another checkout to compare two versions in the same session
(the script only uses ``Executor.from_settings``, ``artifacts.put``, ``info`` and ``open``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from skill_executor.config import Settings
from skill_executor.core import Executor

SIZES = {"1KB": 1000, "10MB": 10_000_000}


def measure(data_dir: Path, rounds: int) -> dict[str, dict[str, float]]:
    settings = Settings(data_dir=data_dir, runtime="local", skills_dirs=[])
    executor = Executor.from_settings(settings)
    results: dict[str, dict[str, float]] = {}
    try:
        store = executor.artifacts
        for label, size in SIZES.items():
            saves, reads = [], []
            base = os.urandom(size)
            for i in range(rounds):
                body = i.to_bytes(8, "big") + base[8:]
                began = time.perf_counter()
                info = store.put(f"bench/{label}", body)
                saves.append(time.perf_counter() - began)
                began = time.perf_counter()
                info = store.info(f"bench/{label}", info.version)
                with store.open(info) as handle:
                    while handle.read(1024 * 1024):
                        pass
                reads.append(time.perf_counter() - began)
            for op, samples in (("save", saves), ("read", reads)):
                ms = sorted(s * 1000 for s in samples)
                results[f"{op} {label}"] = {
                    "p50_ms": round(statistics.median(ms), 3),
                    "p90_ms": round(ms[int(len(ms) * 0.9) - 1], 3),
                }
    finally:
        executor.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--data", type=Path, default=None, help="the data dir's parent (default: a temp folder)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.data) as tmp:
        results = measure(Path(tmp) / "data", args.rounds)
    for op, row in results.items():
        print(f"{op:<10} p50 {row['p50_ms']:9.3f} ms   p90 {row['p90_ms']:9.3f} ms")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
