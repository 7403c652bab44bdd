"""coarsening: compile-time per-thread counts (UNROLL, ITEMS_PER_THREAD, ...) <-> 1."""
from pathlib import Path

import pytest

from klineage.mechanisms.base import Feature, Kernel
from klineage.mechanisms.families.coarsening import Coarsening

from mechtest import assert_compiles, dedent, keys

M = Coarsening()
ROOT = Path(__file__).resolve().parents[2]

SAXPY = dedent("""
    #include <cuda_runtime.h>

    #ifndef BLOCK
    #define BLOCK 256
    #endif
    #ifndef ITEMS_PER_THREAD
    #define ITEMS_PER_THREAD 4   // elements in flight per thread
    #endif
    #if 0
    #define VEC_PER_THREAD 8
    #else
    #define VEC_PER_THREAD 2
    #endif
    #define HOST_UNROLL 8        // only used by host code
    constexpr int kIlp = 1;      // already off

    __global__ void saxpy(float a, const float* x, float* y, int n) {
        const int base = blockIdx.x * BLOCK * ITEMS_PER_THREAD + threadIdx.x;
        float v[ITEMS_PER_THREAD];
    #pragma unroll
        for (int k = 0; k < ITEMS_PER_THREAD; ++k) {
            const int i = base + k * BLOCK;
            v[k] = i < n ? x[i] : 0.f;
        }
    #pragma unroll
        for (int k = 0; k < ITEMS_PER_THREAD; ++k) {
            const int i = base + k * BLOCK;
            if (i < n) y[i] = a * v[k] + y[i] * VEC_PER_THREAD * kIlp;
        }
    }

    extern "C" cudaError_t entry(float a, const float* x, float* y, int n, cudaStream_t stream) {
        int tile = BLOCK * ITEMS_PER_THREAD;
        for (int r = 0; r < HOST_UNROLL; ++r) (void)r;
        saxpy<<<(n + tile - 1) / tile, BLOCK, 0, stream>>>(a, x, y, n);
        return cudaGetLastError();
    }
""")

TEMPLATED = dedent("""
    #include <cuda_runtime.h>

    constexpr int kVecPerThread = 2;
    #define COARSEN 4

    template <int PER>
    __device__ __forceinline__ float sum_items(const float* p, int stride) {
        float s = 0.f;
        for (int k = 0; k < PER; ++k) s += p[k * stride];
        return s;
    }

    template <int BLOCK, int N, int UNROLL = 4>
    __global__ void rsum(const float* x, float* out, int n) {
        const int i = blockIdx.x * BLOCK * N + threadIdx.x;
        float acc[UNROLL];
        for (int u = 0; u < UNROLL; ++u) acc[u] = 0.f;
        if (i + (N - 1) * BLOCK < n) acc[0] = sum_items<N>(x + i, BLOCK);
        out[blockIdx.x * BLOCK + threadIdx.x] = acc[0];
    }

    extern "C" cudaError_t entry(const float* x, float* out, int n, cudaStream_t stream) {
        rsum<128, COARSEN><<<n / (128 * COARSEN), 128, 0, stream>>>(x, out, n);
        rsum<128, kVecPerThread><<<n / 256, 128, 0, stream>>>(x, out, n);
        return cudaGetLastError();
    }
""")

ZERO = dedent("""
    #include <cuda_runtime.h>

    #define UNROLL 4
    __global__ void halves(const float* x, float* y) {
        float h[UNROLL / 2];
        for (int k = 0; k < UNROLL / 2; ++k) h[k] = x[threadIdx.x * UNROLL + k];
        y[threadIdx.x] = h[0];
    }

    extern "C" cudaError_t entry(const float* x, float* y, cudaStream_t stream) {
        halves<<<1, 32, 0, stream>>>(x, y);
        return cudaGetLastError();
    }
""")


