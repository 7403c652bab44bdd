"""smem_staging: a reused operand copied to shared memory <-> read from global memory."""
from pathlib import Path

import pytest

from klineage.mechanisms.base import Feature, Kernel
from klineage.mechanisms.families.smem_staging import SmemStaging

from mechtest import assert_compiles, dedent, keys

M = SmemStaging()
ROOT = Path(__file__).resolve().parents[2]

MATVEC = dedent("""
    #include <cuda_runtime.h>

    // y[r] = sum_j w[j] * x[r * 256 + j], w staged in shared memory
    __global__ void matvec(const float* __restrict__ x, const float* __restrict__ w, float* y, int rows) {
        __shared__ float s_w[256];
        const int r = blockIdx.x * blockDim.x + threadIdx.x;
    #pragma unroll 4
        for (int i = threadIdx.x; i < 256; i += blockDim.x) s_w[i] = w[i];
        __syncthreads();
        // every thread reuses all of w
        if (r >= rows) return;
        float acc = 0.f;
        for (int j = 0; j < 256; ++j) acc += s_w[j] * x[r * 256 + j];
        y[r] = acc + s_w[0];
    }

    extern "C" cudaError_t entry(const float* x, const float* w, float* y, int rows, cudaStream_t stream) {
        matvec<<<(rows + 255) / 256, 256, 0, stream>>>(x, w, y, rows);
        return cudaGetLastError();
    }
""")

DEOPT_MATVEC_BODY = dedent("""
    __global__ void matvec(const float* __restrict__ x, const float* __restrict__ w, float* y, int rows) {
        const int r = blockIdx.x * blockDim.x + threadIdx.x;
        // every thread reuses all of w
        if (r >= rows) return;
        float acc = 0.f;
        for (int j = 0; j < 256; ++j) acc += w[j] * x[r * 256 + j];
        y[r] = acc + w[0];
    }
""")

STENCIL = dedent("""
    #include <cuda_runtime.h>

    #define B 128
    // 1-D blur: each block stages its slice of x, each thread reads two neighbours
    __global__ void blur(const float* x, float* y, int n) {
        const int base = blockIdx.x * B;
        __shared__ float s_x[B];
        __shared__ float s_out[B];
        if (threadIdx.x < B) s_x[threadIdx.x] = x[base + threadIdx.x];
        __syncthreads();
        const int t = threadIdx.x;
        s_out[t] = 0.5f * (s_x[t] + s_x[(t + 1) % B]);
        __syncthreads();
        if (base + t < n) y[base + t] = s_out[t];
    }

    extern "C" cudaError_t entry(const float* x, float* y, int n, cudaStream_t stream) {
        blur<<<n / B, B, 0, stream>>>(x, y, n);
        return cudaGetLastError();
    }
""")

POINTER_FORM = dedent("""
    #include <cuda_runtime.h>

    __global__ void dot(const int* __restrict__ a, const int* __restrict__ coef, int* out, int k) {
        __shared__ int s_c[64];
        for (int i = threadIdx.x; i < 64; i += blockDim.x) {
            s_c[i] = *(coef + (blockIdx.y * 64 + i));
        }
        __syncthreads();
        int acc = 0;
        for (int j = 0; j < k && j < 64; ++j) acc += a[threadIdx.x * 64 + j] * s_c[j];
        out[blockIdx.y * blockDim.x + threadIdx.x] = acc;
    }

    extern "C" cudaError_t entry(const int* a, const int* coef, int* out, int k, cudaStream_t stream) {
        dot<<<dim3(1, 4), 64, 0, stream>>>(a, coef, out, k);
        return cudaGetLastError();
    }
""")

NOT_STAGING = dedent("""
    #include <cuda_runtime.h>

    __global__ void nostage(const float* x, float* y) {
        __shared__ float s[256];
        __shared__ float t[16][16];
        s[threadIdx.x] = x[threadIdx.x];            // no barrier follows in this block
        for (int i = 0; i < 16; ++i) t[i][threadIdx.x & 15] = x[i];
        y[threadIdx.x] = s[threadIdx.x] + t[0][0];
    }

    extern "C" cudaError_t entry(const float* x, float* y, cudaStream_t stream) {
        nostage<<<1, 256, 0, stream>>>(x, y);
        return cudaGetLastError();
    }
""")


