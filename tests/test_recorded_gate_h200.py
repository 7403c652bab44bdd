"""Replay the recorded H200 gate benchmark and check it against the foundation's targets.

The numbers come from benchmarks/gate_h200.py run on the GPU machine (its JSON is committed with
the environment); this test checks what was measured, it measures nothing. The gallery and fault
kernels' record is checked in tests/test_recorded_gallery_faults.py."""
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RES = ROOT / "benchmarks" / "results"


def load(name):
    return json.loads((RES / name).read_text())


def test_environment_recorded():
    env = load("gate_h200.json")["environment"]
    assert env["gpu"] == "NVIDIA H200"
    for k in ("driver", "nvcc", "torch", "triton", "capability"):
        assert env.get(k)


def test_experts_at_the_limit_and_naives_slower():
    k = load("gate_h200.json")["kernels"]
    for name in ("row_sum", "swiglu"):
        ex, nv = k[f"{name}/expert"], k[f"{name}/naive"]
        assert ex["status"] == "PASSED" and nv["status"] == "PASSED"
        bench = ex["timing"][0]
        assert bench["bandwidth_fraction"] >= 0.85
        assert bench["speedup_vs_vendor"] >= 1.0
        for te, tn in zip(ex["timing"], nv["timing"]):
            assert tn["latency_us"] > 1.2 * te["latency_us"]


def test_gallery_all_rejected_when_guarded():
    g = load("gate_h200.json")["gallery"]
    assert len(g) >= 8
    for e in g:
        assert e["guarded"]["status"] == e["expect"], e["kernel"]
        assert e["guarded"]["status"] != "PASSED"


def test_faults_are_records_and_the_run_went_on():
    d = load("gate_h200.json")
    statuses = {f["kernel"]: f["status"] for f in d["faults"]}
    assert statuses["spin_forever.cu"] == "TIMEOUT"
    assert statuses["compile_error.cu"] == "COMPILE_ERROR"
    assert statuses["host_segfault.cu"] == "RUNTIME_ERROR"
    assert d["after_faults"]["status"] == "PASSED"


def test_gate_numbers_meet_targets():
    d = load("gate_h200.json")
    assert d["compile"]["median_s"] <= 2.0
    assert d["evaluation_wall_s_median"] is not None
    for run in (d, load("gate_h200_agreement.json")):
        for name, s in run["spread_and_agreement"].items():
            assert s["spread"] <= 0.02, name
    for name, s in load("gate_h200_agreement.json")["spread_and_agreement"].items():
        ind = s["independent"]
        assert abs(ind["cupti_ratio"] - 1) <= 0.05, name
        assert abs(ind["events_over_cupti_same_calls_median"] - 1) <= 0.05, name
