"""Static preconditions read off real kernels (row_sum, swiglu, the row_sum ladder) and small
snippets: every rule once where its fact is present and once where it is absent."""
import hashlib
from pathlib import Path

import pytest

from klineage.mechanisms.static import static_preconditions
from klineage.gate.compile import SMEM_OPTIN_MAX
from klineage.parse.source import CATEGORIES, PROBES
from klineage.mechanisms import detect_all

ROOT = Path(__file__).resolve().parents[2]
ROW_SUM = (ROOT / "expert_kernels/row_sum/expert.cu").read_text()
SWIGLU = (ROOT / "expert_kernels/swiglu/expert.cu").read_text()
NAIVE = (ROOT / "expert_kernels/row_sum/naive.cu").read_text()
V = {p.stem: p.read_text() for p in (ROOT / "expert_kernels/row_sum/versions").glob("*.cu")}

FLOAT4_NO_TAIL = """\
__global__ void scale4(const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n / 4) {
        float4 v = reinterpret_cast<const float4*>(x)[i];
        v.x *= 2.f; v.y *= 2.f; v.z *= 2.f; v.w *= 2.f;
        reinterpret_cast<float4*>(y)[i] = v;
    }
}
"""

HALF2 = """\
#include <cuda_fp16.h>
__global__ void axpy_h2(const __half2* __restrict__ x, __half2* __restrict__ y, __half a, int n2) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n2) y[i] = __hadd2(__hmul2(__halves2half2(a, a), x[i]), y[i]);
    if (i == 0) y[0] = __halves2half2(__float2half(__half2float(a)), a);
}
"""

SMEM_64K = """\
__global__ void big_tile(float* x) {
    __shared__ float tile[16384];
    tile[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    x[threadIdx.x] = tile[threadIdx.x ^ 1];
}
"""
SMEM_16K = SMEM_64K.replace("16384", "4096")

SMEM_DYNAMIC = """\
__global__ void dyn(float* x, int n) {
    extern __shared__ float buf[];
    buf[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    x[threadIdx.x] = buf[(threadIdx.x + 1) % n];
}
extern "C" void launch(float* x, int n) {
    cudaFuncSetAttribute(dyn, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024);
    dyn<<<1, n, n * sizeof(float)>>>(x, n);
}
"""

# a full-mask shuffle that lanes past `cols` never reach, launched with a shape-dependent block
RAGGED_SHUFFLE = """\
__global__ void row_max(const float* x, float* out, int rows, int cols) {
    int r = blockIdx.x, t = threadIdx.x;
    if (t >= cols) return;
    float v = x[r * cols + t];
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffff, v, o));
    if (t == 0) out[r] = v;
}
extern "C" void launch(const float* x, float* out, int rows, int cols) {
    int threads = cols < 1024 ? cols : 1024;
    row_max<<<rows, threads>>>(x, out, rows, cols);
}
"""

ACTIVE_MASK_SHUFFLE = """\
__global__ void part(float* x) {
    float v = x[threadIdx.x];
    unsigned m = __activemask();
    v += __shfl_down_sync(m, v, 1);
    x[threadIdx.x] = v;
}
"""

RUNTIME_UNROLL = """\
__global__ void sum_n(const float* x, float* out, int n) {
    float s = 0.f;
#pragma unroll 4
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
    out[threadIdx.x] = s;
}
"""

LDG_WRITTEN = """\
__global__ void inplace(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = __ldg(&x[i]) * 2.f;
}
"""

BOUNDS_MIN_BLOCKS = """\
__global__ void __launch_bounds__(128, 4) k(float* x) { x[threadIdx.x] = 1.f; }
extern "C" void launch(float* x) { k<<<1, 256>>>(x); }
"""

FAST_DIV = """\
__global__ void ratio(const float* a, const float* b, float* c) {
    c[threadIdx.x] = __fdividef(a[threadIdx.x], b[threadIdx.x]) + __sinf(a[threadIdx.x]);
}
"""

CLUSTER = """\
__global__ void __cluster_dims__(2, 1, 1) pair(float* x) {
    x[blockIdx.x * blockDim.x + threadIdx.x] = 1.f;
}
"""

WGMMA = """\
__global__ void mma_fence(float* x) {
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    x[threadIdx.x] = 1.f;
}
"""

SETMAXNREG = """\
__global__ void producer(float* x) {
    if (threadIdx.x < 128) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    x[threadIdx.x] = 1.f;
}
"""

TMA = """\
__global__ void bulk(float* x) {
    __shared__ alignas(16) float s[64];
    __shared__ alignas(8) unsigned long long bar;
    unsigned sa = (unsigned)__cvta_generic_to_shared(s), ba = (unsigned)__cvta_generic_to_shared(&bar);
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 256, [%2];"
                 :: "r"(sa), "l"(x), "r"(ba) : "memory");
    x[threadIdx.x] = s[threadIdx.x];
}
"""