def _deopt(src, locus):
    return M.deoptimize(Kernel(src), Feature("smem_staging", locus, (0, 0)))


def test_detects_loop_and_per_thread_copies():
    assert keys(M, MATVEC) == {("smem_staging", "matvec:stage:s_w")}
    f = M.detect(Kernel(MATVEC))[0]
    assert f.anchor == "shared staging" and f.info() == {"array": "s_w", "source": "w", "form": "loop",
                                                         "extent": "256"}
    assert keys(M, STENCIL) == {("smem_staging", "blur:stage:s_x")}
    assert M.detect(Kernel(STENCIL))[0].info()["form"] == "per-thread"
    assert keys(M, POINTER_FORM) == {("smem_staging", "dot:stage:s_c")}
    assert keys(M, NOT_STAGING) == set()


def test_deoptimize_reads_global_and_drops_copy_barrier_and_buffer():
    r = _deopt(MATVEC, "matvec:stage:s_w")
    assert r.ok
    assert DEOPT_MATVEC_BODY in r.source and "#pragma unroll 4" not in r.source
    assert r.after == "acc += w[j] * x[r * 256 + j];"
    assert r.config["sync_removed"] is True
    assert keys(M, r.source) == set()


def test_barrier_kept_when_other_shared_data_needs_it():
    r = _deopt(STENCIL, "blur:stage:s_x")
    assert r.ok and r.config["sync_removed"] is False
    assert "s_out[t] = 0.5f * (x[base + t] + x[base + ((t + 1) % B)]);" in r.source
    assert "__shared__ float s_x" not in r.source and r.source.count("__syncthreads();") == 2
    assert "if (threadIdx.x < B)" not in r.source


def test_pointer_form_keeps_its_load_shape():
    r = _deopt(POINTER_FORM, "dot:stage:s_c")
    assert r.ok and "acc += a[threadIdx.x * 64 + j] * *(coef + (blockIdx.y * 64 + j));" in r.source


@pytest.mark.nvcc
@pytest.mark.parametrize("src", [MATVEC, STENCIL, POINTER_FORM], ids=["matvec", "stencil", "pointer"])
def test_roundtrip_and_compile(src):
    f = M.detect(Kernel(src))[0]
    r = M.deoptimize(Kernel(src), f)
    assert r.ok, r
    assert_compiles(r.source)
    back = M.reoptimize(Kernel(r.source), f.locus, r.config)
    assert back.ok and back.source == src and back.locus == f.locus


def test_not_applicable_cases():
    written = MATVEC.replace("const float* __restrict__ w", "float* w").replace(
        "y[r] = acc + s_w[0];", "y[r] = acc + s_w[0];\n    w[r] = 0.f;")
    r = _deopt(written, "matvec:stage:s_w")
    assert not r.ok and "written" in r.reason
    converted = MATVEC.replace("const float* __restrict__ w", "const double* __restrict__ w").replace(
        "const float* w", "const double* w")
    r = _deopt(converted, "matvec:stage:s_w")
    assert not r.ok and "converts" in r.reason
    overwritten = MATVEC.replace("y[r] = acc + s_w[0];", "s_w[0] = acc;\n    y[r] = acc;")
    r = _deopt(overwritten, "matvec:stage:s_w")
    assert not r.ok and "written" in r.reason
    passed = MATVEC.replace("y[r] = acc + s_w[0];", "y[r] = acc + *(s_w + 1);")
    r = _deopt(passed, "matvec:stage:s_w")
    assert not r.ok and "other than by element reads" in r.reason
    moving = STENCIL.replace("const int t = threadIdx.x;", "const int t = threadIdx.x;\n    base += 0;").replace(
        "const int base", "int base")
    r = _deopt(moving, "blur:stage:s_x")
    assert not r.ok and "base" in r.reason
    assert not _deopt(MATVEC, "matvec:stage:nothing").ok
    assert not M.reoptimize(Kernel(MATVEC)).ok  # needs the deoptimize configuration


def test_expert_kernels_stage_nothing():
    for name in ("row_sum", "swiglu"):
        src = (ROOT / "expert_kernels" / name / "expert.cu").read_text()
        assert keys(M, src) == set()
        assert not M.reoptimize(Kernel(src)).ok
