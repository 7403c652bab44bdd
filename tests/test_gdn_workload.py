"""gdn workload (expert_kernels/gdn): the contract, the oracle against the chunked form, the precision
of the expert's chunk algorithm (a CPU emulation with bf16 roundings where the kernel rounds), nvcc
builds of both kernels, and both kernels run on the CPU under a host emulation of the CUDA subset they
use (cooperative threads, ldmatrix / mma.sync / shuffles as warp-collective exchanges, cp.async copies
deferred to cp.async.wait_group) against the float64 oracle with the workload's tolerance."""
import math
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from klineage.gate.correctness import compare
from klineage.gate.guard import check_source
from klineage.mechanisms.audit import audit_version
from klineage.mechanisms import detect_all, registry
from klineage.mechanisms.base import Kernel
from klineage.workload import Tolerance, load_workload

ROOT = Path(__file__).resolve().parents[1]
WL_DIR = ROOT / "expert_kernels" / "gdn"
NAMES = ("q", "k", "v", "g", "beta")
HAS_GXX = shutil.which("g++") is not None
LADDER = [
    ("01_chunked_form.cu", "chunked_form"),
    ("02_register_tiling.cu", "register_tiling"),
    ("03_restrict.cu", "restrict"),
    ("04_launch_bounds.cu", "launch_bounds"),
    ("05_unroll.cu", "unroll"),
    ("06_fast_math.cu", "fast_math"),
    ("07_tensor_core_mma.cu", "tensor_core_mma"),
    ("08_vector_access.cu", "vector_access"),
]
EXPERT_ADDS = "async_copy"
RUNGS = ["naive.cu", *[n for n, _ in LADDER], "expert.cu"]


def _path(name):
    return WL_DIR / name if name in ("naive.cu", "expert.cu") else WL_DIR / "versions" / name


@pytest.fixture(scope="module")
def wl():
    return load_workload(WL_DIR)


def _args(inputs):
    return tuple(inputs[n] for n in NAMES)


# ---- contract ------------------------------------------------------------------------------------

def test_workload_loads(wl):
    assert wl.name == "gdn"
    assert wl.c_signature == (
        'extern "C" cudaError_t gdn(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, '
        'const float* g, const float* beta, __nv_bfloat16* o, float* state, int B, int T, int H, int HV, '
        'cudaStream_t stream)')
    assert wl.benchmark_cases == ({"B": 1, "T": 4096, "H": 16, "HV": 48},)
    assert wl.output_names == ("o", "state")
    ts = {s["T"] for s in wl.probe_shapes}
    assert {1, 17, 65, 130} <= ts
    assert {1, 3, 8} <= {s.get("offset", 0) for s in wl.probe_shapes}
    for _, shape in wl.all_shapes():
        assert wl.bytes_moved(shape) > 0 and wl.flops(shape) > 0
    assert "fla-core" in wl.vendor_name and "vendor_fallback" in wl.vendor_name


def test_make_inputs(wl):
    s = {"B": 2, "T": 33, "H": 2, "HV": 6}
    a, b, c = wl.make_inputs(s, 1), wl.make_inputs(s, 1), wl.make_inputs(s, 2)
    assert all(torch.equal(a[n], b[n]) for n in NAMES)
    assert not torch.equal(a["v"], c["v"])
    assert a["q"].shape == (2, 33, 2, 128) and a["v"].shape == (2, 33, 6, 128) and a["g"].shape == (2, 33, 6)
    assert a["q"].dtype == torch.bfloat16 and a["g"].dtype == torch.float32 and a["beta"].dtype == torch.float32
    norms = a["k"].float().norm(dim=-1)
    assert torch.allclose(norms, torch.ones_like(norms), atol=1e-2)  # unit keys (bf16-rounded)
    assert (a["g"] < 0).all() and ((a["beta"] > 0) & (a["beta"] < 1)).all()


def test_gva_head_mapping(wl):
    """Value head hv reads q/k head hv // (HV // H): recomputing with q/k repeated that way and H = HV
    gives the same result."""
    s = {"B": 1, "T": 20, "H": 2, "HV": 6}
    ins = wl.make_inputs(s, 3)
    o, st = wl.module.recurrence(*_args(ins))
    rep = {**ins, "q": ins["q"].repeat_interleave(3, dim=2), "k": ins["k"].repeat_interleave(3, dim=2)}
    o2, st2 = wl.module.recurrence(*_args(rep))
    assert torch.allclose(o, o2) and torch.allclose(st, st2)


