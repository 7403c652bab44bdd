"""Every nvcc and ptxas process is counted by purpose, with the answers that needed none; the compiler
evidence a run used is exported as a record and answered from it with no nvcc at all (the corpus's
records make a replayed main job run none)."""
from __future__ import annotations

import pytest

from klineage.gate import compile as comp

KERNEL = """
__global__ void twice(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = 2.0f * x[i];
}
"""


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    monkeypatch.setenv("KLINEAGE_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(comp, "_PTX_RECORDED", {})
    monkeypatch.setattr(comp, "_PTX_SEEN", {})
    monkeypatch.setitem(comp._PTX_COLLECT, "on", False)
    return tmp_path


@pytest.mark.nvcc
def test_ptx_runs_and_cache_hits_are_counted(fresh):
    before = comp.nvcc_calls()
    src = KERNEL + "// counted\n"
    assert comp.compile_ptx(src).ok
    assert comp.compile_ptx(src).cached
    got = comp.calls_since(before)
    assert got["ptx"]["runs"] == 2 and got["ptx"]["seconds"] > 0  # nvcc -ptx, then ptxas -v
    assert got["ptx"]["cached"] == 1 and got["ptx"]["recorded"] == 0
    assert got["total"]["runs"] == 2 and got["build"]["runs"] == 0


@pytest.mark.nvcc
def test_recorded_ptx_answers_without_nvcc(fresh, monkeypatch):
    src = KERNEL + "// recorded\n"
    comp.collect_ptx(True)
    live = comp.compile_ptx(src)
    comp.collect_ptx(False)
    path = fresh / "corpus.ptx.jsonl.xz"
    assert comp.export_ptx_records(path) == 1
    monkeypatch.setenv("KLINEAGE_HOME", str(fresh / "elsewhere"))  # an empty build cache
    monkeypatch.setenv("PATH", "/nonexistent")  # and no nvcc
    assert comp.load_ptx_records(path, replay=True) == 1
    before = comp.nvcc_calls()
    got = comp.compile_ptx(src)
    assert got.ok and got.ptx == live.ptx and got.resources == live.resources and got.log == live.log
    assert comp.calls_since(before)["ptx"] == {"runs": 0, "seconds": 0.0, "cached": 0, "recorded": 1}
    assert not comp.compile_ptx(src + "// not recorded\n").ok  # anything else still needs nvcc


def test_a_file_that_is_not_a_record_is_refused(fresh):
    bad = fresh / "bad.ptx.jsonl.xz"
    bad.write_bytes(b"not xz")
    with pytest.raises(comp.InputError, match="not a PTX record"):
        comp.load_ptx_records(bad)