CP_ASYNC = """\
__global__ void stage(const float* x, float* y) {
    __shared__ alignas(16) float s[256];
    unsigned sa = (unsigned)__cvta_generic_to_shared(s + 4 * threadIdx.x);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(sa), "l"(x + 4 * threadIdx.x));
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
    y[threadIdx.x] = s[threadIdx.x];
}
"""


def feature(source, mechanism, locus_part=""):
    return next(f.to_dict() for f in detect_all(source) if f.mechanism == mechanism and locus_part in f.locus)


def of(pre, category):
    return [p for p in pre if p["category"] == category]


def check_shape(pre, source):
    n = len(source.splitlines())
    for p in pre:
        assert set(p) == {"category", "condition", "fails_without", "evidence", "lines", "kernel", "probe"}
        assert p["category"] in CATEGORIES and (p["probe"] is None or p["probe"] in PROBES)
        assert p["evidence"].startswith("static: ") and p["condition"] and p["fails_without"]
        assert 1 <= p["lines"][0] <= p["lines"][1] <= n
        assert p["kernel"] == hashlib.sha256(source.encode()).hexdigest()[:12]


# ---- vector casts -------------------------------------------------------------------------------

def test_vector_cast_without_tail_needs_alignment_and_divisibility():
    pre = static_preconditions(FLOAT4_NO_TAIL, "vector_access")
    check_shape(pre, FLOAT4_NO_TAIL)
    align = next(p for p in pre if p["probe"] == "misaligned_base")
    ragged = next(p for p in pre if p["probe"] == "ragged_size")
    assert align["category"] == ragged["category"] == "layout"
    assert "16-byte aligned" in align["condition"] and not align["condition"].startswith("handled")
    assert "divisible by 4" in ragged["condition"]
    assert align["lines"] == [4, 6]
    assert "reinterpret_cast<const float4*>" in align["evidence"] and "lines 4-4, 6-6" in align["evidence"]


def test_vector_cast_guarded_by_head_and_tail_in_row_sum():
    # the float4 load feature sits in rs_load4; the casts are in the kernels that call it, the
    # head/tail split in split_row: all found from the feature
    pre = static_preconditions(ROW_SUM, "vector_access", feature(ROW_SUM, "vector_access"))
    check_shape(pre, ROW_SUM)
    align = next(p for p in pre if p["probe"] == "misaligned_base")
    ragged = next(p for p in pre if p["probe"] == "ragged_size")
    assert align["condition"].startswith("handled in code") and "line 117" in align["condition"]
    assert ragged["condition"].startswith("handled in code")
    assert "138-138" in align["evidence"] and "181-181" in align["evidence"]


def test_vector_cast_swiglu_counts_bf16_elements_and_sees_the_host_alignment_check():
    pre = static_preconditions(SWIGLU, "vector_access")
    align = next(p for p in pre if p["probe"] == "misaligned_base")
    ragged = next(p for p in pre if p["probe"] == "ragged_size")
    assert "line 128" in align["condition"] and align["condition"].startswith("handled")
    assert "8 __nv_bfloat16" in ragged["condition"]


HOST_DISPATCH = """\
#include <stdint.h>
__global__ void copy4(const float4* __restrict__ x, float4* __restrict__ y, int n4) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) y[i] = x[i];
}
extern "C" void copy(const float* x, float* y, int n) {
    const bool vec = (n & 3) == 0 && ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y)) & 15u) == 0;
    if (vec) copy4<<<(n / 4 + 255) / 256, 256>>>(reinterpret_cast<const float4*>(x), reinterpret_cast<float4*>(y), n / 4);
}
"""


def test_vector_cast_guarded_by_a_host_dispatch():
    f = feature(HOST_DISPATCH, "vector_access")
    pre = static_preconditions(HOST_DISPATCH, "vector_access", f)
    assert len(pre) == 2 and all(p["condition"].startswith("handled in code") for p in pre)
    assert all("line 7" in p["condition"] for p in pre)
    assert any("divisible by 4" in p["condition"] for p in pre)
    assert "reinterpret_cast<const float4*>, reinterpret_cast<float4*> at lines 8-8" in pre[0]["evidence"]


def test_vector_cast_absent():
    assert of(static_preconditions(V["01_restrict"], "vector_access"), "layout") == []


# ---- full-warp masks ----------------------------------------------------------------------------

