"""The matmul rewriter on the naive products of apply_workloads/ (fp32, any layout): its ladder from each
start, the tunables every rewrite names (read by the sweep in the role the generator gives them: no
tile extent or per-thread count taken for a thread count), every rewrite built with nvcc for sm_90a
without spills, and every first-round sweep point of a rewritten kernel that the kernel's static checks
accept built with nvcc too."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from klineage import tuning
from klineage.apply.materialize import TUNABLE_RE, point_flags, sweep_points, tunables
from klineage.gate.compile import compile_many, front_end_accepts
from klineage.mechanisms.base import Applied
from klineage.mechanisms.shapes import rewriters
from klineage.mechanisms.shapes.matmul import MatmulRewriter
from klineage.mechanisms.shapes.matmul import emit as mm_emit
from klineage.mechanisms.shapes.matmul import plan as mm_plan
from klineage.workload import load_workload

ROOT = Path(__file__).resolve().parents[3]
APPLY = ROOT / "apply_workloads"
PRODUCTS = sorted(p.parent for p in APPLY.glob("*/workload.py")
                  if "mmops" in p.read_text() and (p.parent / "naive.cu").is_file())
# starts of each layout and naming habit: [M, K] x [K, N] under a BLOCK_ prefix, both operands
# transposed, a batch (the emulation tests hold the data paths of each layout)
BUILT = ("matmul_square_rowx", "matmul_tt_both", "bmm_gridx_B")
# fp32 forms: wgmma, the TMA and warp specialization are written for 16-bit operands only
FP32_LADDER = ("smem_tiling", "register_tiling", "unroll", "tensor_core_mma", "smem_swizzle", "async_copy",
               "launch_bounds")


def _ladder(folder: Path) -> list[tuple[str, str]]:
    """(steps so far, source) of every rewrite the rewriter's ladder makes from the folder's naive kernel."""
    rw = next(r for r in rewriters() if r.name == "matmul")
    wl = load_workload(folder)
    src, out, steps = (folder / "naive.cu").read_text(), [], []
    for mech in rw.ladder:
        shape = rw.recognise(src, wl)
        assert not hasattr(shape, "reason"), shape.reason
        res = rw.rewrite(src, shape, mech, {}, wl)
        if isinstance(res, Applied):
            src = res.source
            steps.append(mech)
            out.append(("+".join(steps), src))
    return out


@pytest.fixture(scope="module")
def ladders():
    return {f.name: _ladder(f) for f in PRODUCTS}


@pytest.mark.parametrize("folder", PRODUCTS, ids=lambda p: p.name)
def test_the_ladder_climbs_to_the_tf32_ring(folder, ladders):
    wl = load_workload(folder)
    steps = ladders[folder.name][-1][0].split("+")
    tight = wl.tolerance.atol < 3e-3
    want = [m for m in FP32_LADDER if not tight or m in ("smem_tiling", "register_tiling", "unroll",
                                                          "launch_bounds")]
    assert steps == want, (steps, wl.tolerance)


@pytest.mark.parametrize("folder", PRODUCTS, ids=lambda p: p.name)
def test_rewrites_name_their_tunables_as_the_sweep_reads_them(folder, ladders):
    for steps, src in ladders[folder.name]:
        names = dict(TUNABLE_RE.findall(src))
        assert names, steps
        for name in names:
            role = mm_plan._role_of(name)
            assert role is not None and mm_emit.reads_as(name, role), (steps, name, tuning.role(name))
            assert tuning.role(name) != "block", (steps, name)
    # the start's BLOCK_SIZE prefix is not taken for a per-thread count or a tile (BLOCK_TM reads as threads)
    if folder.name == "matmul_square_rowx":
        assert all(not n.startswith("BLOCK_") for _, src in ladders[folder.name] for n in tunables(src))


@pytest.mark.nvcc
def test_every_rewrite_builds(ladders, tmp_path):
    cases = [(name, steps, src) for name in BUILT for steps, src in ladders[name]]
    built = compile_many([c[2] for c in cases], arch="sm_90a", jobs=2, cache_dir=tmp_path)
    for (name, steps, _), b in zip(cases, built):
        assert b.ok, (name, steps, b.log[-2000:])
        assert not b.spills and all(r.stack_bytes == 0 for r in b.resources), (name, steps, b.resources)


@pytest.mark.nvcc
def test_every_sweep_point_the_static_checks_accept_builds(ladders, tmp_path):
    """The first sweep round of each tiled form of the BLOCK_-prefixed start: a point nvcc's front end
    accepts (the kernel's static_asserts hold) builds."""
    cases = []
    for name in ("matmul_square_rowx",):
        for steps, src in ladders[name]:
            if steps.split("+")[-1] in ("smem_tiling", "register_tiling", "async_copy"):
                for p in sweep_points(src, [])[1:]:
                    cases.append((name, steps, src, p))
    assert len(cases) >= 15
    accepted = [c for c in cases if front_end_accepts(c[2], "sm_90a", point_flags({**tunables(c[2]), **c[3]}), tmp_path)]
    assert len(accepted) >= len(cases) // 3
    from klineage.gate.compile import compile_kernel
    for name, steps, src, p in accepted:
        b = compile_kernel(src, "sm_90a", point_flags(p), tmp_path)
        assert b.ok, (name, steps, p, b.log[-1500:])


def test_16bit_kernel_with_a_stored_km_climbs_past_tensor_cores():
    """A bf16 product with a stored [K, M] (the transposed start with conversions): mma.sync reads a's
    panels with ldmatrix.trans; wgmma and the TMA, written for a K-major a, refuse it with that fact."""
    src = (APPLY / "matmul_tn_a_km" / "naive.cu").read_text()
    bf = ("#include <cuda_bf16.h>\n" + src.replace("const float*", "const __nv_bfloat16*")
          .replace("float* C", "__nv_bfloat16* C")
          .replace("value += A[k * M + row] * B[k * N + col];",
                   "value += __bfloat162float(A[k * M + row]) * __bfloat162float(B[k * N + col]);")
          .replace("C[row * N + col] = value;", "C[row * N + col] = __float2bfloat16(value);"))
    rw = next(r for r in rewriters() if r.name == "matmul")
    for mech in MatmulRewriter.ladder[:6]:
        res = rw.rewrite(bf, rw.recognise(bf, None), mech, {}, None)
        assert isinstance(res, Applied), (mech, res.reason)
        bf = res.source
    assert "ldmatrix_x4_trans(af[mi]" in bf and "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in bf
    why = rw.rewrite(bf, rw.recognise(bf, None), "wgmma", {}, None)
    assert "a stored [K, M]: the wgmma form here reads a K-major a" in why.reason
    assert re.search(r"a \[K, M\] row-major \(M-major: out = a\^T @ b\)", bf)
