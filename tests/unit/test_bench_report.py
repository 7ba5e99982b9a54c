"""The benchmark's one table (bench/run.py): every target gets its verdict from the figures
measured in the same run -- MET, NOT MET, or "not measured" when its section did not run --
and the report prints every row it has. Pure logic on a results dict; the measurements
themselves need the engine (./scripts/bench.sh)."""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

import pytest

from ..conftest import REPO

_spec = importlib.util.spec_from_file_location("bench_run", REPO / "bench" / "run.py")
assert _spec is not None and _spec.loader is not None
bench = importlib.util.module_from_spec(_spec)
sys.modules["bench_run"] = bench
_spec.loader.exec_module(bench)


def figure(p50: float) -> dict[str, float]:
    return {"p50": p50, "p90": p50 * 1.1, "n": 10}


def results(**extra: Any) -> dict[str, Any]:
    r: dict[str, Any] = {
        "quick": True,
        "seconds": 70.0,
        "section_seconds": {"floor": 5.0},
        "floor_exec_run_ms": figure(60.0),
        "floor_none_ms": figure(300.0),
        "floor_disabled_ms": figure(200.0),
        "launcher_round_trip_ms": figure(6.0),
        "library_warm_pool_ms": figure(12.0),
        "library_pool0_ms": figure(190.0),
        "floor_none_beside_library_ms": figure(300.0),
        "http_warm_pool_ms": figure(20.0),
        "http_pool0_ms": figure(250.0),
        "floor_none_beside_http_ms": figure(300.0),
        "floor_disabled_beside_http_ms": figure(200.0),
        "throughput_floor_none": {"4": 5.0},
        "throughput_floor_disabled": {"4": 8.0},
        "throughput_ours_http": {"4": 9.0},
        "workloads": {"pdf_form_fill": {"plain_ms": figure(700.0), "ours_ms": figure(800.0), "ratio": 800 / 700}},
    }
    r.update(extra)
    return r


def verdicts(r: dict[str, Any]) -> dict[str, Any]:
    return {t["target"]: t["met"] for t in bench.targets(r)}


def test_each_target_is_judged_against_figures_of_the_same_run() -> None:
    by_name = {t["target"]: t for t in bench.targets(results())}
    warm = by_name["HTTP warm pool p50 / exec_run p50"]
    assert warm["value"] == pytest.approx(20 / 60) and warm["met"] is False
    assert by_name["library warm pool p50 / launcher round trip p50"]["value"] == pytest.approx(2.0)
    assert by_name["library warm pool p50 / launcher round trip p50"]["met"] is True
    assert by_name["HTTP pool 0 p50 / c+s+w+r network_mode=none (in turn)"]["value"] == pytest.approx(250 / 300)
    assert by_name["HTTP pool 0 p50 / c+s+w+r network_mode=none (in turn)"]["met"] is False  # 0.83 > 0.8
    assert by_name["library pool 0 p50 / c+s+w+r network_mode=none (in turn)"]["met"] is True
    assert by_name["HTTP throughput at c=4 / churn network_mode=none"]["value"] == pytest.approx(1.8)
    assert by_name["HTTP throughput at c=4 / churn network_mode=none"]["met"] is True  # a ">=" target
    assert by_name["workload pdf_form_fill: ours / plain docker run"]["met"] is False  # 1.14 > 1.05
    assert by_name["--quick finishes within (s)"]["met"] is True


def test_a_section_left_out_is_not_measured_never_met() -> None:
    r = results()
    for key in ("launcher_round_trip_ms", "throughput_ours_http", "workloads"):
        del r[key]
    judged = verdicts(r)
    assert judged["library warm pool p50 / launcher round trip p50"] is None
    assert judged["HTTP throughput at c=4 / churn network_mode=none"] is None
    assert not any(name.startswith("workload ") for name in judged)
    assert judged["service RSS idle (MB)"] is None
    # A full run (not --quick) has no time limit.
    assert verdicts(results(quick=False))["--quick finishes within (s)"] is None
    assert verdicts(results(seconds=95.0))["--quick finishes within (s)"] is False


def test_the_report_prints_every_row_and_every_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    r = results(
        peers={
            "samples": 6,
            "throughput_runs": 12,
            "rows": [
                {
                    "peer": "epicbox",
                    "isolation": "fresh container per run",
                    "version": "1.1.0",
                    "p50_ms": 200.0,
                    "p90_ms": 220.0,
                    "n": 6,
                    "throughput_runs_per_s": 7.0,
                },
                {"peer": "AutoGen", "isolation": "one shared container", "error": "driver exited with 1"},
            ],
        },
        throughput_library_c4=8.0,
    )
    r["targets"] = bench.targets(r)
    bench.report(r)
    out = capsys.readouterr().out
    for text in (
        "warm launcher round trip",
        "network_disabled",
        "pool 0",
        "c=4",
        "pdf_form_fill",
        "epicbox 1.1.0",
        "AutoGen",
        "failed: driver exited with 1",
        "NOT MET",
        "MET",
        "finished in 70.0 s",
    ):
        assert text in out, text
    assert out.count("NOT MET") == sum(1 for t in r["targets"] if t["met"] is False)


def egress_row(added_p50: float, direct: bool = True) -> dict[str, Any]:
    row: dict[str, Any] = {
        "gateway": {"p50_ms": 0.5 + added_p50, "p99_ms": 4.0, "n": 200},
        "added_p50_ms": added_p50,
        "added_p99_ms": 3.0,
        "gateway_rps": 600.0,
    }
    if direct:
        row.update(direct={"p50_ms": 0.5, "p99_ms": 1.0, "n": 200}, direct_rps=1800.0)
    return row


def test_the_egress_gateway_is_judged_on_its_added_p50_where_measured(capsys: pytest.CaptureFixture[str]) -> None:
    egress = {
        "host": {"https": egress_row(1.5), "http": egress_row(1.2)},
        "sandbox": {"https": egress_row(2.4, direct=False), "http": egress_row(1.1, direct=False)},
    }
    judged = verdicts(results(egress=egress))
    assert judged["egress gateway added p50, HTTPS kept alive, host (ms)"] is True
    assert judged["egress gateway added p50, HTTPS kept alive, sandbox (ms)"] is False  # 2.4 > 2
    # --quick measures the host only; a skipped section measures nothing
    del egress["sandbox"]
    assert verdicts(results(egress=egress))["egress gateway added p50, HTTPS kept alive, sandbox (ms)"] is None
    skipped = verdicts(results(egress={"skipped": "no egress environment"}))
    assert skipped["egress gateway added p50, HTTPS kept alive, host (ms)"] is None
    r = results(egress={"host": {"https": egress_row(1.5), "http": egress_row(1.2)}})
    r["targets"] = bench.targets(r)
    bench.report(r)
    out = capsys.readouterr().out
    assert "egress gateway" in out and "1800.0/600.0" in out and "1.50/3.00" in out
