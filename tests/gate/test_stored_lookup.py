"""A stored evaluation is found before anything is built, and a workload may cap a timing trial."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from klineage.errors import WorkloadError
from klineage.exec import serial as gate_builds  # where a gate without an executor builds
from klineage.gate.compile import CompileResult
from klineage.gate.gate import Gate, Status, kernel_hash
from klineage.gate.worker import MIN_TIMED_REPS, fit_to_budget
from klineage.lineage.mine import load_config
from klineage.store import open_store
from klineage.workload import load_workload

ROOT = Path(__file__).resolve().parents[2]
ROW_SUM = ROOT / "expert_kernels" / "row_sum"


def _store_with_gate_records(tmp_path):
    """A store holding the corpus run's H200 records, and the gate settings that run used."""
    store = open_store(tmp_path / "t.duckdb")
    path = ROOT / "skills_db" / "evaluations" / "mine_corpus_h200.jsonl.gz"
    store.import_evaluations(path)
    with gzip.open(path, "rt") as f:
        records = [json.loads(line) for line in f]
    return store, records, load_config(ROOT / "pipelines" / "mine.toml")[0].gate_config()


def test_a_stored_record_is_returned_without_building(tmp_path, monkeypatch):
    store, records, cfg = _store_with_gate_records(tmp_path)
    wl = load_workload(ROW_SUM)
    src = (ROW_SUM / "expert.cu").read_text()
    assert any(r["kernel_hash"] == kernel_hash(src) and r["workload_hash"] == wl.content_hash for r in records)

    def no_build(*a, **k):
        raise AssertionError("built a kernel whose evaluation is stored")
    monkeypatch.setattr(gate_builds, "compile_kernel", no_build)
    res = Gate(store, cfg).evaluate(src, wl, replay=True)
    assert res.status == Status.PASSED and res.source == "replayed"
    assert res.timing and res.timing[0]["latency_us"] > 0
    store.close()


def test_a_kernel_without_a_record_is_built(tmp_path, monkeypatch):
    store, _, cfg = _store_with_gate_records(tmp_path)
    wl = load_workload(ROW_SUM)
    src = (ROW_SUM / "expert.cu").read_text() + "\n// a kernel nobody measured\n"
    built = []

    def failing_build(source, arch, flags):
        built.append(kernel_hash(source))
        return CompileResult(False, "k", arch, list(flags), "", "", error_kind="nvcc_error",
                             error_message="scripted failure")
    monkeypatch.setattr(gate_builds, "compile_kernel", failing_build)
    res = Gate(store, cfg).evaluate(src, wl, replay=True)
    assert built == [kernel_hash(src)]
    assert res.status == Status.COMPILE_ERROR
    store.close()


@pytest.mark.parametrize("call_s,expect", [
    (0.003, (5, 25, False)),     # fits: the gate's own warm-up and reps
    (1.1518, (2, 6, True)),      # a naive attention kernel at ~1.15 s a call: 8 calls in 10 s
    (4.0, (1, MIN_TIMED_REPS, True)),  # slower than the budget allows: never under 5 timed calls
])
def test_fit_to_budget(call_s, expect):
    warmup, reps, note = fit_to_budget(10, call_s, 5, 25)
    assert (warmup, reps, note is not None) == expect
    if note:
        assert note["asked"] == {"warmup": 5, "reps": 25} and note["budget_s"] == 10


def _workload_with(tmp_path, line):
    src = (ROW_SUM / "workload.py").read_text() + "\n" + line + "\n"
    d = tmp_path / "wl"
    d.mkdir(parents=True)
    (d / "workload.py").write_text(src)
    return d


def test_timing_budget_is_read_and_validated(tmp_path):
    assert load_workload(ROW_SUM).timing_budget_s is None
    assert load_workload(ROOT / "expert_kernels" / "fmha").timing_budget_s == 10.0
    assert load_workload(_workload_with(tmp_path / "a", "TIMING_BUDGET_S = 2.5")).timing_budget_s == 2.5
    for bad in ("0", "-1", "'10'", "True"):
        with pytest.raises(WorkloadError, match="TIMING_BUDGET_S"):
            load_workload(_workload_with(tmp_path / f"b{len(bad)}{bad[0]}", f"TIMING_BUDGET_S = {bad}"))


def test_build_stored_builds_a_kernel_whose_record_is_stored(tmp_path, monkeypatch):
    """`mine --check-builds`: the record is still used, but the kernel is built first."""
    store, _, cfg = _store_with_gate_records(tmp_path)
    wl = load_workload(ROW_SUM)
    src = (ROW_SUM / "expert.cu").read_text()
    real, built = gate_builds.compile_kernel, []

    def counting_build(source, arch, flags):
        built.append(kernel_hash(source))
        return real(source, arch, flags)
    monkeypatch.setattr(gate_builds, "compile_kernel", counting_build)
    res = Gate(store, cfg, build_stored=True).evaluate(src, wl, replay=True)
    assert built == [kernel_hash(src)]
    assert res.status == Status.PASSED and res.source == "replayed"
    store.close()
