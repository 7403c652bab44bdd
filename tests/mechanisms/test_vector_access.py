"""vector_access: vector-typed global loads/stores <-> per-component scalar helpers."""
from pathlib import Path

import pytest

from klineage.mechanisms.base import Feature, Kernel
from klineage.mechanisms.families.cache_hint import CacheHint
from klineage.mechanisms.families.vector_access import VectorAccess

from mechtest import assert_compiles, dedent, keys

M = VectorAccess()
ROOT = Path(__file__).resolve().parents[2]

FLOAT4 = dedent("""
    #include <cuda_runtime.h>

    // out = 2 * in, four floats per thread
    __global__ void scale4(const float4* __restrict__ in, float4* __restrict__ out, int nvec) {
        const int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i >= nvec) return;
        float4 v = in[i];
        v.x *= 2.f; v.y *= 2.f; v.z *= 2.f; v.w *= 2.f;
        out[i] = v;
    }

    extern "C" cudaError_t entry(const float* in, float* out, int n, cudaStream_t stream) {
        const int nvec = n / 4;
        scale4<<<(nvec + 255) / 256, 256, 0, stream>>>(reinterpret_cast<const float4*>(in),
                                                      reinterpret_cast<float4*>(out), nvec);
        return cudaGetLastError();
    }
""")

FLOAT2_INT4 = dedent("""
    #include <cuda_runtime.h>

    __device__ __forceinline__ float2 load2(const float2* p, int i) { return *(p + i); }

    __global__ void mix(const float* a, const int* b, float2* out2, int4* out4, int n) {
        const int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i >= n) return;
        const int4* q = reinterpret_cast<const int4*>(b);
        int4 w = q[i];
        float2 f = load2(reinterpret_cast<const float2*>(a), i);
        *(out2 + i) = f;
        w.x += 1;
        out4[i] = w;
    }

    extern "C" cudaError_t entry(const float* a, const int* b, float* o2, int* o4, int n, cudaStream_t stream) {
        mix<<<(n + 127) / 128, 128, 0, stream>>>(a, b, reinterpret_cast<float2*>(o2),
                                                 reinterpret_cast<int4*>(o4), n);
        return cudaGetLastError();
    }
""")

HALF2 = dedent("""
    #include <cuda_runtime.h>
    #include <cuda_fp16.h>

    __global__ void hadd(const half2* __restrict__ x, half2* __restrict__ y, int n2) {
        const int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n2) {
            half2 v = x[i];
            y[i] = __hadd2(v, v);
        }
    }

    extern "C" cudaError_t entry(const __half* x, __half* y, int n, cudaStream_t stream) {
        hadd<<<(n / 2 + 255) / 256, 256, 0, stream>>>(reinterpret_cast<const half2*>(x),
                                                     reinterpret_cast<half2*>(y), n / 2);
        return cudaGetLastError();
    }
""")

BF162 = dedent("""
    #include <cuda_runtime.h>
    #include <cuda_bf16.h>

    __global__ void bmul(const __nv_bfloat162* a, __nv_bfloat162* o, int n2) {
        const int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i >= n2) return;
        const __nv_bfloat162 v = *(a + i);
        *(o + i) = __hmul2(v, v);
    }

    extern "C" cudaError_t entry(const __nv_bfloat16* a, __nv_bfloat16* o, int n, cudaStream_t stream) {
        bmul<<<(n / 2 + 255) / 256, 256, 0, stream>>>(reinterpret_cast<const __nv_bfloat162*>(a),
                                                     reinterpret_cast<__nv_bfloat162*>(o), n / 2);
        return cudaGetLastError();
    }
""")

HINTED = dedent("""
    #include <cuda_runtime.h>

    __global__ void copy4(const float4* __restrict__ in, float4* __restrict__ out, int nvec) {
        const int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < nvec) out[i] = __ldg(in + i);
    }

    extern "C" cudaError_t entry(const float* in, float* out, int n, cudaStream_t stream) {
        copy4<<<(n / 4 + 255) / 256, 256, 0, stream>>>(reinterpret_cast<const float4*>(in),
                                                      reinterpret_cast<float4*>(out), n / 4);
        return cudaGetLastError();
    }
""")

SCALAR = dedent("""
    #include <cuda_runtime.h>

    #define USE_VEC 0
    __global__ void scalar(const float* in, float4* acc, float* out, int n) {
        const int i = blockIdx.x * blockDim.x + threadIdx.x;
        float4 regs[2];
        regs[0] = make_float4(0.f, 0.f, 0.f, 0.f);
        regs[1] = regs[0];
    #if USE_VEC
        float4 v = acc[i];
    #endif
        if (i < n) out[i] = in[i] * 2.f + regs[1].x + acc[0].y;
    }

    extern "C" cudaError_t entry(const float* in, float* acc, float* out, int n, cudaStream_t stream) {
        scalar<<<(n + 255) / 256, 256, 0, stream>>>(in, reinterpret_cast<float4*>(acc), out, n);
        return cudaGetLastError();
    }
""")

