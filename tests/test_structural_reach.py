"""The reach of the structural rewriters on apply_workloads/' naive kernels
(benchmarks/results/structural_reach.json, written by `python benchmarks/structural_reach.py --out ...`):
the record meets the targets (each of the matrix-product, reduction, softmax and normalisation
classes reached on >= 80% of its kernels, every candidate built with nvcc), and a fresh run of the
recognisers and rewriters writes exactly the recorded candidates (by content hash), so the recorded
builds are those of today's candidates. Fails while the record is missing."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("structural_reach", ROOT / "benchmarks" / "structural_reach.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


@pytest.fixture(scope="module")
def record() -> dict:
    assert bench.RECORD.is_file(), (f"{bench.RECORD} is missing: run `python benchmarks/structural_reach.py --out "
                                    f"{bench.RECORD.relative_to(ROOT)}`")
    rec = json.loads(bench.RECORD.read_text())
    assert rec["kernels"] and rec["candidates"], "the record is empty"
    return rec


@pytest.fixture(scope="module")
def fresh() -> dict:
    return bench.run(build=False)


def test_the_record_meets_the_targets(record):
    assert bench.failures(record) == []
    assert record["builds"] == record["candidates"] and not record["failed"]


def test_a_fresh_run_writes_the_recorded_candidates(record, fresh):
    assert set(fresh["kernels"]) == set(record["kernels"])
    for name, k in fresh["kernels"].items():
        rec = record["kernels"][name]
        assert k["class"] == rec["class"] and k["candidates"] == rec["candidates"], name
        for rw, got in k["rewriters"].items():
            want = rec["rewriters"][rw]
            assert got["recognised"] == want["recognised"], (name, rw, got.get("reason"), want.get("reason"))
            if got["recognised"]:
                assert got["steps"] == want["steps"] and got["ladder"] == want["ladder"], (name, rw)
            else:
                assert got["reason"] == want["reason"], (name, rw)
    assert {c: {k: v for k, v in r.items()} for c, r in fresh["classes"].items()} == record["classes"]


@pytest.mark.nvcc
def test_one_kernel_per_class_still_builds(record):
    """A sample rebuilt here: one reached kernel of each class, every candidate its rewriters write."""
    from klineage.gate.compile import compile_kernel
    picked = {}
    for name, k in record["kernels"].items():
        if k["reached"] and k["class"] != "other":
            picked.setdefault(k["class"], name)
    assert picked
    for name in picked.values():
        got = bench.candidates(name)
        for source in got["_sources"].values():
            res = compile_kernel(source)
            assert res.ok, (name, res.log[-1500:])
