// gemm naive: out = x @ weight^T, bf16 in and out, fp32 accumulation. One thread per output
// element walks the whole K dimension reading x and weight straight from global memory: no shared
// memory, no register tiling, no tensor cores. The start of the ladder.
#include <cuda_runtime.h>
#include <cuda_bf16.h>

// ---- tuning constants (override with -DNAME=value) ----
#ifndef GEMM_BLOCK_X
#define GEMM_BLOCK_X 16
#endif
#ifndef GEMM_BLOCK_Y
#define GEMM_BLOCK_Y 16
#endif

__global__ void gemm_naive_kernel(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* out, int M, int N,
                                  int K) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k)
        acc += __bfloat162float(x[(long long)row * K + k]) * __bfloat162float(w[(long long)col * K + k]);
    out[(long long)row * N + col] = __float2bfloat16(acc);
}

extern "C" cudaError_t gemm(const __nv_bfloat16* x, const __nv_bfloat16* weight, __nv_bfloat16* out, int M, int N,
                            int K, cudaStream_t stream) {
    if (M <= 0 || N <= 0) return cudaSuccess;
    dim3 block(GEMM_BLOCK_X, GEMM_BLOCK_Y);
    dim3 grid((N + GEMM_BLOCK_X - 1) / GEMM_BLOCK_X, (M + GEMM_BLOCK_Y - 1) / GEMM_BLOCK_Y);
    gemm_naive_kernel<<<grid, block, 0, stream>>>(x, weight, out, M, N, K);
    return cudaGetLastError();
}