DEOPT_FLOAT4_LOAD = dedent("""
    #include <cuda_runtime.h>

    __device__ __forceinline__ float4 kl_scalar_load_float4(const float4* p) {
        const float* s = reinterpret_cast<const float*>(p);
        return make_float4(s[0], s[1], s[2], s[3]);
    }
    // out = 2 * in, four floats per thread
    __global__ void scale4(const float4* __restrict__ in, float4* __restrict__ out, int nvec) {
        const int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i >= nvec) return;
        float4 v = kl_scalar_load_float4(in + i);
        v.x *= 2.f; v.y *= 2.f; v.z *= 2.f; v.w *= 2.f;
        out[i] = v;
    }
""")


def _deopt(src: str, locus: str):
    k = Kernel(src)
    f = next(f for f in M.detect(k) if f.locus == locus)
    return f, M.deoptimize(k, f)


def test_detects_loads_and_stores_of_each_vector_type():
    assert keys(M, FLOAT4) == {("vector_access", "scale4:load:in + i"), ("vector_access", "scale4:store:out + i")}
    assert keys(M, FLOAT2_INT4) == {("vector_access", "load2:load:p + i"), ("vector_access", "mix:load:q + i"),
                                    ("vector_access", "mix:store:out2 + i"), ("vector_access", "mix:store:out4 + i")}
    assert keys(M, HALF2) == {("vector_access", "hadd:load:x + i"), ("vector_access", "hadd:store:y + i")}
    assert keys(M, BF162) == {("vector_access", "bmul:load:a + i"), ("vector_access", "bmul:store:o + i")}
    details = {f.locus: f.info() for f in M.detect(Kernel(FLOAT2_INT4))}
    assert details["mix:load:q + i"]["vector"] == "int4" and details["mix:load:q + i"]["bytes"] == 16
    assert details["load2:load:p + i"]["form"] == "deref"
    assert {f.anchor for f in M.detect(Kernel(FLOAT4))} == {"global load", "global store"}
    assert {f.info()["vector"] for f in M.detect(Kernel(HALF2))} == {"__half2"}


def test_no_vector_access_in_scalar_register_component_or_dead_code():
    assert keys(M, SCALAR) == set()


def test_deoptimize_load_inserts_the_helper_once_above_the_function_and_its_comment():
    f, r = _deopt(FLOAT4, "scale4:load:in + i")
    assert r.ok
    assert r.source.startswith(DEOPT_FLOAT4_LOAD)
    assert r.before == "float4 v = in[i];" and r.after == "float4 v = kl_scalar_load_float4(in + i);"
    assert keys(M, r.source) == {("vector_access", "scale4:store:out + i")}  # the other keeps its name


def test_deoptimize_store_writes_scalars():
    f, r = _deopt(FLOAT4, "scale4:store:out + i")
    assert "kl_scalar_store_float4(out + i, v);" in r.source
    assert "    float* d = reinterpret_cast<float*>(p);\n    d[0] = v.x; d[1] = v.y; d[2] = v.z; d[3] = v.w;\n" \
        in r.source
    assert "volatile" not in r.source


@pytest.mark.nvcc
@pytest.mark.parametrize("src", [FLOAT4, FLOAT2_INT4, HALF2, BF162], ids=["float4", "float2_int4", "half2", "bf162"])
def test_every_access_roundtrips_and_compiles(src):
    for f in M.detect(Kernel(src)):
        r = M.deoptimize(Kernel(src), f)
        assert r.ok, r
        assert f.key not in keys(M, r.source)
        assert_compiles(r.source)
        back = M.reoptimize(Kernel(r.source), f.locus, r.config)
        assert back.ok and back.source == src, f.locus


@pytest.mark.nvcc
def test_all_accesses_removed_then_restored_in_any_order():
    src, configs = FLOAT2_INT4, []
    for f in M.detect(Kernel(src)):
        f = next(g for g in M.detect(Kernel(src)) if g.locus == f.locus)
        r = M.deoptimize(Kernel(src), f)
        configs.append((f.locus, r.config))
        src = r.source
    assert M.detect(Kernel(src)) == []
    assert src.count("__device__ __forceinline__ float2 kl_scalar_load_float2") == 1
    assert_compiles(src)
    for order in (configs, list(reversed(configs))):
        cur = src
        for locus, cfg in order:
            r = M.reoptimize(Kernel(cur), locus, cfg)
            assert r.ok, r
            cur = r.source
        assert cur == FLOAT2_INT4
        assert "kl_scalar" not in cur