def test_full_mask_shuffle_with_fixed_blocks():
    pre = static_preconditions(ROW_SUM, "warp_reduction", feature(ROW_SUM, "warp_reduction"))
    check_shape(pre, ROW_SUM)
    (p,) = pre
    assert p["category"] == "pipeline" and p["probe"] is None and p["lines"] == [76, 76]
    assert "multiple of 32" in p["condition"] and "256, 512" in p["condition"]


def test_full_mask_shuffle_with_early_exit_and_shape_dependent_block():
    (p,) = static_preconditions(RAGGED_SHUFFLE, "warp_reduction")
    assert p["probe"] == "ragged_size"
    assert "line 3" in p["condition"] and "depends on the shape" in p["condition"]
    assert p["lines"] == [3, 5]


def test_full_mask_absent():
    assert static_preconditions(ACTIVE_MASK_SHUFFLE, "warp_reduction") == []
    assert of(static_preconditions(V["04_warp_per_row"], "warp_per_row"), "pipeline") == []


# ---- shared memory ------------------------------------------------------------------------------

def test_shared_memory_over_static_limit():
    (p,) = static_preconditions(SMEM_64K, "smem_staging")
    assert p["category"] == "storage" and p["lines"] == [2, 2]
    assert "65536 B" in p["condition"] and "exceeds the 48 KiB" in p["condition"]
    assert "builds only for sm_90a" in p["condition"]


def test_shared_memory_template_sized_tile_fits_everywhere():
    (p,) = static_preconditions(V["04_warp_per_row"], "smem_staging")
    assert "1024 B" in p["condition"] and "every arch" in p["condition"]
    assert "BLOCK = 256" in p["evidence"]
    (q,) = static_preconditions(SMEM_16K, "smem_staging")
    assert "16384 B" in q["condition"] and "sm_120" in q["condition"]


def test_shared_memory_dynamic_is_reported_with_the_opt_in_table():
    (p,) = static_preconditions(SMEM_DYNAMIC, "smem_staging")
    assert "dynamic" in p["condition"] and "unknown statically" in p["condition"]
    assert "opt-in call is at line 8" in p["condition"]
    for arch, limit in SMEM_OPTIN_MAX.items():
        assert f"{arch} {limit // 1024} KiB" in p["condition"]


def test_shared_memory_absent():
    assert of(static_preconditions(SWIGLU, "smem_staging"), "storage") == []


# ---- dtype intrinsics ---------------------------------------------------------------------------

def test_dtype_bf16_in_swiglu():
    pre = of(static_preconditions(SWIGLU, "vector_access"), "data_types")
    (p,) = pre
    assert p["condition"].startswith("operands are bf16") and "__bfloat162float" in p["condition"]
    assert p["lines"] == [68, 120] and p["probe"] is None


def test_dtype_fp16_half2_kernel():
    (p,) = of(static_preconditions(HALF2, "vector_access"), "data_types")
    assert p["condition"].startswith("operands are fp16")
    assert "__hadd2" in p["condition"] and "__half2float" in p["condition"]


def test_dtype_absent_in_fp32_row_sum():
    assert of(static_preconditions(ROW_SUM, "vector_access"), "data_types") == []


# ---- fast math ----------------------------------------------------------------------------------

def test_fast_math_expf_in_swiglu_limited_to_the_feature_intrinsic():
    f = feature(SWIGLU, "fast_math", "__expf")
    pre = [p for p in static_preconditions(SWIGLU, "fast_math", f) if "__expf" in p["evidence"]]
    (p,) = pre
    assert p["category"] == "data_types" and p["probe"] == "large_magnitude" and p["lines"] == [60, 60]
    assert "1.173" in p["condition"]
    assert not any("__frcp_rn" in q["evidence"] for q in static_preconditions(SWIGLU, "fast_math", f))


def test_fast_math_fdividef_and_sinf():
    pre = static_preconditions(FAST_DIV, "fast_math")
    assert {p["probe"] for p in pre} == {"large_magnitude"}
    assert any("2^126" in p["condition"] for p in pre) and any("[-pi, pi]" in p["condition"] for p in pre)


def test_fast_math_absent():
    assert static_preconditions(ROW_SUM, "fast_math") == []


# ---- launch bounds ------------------------------------------------------------------------------

def test_launch_bounds_resolves_template_block():
    f = feature(ROW_SUM, "launch_bounds", "row_sum_warp_kernel")
    (p,) = static_preconditions(ROW_SUM, "launch_bounds", f)
    assert p["category"] == "pipeline" and p["lines"] == [127, 127]
    assert "BLOCK = 256" in p["condition"] and "too many resources requested" in p["fails_without"]
    # non-template kernel (the attribute on the line before the name)
    pre = static_preconditions(SWIGLU, "launch_bounds")
    assert any("swiglu_scalar_kernel" in p["condition"] and "SWIGLU_BLOCK = 256" in p["condition"] for p in pre)