def test_reference_matches_the_chunked_form(wl):
    """The token recurrence and the chunked (WY / UT) form agree to float64 rounding, tails included."""
    for s in ({"B": 2, "T": 130, "H": 2, "HV": 6}, {"B": 1, "T": 17, "H": 1, "HV": 3}, {"B": 1, "T": 64, "H": 1, "HV": 1}):
        ins = wl.make_inputs(s, 0)
        ref = wl.reference(ins, s)
        o, st = wl.module.chunked(*_args(ins), dtype=torch.float64)
        assert (o - ref["o"]).abs().max() < 1e-12
        assert (st - ref["state"]).abs().max() < 1e-12


def test_vendor_fallback_passes_the_tolerance(wl):
    for s in wl.probe_shapes[:6]:
        ins = wl.make_inputs(s, 1)
        ref = wl.reference(ins, s)
        out = wl.module.vendor_fallback(ins, s)
        assert out["o"].dtype == torch.bfloat16 and out["state"].dtype == torch.float32
        for n in ("o", "state"):
            c = compare(out[n], ref[n], wl.tolerance)
            assert c.ok and c.matched_fraction == 1.0, (s, n, c.reason)


def test_vendor_without_fla_names_the_fallback(wl, monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "fla", None)  # import fails as if fla-core were missing
    with pytest.raises(RuntimeError, match="vendor_fallback"):
        wl.vendor(wl.make_inputs({"B": 1, "T": 3, "H": 1, "HV": 1}, 0), {"B": 1, "T": 3, "H": 1, "HV": 1})


def test_negative_controls_fail(wl):
    s = {"B": 1, "T": 130, "H": 2, "HV": 4}
    ins = wl.make_inputs(s, 0)
    ref = wl.reference(ins, s)
    for n in ("o", "state"):
        assert not compare(torch.zeros_like(ref[n]), ref[n], wl.tolerance).ok
    # q/k heads mapped the wrong way (hv % H instead of hv // G) fail
    bad = {**ins, "q": ins["q"].repeat(1, 1, 2, 1), "k": ins["k"].repeat(1, 1, 2, 1)}
    o_bad, _ = wl.module.recurrence(*_args(bad))
    assert not compare(o_bad, ref["o"], wl.tolerance).ok


# ---- the expert's chunk algorithm, emulated with its roundings -----------------------------------

def _bf(x):
    return x.to(torch.bfloat16).to(torch.float32)


def emulate_chunk_algorithm(q, k, v, g, beta, chunk=64, decay_on_x=True):
    """What expert.cu computes, in fp32 torch with bf16 rounding at the kernel's rounding points: the
    state copy feeding K S0 and Q S0, T, R, U, exp(G_last - G) U and P; o rounded to bf16."""
    b, t, h, dk = q.shape
    hv, dv = v.shape[2], v.shape[3]
    grp = hv // h
    nc = (t + chunk - 1) // chunk
    pad = nc * chunk - t

    def prep(x, rep):
        x = x.float()
        if rep:
            x = x.repeat_interleave(grp, dim=2)
        x = x.transpose(1, 2)
        x = F.pad(x, (0, 0, 0, pad)) if x.dim() == 4 else F.pad(x, (0, pad))
        return x.reshape(b, hv, nc, chunk, *x.shape[3:])

    qc, kc, vc, gc, bc = prep(q, True), prep(k, True), prep(v, False), prep(g, False), prep(beta, False)
    scale = 1.0 / math.sqrt(dk)
    ii = torch.arange(chunk)
    lower, incl = ii[:, None] > ii[None, :], ii[:, None] >= ii[None, :]
    s = torch.zeros(b, hv, dk, dv)
    o = torch.empty(b, hv, nc, chunk, dv)
    for c in range(nc):
        K, Q, V, bt = kc[:, :, c], qc[:, :, c], vc[:, :, c], bc[:, :, c]
        G = gc[:, :, c].cumsum(-1)
        diff = G[..., :, None] - G[..., None, :]
        A = torch.where(lower, bt[..., :, None] * torch.exp(torch.where(lower, diff, 0.0)) * (K @ K.transpose(-1, -2)), 0.0)
        P = torch.where(incl, torch.exp(torch.where(incl, diff, 0.0)) * (Q @ K.transpose(-1, -2)), 0.0)
        eye = torch.eye(chunk).expand_as(A)
        Tm = torch.linalg.solve_triangular(eye + A, eye, upper=False, unitriangular=True)
        sb = _bf(s)
        X, Y = K @ sb, Q @ sb
        eg = torch.exp(G)[..., None] if decay_on_x else 1.0
        R = _bf(bt[..., None] * (V - eg * X))
        U = _bf(Tm) @ R
        o[:, :, c] = scale * (torch.exp(G)[..., None] * Y + _bf(P) @ _bf(U))
        Ud = _bf(torch.exp(G[..., -1:] - G)[..., None] * U)
        s = torch.exp(G[..., -1])[..., None, None] * s + K.transpose(-1, -2) @ Ud
    o = o.reshape(b, hv, nc * chunk, dv)[:, :, :t].transpose(1, 2)
    return _bf(o), s


