"""smem_padding: `tile[N][N + 1]` <-> `tile[N][N]`."""
from pathlib import Path

import pytest

from klineage.mechanisms.base import Feature, Kernel
from klineage.mechanisms.families.smem_padding import SmemPadding

from mechtest import assert_compiles, dedent, keys

M = SmemPadding()
ROOT = Path(__file__).resolve().parents[2]

TRANSPOSE = dedent("""
    #include <cuda_runtime.h>

    #define TILE 32
    #define PAD 1

    __global__ void transpose(const float* in, float* out, int n) {
        __shared__ float tile[32][32 + 1];
        __shared__ float halo[TILE + 2][TILE + 2];
        __shared__ float tile2[TILE][TILE + PAD];
        __shared__ float line[64];
        const int x = blockIdx.x * TILE + threadIdx.x, y = blockIdx.y * TILE + threadIdx.y;
        if (x < n && y < n) {
            tile[threadIdx.y][threadIdx.x] = in[y * n + x];
            tile2[threadIdx.y][threadIdx.x] = 2.f * in[y * n + x];
        }
        halo[threadIdx.y][threadIdx.x] = 0.f;
        line[threadIdx.x] = 0.f;
        __syncthreads();
        const int tx = blockIdx.y * TILE + threadIdx.x, ty = blockIdx.x * TILE + threadIdx.y;
        if (tx < n && ty < n)
            out[ty * n + tx] = tile[threadIdx.x][threadIdx.y] + tile2[threadIdx.x][threadIdx.y]
                               + halo[threadIdx.x][threadIdx.y] + line[threadIdx.y];
    }

    extern "C" cudaError_t entry(const float* in, float* out, int n, cudaStream_t stream) {
        dim3 grid((n + TILE - 1) / TILE, (n + TILE - 1) / TILE), block(TILE, TILE);
        transpose<<<grid, block, 0, stream>>>(in, out, n);
        return cudaGetLastError();
    }
""")

UNPADDED = dedent("""
    #include <cuda_runtime.h>

    template <int T>
    __global__ void transpose(const float* in, float* out, int n) {
        __shared__ float tile[T][T];
        __shared__ float odd[T][48];
        const int x = blockIdx.x * T + threadIdx.x, y = blockIdx.y * T + threadIdx.y;
        tile[threadIdx.y][threadIdx.x] = x < n && y < n ? in[y * n + x] : 0.f;
        odd[threadIdx.y][threadIdx.x] = 0.f;
        __syncthreads();
        const int tx = blockIdx.y * T + threadIdx.x, ty = blockIdx.x * T + threadIdx.y;
        if (tx < n && ty < n) out[ty * n + tx] = tile[threadIdx.x][threadIdx.y] + odd[threadIdx.x][threadIdx.y];
    }

    extern "C" cudaError_t entry(const float* in, float* out, int n, cudaStream_t stream) {
        dim3 grid((n + 31) / 32, (n + 31) / 32), block(32, 32);
        transpose<32><<<grid, block, 0, stream>>>(in, out, n);
        return cudaGetLastError();
    }
""")


def test_detects_literal_and_named_padding_not_halos_or_1d():
    assert keys(M, TRANSPOSE) == {("smem_padding", "transpose:pad:tile"), ("smem_padding", "transpose:pad:tile2")}
    info = {f.locus: f.info() for f in M.detect(Kernel(TRANSPOSE))}
    assert info["transpose:pad:tile"]["pad"] == "1" and info["transpose:pad:tile2"]["pad"] == "PAD"
    assert keys(M, UNPADDED) == set()


def test_deoptimize_drops_the_pad():
    r = M.deoptimize(Kernel(TRANSPOSE), Feature("smem_padding", "transpose:pad:tile2", (0, 0)))
    assert r.ok and r.before == "__shared__ float tile2[TILE][TILE + PAD];"
    assert r.after == "__shared__ float tile2[TILE][TILE];"
    assert r.source == TRANSPOSE.replace("[TILE][TILE + PAD]", "[TILE][TILE]")
    assert keys(M, r.source) == {("smem_padding", "transpose:pad:tile")}


@pytest.mark.nvcc
def test_roundtrip_and_compile():
    for f in M.detect(Kernel(TRANSPOSE)):
        r = M.deoptimize(Kernel(TRANSPOSE), f)
        assert r.ok
        assert_compiles(r.source)
        back = M.reoptimize(Kernel(r.source), f.locus, r.config)
        assert back.ok and back.source == TRANSPOSE and back.locus == f.locus


@pytest.mark.nvcc
def test_reoptimize_natural_code():
    r = M.reoptimize(Kernel(UNPADDED))
    assert r.ok and r.locus == "transpose:pad:tile" and r.after == "__shared__ float tile[T][T + 1];"
    assert keys(M, r.source) == {("smem_padding", "transpose:pad:tile")}
    assert_compiles(r.source)
    lit = M.reoptimize(Kernel(TRANSPOSE.replace("[32][32 + 1]", "[32][32]")), "transpose:pad:tile")
    assert lit.ok and lit.source == TRANSPOSE
    assert not M.reoptimize(Kernel(UNPADDED), "transpose:pad:odd").ok  # 48: not a power of two
    assert not M.reoptimize(Kernel(TRANSPOSE), "transpose:pad:tile").ok  # already padded


def test_not_applicable_on_a_flat_view():
    flat = TRANSPOSE.replace("line[threadIdx.x] = 0.f;", "float* f = &tile[0][0]; f[threadIdx.x] = 0.f;")
    r = M.deoptimize(Kernel(flat), Feature("smem_padding", "transpose:pad:tile", (0, 0)))
    assert not r.ok and "flat view" in r.reason
    assert not M.deoptimize(Kernel(TRANSPOSE), Feature("smem_padding", "transpose:pad:line", (0, 0))).ok


def test_expert_kernels_have_no_padded_tiles():
    for name in ("row_sum", "swiglu"):
        src = (ROOT / "expert_kernels" / name / "expert.cu").read_text()
        assert keys(M, src) == set()
        assert not M.reoptimize(Kernel(src)).ok  # only 1-D shared arrays there
