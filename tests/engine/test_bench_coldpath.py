"""The cold-path benchmark (bench/coldpath.py) works end to end, quick (<= 25 s).

Only what does not depend on the machine's speed is asserted: every variant is there
with positive figures, and no container of the run is left behind.
"""

from __future__ import annotations

import importlib.util
from types import ModuleType

import pytest

from skill_executor.config import Settings

from ..conftest import REPO, require_runtime

pytestmark = pytest.mark.docker

QUICK_VARIANTS = ("network_disabled", "init", "ours", "ours_no_init")
PHASES = ("create", "start", "wait", "remove")


def load_coldpath() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_coldpath", REPO / "bench" / "coldpath.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def positive(figures: dict[str, float]) -> bool:
    return figures["n"] > 0 and 0 < figures["p50"] <= figures["p90"]


def test_coldpath_quick() -> None:
    require_runtime("docker")
    import docker

    coldpath = load_coldpath()
    client = docker.DockerClient(base_url="unix:///var/run/docker.sock", version="auto", timeout=120)
    result = coldpath.bench_coldpath(client, Settings().docker_image, quick=True)

    for name in QUICK_VARIANTS:
        row = result[name]
        assert positive(row["ms"]) and positive(row["baseline_ms"]), row
        assert row["ratio"] > 0, row
    assert set(result["churn_c4"]) == {"baseline", "network_disabled", "ours"}
    for row in result["churn_c4"].values():
        assert row["runs_per_s"] > 0 and row["containers"] > 0, row
    assert set(result["phases"]) == {"baseline", "ours"}
    for by_phase in result["phases"].values():
        assert set(by_phase) == set(PHASES) and all(positive(by_phase[p]) for p in PHASES), by_phase
    left = client.api.containers(all=True, filters={"label": f"{coldpath.LABEL_SESSION}={result['session']}"})
    assert left == []
