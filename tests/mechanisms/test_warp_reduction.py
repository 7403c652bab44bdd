"""warp_reduction: warp-shuffle reductions <-> a shared-memory exchange inside the warp."""
from pathlib import Path

import pytest

from klineage.mechanisms.base import Feature, Kernel
from klineage.mechanisms.families.warp_reduction import WarpReduction

from mechtest import assert_compiles, dedent, keys

M = WarpReduction()
ROOT = Path(__file__).resolve().parents[2]

WARP_SUM = dedent("""
    #include <cuda_runtime.h>

    __device__ __forceinline__ float warp_sum(float v) {
    #pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        return v;
    }

    __global__ void row_sum(const float* x, float* out, int cols) {
        const float* row = x + (size_t)blockIdx.x * cols;
        float s = 0.f;
        for (int c = threadIdx.x; c < cols; c += 32) s += row[c];
        s = warp_sum(s);
        if (threadIdx.x == 0) out[blockIdx.x] = s;
    }

    extern "C" cudaError_t entry(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
        row_sum<<<rows, 32, 0, stream>>>(x, out, cols);
        return cudaGetLastError();
    }
""")

DEOPT_WARP_SUM = dedent("""
    __device__ __forceinline__ float warp_sum(float v) {
        __shared__ float kl_warp_red[1024];
        const unsigned int kl_t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    #pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            kl_warp_red[kl_t] = v;
            __syncwarp();
            v += kl_warp_red[kl_t ^ o];
            __syncwarp();
        }
        return v;
    }
""")

MIXED = dedent("""
    #include <cuda_runtime.h>

    #define FULL 0xffffffffu

    __device__ __forceinline__ float warp_max(float v) { for (int o = 1; o < 32; o <<= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o)); return v; }

    __global__ void reduce(const float* x, float* sum, float* mx, int* cnt, int n) {
        const int i = blockIdx.x * blockDim.x + threadIdx.x;
        float v = i < n ? x[i] : 0.f;
        int c = i < n;
        for (int o = 16; o > 0; o /= 2) {
            v += __shfl_down_sync(FULL, v, o);
        }
        const unsigned mask = 0xffffffffu;
        c += __shfl_down_sync(mask, c, 16);
        c += __shfl_down_sync(mask, c, 8);
        c += __shfl_down_sync(mask, c, 4);
        c += __shfl_down_sync(mask, c, 2);
        c += __shfl_down_sync(mask, c, 1);
        float m = warp_max(v);
        if ((threadIdx.x & 31) == 0) { atomicAdd(sum, v); atomicAdd(cnt, c); mx[blockIdx.x] = m; }
    }

    extern "C" cudaError_t entry(const float* x, float* sum, float* mx, int* cnt, int n, cudaStream_t stream) {
        reduce<<<(n + 255) / 256, 256, 0, stream>>>(x, sum, mx, cnt, n);
        return cudaGetLastError();
    }
""")
MIXED_LOCI = {
    ("warp_reduction", "warp_max:shfl_xor:v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o))"),
    ("warp_reduction", "reduce:shfl_down:v += __shfl_down_sync(FULL, v, o)"),
    ("warp_reduction", "reduce:shfl_down:c += __shfl_down_sync(mask, c, 16)"),
}

NOT_REDUCTIONS = dedent("""
    #include <cuda_runtime.h>

    __global__ void scan(const float* x, float* y, float* z, int n) {
        const int i = blockIdx.x * blockDim.x + threadIdx.x;
        const int lane = threadIdx.x & 31;
        float v = i < n ? x[i] : 0.f;
        for (int o = 1; o < 32; o <<= 1) {           // inclusive scan: shfl_up, guarded
            float t = __shfl_up_sync(0xffffffffu, v, o);
            if (lane >= o) v += t;
        }
        float b = __shfl_sync(0xffffffffu, v, 0);     // broadcast
        float w = 0.f;
        for (int o = 32; o > 0; o >>= 1) w += __shfl_xor_sync(0xffffffffu, v, o);  // offset 32 leaves the warp
    #if 0
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    #endif
        if (i < n) { y[i] = v + b; z[i] = w; }
    }

    extern "C" cudaError_t entry(const float* x, float* y, float* z, int n, cudaStream_t stream) {
        scan<<<(n + 255) / 256, 256, 0, stream>>>(x, y, z, n);
        return cudaGetLastError();
    }
""")


def _feature(src, locus):
    return next(f for f in M.detect(Kernel(src)) if f.locus == locus)


def test_detects_butterfly_tree_and_unrolled_reductions():
    assert keys(M, WARP_SUM) == {("warp_reduction", "warp_sum:shfl_xor:v += __shfl_xor_sync(0xffffffffu, v, o)")}
    f = M.detect(Kernel(WARP_SUM))[0]
    assert f.anchor == "warp reduction" and f.lines == (4, 5)  # the #pragma unroll belongs to it
    assert keys(M, MIXED) == MIXED_LOCI
    unrolled = _feature(MIXED, "reduce:shfl_down:c += __shfl_down_sync(mask, c, 16)")
    assert unrolled.info()["form"] == "unrolled" and unrolled.info()["steps"] == 5


def test_scans_broadcasts_wide_offsets_and_dead_code_are_not_reductions():
    assert keys(M, NOT_REDUCTIONS) == set()


