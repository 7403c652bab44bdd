"""The matmul generator's tensor-core data paths checked on the CPU (no GPU here): a model of ldmatrix,
mma.sync, the wgmma descriptors and the TMA swizzle (matmul_emulate.py) runs the generated kernels'
index formulas on small integer tiles and must give exactly a @ b. The model itself is first held to
kernels measured correct on an H200: the held-out idiom GEMM (ldmatrix.trans of a [K, N] b), the
gemm ladder's wgmma rung (K-major descriptors) and the fmha ladder's MN-major v descriptor. The
formulas the model runs are pinned to the generated text, so a template change that moves one fails
here."""
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import matmul_emulate as em
from klineage.mechanisms.shapes.matmul import emit as mm_emit
from klineage.mechanisms.shapes.matmul import forms as mm_forms
from klineage.mechanisms.shapes.matmul import plan as mm_plan

ROOT = Path(__file__).resolve().parents[3]
RNG = np.random.default_rng(7)


def ints(*shape):
    return RNG.integers(-3, 4, size=shape).astype(float)


# ---- the model against kernels known to be correct ---------------------------------------------------------

def heldout_chunk_offset(kchunks: int):
    """heldout/kernels/gemm_mm.cu's chunk_offset<kChunks>(row, chunk)."""
    span = kchunks if kchunks < 8 else 8
    rows_per_line = 8 // kchunks if kchunks < 8 else 1
    return lambda row, chunk: (row * kchunks + (chunk ^ ((row // rows_per_line) % span))) * 16


def test_model_runs_the_heldout_idiom_kernel():
    src = (ROOT / "heldout/kernels/gemm_mm.cu").read_text()
    # the formulas modelled below, as the held-out kernel writes them
    for text in ("const int row = wm * kWarpM + mi * 16 + (lane & 15);",
                 "ldmatrix_x4(af[mi], sa + chunk_offset<kChunksA>(row, kk * 2 + (lane >> 4)));",
                 "const int krow = kk * 16 + (lane & 15);",
                 "const int chunk = (wn * kWarpN + nj * 16) / 8 + (lane >> 4);",
                 "ldmatrix_x4_trans(t, sb + chunk_offset<kChunksB>(krow, chunk));"):
        assert text in src
    bm, bn, bk = 64, 64, 32  # GEMM_BLOCK_K = 32: 64-byte rows of a, 8 / 4 = 2 rows per 128-byte line
    A, B = ints(bm, bk), ints(bk, bn)
    fa, fb = heldout_chunk_offset(bk // 8), heldout_chunk_offset(bn // 8)
    smem = {}
    em.store_rows(smem, 0, A, fa)
    em.store_rows(smem, 8192, B, fb)
    out = np.zeros((bm, bn))
    em.mma_block(smem, 0, 8192, bm=bm, bn=bn, warps_m=2, warps_n=2, b_kmajor=False, a_off=fa, b_off=fb, out=out,
                 bk=bk)
    assert np.array_equal(out, A @ B)


def test_model_reads_the_ladders_wgmma_descriptors():
    rung10 = (ROOT / "expert_kernels/gemm/versions/10_wgmma.cu").read_text()
    assert "return ((a & 0x3FFFF) >> 4) | (1ull << 16) | ((1024ull >> 4) << 32) | (1ull << 62);" in rung10
    assert "wgmma_m64n256k16(acc, smem_desc(a + kk * 16), smem_desc(b + kk * 16));" in rung10
    assert "r * 128 + ((c ^ (r & 7)) * 16)" in rung10
    x = ints(128, 64)  # a K-major tile as rung 10 stores it (swizzle128 chunks), one warpgroup's 64 rows
    smem = {}
    em.store_rows(smem, 0, x, lambda r, c: em.chunk_offset(r, c, True))
    for c in range(2):
        for kk in range(4):
            got = em.operand_kmajor(smem, em.desc(c * 64 * 64 * 2 + kk * 32, 16, 1024), 64)
            assert np.array_equal(got, x[c * 64:(c + 1) * 64, kk * 16:kk * 16 + 16])

    fmha = (ROOT / "expert_kernels/fmha/versions/13_wgmma.cu").read_text()
    assert "return (c / 8) * (128 * 128) + r * 128 + (((c % 8) ^ (r & 7)) * 16);" in fmha
    assert "wgmma_rs(o, a, desc_mnmajor(vt + t * 16 * 64, FMHA_BN * 128));" in fmha
    assert "((uint64_t)((half_bytes >> 4) & 0x3FFF) << 16) | ((1024ull >> 4) << 32)" in fmha
    v = ints(128, 128)  # [keys][D]: the B operand of o += p v is v[16t + k][n], read MN-major
    smem = {}
    em.store_rows(smem, 0, v, lambda r, c: (c // 8) * (128 * 128) + r * 128 + (((c % 8) ^ (r & 7)) * 16))
    for t in range(8):
        got = em.operand_mnmajor(smem, em.desc(t * 16 * 64 * 2, 128 * 128, 1024), 128)
        assert np.array_equal(got, v[16 * t:16 * t + 16, :])


def test_tma_swizzle_is_the_chunk_layout():
    box = ints(64, 64)
    a, b = {}, {}
    em.tma_box(a, 1024, box)
    em.store_rows(b, 1024, box, lambda r, c: em.chunk_offset(r, c, True))
    assert a == b


# ---- the generator's paths ---------------------------------------------------------------------------------

PATHS = [  # (core, copy, b_kmajor, swizzle, bm, bn, K)
    ("mma", "cp_async", False, True, 32, 64, 128),
    ("mma", "sync", False, False, 32, 128, 100),
    ("mma", "tma", False, True, 32, 64, 72),
    ("mma", "cp_async", True, True, 32, 32, 128),
    ("mma", "sync", True, False, 32, 32, 64),
    ("wgmma", "cp_async", False, True, 128, 128, 128),
    ("wgmma", "tma", False, True, 64, 256, 80),
    ("wgmma", "cp_async", True, True, 64, 64, 64),
    ("wgmma", "tma", True, True, 128, 64, 100),
]


@pytest.mark.parametrize("core,copy,b_kmajor,swizzle,bm,bn,K", PATHS)
def test_generated_path_computes_the_product(core, copy, b_kmajor, swizzle, bm, bn, K):
    A, B = ints(bm, K), ints(K, bn)
    got = em.block_product(A, B, core=core, copy=copy, b_kmajor=b_kmajor, bm=bm, bn=bn, swizzle=swizzle)
    assert np.array_equal(got, A @ B)


def _plan(b_kmajor: bool) -> mm_plan.Plan:
    src = (ROOT / "heldout/kernels/gemm_mm.cu").read_text()
    entries, _ = mm_plan.entries(src)
    form = mm_plan.Form("mma", "cp_async", True, False, False, True, True, True)
    return mm_plan.Plan("bf16", b_kmajor, tuple(entries), frozenset({"register_tiling", "tensor_core_mma"}), form,
                   {}, {}, "GEMM")


@pytest.mark.parametrize("b_kmajor", [False, True])
@pytest.mark.parametrize("core,copy,swizzle", [("mma", "sync", False), ("mma", "cp_async", True),
                                               ("mma", "tma", True), ("wgmma", "cp_async", True),
                                               ("wgmma", "tma", True), ("wgmma", "tma_ws", True)])
def test_modelled_formulas_are_the_generated_ones(b_kmajor, core, copy, swizzle):
    """Every formula matmul_emulate runs appears in the generated kernel as written there."""
    plan = _plan(b_kmajor)
    ws, copy = copy.endswith("_ws"), copy.removesuffix("_ws")
    form = replace(plan.form, core=core, copy=copy, swizzle=swizzle, ws=ws)
    values, _ = mm_forms.choose(plan, form, {})
    src = mm_emit.emit(plan, form, values)
    flat = re.sub(r"\s+", " ", src)
    want = []
    if core == "mma" or copy != "tma":
        want.append("r * 128 + ((c ^ (r & 7)) * 16)" if swizzle else "r * 128 + c * 16")
    if not b_kmajor and (core == "mma" or copy != "tma"):
        want.append("return static_cast<uint32_t>((c / 8) * (kBK * 128)) + chunk_offset(r, c % 8);")
    if copy != "tma":
        want += ["copy16(s + chunk_offset(r, c), g + (in ? (r0 + r) * ld + k0 + c * 8 : 0), in);",
                 "load_kmajor<kBM>(st, a, d.K, t.rows, d.K, t.m0, kt * kBK);"]
        want.append("load_kmajor<kBN>(st + kTileABytes, b, d.K, d.N, d.K, t.n0, kt * kBK);" if b_kmajor else
                    "copy16(s + panel_offset(r, c), g + (in ? (k0 + r) * ld + n0 + c * 8 : 0), in);")
    else:
        want += ["tma_load_3d(st, map_a, kt * kBK, t.row0 + t.m0, offs != nullptr ? 0 : t.z, bar);",
                 "encode_map(reinterpret_cast<TensorMapEncodeTiled>(fn), &map_a, a, K, M, depth_a, 64, kBM)",
                 "mbar_expect_tx(bar, kStageBytes);"]
        want += (["tma_load_3d(st + kTileABytes, map_b, kt * kBK, t.n0, t.z, bar);",
                  "encode_map(reinterpret_cast<TensorMapEncodeTiled>(fn), &map_b, b, K, N, depth_b, 64, kBN)"]
                 if b_kmajor else
                 ["tma_load_3d(st + kTileABytes + j * (kBK * 128), map_b, t.n0 + j * 64, kt * kBK, t.z, bar);",
                  "encode_map(reinterpret_cast<TensorMapEncodeTiled>(fn), &map_b, b, N, K, depth_b, 64, kBK)"])
    if core == "mma":
        want += ["const int row = wm * kWarpM + mi * 16 + (lane & 15);",
                 "ldmatrix_x4(af[mi], sa + chunk_offset(row, kk * 2 + (lane >> 4)));",
                 "bf[2 * nj][0] = q[0]; bf[2 * nj][1] = q[1]; bf[2 * nj + 1][0] = q[2]; bf[2 * nj + 1][1] = q[3];",
                 "const int r = t.m0 + wm * kWarpM + mi * 16 + lane / 4;",
                 "const int c = t.n0 + wn * kWarpN + ni * 8 + (lane % 4) * 2;",
                 "store_pair(tout, bias, d, t, r, c, acc[mi][ni][0], acc[mi][ni][1]);",
                 "store_pair(tout, bias, d, t, r + 8, c, acc[mi][ni][2], acc[mi][ni][3]);"]
        want += (["const int row = wn * kWarpN + nj * 16 + (lane & 7) + 8 * (lane >> 4);",
                  "ldmatrix_x4(q, sb + chunk_offset(row, kk * 2 + ((lane >> 3) & 1)));"] if b_kmajor else
                 ["const int krow = kk * 16 + (lane & 15);",
                  "ldmatrix_x4_trans(q, sb + panel_offset(krow, (wn * kWarpN + nj * 16) / 8 + (lane >> 4)));"])
    else:
        want += ["const elem_t* sa = reinterpret_cast<const elem_t*>(st) + c * 64 * kBK;",
                 "return ((addr & 0x3FFFF) >> 4) | (1ull << 16) | ((1024ull >> 4) << 32) | (1ull << 62);",
                 "const int r = t.m0 + c * 64 + warp * 16 + lane / 4;",
                 "const int col = t.n0 + j * 8 + (lane % 4) * 2;",
                 "store_pair(out, bias, d, t, r, col, acc[4 * j], acc[4 * j + 1]);",
                 "store_pair(out, bias, d, t, r + 8, col, acc[4 * j + 2], acc[4 * j + 3]);"]
        want += (["wgmma_tile<kBN>(acc, desc_kmajor(sa + kk * 16), desc_kmajor(sb + kk * 16));",
                  "p, 1, 1, 0, 0;"] if b_kmajor else
                 ["wgmma_tile<kBN>(acc, desc_kmajor(sa + kk * 16), desc_nmajor(sb + kk * 16 * 64));",
                  "(static_cast<uint64_t>((kBK * 128) >> 4) << 16) | ((1024ull >> 4) << 32) | (1ull << 62);",
                  "p, 1, 1, 0, 1;"])
    missing = [w for w in want if w not in flat]
    assert not missing, missing


# ---- the tiling of a call ----------------------------------------------------------------------------------

@pytest.mark.parametrize("offs,M,N", [([1280, 2048, 3136, 4096], 4096, 300), ([0, 500, 500, 777], 777, 200),
                                      ([3, 3, 3, 3], 3, 8), ([0, 0, 0, 1], 1, 1), (None, 300, 520)])
def test_every_output_is_one_blocks(offs, M, N):
    bm, bn, gm = 128, 64, 8
    groups = len(offs) if offs else 0
    cover = np.zeros((M, N), dtype=int)
    for block in range(em.tiles_of(M, N, groups, offs is not None, bm, bn)):
        t = em.find_tile(block, 0, offs=offs, M=M, N=N, groups=groups, bm=bm, bn=bn, group_m=gm)
        if t is None:
            continue
        z, rows, row0, m0, n0 = t
        assert m0 < rows and n0 < N  # no block without work past the bound check
        # the TMA's a rows of this block (row0 + m0 in the whole a) and the epilogue's guard (r < rows)
        r0, r1 = row0 + m0, row0 + min(m0 + bm, rows)
        cover[r0:r1, n0:min(n0 + bn, N)] += 1
        if offs is not None:
            start = 0 if z == 0 else offs[z - 1]
            assert row0 == start and rows == offs[z] - start
    ends = offs[-1] if offs else M
    assert (cover[:ends] == 1).all() and (cover[ends:] == 0).all()


# ---- fp32 on TF32 tensor cores, and a stored [K, M] ------------------------------------------------------------

def _f32_plan(a_mmajor: bool, b_kmajor: bool, dtype: str = "f32") -> mm_plan.Plan:
    e = mm_plan.Entry("mm", "const float* a, const float* b, float* out, int M, int N, int K, cudaStream_t stream",
                      "mm", "a", "b", "out", "M", "N", "K", "stream")
    form = mm_plan.Form("mma", "cp_async", True, False, False, False, True, False)
    return mm_plan.Plan(dtype, b_kmajor, (e,), frozenset({"register_tiling", "tensor_core_mma"}), form, {}, {}, "MM",
                        a_mmajor)


@pytest.mark.parametrize("a_mmajor,b_kmajor,swizzle,bm,bn,K", [
    (False, False, True, 32, 64, 96), (False, True, True, 32, 32, 40), (True, False, True, 64, 64, 64),
    (True, True, False, 64, 32, 36), (False, False, False, 32, 32, 33)])
def test_tf32_path_computes_the_product(a_mmajor, b_kmajor, swizzle, bm, bn, K):
    A, B = ints(bm, K), ints(K, bn)
    got = em.tf32_block_product(A, B, a_mmajor=a_mmajor, b_kmajor=b_kmajor, bm=bm, bn=bn, swizzle=swizzle)
    assert np.array_equal(got, A @ B)


@pytest.mark.parametrize("b_kmajor,swizzle", [(False, True), (True, True), (False, False)])
def test_16bit_path_with_a_stored_km_computes_the_product(b_kmajor, swizzle):
    A, B = ints(64, 128), ints(128, 64)
    got = em.mmajor_block_product(A, B, b_kmajor=b_kmajor, bm=64, bn=64, swizzle=swizzle)
    assert np.array_equal(got, A @ B)


@pytest.mark.parametrize("a_mmajor", [False, True])
@pytest.mark.parametrize("b_kmajor", [False, True])
def test_modelled_tf32_formulas_are_the_generated_ones(a_mmajor, b_kmajor):
    plan = _f32_plan(a_mmajor, b_kmajor)
    values, _ = mm_forms.choose(plan, plan.form, {})
    flat = re.sub(r"\s+", " ", mm_emit.emit(plan, plan.form, values))
    want = ["constexpr int kBK = 32;", "for (int kk = 0; kk < kBK / 8; ++kk) {",
            "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", 'asm("cvt.rna.tf32.f32 %0, %1;\\n"',
            "r * 128 + ((c ^ (r & 7)) * 16)",
            "const int r = t.m0 + wm * kWarpM + mi * 16 + lane / 4;",
            "const int c = t.n0 + wn * kWarpN + ni * 8 + (lane % 4) * 2;"]
    if a_mmajor:
        want += ["const int m = wm * kWarpM + mi * 16 + lane / 4, k = kk * 8 + lane % 4;",
                 "af[mi][0] = lds_tf32(sa + panel_word(k, m));", "af[mi][1] = lds_tf32(sa + panel_word(k, m + 8));",
                 "af[mi][2] = lds_tf32(sa + panel_word(k + 4, m));",
                 "af[mi][3] = lds_tf32(sa + panel_word(k + 4, m + 8));",
                 "copy16(s + panel_offset(r, c), g + (in ? (k0 + r) * ld + m0 + c * 4 : 0), in);",
                 "load_a_panels(st, a, d.M, d.K, t.rows, kt * kBK, t.m0);"]
    else:
        want += ["const int row = wm * kWarpM + mi * 16 + (lane & 15);",
                 "ldmatrix_x4(af[mi], sa + chunk_offset(row, kk * 2 + (lane >> 4)));",
                 "copy16(s + chunk_offset(r, c), g + (in ? (r0 + r) * ld + k0 + c * 4 : 0), in);"]
    if b_kmajor:
        want += ["const int row = wn * kWarpN + nj * 16 + (lane & 7) + 8 * (lane >> 4);",
                 "ldmatrix_x4(q, sb + chunk_offset(row, kk * 2 + ((lane >> 3) & 1)));",
                 "bf[2 * nj][0] = to_tf32(q[0]); bf[2 * nj][1] = to_tf32(q[1]);"]
    else:
        want += ["const int n = wn * kWarpN + ni * 8 + lane / 4, k = kk * 8 + lane % 4;",
                 "bf[ni][0] = lds_tf32(sb + panel_word(k, n));", "bf[ni][1] = lds_tf32(sb + panel_word(k + 4, n));",
                 "copy16(s + panel_offset(r, c), g + (in ? (k0 + r) * ld + n0 + c * 4 : 0), in);"]
    if a_mmajor or not b_kmajor:
        want += ["return panel_offset(r, c / 4) + static_cast<uint32_t>((c % 4) * 4);",
                 "return static_cast<uint32_t>((c / 8) * (kBK * 128)) + chunk_offset(r, c % 8);"]
    missing = [w for w in want if w not in flat]
    assert not missing, missing


def test_modelled_16bit_formulas_with_a_stored_km_are_the_generated_ones():
    plan = _f32_plan(True, False, "bf16")
    values, _ = mm_forms.choose(plan, plan.form, {})
    flat = re.sub(r"\s+", " ", mm_emit.emit(plan, plan.form, values))
    for w in ["const int krow = kk * 16 + (lane & 7) + 8 * (lane >> 4);",
              "ldmatrix_x4_trans(af[mi], sa + panel_offset(krow, (wm * kWarpM + mi * 16) / 8 + ((lane >> 3) & 1)));",
              "copy16(s + panel_offset(r, c), g + (in ? (k0 + r) * ld + m0 + c * 8 : 0), in);",
              "load_a_panels(st, a, d.M, d.K, t.rows, kt * kBK, t.m0);"]:
        assert w in flat, w
