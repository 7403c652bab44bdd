// klineage-step: mechanism=smem_tiling
// The convolution as an implicit GEMM (rows: output pixels, columns: filters, k: tap x channel):
// 32 x 32 tiles of the im2col operand and of the weights are staged in shared memory one k-slice
// of 32 at a time, so each value read from global memory is reused by 32 threads. One thread
// still computes one output element.
#include <cuda_runtime.h>
#include <cuda_fp16.h>

// ---- tuning constants (override with -DNAME=value) ----
#ifndef CONV_TILE
#define CONV_TILE 32
#endif

// Element (m, k) of the implicit GEMM's left operand: m an output pixel (n, oh, ow), k a tap and
// channel (k = (r * 3 + s) * C + c); zero in the padding and beyond the matrix.
__device__ __forceinline__ float im2col(const __half* x, int m, int k, int M, int H, int W, int C) {
    if (m >= M || k >= 9 * C) return 0.0f;
    const int tap = k / C, c = k % C;
    const int ow = m % W, oh = (m / W) % H, n = m / (W * H);
    const int ih = oh + tap / 3 - 1, iw = ow + tap % 3 - 1;
    if (ih < 0 || ih >= H || iw < 0 || iw >= W) return 0.0f;
    return __half2float(x[(((long long)n * H + ih) * W + iw) * C + c]);
}

__global__ void conv2d_smem_kernel(const __half* x, const __half* w, __half* out, int N, int H, int W, int C, int F) {
    __shared__ float xs[CONV_TILE][CONV_TILE];
    __shared__ float ws[CONV_TILE][CONV_TILE];  // k-major: ws[k][f]
    const int M = N * H * W, K = 9 * C;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * CONV_TILE + ty, col = blockIdx.x * CONV_TILE + tx;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += CONV_TILE) {
        xs[ty][tx] = im2col(x, row, k0 + tx, M, H, W, C);
        ws[ty][tx] = (col < F && k0 + ty < K) ? __half2float(w[(long long)col * K + k0 + ty]) : 0.0f;
        __syncthreads();
        for (int kk = 0; kk < CONV_TILE; ++kk) acc += xs[ty][kk] * ws[kk][tx];
        __syncthreads();
    }
    if (row < M && col < F) out[(long long)row * F + col] = __float2half(acc);
}

extern "C" cudaError_t conv2d(const __half* x, const __half* weight, __half* out, int N, int H, int W, int C, int F,
                              cudaStream_t stream) {
    const int M = N * H * W;
    if (M <= 0 || F <= 0) return cudaSuccess;
    dim3 block(CONV_TILE, CONV_TILE);
    dim3 grid((F + CONV_TILE - 1) / CONV_TILE, (M + CONV_TILE - 1) / CONV_TILE);
    conv2d_smem_kernel<<<grid, block, 0, stream>>>(x, weight, out, N, H, W, C, F);
    return cudaGetLastError();
}
