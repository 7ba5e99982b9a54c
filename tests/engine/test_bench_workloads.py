"""The real-workload benchmark (bench/workloads.py) works end to end on a subset (about 30 s).

A docx -> PDF conversion with LibreOffice, once in a plain ``docker
run`` and once through the service, and the LibreOffice first-start split.  Only what does not
depend on the machine's speed is asserted: every run succeeded on both sides (the benchmark
raises otherwise), every figure is present and positive.  The full benchmark:
``.venv/bin/python bench/workloads.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import docker
import pytest

from skill_executor.config import Settings

from ..conftest import REPO, require_runtime

pytestmark = pytest.mark.docker


def _stats_ok(s: dict[str, float], n: int) -> bool:
    return s["n"] == n and 0 < s["p50"] <= s["p90"]


def test_workloads_quick_subset(tmp_path: Path) -> None:
    require_runtime("docker")
    sys.path.insert(0, str(REPO))
    from bench.workloads import bench_workloads

    image = Settings().docker_image
    client = docker.DockerClient(base_url="unix:///var/run/docker.sock", version="auto", timeout=600)
    try:
        result = bench_workloads(tmp_path, client, image, quick=True, names=["docx_to_pdf"])
    finally:
        client.close()
    assert set(result["workloads"]) == {"docx_to_pdf"}
    for name, row in result["workloads"].items():
        for key in ("plain_ms", "ours_ms", "ours_exec_ms", "plain_exec_ms"):
            assert _stats_ok(row[key], 1), (name, key, row[key])
        assert row["ratio"] > 0 and row["ratio"] == row["ours_ms"]["p50"] / row["plain_ms"]["p50"]
        assert row["ours_outside_exec_ms"]["n"] == 1 and row["plain_outside_exec_ms"]["n"] == 1
    lo = result["libreoffice_first_start"]
    for key in ("make_doc_ms", "first_convert_ms", "second_convert_ms"):
        assert _stats_ok(lo[key], 1), (key, lo[key])
    assert isinstance(lo["first_start_cost_ms"], float)
    made = lo["profile_in_home"]["one_conversion"]
    assert _stats_ok(made["run_ms"], 1) and _stats_ok(made["convert_ms"], 1)
    assert isinstance(made["saves_ms"], float)
    assert not list(tmp_path.iterdir())  # the benchmark's folders are gone