def test_launch_bounds_min_blocks_and_static_violation():
    (p,) = static_preconditions(BOUNDS_MIN_BLOCKS, "launch_bounds")
    assert "4 blocks" in p["condition"] and "violated statically" in p["condition"]


def test_launch_bounds_absent():
    assert static_preconditions(V["01_restrict"], "launch_bounds") == []


# ---- unroll -------------------------------------------------------------------------------------

def test_unroll_compile_time_count_needs_nothing():
    for f in (x.to_dict() for x in detect_all(ROW_SUM) if x.mechanism == "unroll"):
        assert static_preconditions(ROW_SUM, "unroll", f) == []


def test_unroll_runtime_count():
    (p,) = static_preconditions(RUNTIME_UNROLL, "unroll")
    assert p["category"] == "pipeline" and p["probe"] == "tiny_size" and p["lines"] == [3, 4]
    assert "runtime value (n, blockDim, threadIdx)" in p["condition"] and "unrolls by 4" in p["condition"]


# ---- read-only loads ----------------------------------------------------------------------------

def test_ldg_read_only_and_dead_branch_ignored():
    (p,) = static_preconditions(V["02_ldg"], "cache_hint")
    assert p["category"] == "pipeline" and "read-only for the kernel's lifetime" in p["condition"]
    pre = static_preconditions(ROW_SUM, "cache_hint")
    assert pre and all("__ldcs" not in p["evidence"] for p in pre)  # __ldcs sits in a dead #if branch


def test_ldg_on_a_buffer_the_kernel_writes():
    (p,) = static_preconditions(LDG_WRITTEN, "cache_hint")
    assert "violated statically: x" in p["condition"]


def test_ldg_absent():
    assert static_preconditions(V["01_restrict"], "cache_hint") == []


# ---- restrict -----------------------------------------------------------------------------------

def test_restrict_pointers_do_not_alias():
    (p,) = static_preconditions(V["01_restrict"], "restrict")
    assert p["category"] == "layout" and "x, out" in p["condition"] and "do not alias" in p["condition"]
    assert p["lines"] == [6, 6]


def test_restrict_limited_to_the_feature_function():
    f = feature(SWIGLU, "restrict", "swiglu_scalar_kernel")
    (p,) = static_preconditions(SWIGLU, "restrict", f)
    assert "swiglu_scalar_kernel" in p["condition"] and "a_s" not in p["condition"]


def test_restrict_absent():
    assert static_preconditions(NAIVE, "restrict") == []


# ---- hardware -----------------------------------------------------------------------------------

def test_cluster_needs_sm90():
    pre = static_preconditions(ROW_SUM, "thread_block_cluster")
    assert pre and all(p["category"] == "hardware" and "9.0 or newer" in p["condition"] for p in pre)
    (p,) = static_preconditions(CLUSTER, "thread_block_cluster")
    assert p["lines"] == [1, 1] and "__cluster_dims__" in p["evidence"]


def test_wgmma_setmaxnreg_tma_cp_async():
    (w,) = static_preconditions(WGMMA, "tensor_core_mma")
    assert "sm_90a target only" in w["condition"] and w["lines"] == [2, 2]
    assert "wgmma.fence.sync.aligned" in w["evidence"]
    (s,) = static_preconditions(SETMAXNREG, "warp_specialization")
    assert "sm_90a" in s["condition"] and "sm_100a" in s["condition"]
    t = of(static_preconditions(TMA, "tma"), "hardware")
    assert len(t) == 1 and "9.0 or newer" in t[0]["condition"] and t[0]["lines"] == [5, 5]
    (c,) = of(static_preconditions(CP_ASYNC, "async_copy"), "hardware")
    assert "8.0 or newer" in c["condition"] and c["lines"] == [4, 5]


def test_hardware_absent():
    assert static_preconditions(V["09_block_per_row"], "thread_block_cluster") == []
    assert static_preconditions(ROW_SUM, "tensor_core_mma") == []
    assert of(static_preconditions(ROW_SUM, "async_copy"), "hardware") == []


# ---- across rules -------------------------------------------------------------------------------

@pytest.mark.parametrize("source", [ROW_SUM, SWIGLU], ids=["row_sum", "swiglu"])
def test_unknown_mechanism_gets_every_rule_and_shapes_hold(source):
    pre = static_preconditions(source, "some_llm_named_mechanism")
    check_shape(pre, source)
    assert {"layout", "pipeline"} <= {p["category"] for p in pre}
    known = static_preconditions(source, "restrict")
    assert known and all(p["category"] == "layout" for p in known)