@pytest.mark.parametrize("shape", [{"B": 2, "T": 300, "H": 2, "HV": 4}, {"B": 1, "T": 2048, "H": 1, "HV": 3},
                                   {"B": 1, "T": 17, "H": 2, "HV": 6}, {"B": 2, "T": 65, "H": 1, "HV": 3}])
def test_chunk_algorithm_with_bf16_roundings_passes(wl, shape):
    ins = wl.make_inputs(shape, 0)
    ref = wl.reference(ins, shape)
    o, st = emulate_chunk_algorithm(*_args(ins))
    for n, out in (("o", o), ("state", st)):
        c = compare(out, ref[n], wl.tolerance)
        assert c.ok, (n, c.reason)
        # the margin the tolerance comment states: ~0.35% rms error, everything matched
        assert float((out.double() - ref[n]).pow(2).mean().sqrt()) < 6e-3 * c.ref_rms
    # and the atol is what the bf16 roundings need: a third of it fails this arithmetic
    tight = Tolerance(wl.tolerance.rtol, wl.tolerance.atol / 3, wl.tolerance.min_matched)
    assert not compare(o, ref["o"], tight).ok or shape["T"] < 64


def test_chunk_algorithm_without_the_decay_on_k_s0_fails(wl):
    s = {"B": 1, "T": 300, "H": 1, "HV": 3}
    ins = wl.make_inputs(s, 0)
    ref = wl.reference(ins, s)
    o, _ = emulate_chunk_algorithm(*_args(ins), decay_on_x=False)
    assert not compare(o, ref["o"], wl.tolerance).ok


# ---- nvcc ------------------------------------------------------------------------------------------

@pytest.mark.nvcc
@pytest.mark.parametrize("name", RUNGS)
def test_kernels_build_without_spills(wl, name):
    from klineage.gate.compile import compile_kernel
    src = _path(name).read_text()
    assert check_source(src, wl).ok
    res = compile_kernel(src)
    assert res.ok, res.log[-3000:]
    kernels = [r for r in res.resources if "gdn" in r.name]
    assert kernels and not res.spills and all(r.stack_bytes == 0 for r in kernels), res.log[-3000:]
    if name in ("expert.cu", "08_vector_access.cu"):
        assert len(kernels) == 2  # the fast instantiation and the one for misaligned bases


# ---- the versions ladder ----------------------------------------------------------------------------

def test_ladder_files_declare_their_steps():
    import tomllib
    assert sorted(p.name for p in (WL_DIR / "versions").glob("*.cu")) == [n for n, _ in LADDER]
    for name, mech in LADDER:
        assert _path(name).read_text().startswith(f"// klineage-step: mechanism={mech}\n")
    assert tomllib.loads((WL_DIR / "versions" / "ladder.toml").read_text())["expert_adds"] == EXPERT_ADDS


def test_consecutive_rungs_pass_the_versions_audit():
    known = {m.NAME for m in registry().values() if m.DETECTABLE}
    feats = [detect_all(Kernel(_path(n).read_text())) for n in RUNGS]
    for i, mech in enumerate([m for _, m in LADDER] + [EXPERT_ADDS]):
        audit = audit_version(feats[i + 1], feats[i], mech, known)
        assert audit["ok"], f"{RUNGS[i]} -> {RUNGS[i + 1]} ({mech}): {audit['reason']}"
    assert not feats[0]
    assert {f.mechanism for f in feats[-1]} == {"async_copy", "fast_math", "launch_bounds", "register_tiling",
                                                 "restrict", "tensor_core_mma", "unroll", "vector_access"}


def test_versions_ladder_walks_to_the_naive_kernel(wl):
    from tests.ladder_support import assert_versions_walk
    assert_versions_walk(wl, WL_DIR, LADDER, EXPERT_ADDS)


