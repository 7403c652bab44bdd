"""The recorded H200 throughput benchmark of the local executor (benchmarks/results/executor_h200/)."""
import json
from pathlib import Path

RECORD = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "executor_h200" / "executor_h200.json"


def test_recorded_run_is_an_h200_run_of_both_modes():
    d = json.loads(RECORD.read_text())
    assert d["env"]["gpu"] == "NVIDIA H200" and d["env"]["driver"] and d["env"]["nvcc"] and d["env"]["torch"]
    runs = {r["mode"]: r for r in d["runs"]}
    assert set(runs) == {"serial", "local"}
    for r in runs.values():
        assert r["evaluations"] > 0 and r["wall_s"] > 0
        assert abs(r["evaluations_per_min"] - 60.0 * r["evaluations"] / r["wall_s"]) < 1e-6
        assert r["gpu_utilisation"]["0"]["samples"] > 0


def test_local_executor_beats_serial_in_the_record():
    runs = {r["mode"]: r for r in json.loads(RECORD.read_text())["runs"]}
    local, serial = runs["local"], runs["serial"]
    assert local["interrupted"] is None  # every walk finished inside its share
    assert local["evaluations_per_min"] > 2.0 * serial["evaluations_per_min"]
    assert local["gpu_utilisation"]["0"]["busy_fraction"] > serial["gpu_utilisation"]["0"]["busy_fraction"]
