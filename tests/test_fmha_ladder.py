"""The fmha workload and its hand-made ladder: naive.cu -> versions/01..14 -> expert.cu, one
mechanism per step. Checked without a GPU: the headers, the guard, the scripted versions walk (which audits every
consecutive pair) down to the naive kernel, that every kernel builds for
sm_90a without spilling, and the workload's oracle on the CPU (against torch's attention in float64,
and on CUDA-only arithmetic, the TF32 split, emulated in float32)."""
from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

from tests.ladder_support import assert_versions_walk
from klineage.gate.guard import check_source
from klineage.workload import load_workload

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD_DIR = ROOT / "expert_kernels" / "fmha"
RUNGS = sorted((WORKLOAD_DIR / "versions").glob("*.cu"))
LADDER = [(p.name, re.match(r"// klineage-step: mechanism=(\w+)", p.read_text()).group(1)) for p in RUNGS]
CHAIN = [WORKLOAD_DIR / "naive.cu"] + RUNGS + [WORKLOAD_DIR / "expert.cu"]


@pytest.fixture(scope="module")
def wl():
    return load_workload(WORKLOAD_DIR)


def test_ladder_has_at_least_five_rungs_each_declaring_one_mechanism():
    assert len(LADDER) >= 5
    assert len({m for _, m in LADDER}) == len(LADDER)


@pytest.mark.parametrize("path", CHAIN, ids=lambda p: p.name)
def test_every_kernel_passes_the_guard(wl, path):
    res = check_source(path.read_text(), wl)
    assert res.ok, (path.name, res)


def test_scripted_versions_walk_reaches_the_naive_kernel(wl):
    assert_versions_walk(wl, WORKLOAD_DIR, LADDER, "warp_specialization")


@pytest.mark.nvcc
@pytest.mark.parametrize("path", CHAIN, ids=lambda p: p.name)
def test_every_kernel_builds_for_sm90a_without_spills(path, tmp_path):
    import subprocess
    r = subprocess.run(["nvcc", "-gencode=arch=compute_90a,code=sm_90a", "-O3", "-Xptxas", "-v", "-c", str(path),
                        "-o", str(tmp_path / "k.o")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert not re.search(r"[1-9]\d* bytes spill stores", r.stderr), r.stderr


@pytest.mark.parametrize("shape", [{"B": 1, "H": 2, "S": 17, "D": 128}, {"B": 2, "H": 1, "S": 70, "D": 64}])
def test_oracle_matches_float64_attention_on_the_cpu(wl, shape):
    ins = wl.make_inputs(shape, 3)
    out = wl.reference(ins, shape)["out"]
    q, k, v = (ins[n].double() for n in ("q", "k", "v"))
    p = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(shape["D"]), dim=-1)
    torch.testing.assert_close(out.double(), p @ v, rtol=0, atol=1e-12)


def test_tf32_split_of_p_keeps_fp32_accuracy():
    """The CUDA oracle's p = hi + lo split: hi has 10 significand bits (exact in TF32), and lo
    rounded to TF32 (emulated: 10 bits kept) leaves an error of at most ~2^-21 relative to p."""
    p = torch.rand(4096, dtype=torch.float32)
    hi = (p.view(torch.int32) & -8192).view(torch.float32)
    assert torch.equal((hi.view(torch.int32) & 8191), torch.zeros_like(hi.view(torch.int32)))
    lo = p - hi
    lo_tf32 = (lo.view(torch.int32) & -8192).view(torch.float32)  # truncation bounds rounding from above
    assert float(((hi + lo_tf32) - p).abs().div(p).max()) < 2.0 ** -20


def test_vendor_is_the_cudnn_backend(wl):
    assert "cuDNN" in wl.vendor_name