# ---- host emulation of the CUDA kernels ------------------------------------------------------------

EMU_PRELUDE = r"""// Host emulation of the CUDA subset the gdn kernels use: every CUDA thread of a block is a cooperative
// ucontext coroutine; __syncthreads and warp-collective operations (ldmatrix, mma.sync, shuffles) are
// barriers at which the scheduler resumes the runnable threads in a random order; cp.async copies are
// performed only at cp.async.wait_group (so a read before the wait sees stale data); shared memory
// starts as NaN-filled garbage; output buffers are NaN-filled by the driver.
#include <ucontext.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
typedef int cudaError_t;
static const int cudaSuccess = 0;
static const int cudaErrorInvalidValue = 1;
typedef void* cudaStream_t;
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };
template <class F>
cudaError_t cudaFuncSetAttribute(F, cudaFuncAttribute, int bytes) { return bytes <= 227 * 1024 ? 0 : 1; }

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __shared__
#define __restrict__ __restrict

struct __nv_bfloat16 { uint16_t x; };
struct __nv_bfloat162 { __nv_bfloat16 x, y; };
struct float2 { float x, y; };
inline float2 make_float2(float a, float b) { return {a, b}; }
inline uint16_t emu_f2bf(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
inline float __uint_as_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
inline __nv_bfloat16 __float2bfloat16(float f) { return {emu_f2bf(f)}; }
inline float __bfloat162float(__nv_bfloat16 b) { return __uint_as_float((uint32_t)b.x << 16); }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {{emu_f2bf(a)}, {emu_f2bf(b)}}; }
inline float __expf(float x) { return expf(x); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }

namespace emu {

struct Copy { void* dst; const void* src; int n; bool valid; };
struct Thr {
    ucontext_t ctx;
    int tid = 0;
    int wait = 0;  // 0 runnable, 1 block barrier, 2 warp barrier
    uint64_t gen = 0;
    bool done = false;
    std::vector<Copy> pending;
    std::vector<Copy> committed;
    std::vector<char> stack;
};
struct Cta {
    int nthreads = 0;
    dim3 bid;
    std::vector<Thr> thr;
    uint64_t bgen = 0;
    int barrived = 0;
    uint64_t wgen[32] = {};
    int warrived[32] = {};
    std::vector<unsigned char> smem;
    const void* wptr[32][32];
    uint32_t wa[32][32][4];
    uint32_t wb[32][32][2];
    float wf[32][32];
};

inline ucontext_t g_sched;
inline Cta* g_cta = nullptr;
inline Thr* g_cur = nullptr;
inline dim3 g_grid, g_block;
inline const std::function<void()>* g_body = nullptr;
inline std::mt19937 g_rng(12345);
inline long g_syncs = 0;

inline dim3 tidx() { return dim3((unsigned)g_cur->tid % g_block.x, (unsigned)g_cur->tid / g_block.x, 0); }
inline dim3 bidx() { return g_cta->bid; }

inline void yield_() { swapcontext(&g_cur->ctx, &g_sched); }

inline void sync_block() {
    Cta& c = *g_cta;
    uint64_t g = c.bgen;
    ++g_syncs;
    if (++c.barrived == c.nthreads) {
        c.barrived = 0;
        c.bgen++;
        // let the others run first now and then, so no thread is always the last to arrive
        g_cur->wait = 0;
        yield_();
    } else {
        g_cur->wait = 1;
        g_cur->gen = g;
        yield_();
    }
}

inline void sync_warp() {
    Cta& c = *g_cta;
    int w = g_cur->tid / 32;
    uint64_t g = c.wgen[w];
    if (++c.warrived[w] == 32) {
        c.warrived[w] = 0;
        c.wgen[w]++;
    } else {
        g_cur->wait = 2;
        g_cur->gen = g;
        yield_();
    }
}

inline int lane() { return g_cur->tid & 31; }
inline int warp() { return g_cur->tid >> 5; }

template <class T>
inline T shfl(T v, int src_lane, bool keep) {
    Cta& c = *g_cta;
    float f;
    memcpy(&f, &v, 4);
    c.wf[warp()][lane()] = f;
    sync_warp();
    float r = keep ? f : c.wf[warp()][src_lane];
    sync_warp();
    T out;
    memcpy(&out, &r, 4);
    return out;
}

inline void ldsm(uint32_t (&r)[4], const void* p, bool trans) {
    Cta& c = *g_cta;
    const unsigned char* lo = c.smem.data();
    const unsigned char* hi = lo + c.smem.size();
    if ((const unsigned char*)p < lo || (const unsigned char*)p + 16 > hi || ((uintptr_t)p & 15)) {
        fprintf(stderr, "ldmatrix: row address outside shared memory or not 16-byte aligned (tid %d)\n", g_cur->tid);
        abort();
    }
    int w = warp(), l = lane();
    c.wptr[w][l] = p;
    sync_warp();
    for (int mi = 0; mi < 4; ++mi) {
        uint16_t e0, e1;
        if (!trans) {
            const uint16_t* row = (const uint16_t*)c.wptr[w][8 * mi + l / 4];
            e0 = row[2 * (l % 4)];
            e1 = row[2 * (l % 4) + 1];
        } else {
            e0 = ((const uint16_t*)c.wptr[w][8 * mi + 2 * (l % 4)])[l / 4];
            e1 = ((const uint16_t*)c.wptr[w][8 * mi + 2 * (l % 4) + 1])[l / 4];
        }
        r[mi] = (uint32_t)e0 | ((uint32_t)e1 << 16);
    }
    sync_warp();
}

inline float bf(uint32_t v, int half) { return __uint_as_float(half ? (v & 0xffff0000u) : (v << 16)); }

inline void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    Cta& c = *g_cta;
    int w = warp(), l = lane();
    for (int i = 0; i < 4; ++i) c.wa[w][l][i] = a[i];
    c.wb[w][l][0] = b0;
    c.wb[w][l][1] = b1;
    sync_warp();
    float A[16][16], B[16][8];
    for (int L = 0; L < 32; ++L) {
        int g = L / 4, t = L % 4;
        const uint32_t* fa = c.wa[w][L];
        for (int e = 0; e < 2; ++e) {
            A[g][2 * t + e] = bf(fa[0], e);
            A[g + 8][2 * t + e] = bf(fa[1], e);
            A[g][2 * t + 8 + e] = bf(fa[2], e);
            A[g + 8][2 * t + 8 + e] = bf(fa[3], e);
            B[2 * t + e][g] = bf(c.wb[w][L][0], e);
            B[2 * t + 8 + e][g] = bf(c.wb[w][L][1], e);
        }
    }
    int g = l / 4, t = l % 4;
    for (int i = 0; i < 4; ++i) {
        int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
        float acc = d[i];
        for (int kk = 0; kk < 16; ++kk) acc += A[row][kk] * B[kk][col];
        d[i] = acc;
    }
    sync_warp();
}

inline void cp_async(void* dst, const void* src, int n, bool valid) {
    Cta& c = *g_cta;
    unsigned char* lo = c.smem.data();
    if ((unsigned char*)dst < lo || (unsigned char*)dst + n > lo + c.smem.size() || ((uintptr_t)dst % n) ||
        (valid && ((uintptr_t)src % n))) {
        fprintf(stderr, "cp.async: bad or misaligned address (tid %d, %d bytes)\n", g_cur->tid, n);
        abort();
    }
    g_cur->pending.push_back({dst, src, n, valid});
}
inline void commit() {
    for (auto& cp : g_cur->pending) g_cur->committed.push_back(cp);
    g_cur->pending.clear();
}
inline void wait_all() {
    for (auto& cp : g_cur->committed) {
        if (cp.valid) memcpy(cp.dst, cp.src, cp.n);
        else memset(cp.dst, 0, cp.n);
    }
    g_cur->committed.clear();
}

inline void trampoline() {
    (*g_body)();
    g_cur->done = true;
    swapcontext(&g_cur->ctx, &g_sched);
}

inline void launch(dim3 grid, dim3 block, int smem_bytes, const std::function<void()>& body) {
    g_grid = grid;
    g_block = block;
    g_body = &body;
    const int n = (int)(block.x * block.y * block.z);
    for (unsigned bz = 0; bz < grid.z; ++bz)
        for (unsigned by = 0; by < grid.y; ++by)
            for (unsigned bx = 0; bx < grid.x; ++bx) {
                Cta cta;
                cta.nthreads = n;
                cta.bid = dim3(bx, by, bz);
                cta.smem.resize(smem_bytes > 0 ? smem_bytes : 1);
                for (size_t i = 0; i < cta.smem.size(); ++i) cta.smem[i] = (unsigned char)(0xff - (i & 1));  // NaN garbage
                cta.thr.resize(n);
                g_cta = &cta;
                for (int t = 0; t < n; ++t) {
                    Thr& th = cta.thr[t];
                    th.tid = t;
                    th.stack.resize(256 * 1024);
                    getcontext(&th.ctx);
                    th.ctx.uc_stack.ss_sp = th.stack.data();
                    th.ctx.uc_stack.ss_size = th.stack.size();
                    th.ctx.uc_link = nullptr;
                    makecontext(&th.ctx, (void (*)())trampoline, 0);
                }
                // Run one randomly chosen warp as far as it goes (until its threads wait at a block
                // barrier or exit) before switching: warps drift apart as far as the barriers allow,
                // so a missing __syncthreads shows up as a stale or NaN read.
                const int nwarps = (n + 31) / 32;
                auto ready = [&](int t) {
                    Thr& th = cta.thr[t];
                    return !th.done && (th.wait == 0 || (th.wait == 1 && cta.bgen > th.gen) ||
                                        (th.wait == 2 && cta.wgen[t / 32] > th.gen));
                };
                std::vector<int> lanes;
                for (;;) {
                    std::vector<int> live;
                    bool all_done = true;
                    for (int w = 0; w < nwarps; ++w) {
                        bool any = false;
                        for (int t = 32 * w; t < std::min(n, 32 * w + 32); ++t) {
                            if (!cta.thr[t].done) all_done = false;
                            if (ready(t)) any = true;
                        }
                        if (any) live.push_back(w);
                    }
                    if (all_done) break;
                    if (live.empty()) {
                        fprintf(stderr, "deadlock: threads wait on a barrier others never reach (block %u,%u,%u)\n", bx, by, bz);
                        abort();
                    }
                    const int w = live[g_rng() % live.size()];
                    for (bool progress = true; progress;) {
                        progress = false;
                        lanes.clear();
                        for (int t = 32 * w; t < std::min(n, 32 * w + 32); ++t) lanes.push_back(t);
                        std::shuffle(lanes.begin(), lanes.end(), g_rng);
                        for (int t : lanes) {
                            if (!ready(t)) continue;
                            Thr& th = cta.thr[t];
                            th.wait = 0;
                            g_cur = &th;
                            swapcontext(&g_sched, &th.ctx);
                            progress = true;
                        }
                    }
                }
                for (auto& th : cta.thr)
                    if (!th.pending.empty() || !th.committed.empty()) {
                        fprintf(stderr, "cp.async copies left unwaited at exit (tid %d)\n", th.tid);
                        abort();
                    }
                g_cta = nullptr;
            }
}

}  // namespace emu

#define threadIdx (emu::tidx())
#define blockIdx (emu::bidx())
inline void __syncthreads() { emu::sync_block(); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::sync_warp(); }
template <class T>
inline T __shfl_xor_sync(unsigned, T v, int m) { return emu::shfl(v, emu::lane() ^ m, false); }
template <class T>
inline T __shfl_up_sync(unsigned, T v, int off) {
    int l = emu::lane();
    return emu::shfl(v, l >= off ? l - off : l, l < off);
}
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
"""