def test_helper_text_for_half_and_bfloat16():
    _, r = _deopt(HALF2, "hadd:load:x + i")
    assert "return __halves2half2(s[0], s[1]);" in r.source and "const __half* s" in r.source
    _, r = _deopt(BF162, "bmul:store:o + i")
    assert "d[0] = __low2bfloat16(v); d[1] = __high2bfloat16(v);" in r.source
    assert "kl_scalar_store_bfloat162(o + i, __hmul2(v, v));" in r.source


def test_hinted_access_waits_for_the_cache_hint_to_come_off():
    k = Kernel(HINTED)
    f = next(f for f in M.detect(k) if f.locus == "copy4:load:in + i")
    assert f.info()["form"] == "__ldg"
    r = M.deoptimize(k, f)
    assert not r.ok and "cache hint" in r.reason
    ch = CacheHint()
    plain = ch.deoptimize(k, ch.detect(k)[0]).source
    assert "copy4:load:in + i" in {loc for _, loc in keys(M, plain)}  # same locus once the hint is off
    r = M.deoptimize(Kernel(plain), Feature("vector_access", "copy4:load:in + i", (0, 0)))
    assert r.ok and "out[i] = kl_scalar_load_float4(in + i);" in r.source


def test_not_applicable_cases():
    assert not M.deoptimize(Kernel(FLOAT4), Feature("vector_access", "scale4:load:nothing", (0, 0))).ok
    assert not M.reoptimize(Kernel(FLOAT4)).ok  # no helper call to turn back
    chained = FLOAT4.replace("out[i] = v;", "float4 w = (out[i] = v);")
    r = M.deoptimize(Kernel(chained), Feature("vector_access", "scale4:store:out + i", (0, 0)))
    assert not r.ok and "value" in r.reason


@pytest.mark.nvcc
def test_reoptimize_natural_helper_calls():
    _, r = _deopt(FLOAT4, "scale4:load:in + i")
    nat = M.reoptimize(Kernel(r.source))  # no configuration: the helper call becomes a dereference
    assert nat.ok and nat.locus == "scale4:load:in + i"
    assert "float4 v = *(in + i);" in nat.source and "kl_scalar" not in nat.source
    assert keys(M, nat.source) == keys(M, FLOAT4)
    assert_compiles(nat.source)


def _expert(name):
    return (ROOT / "expert_kernels" / name / "expert.cu").read_text()


@pytest.mark.nvcc
def test_row_sum_expert():
    src = _expert("row_sum")
    assert keys(M, src) == {("vector_access", "rs_load4:load:p")}
    f = M.detect(Kernel(src))[0]
    assert f.info()["form"] == "__ldg" and not M.deoptimize(Kernel(src), f).ok
    ch = CacheHint()
    hint = next(g for g in ch.detect(Kernel(src)) if g.locus == "rs_load4:__ldg:p")
    plain = ch.deoptimize(Kernel(src), hint).source
    assert keys(M, plain) == {("vector_access", "rs_load4:load:p")}
    r = M.deoptimize(Kernel(plain), f)
    assert r.ok and r.after == "return kl_scalar_load_float4(p);"
    assert keys(M, r.source) == set()
    assert_compiles(r.source)
    assert M.reoptimize(Kernel(r.source), f.locus, r.config).source == plain


@pytest.mark.nvcc
def test_swiglu_expert():
    src = _expert("swiglu")
    assert keys(M, src) == {("vector_access", "sg_load:load:p"), ("vector_access", "sg_store:store:p")}
    store = next(f for f in M.detect(Kernel(src)) if f.locus == "sg_store:store:p")
    r = M.deoptimize(Kernel(src), store)
    assert r.ok and r.before == "*p = v;" and r.after == "kl_scalar_store_uint4(p, v);"
    assert keys(M, r.source) == {("vector_access", "sg_load:load:p")}
    assert_compiles(r.source)
    assert M.reoptimize(Kernel(r.source), store.locus, r.config).source == src
    ch = CacheHint()
    plain = ch.deoptimize(Kernel(src), next(g for g in ch.detect(Kernel(src)) if g.locus == "sg_load:__ldg:p")).source
    load = M.deoptimize(Kernel(plain), Feature("vector_access", "sg_load:load:p", (0, 0)))
    assert load.ok and "return kl_scalar_load_uint4(p);" in load.source
    assert_compiles(load.source)
    assert M.reoptimize(Kernel(load.source), "sg_load:load:p", load.config).source == plain
