"""cache_hint, fast_math, launch_bounds, unroll, restrict: before/after on real snippets, every
rewrite compiled with nvcc, detectors present/absent, exact roundtrips."""
from pathlib import Path

import pytest

from klineage.mechanisms.base import Applied, Kernel, NotApplicable
from klineage.mechanisms.families.cache_hint import CacheHint
from klineage.mechanisms.families.fast_math import FastMath
from klineage.mechanisms.families.launch_bounds import LaunchBounds
from klineage.mechanisms.families.restrict import Restrict
from klineage.mechanisms.families.unroll import Unroll

from mechtest import assert_compiles, dedent, keys

ROOT = Path(__file__).resolve().parents[2]

SNIPPET = dedent(r'''
    #include <cuda_runtime.h>
    #define MODE 0
    #ifndef BLOCK
    #define BLOCK 256
    #endif
    __device__ __forceinline__ float load1(const float* p) {
    #if MODE == 1
        return __ldcs(p);
    #else
        return __ldg(p);
    #endif
    }
    __global__ void __launch_bounds__(BLOCK)
    scale_exp(const float* __restrict__ x, float* __restrict__ y, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        float acc = 0.f;
    #pragma unroll
        for (int k = 0; k < 4; ++k) {
            int j = i * 4 + k;
            if (j < n) acc += __expf(load1(x + j)) * rsqrtf(1.0f + (float)k);
        }
        if (i < n) __stcs(y + i, __fdividef(acc, 4.0f));
    }
    extern "C" cudaError_t entry(const float* x, float* y, int n, cudaStream_t stream) {
        scale_exp<<<(n + BLOCK - 1) / BLOCK, BLOCK, 0, stream>>>(x, y, n);
        return cudaGetLastError();
    }
''')

PLAIN = dedent(r'''
    #include <cuda_runtime.h>
    __global__ void plain(const float* x, float* y, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        float acc = 0.f;
        for (int k = 0; k < 4; ++k) acc += expf(x[i * 4 + k]);
        if (i < n) y[i] = acc;
    }
    extern "C" cudaError_t entry(const float* x, float* y, int n, cudaStream_t stream) {
        int block = 128;
        plain<<<(n + block - 1) / block, block, 0, stream>>>(x, y, n);
        return cudaGetLastError();
    }
''')

CASES = [
    (CacheHint(), {("cache_hint", "load1:__ldg:p"), ("cache_hint", "scale_exp:__stcs:y + i")}),
    (FastMath(), {("fast_math", "scale_exp:__expf"), ("fast_math", "scale_exp:rsqrtf"),
                  ("fast_math", "scale_exp:__fdividef")}),
    (LaunchBounds(), {("launch_bounds", "scale_exp:launch_bounds")}),
    (Unroll(), {("unroll", "scale_exp:loop:for (int k = 0; k < 4; ++k)")}),
    (Restrict(), {("restrict", "scale_exp:params")}),
]


@pytest.mark.parametrize("mech,expected", CASES, ids=[m.NAME for m, _ in CASES])
def test_detector_present_on_snippet_absent_on_plain(mech, expected):
    assert keys(mech, SNIPPET) == expected
    assert keys(mech, PLAIN) == set()


@pytest.mark.nvcc
@pytest.mark.parametrize("mech,expected", CASES, ids=[m.NAME for m, _ in CASES])
def test_deoptimize_removes_exactly_one_compiles_and_roundtrips(mech, expected):
    k = Kernel(SNIPPET)
    for feat in mech.detect(k):
        res = mech.deoptimize(k, feat)
        assert isinstance(res, Applied), res
        assert keys(mech, res.source) == expected - {feat.key}
        assert_compiles(res.source)
        back = mech.reoptimize(Kernel(res.source), feat.locus, res.config)
        assert isinstance(back, Applied) and back.source == SNIPPET


def test_deoptimize_text():
    k = Kernel(SNIPPET)
    ch = CacheHint()
    store = next(f for f in ch.detect(k) if "__stcs" in f.locus)
    assert "*(y + i) = (__fdividef(acc, 4.0f));" in ch.deoptimize(k, store).source
    load = next(f for f in ch.detect(k) if "__ldg" in f.locus)
    out = ch.deoptimize(k, load).source
    assert "return *p;" in out and "return __ldcs(p);" in out  # the dead branch is left alone
    fm = FastMath()
    out = fm.deoptimize(k, next(f for f in fm.detect(k) if f.locus.endswith("rsqrtf"))).source
    assert "(1.0f / sqrtf(1.0f + (float)k))" in out
    un = Unroll()
    assert "#pragma unroll 1\n" in un.deoptimize(k, un.detect(k)[0]).source
    lb = LaunchBounds()
    assert "__launch_bounds__" not in lb.deoptimize(k, lb.detect(k)[0]).source
    r = Restrict()
    assert "__restrict__" not in r.deoptimize(k, r.detect(k)[0]).source


@pytest.mark.nvcc
def test_reoptimize_on_natural_code_compiles():
    k = Kernel(PLAIN)
    for mech, expect in ((CacheHint(), "__ldg(x + (i * 4 + k))"), (FastMath(), "__expf(x[i * 4 + k])"),
                         (LaunchBounds(), "__launch_bounds__(128)"), (Unroll(), "#pragma unroll\n"),
                         (Restrict(), "const float* __restrict__ x, float* __restrict__ y")):
        res = mech.reoptimize(k)
        assert isinstance(res, Applied), (mech.NAME, res)
        assert expect in res.source, (mech.NAME, res.source)
        assert len(mech.detect(Kernel(res.source))) == 1
        assert_compiles(res.source)


def test_not_applicable_is_a_result_not_an_exception():
    k = Kernel(PLAIN)
    from klineage.mechanisms.base import Feature
    ghost = Feature("cache_hint", "plain:__ldg:x", (1, 1))
    assert isinstance(CacheHint().deoptimize(k, ghost), NotApplicable)
    assert isinstance(LaunchBounds().deoptimize(k, Feature("launch_bounds", "plain:launch_bounds", (1, 1))),
                      NotApplicable)
    assert isinstance(Unroll().reoptimize(Kernel("__global__ void k(float* x, int n) { for (int i = 0; i < n; ++i) x[i] = 0; }")),
                      NotApplicable)


def test_real_experts_roundtrip():
    for path in ("expert_kernels/row_sum/expert.cu", "expert_kernels/swiglu/expert.cu"):
        src = (ROOT / path).read_text()
        k = Kernel(src)
        for mech in (CacheHint(), FastMath(), LaunchBounds(), Unroll(), Restrict()):
            for feat in mech.detect(k):
                res = mech.deoptimize(k, feat)
                assert isinstance(res, Applied), (path, feat)
                assert mech.reoptimize(Kernel(res.source), feat.locus, res.config).source == src