EMU_HELPERS = r"""
inline void ldsm_x4(uint32_t (&r)[4], const void* p) { emu::ldsm(r, p, false); }
inline void ldsm_x4_t(uint32_t (&r)[4], const void* p) { emu::ldsm(r, p, true); }
inline void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) { emu::mma(d, a, b0, b1); }
inline void cp_async16(void* dst, const void* src, bool valid) { emu::cp_async(dst, src, 16, valid); }
inline void cp_async4(void* dst, const void* src, bool valid) { emu::cp_async(dst, src, 4, valid); }
inline void cp_async_commit() { emu::commit(); }
inline void cp_async_wait_all() { emu::wait_all(); }
inline uint32_t pack_bf16(float lo, float hi) { return (uint32_t)emu_f2bf(lo) | ((uint32_t)emu_f2bf(hi) << 16); }
inline float bf16_lo(uint32_t v) { return __uint_as_float(v << 16); }
inline float bf16_hi(uint32_t v) { return __uint_as_float(v & 0xffff0000u); }
"""

EMU_DRIVER = r"""
int main(int argc, char** argv) {
    if (argc < 5) return 2;
    FILE* f = fopen(argv[1], "rb");
    int hdr[4];
    if (fread(hdr, 4, 4, f) != 4) return 3;
    const int B = hdr[0], T = hdr[1], H = hdr[2], HV = hdr[3];
    const long off = atol(argv[3]);
    emu::g_rng.seed((unsigned)atol(argv[4]));
    const size_t nq = (size_t)B * T * H * 128, nv = (size_t)B * T * HV * 128, ng = (size_t)B * T * HV,
                 ns = (size_t)B * HV * 128 * 128;
    auto alloc = [&](size_t bytes, size_t elem) { return (char*)aligned_alloc(256, (bytes + 511) / 256 * 256) + off * elem; };
    uint16_t* q = (uint16_t*)alloc(nq * 2, 2); uint16_t* k = (uint16_t*)alloc(nq * 2, 2);
    uint16_t* v = (uint16_t*)alloc(nv * 2, 2); uint16_t* o = (uint16_t*)alloc(nv * 2, 2);
    float* g = (float*)alloc(ng * 4, 4); float* beta = (float*)alloc(ng * 4, 4); float* st = (float*)alloc(ns * 4, 4);
    size_t ok = fread(q, 2, nq, f) + fread(k, 2, nq, f) + fread(v, 2, nv, f) + fread(g, 4, ng, f) + fread(beta, 4, ng, f);
    fclose(f);
    if (ok != 2 * nq + nv + 2 * ng) return 4;
    for (size_t i = 0; i < nv; ++i) o[i] = 0xffff;
    for (size_t i = 0; i < ns; ++i) st[i] = NAN;
    cudaError_t e = gdn((const __nv_bfloat16*)q, (const __nv_bfloat16*)k, (const __nv_bfloat16*)v, g, beta,
                        (__nv_bfloat16*)o, st, B, T, H, HV, nullptr);
    FILE* w = fopen(argv[2], "wb");
    fwrite(o, 2, nv, w); fwrite(st, 4, ns, w); fclose(w);
    fprintf(stderr, "block barriers: %ld\n", emu::g_syncs);
    return e;
}
"""


