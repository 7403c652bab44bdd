// klineage-step: mechanism=smem_tiling
// 32 x 32 tiles of x and weight are staged in shared memory, one k-slice of 32 at a time: each
// element a block reads from global memory is reused by 32 threads instead of being read 32 times.
// One thread still computes one output element. The weight tile is stored k-major (ws[k][n]) so
// the inner loop reads it without bank conflicts.
#include <cuda_runtime.h>
#include <cuda_bf16.h>

// ---- tuning constants (override with -DNAME=value) ----
#ifndef GEMM_TILE
#define GEMM_TILE 32
#endif

__global__ void gemm_smem_kernel(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* out, int M, int N,
                                 int K) {
    __shared__ float xs[GEMM_TILE][GEMM_TILE];
    __shared__ float ws[GEMM_TILE][GEMM_TILE];  // k-major: ws[k][n]
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * GEMM_TILE + ty, col = blockIdx.x * GEMM_TILE + tx;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += GEMM_TILE) {
        xs[ty][tx] = (row < M && k0 + tx < K) ? __bfloat162float(x[(long long)row * K + k0 + tx]) : 0.0f;
        ws[ty][tx] = (col < N && k0 + ty < K) ? __bfloat162float(w[(long long)col * K + k0 + ty]) : 0.0f;
        __syncthreads();
        for (int kk = 0; kk < GEMM_TILE; ++kk) acc += xs[ty][kk] * ws[kk][tx];
        __syncthreads();
    }
    if (row < M && col < N) out[(long long)row * N + col] = __float2bfloat16(acc);
}

extern "C" cudaError_t gemm(const __nv_bfloat16* x, const __nv_bfloat16* weight, __nv_bfloat16* out, int M, int N,
                            int K, cudaStream_t stream) {
    if (M <= 0 || N <= 0) return cudaSuccess;
    dim3 block(GEMM_TILE, GEMM_TILE);
    dim3 grid((N + GEMM_TILE - 1) / GEMM_TILE, (M + GEMM_TILE - 1) / GEMM_TILE);
    gemm_smem_kernel<<<grid, block, 0, stream>>>(x, weight, out, M, N, K);
    return cudaGetLastError();
}