def test_deoptimize_text_keeps_loop_order_and_operator():
    f = M.detect(Kernel(WARP_SUM))[0]
    r = M.deoptimize(Kernel(WARP_SUM), f)
    assert r.ok
    assert DEOPT_WARP_SUM in r.source
    assert "__shfl" not in r.source
    assert r.before.endswith("for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);")
    assert "v += kl_warp_red[kl_t ^ o];" in r.after
    assert keys(M, r.source) == set()


def test_deoptimize_tree_reduction_reads_own_slot_past_the_warp_end():
    r = M.deoptimize(Kernel(MIXED), _feature(MIXED, "reduce:shfl_down:v += __shfl_down_sync(FULL, v, o)"))
    assert "v += kl_warp_red[(kl_t & 31) + o < 32 ? kl_t + o : kl_t];" in r.source
    assert "__syncwarp(FULL);" in r.source  # a named mask is kept
    fmax = "warp_max:shfl_xor:v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o))"
    r = M.deoptimize(Kernel(MIXED), _feature(MIXED, fmax))
    assert "v = fmaxf(v, kl_warp_red[kl_t ^ o]); __syncwarp(); }" in r.source
    r = M.deoptimize(Kernel(MIXED), _feature(MIXED, "reduce:shfl_down:c += __shfl_down_sync(mask, c, 16)"))
    assert "__shared__ int kl_warp_red[1024];" in r.source  # the buffer has the value's type
    assert r.source.count("__syncwarp(mask)") == 10


@pytest.mark.nvcc
@pytest.mark.parametrize("src", [WARP_SUM, MIXED], ids=["warp_sum", "mixed"])
def test_each_reduction_roundtrips_and_compiles(src):
    for f in M.detect(Kernel(src)):
        r = M.deoptimize(Kernel(src), f)
        assert r.ok, r
        assert keys(M, r.source) == keys(M, src) - {f.key}  # the others keep their loci
        assert_compiles(r.source)
        back = M.reoptimize(Kernel(r.source), f.locus, r.config)
        assert back.ok and back.source == src, f.locus


@pytest.mark.nvcc
def test_all_removed_in_one_function_get_their_own_buffers():
    src, configs = MIXED, []
    for locus in sorted(loc for _, loc in MIXED_LOCI):
        r = M.deoptimize(Kernel(src), _feature(src, locus))
        configs.append((locus, r.config))
        src = r.source
    assert "kl_warp_red_2" in src and keys(M, src) == set()
    assert_compiles(src)
    for order in (configs, list(reversed(configs))):
        cur = src
        for locus, cfg in order:
            cur = M.reoptimize(Kernel(cur), locus, cfg).source
        assert cur == MIXED


@pytest.mark.nvcc
def test_reoptimize_natural_canonical_form():
    r = M.deoptimize(Kernel(WARP_SUM), M.detect(Kernel(WARP_SUM))[0])
    nat = M.reoptimize(Kernel(r.source))  # no configuration: mask 0xffffffffu for __syncwarp()
    assert nat.ok and nat.source == WARP_SUM
    assert nat.locus == "warp_sum:shfl_xor:v += __shfl_xor_sync(0xffffffffu, v, o)"
    r = M.deoptimize(Kernel(MIXED), _feature(MIXED, "reduce:shfl_down:v += __shfl_down_sync(FULL, v, o)"))
    nat = M.reoptimize(Kernel(r.source))
    assert "for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(FULL, v, o);" in nat.source
    assert "kl_warp_red" not in nat.source
    assert keys(M, nat.source) == MIXED_LOCI
    assert_compiles(nat.source)


def test_not_applicable_cases():
    narrow = WARP_SUM.replace("__shfl_xor_sync(0xffffffffu, v, o)", "__shfl_xor_sync(0xffffffffu, v, o, 16)")
    r = M.deoptimize(Kernel(narrow), M.detect(Kernel(narrow))[0])
    assert not r.ok and "width" in r.reason
    active = WARP_SUM.replace("0xffffffffu", "__activemask()")
    r = M.deoptimize(Kernel(active), M.detect(Kernel(active))[0])
    assert not r.ok and "mask" in r.reason
    guarded = WARP_SUM.replace("#pragma unroll\n    for", "    if (blockDim.x >= 32) for")
    r = M.deoptimize(Kernel(guarded), M.detect(Kernel(guarded))[0])
    assert not r.ok and "body of another statement" in r.reason
    assert not M.deoptimize(Kernel(WARP_SUM), Feature("warp_reduction", "warp_sum:shfl_xor:nope", (0, 0))).ok
    assert not M.reoptimize(Kernel(WARP_SUM)).ok  # nothing in the canonical shared form


def _expert(name):
    return (ROOT / "expert_kernels" / name / "expert.cu").read_text()


@pytest.mark.nvcc
def test_row_sum_expert():
    src = _expert("row_sum")
    locus = "warp_sum:shfl_xor:v += __shfl_xor_sync(0xffffffffu, v, o)"
    assert keys(M, src) == {("warp_reduction", locus)}
    r = M.deoptimize(Kernel(src), _feature(src, locus))
    assert r.ok and "__shared__ float kl_warp_red[1024];" in r.source
    assert keys(M, r.source) == set()
    assert_compiles(r.source)
    assert M.reoptimize(Kernel(r.source), locus, r.config).source == src
    assert M.reoptimize(Kernel(r.source)).source == src


def test_swiglu_expert_has_no_warp_reduction():
    assert keys(M, _expert("swiglu")) == set()
