"""The style gallery's detection benchmark: a fresh run meets the thresholds (recall >= 95% and
precision >= 98% per family with both kinds of evidence, >= 3 idioms per family, >= 60 kernels), and
the recorded output (benchmarks/results/detector_gallery.json) is what a fresh run prints."""
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("detector_gallery", ROOT / "benchmarks" / "detector_gallery.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_every_gallery_kernel_is_labelled_with_known_families_and_idioms():
    from klineage.mechanisms import registry
    labels = bench.load_labels()
    families = {n for n, m in registry().items() if m.DETECTABLE}
    assert len(labels) >= bench.MIN_KERNELS
    for name, lab in labels.items():
        assert set(lab["mechanisms"]) <= families, name
        assert set(lab.get("idioms", {})) == set(lab["mechanisms"]), name


@pytest.fixture(scope="module")
def fresh():
    return bench.run(jobs=2)


@pytest.mark.nvcc
def test_a_fresh_run_meets_the_thresholds(fresh):
    assert bench.failures(fresh) == []


@pytest.mark.nvcc
def test_the_record_is_a_fresh_run(fresh):
    recorded = json.loads(bench.RECORD.read_text())
    if recorded["environment"]["nvcc"] != fresh["environment"]["nvcc"]:
        pytest.skip(f"recorded with nvcc {recorded['environment']['nvcc']}: the thresholds are checked above")
    assert recorded["kernels"] == fresh["kernels"]
    assert recorded["families"] == json.loads(json.dumps(fresh["families"]))
