"""First uses in a single-use sandbox against a long-lived warm container, same image, same run.

    python bench/warm_workloads.py [--runs N] [--out FILE]

A fresh sandbox pays first-use costs a long-lived container paid once: matplotlib's font cache,
LibreOffice's user profile, the page cache of Python's packages.  For each workload -- the first
matplotlib plot, a first docx -> pdf conversion with LibreOffice, a first ``import pandas`` --
the same command runs

* **ours**: a library run on the Docker runtime's warm pool (a fresh single-use container per
  run, its HOME made from the image's baked warm state), end to end (claim to result);
* **exec**: ``docker exec`` of ``bash -c <command>`` into one long-lived container of the same
  image (network none, uid 1000, the same HOME and MPLCONFIGDIR layout), after one warm-up
  use: what a warm long-lived container costs, exec's own overhead included.

Samples are taken in turn; each side's p50 and the ratio ours/exec (goal <= 1.1) are printed
as JSON (and written to ``--out``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import docker

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from skill_executor.config import Settings  # noqa: E402
from skill_executor.core import Executor  # noqa: E402
from skill_executor.runs.models import RunRequest  # noqa: E402

WORKLOADS = {
    "matplotlib_first_plot": "python3 -c 'import matplotlib.pyplot as p; p.plot([1, 2]); p.savefig(\"out/a.png\")'",
    "docx_to_pdf": 'python3 -c \'import docx; d = docx.Document(); d.add_paragraph("hi"); d.save("out/a.docx")\' '
    "&& soffice --headless --convert-to pdf --outdir out out/a.docx >/dev/null",
    "pandas_import": "python3 -c 'import pandas'",
}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    settings = Settings(
        data_dir=Path(tempfile.mkdtemp(prefix="bench-warm-")), pool_size=2, skills_dirs=[REPO / "skills"]
    )
    client = docker.from_env()
    container = client.containers.run(
        settings.docker_image,
        ["sleep", "infinity"],
        detach=True,
        network_disabled=True,
        user="1000:1000",
        tmpfs={"/tmp": "rw,exec", "/ws": "rw,exec,uid=1000,gid=1000"},
        environment={"HOME": "/ws/run/home", "MPLCONFIGDIR": "/ws/run/home/.cache/matplotlib"},
        working_dir="/ws",
        entrypoint=[],
    )
    executor = Executor.from_settings(settings)
    samples: dict[str, dict[str, list[float]]] = {name: {"ours": [], "exec": []} for name in WORKLOADS}
    try:
        container.exec_run(["bash", "-c", "mkdir -p /ws/out /ws/run/home"])
        for command in WORKLOADS.values():  # the long-lived container's first uses: not measured
            container.exec_run(["bash", "-c", command])
        for _ in range(args.runs):
            for name, command in WORKLOADS.items():
                started = time.perf_counter()
                done = container.exec_run(["bash", "-c", command])
                samples[name]["exec"].append((time.perf_counter() - started) * 1000)
                assert done.exit_code == 0, done.output
                assert executor.runtime.pool is not None and executor.runtime.pool.wait_ready()
                time.sleep(0.2)
                started = time.perf_counter()
                result = executor.runner.run(RunRequest(skill="math-tools", command=command, timeout=120))
                samples[name]["ours"].append((time.perf_counter() - started) * 1000)
                assert result.exit_code == 0, result.stderr
    finally:
        executor.close()
        container.remove(force=True)
    report = {
        "image": settings.docker_image,
        "runs": args.runs,
        "ms_p50": {
            name: {side: round(statistics.median(values), 1) for side, values in sides.items()}
            for name, sides in samples.items()
        },
    }
    report["ratio_ours_to_exec"] = {
        name: round(v["ours"] / v["exec"], 2)
        for name, v in report["ms_p50"].items()  # type: ignore[union-attr]
    }
    print(json.dumps(report, indent=1))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
