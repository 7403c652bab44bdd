// Naive start kernel of the held-out fused residual add + RMSNorm instance (FlagGems' fused_add_rms_norm):
//   residual_out[r, c] = bf16(x[r, c] + residual[r, c])
//   out[r, c] = residual_out[r, c] * rsqrt(mean_c(residual_out[r, :]^2) + eps) * weight[c]
// bf16 in and out, fp32 math. One thread per row, two serial passes with scalar loads: add, store the
// rounded sum and accumulate its square; then read the stored sum back and normalize. No vectorization,
// no cooperation between threads. Each element of x and residual is read before that element of out and
// residual_out is written, and the second pass reads only residual_out, so out may alias x and
// residual_out may alias residual (the in-place call).
#include <cuda_runtime.h>
#include <cuda_bf16.h>

#ifndef ADD_RMSNORM_BLOCK
#define ADD_RMSNORM_BLOCK 256  // threads per block, one row each
#endif

__global__ void add_rmsnorm_naive_kernel(const __nv_bfloat16* x, const __nv_bfloat16* residual,
                                         const __nv_bfloat16* weight, __nv_bfloat16* out,
                                         __nv_bfloat16* residual_out, int rows, int cols, float eps) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    long long base = (long long)r * cols;
    float ss = 0.0f;
    for (int c = 0; c < cols; ++c) {
        __nv_bfloat16 h = __float2bfloat16(__bfloat162float(x[base + c]) + __bfloat162float(residual[base + c]));
        residual_out[base + c] = h;
        float v = __bfloat162float(h);
        ss += v * v;
    }
    float scale = 1.0f / sqrtf(ss / (float)cols + eps);
    for (int c = 0; c < cols; ++c)
        out[base + c] =
            __float2bfloat16(__bfloat162float(residual_out[base + c]) * scale * __bfloat162float(weight[c]));
}

extern "C" cudaError_t add_rmsnorm(const __nv_bfloat16* x, const __nv_bfloat16* residual, const __nv_bfloat16* weight,
                                   __nv_bfloat16* out, __nv_bfloat16* residual_out, int rows, int cols, float eps,
                                   cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    int block = ADD_RMSNORM_BLOCK;
    int grid = (rows + block - 1) / block;
    add_rmsnorm_naive_kernel<<<grid, block, 0, stream>>>(x, residual, weight, out, residual_out, rows, cols, eps);
    return cudaGetLastError();
}