def test_detects_used_per_thread_counts_only():
    # BLOCK is not a per-thread count, HOST_UNROLL is used by host code only, kIlp is already 1, and the
    # dead `#define VEC_PER_THREAD 8` does not count (the live one is 2, used in kernel arithmetic only)
    assert keys(M, SAXPY) == {("coarsening", "ITEMS_PER_THREAD")}
    f = M.detect(Kernel(SAXPY))[0]
    assert f.lines == (7, 7) and f.info()["value"] == 4 and f.info()["uses"] == "extent,loop"
    assert f.anchor == "per-thread count"


def test_follows_template_arguments_and_defaults():
    assert keys(M, TEMPLATED) == {("coarsening", "kVecPerThread"), ("coarsening", "COARSEN"),
                                  ("coarsening", "rsum:UNROLL")}
    info = {f.locus: f.info() for f in M.detect(Kernel(TEMPLATED))}
    assert info["COARSEN"]["functions"] == "sum_items"  # rsum<128, COARSEN> -> N -> sum_items<N> -> loop
    assert info["rsum:UNROLL"]["form"] == "template default"


def test_deoptimize_sets_one_and_records_the_value():
    r = M.deoptimize(Kernel(SAXPY), Feature("coarsening", "ITEMS_PER_THREAD", (0, 0)))
    assert r.ok and r.config["value"] == "4"
    assert r.before == "#define ITEMS_PER_THREAD 4   // elements in flight per thread"
    assert r.after == "#define ITEMS_PER_THREAD 1   // elements in flight per thread"
    assert r.source == SAXPY.replace("ITEMS_PER_THREAD 4 ", "ITEMS_PER_THREAD 1 ")
    assert keys(M, r.source) == set()


@pytest.mark.nvcc
@pytest.mark.parametrize("src", [SAXPY, TEMPLATED], ids=["saxpy", "templated"])
def test_roundtrip_and_compile(src):
    for f in M.detect(Kernel(src)):
        r = M.deoptimize(Kernel(src), f)
        assert r.ok, r
        assert keys(M, r.source) == keys(M, src) - {f.key}
        assert_compiles(r.source)
        back = M.reoptimize(Kernel(r.source), f.locus, r.config)
        assert back.ok and back.source == src


def test_reoptimize_natural_code_defaults_to_four():
    src = SAXPY.replace("ITEMS_PER_THREAD 4 ", "ITEMS_PER_THREAD 1 ")
    r = M.reoptimize(Kernel(src))
    assert r.ok and r.locus == "ITEMS_PER_THREAD" and r.source == SAXPY
    r = M.reoptimize(Kernel(src), "ITEMS_PER_THREAD", {"value": 8})
    assert "#define ITEMS_PER_THREAD 8 " in r.source
    assert not M.reoptimize(Kernel(src), "ITEMS_PER_THREAD", {"value": 1}).ok
    assert not M.reoptimize(Kernel(SAXPY)).ok  # nothing at 1 that kernel code uses


def test_not_applicable_when_an_extent_would_be_zero():
    assert keys(M, ZERO) == {("coarsening", "UNROLL")}
    r = M.deoptimize(Kernel(ZERO), M.detect(Kernel(ZERO))[0])
    assert not r.ok and "zero-length" in r.reason
    assert not M.deoptimize(Kernel(SAXPY), Feature("coarsening", "NOPE", (0, 0))).ok


def _expert(name):
    return (ROOT / "expert_kernels" / name / "expert.cu").read_text()


@pytest.mark.nvcc
@pytest.mark.parametrize("name,loci", [("row_sum", {"ROW_SUM_WARP_UNROLL", "ROW_SUM_UNROLL"}),
                                       ("swiglu", {"SWIGLU_UNROLL"})])
def test_expert_kernels(name, loci):
    src = _expert(name)
    assert keys(M, src) == {("coarsening", loc) for loc in loci}
    for f in M.detect(Kernel(src)):
        r = M.deoptimize(Kernel(src), f)
        assert r.ok and r.after.startswith(f"#define {f.locus} 1 ")
        assert keys(M, r.source) == keys(M, src) - {f.key}
        assert_compiles(r.source)
        assert M.reoptimize(Kernel(r.source), f.locus, r.config).source == src