def emulation_source(cu_source: str) -> str:
    """A host C++ translation unit: the emulation prelude, the kernel file with its PTX helpers, CUDA
    includes, dynamic shared memory and launches swapped for emulated ones, and a driver main()."""
    src = re.sub(r"^\s*#\s*include\s*<cuda[^>]*>\s*$", "", cu_source, flags=re.M)
    if "// ---- ptx helpers begin ----" in src:
        a, b = src.index("// ---- ptx helpers begin ----"), src.index("// ---- ptx helpers end ----")
        src = src[:a] + EMU_HELPERS + src[b:]
    src = re.sub(r"extern\s+__shared__[^;]*?\b(\w+)\s*\[\s*\]\s*;", r"unsigned char* \1 = emu::g_cta->smem.data();", src)
    src = re.sub(r"__shared__\s+(\w+)\s+(\w+)\s*\[([^\]]+)\]\s*;", r"static \1 \2[\3];", src)  # blocks run one by one
    src = re.sub(r"(\w+(?:<\w+>)?)\s*<<<([^>]*)>>>\s*\(([^;]*)\);",
                 lambda m: "emu::launch(" + ", ".join(x.strip() for x in m.group(2).split(",")[:3]) +
                 ", [&]() { " + m.group(1) + "(" + m.group(3) + "); });", src)
    return EMU_PRELUDE + "\n" + src + EMU_DRIVER


def build_emulated(cu_source: str, exe: Path) -> Path:
    tu = exe.with_suffix(".cpp")
    tu.write_text(emulation_source(cu_source))
    r = subprocess.run(["g++", "-std=c++17", "-O2", "-fno-strict-aliasing", "-w", "-o", str(exe), str(tu)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    return exe


@pytest.fixture(scope="module")
def emu_dir(tmp_path_factory):
    if not HAS_GXX:
        pytest.skip("g++ not on PATH")
    return tmp_path_factory.mktemp("gdn_emu")


@pytest.fixture(scope="module")
def emu_exes(emu_dir):
    return emu_dir, {name: build_emulated((WL_DIR / f"{name}.cu").read_text(), emu_dir / f"{name}_emu")
                     for name in ("naive", "expert")}


def run_emulated(exe, wd, inputs, shape, offset=0, seed=1):
    b, t, h, hv = shape["B"], shape["T"], shape["H"], shape["HV"]
    fin, fout = wd / f"in_{exe.name}.bin", wd / f"out_{exe.name}.bin"
    with open(fin, "wb") as f:
        f.write(np.array([b, t, h, hv], dtype=np.int32).tobytes())
        for n in ("q", "k", "v"):
            f.write(inputs[n].contiguous().view(torch.int16).numpy().tobytes())
        for n in ("g", "beta"):
            f.write(inputs[n].contiguous().numpy().astype(np.float32).tobytes())
    r = subprocess.run([str(exe), str(fin), str(fout), str(offset), str(seed)], capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, f"emulated kernel failed ({r.returncode}): {r.stderr[-2000:]}"
    raw = fout.read_bytes()
    nv = b * t * hv * 128
    o = torch.frombuffer(bytearray(raw[:2 * nv]), dtype=torch.bfloat16).reshape(b, t, hv, 128)
    st = torch.frombuffer(bytearray(raw[2 * nv:]), dtype=torch.float32).reshape(b, hv, 128, 128)
    return {"o": o, "state": st}


# every probe shape but the 2048-token one (32 s emulated; the chunk algorithm test covers its length)
EMU_SHAPES = [s for s in load_workload(WL_DIR).probe_shapes if s["T"] <= 300]


@pytest.mark.parametrize("shape", EMU_SHAPES, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_expert_kernel_emulated(wl, emu_exes, shape):
    wd, exes = emu_exes
    ins = wl.make_inputs(shape, 2)
    ref = wl.reference(ins, shape)
    out = run_emulated(exes["expert"], wd, ins, shape, offset=shape.get("offset", 0), seed=shape["T"])
    for n in ("o", "state"):
        c = compare(out[n], ref[n], wl.tolerance)
        assert c.ok, (n, c.reason)


@pytest.mark.parametrize("shape", [{"B": 1, "T": 17, "H": 2, "HV": 6}, {"B": 1, "T": 130, "H": 2, "HV": 2, "offset": 1}],
                         ids=["T17", "T130-offset1"])
def test_naive_kernel_emulated(wl, emu_exes, shape):
    wd, exes = emu_exes
    ins = wl.make_inputs(shape, 2)
    ref = wl.reference(ins, shape)
    out = run_emulated(exes["naive"], wd, ins, shape, offset=shape.get("offset", 0))
    for n in ("o", "state"):
        c = compare(out[n], ref[n], wl.tolerance)
        assert c.ok and c.matched_fraction == 1.0, (n, c.reason)  # fp32 token by token: far inside


@pytest.mark.parametrize("name", [n for n, _ in LADDER])
def test_ladder_rung_emulated(wl, emu_dir, name):
    """Every rung computes the same thing: a partial tail chunk, GVA ratio 3, misaligned bases."""
    exe = build_emulated(_path(name).read_text(), emu_dir / f"rung_{name[:2]}")
    for shape in ({"B": 2, "T": 70, "H": 1, "HV": 3, "offset": 3}, {"B": 1, "T": 130, "H": 2, "HV": 2}):
        ins = wl.make_inputs(shape, 1)
        ref = wl.reference(ins, shape)
        out = run_emulated(exe, emu_dir, ins, shape, offset=shape.get("offset", 0), seed=11)
        for n in ("o", "state"):
            c = compare(out[n], ref[n], wl.tolerance)
            assert c.ok, (name, shape, n, c.reason)


MUTANTS = {
    "state update reads K untransposed": ("ldsm_x4_t(a, cK + (ks * 16", "ldsm_x4(a, cK + (ks * 16"),
    "no barrier between U and its readers": ("__syncthreads();  // U visible", ""),
    "no barrier after the decay scan": ("__syncthreads();  // sGc visible", ""),
    "no wait for the staged chunk": ("if (kAsync) cp_async_wait_all();", "if (kAsync) {}"),
}


@pytest.mark.parametrize("mutant", list(MUTANTS))
def test_emulation_catches_broken_kernels(wl, emu_dir, mutant):
    """The emulation is worth trusting only if it fails kernels with the bugs it is meant to catch:
    a wrong ldmatrix form, a missing barrier, a read before cp.async lands."""
    wd = emu_dir
    before, after = MUTANTS[mutant]
    src = (WL_DIR / "expert.cu").read_text()
    assert src.count(before) == 1
    exe = build_emulated(src.replace(before, after), wd / "mutant")
    shape = {"B": 1, "T": 130, "H": 2, "HV": 2}
    ins = wl.make_inputs(shape, 0)
    ref = wl.reference(ins, shape)
    try:
        out = run_emulated(exe, wd, ins, shape, seed=5)
    except AssertionError:
        return  # the emulator stopped it (unwaited copies, deadlock, bad address)
    assert not all(compare(out[n], ref[n], wl.tolerance).ok for n in ("o", "state"))
